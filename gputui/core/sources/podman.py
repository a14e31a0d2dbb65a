"""What podman adds to its Docker-compatible API: where its sockets are, and the GPU grants it keeps elsewhere.

podman serves the Docker Engine API (``podman system service``), so
:class:`gputui.core.sources.docker_source.DockerSource` reads it through the same
docker SDK. Three things differ, and live here:

* **Where.** The rootful socket is ``/run/podman/podman.sock``, a user's own is
  ``$XDG_RUNTIME_DIR/podman/podman.sock`` (:func:`podman_sockets`).
* **Which engine answers.** ``GET /version`` names a ``Podman Engine`` component
  (:func:`is_podman`); containers then say ``"runtime": "podman"`` and the list
  filter leaves out ``restarting``, a state podman does not have (it answers
  HTTP 500 "unknown container state" to the whole request).
* **Grants.** podman 4's compat inspect leaves ``HostConfig.Devices`` empty
  whatever ``--device`` said. What it keeps: the command that created the
  container (``Config.CreateCommand`` in its own inspect: CDI names such as
  ``--device nvidia.com/gpu=1``) and the OCI spec it hands the runtime
  (``OCIConfigPath``: ``linux.devices``, where a ``/dev/nvidiaN`` node or a CDI
  device ends up as major 195, minor N). :func:`podman_grant_attrs` folds both
  into the inspect data as ``HostConfig.Devices`` entries, so the one grant model
  (:func:`gputui.core.grants.read_grant`) reads them; ``NVIDIA_VISIBLE_DEVICES`` is
  a grant on podman whatever the runtime is called (the NVIDIA OCI hook reads it).

The spec file is read as root from a path the API names: it is opened without
following symlinks, must be a regular file owned by root or by the owner of the
socket, and is read up to 4 MiB; anything else is skipped (no device grant read).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from gputui.core.grants import CDI_PREFIX
from gputui.core.statefile import open_regular

ROOTFUL_SOCKET = "/run/podman/podman.sock"
#: NVIDIA's character-device major; minors 0-253 are GPUs (254 nvidia-modeset, 255 nvidiactl).
NVIDIA_MAJOR = 195
_MAX_GPU_MINOR = 253
SPEC_LIMIT = 4 << 20
_MAX_DEVICES = 512
_MAX_ARGS = 4096
_LIBPOD_API = "v4.0.0"
_ID = re.compile(r"[0-9a-f]{12,64}")


def podman_sockets(environ: Mapping[str, str], rootful: str = ROOTFUL_SOCKET) -> list[str]:
    """podman's API sockets that exist: the rootful one, then the user's own."""
    found = []
    if os.path.exists(rootful):
        found.append(rootful)
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isabs(runtime_dir):
        own = os.path.join(runtime_dir, "podman", "podman.sock")
        if own != rootful and os.path.exists(own):
            found.append(own)
    return found


def is_podman(version: Mapping[str, Any] | None) -> bool:
    """Whether a ``GET /version`` answer comes from podman."""
    if not isinstance(version, Mapping):
        return False
    for comp in version.get("Components") or []:
        if isinstance(comp, Mapping) and "podman" in str(comp.get("Name") or "").lower():
            return True
    return False


def cdi_names(create_command: Any) -> list[str]:
    """The ``nvidia.com/gpu=…`` names a ``--device`` of podman's create command asked for."""
    if not isinstance(create_command, list):
        return []
    args = [a for a in create_command[:_MAX_ARGS] if isinstance(a, str)]
    names = []
    for i, arg in enumerate(args):
        value = None
        if arg == "--device" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--device="):
            value = arg[len("--device="):]
        if value and value.startswith(CDI_PREFIX) and len(value) <= 256:
            names.append(value)
    return names


def spec_minors(path: Any, owners: tuple[int, ...]) -> list[int] | None:
    """GPU minor numbers in an OCI spec's ``linux.devices``; None when the file cannot be trusted or read."""
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 4096 or "\0" in path:
        return None
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid not in owners:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(SPEC_LIMIT + 1)
        if len(data) > SPEC_LIMIT:
            return None
        spec = json.loads(data)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    devices = ((spec.get("linux") or {}).get("devices") or []) if isinstance(spec, dict) else []
    minors = []
    for dev in devices[:_MAX_DEVICES] if isinstance(devices, list) else []:
        if not isinstance(dev, dict) or dev.get("type") != "c" or dev.get("major") != NVIDIA_MAJOR:
            continue
        minor = dev.get("minor")
        if isinstance(minor, int) and not isinstance(minor, bool) and 0 <= minor <= _MAX_GPU_MINOR \
                and minor not in minors:
            minors.append(minor)
    return minors


def libpod_inspect(client: Any, container_id: str) -> dict[str, Any] | None:
    """podman's own inspect of a container (CreateCommand, OCIConfigPath), or None when it cannot be had."""
    if not _ID.fullmatch(container_id):  # it goes into a URL path: hex ids only
        return None
    api = client.api
    try:
        resp = api._get(f"{api.base_url}/{_LIBPOD_API}/libpod/containers/{container_id}/json")
        if resp.status_code != 200:
            return None
        data = resp.json()
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def podman_grant_attrs(attrs: dict[str, Any], native: Mapping[str, Any] | None,
                       owners: tuple[int, ...]) -> dict[str, Any]:
    """``attrs`` (compat inspect) with the CDI names and GPU device nodes podman keeps elsewhere added
    to ``HostConfig.Devices``, where the grant model reads them."""
    if not native:
        return attrs
    cdi = cdi_names((native.get("Config") or {}).get("CreateCommand"))
    minors = spec_minors(native.get("OCIConfigPath"), owners) or []
    if cdi:
        # CDI devices become device nodes in the spec; named once, in the form the user wrote.
        minors = []
    if not cdi and not minors:
        return attrs
    out = copy.copy(attrs)
    hc = dict(out.get("HostConfig") or {})
    devices = list(hc.get("Devices") or [])
    devices += [{"PathOnHost": name, "PathInContainer": "", "CgroupPermissions": ""} for name in cdi]
    devices += [{"PathOnHost": f"/dev/nvidia{m}", "PathInContainer": f"/dev/nvidia{m}", "CgroupPermissions": "rwm"}
                for m in minors]
    hc["Devices"] = devices
    out["HostConfig"] = hc
    return out


__all__ = ["ROOTFUL_SOCKET", "podman_sockets", "is_podman", "cdi_names", "spec_minors", "libpod_inspect",
           "podman_grant_attrs"]
