"""One model of a container's GPU grant: read from inspect data, resolved to this host's GPUs, rewritable.

The containers view, its findings, ``pick``, ``doctor`` and ``migrate`` all ask
the same question — which GPUs does this container hold, and how was it told? —
so they all ask it here (:func:`read_grant`). Docker knows four forms, and a
container can use several at once; every form present is read and combined:

* ``HostConfig.DeviceRequests`` for the nvidia driver (``--gpus``): ids by index
  or UUID, a count (Docker turns ``Count: N`` into GPUs ``0..N-1``, busy or not)
  or all (``Count: -1``).
* CDI names ``nvidia.com/gpu=<index|UUID|all>``, as a ``cdi`` device request
  (Docker ≥ 25) or as a ``HostConfig.Devices`` entry.
* The legacy nvidia runtime — any runtime whose name starts with ``nvidia``
  (``nvidia``, ``nvidia-experimental``, ``NVIDIA``…) — with
  ``NVIDIA_VISIBLE_DEVICES`` in ``Config.Env``. Trusted only with such a runtime
  (CUDA images set it to ``all`` for everyone) and ignored when a device request
  exists (dockerd then injects its own value over it).
* Raw ``/dev/nvidiaN`` device nodes: N is the device *minor number*, not the
  NVML index.

Each named GPU becomes a :class:`GrantEntry` that remembers its form and how it
was written, so :func:`rewrite_grant` can change exactly those entries and keep
the container's own spelling (index or UUID). Entries resolve to a *target key*:
today a GPU UUID; the key is a string so MIG instances (``MIG-…`` UUIDs,
``index:instance``) can become targets of their own without changing callers.
An identifier this host does not have becomes a ``problem`` sentence instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from gputui.core.model import Gpu, GpuGrant, GrantSource, match_uuid
from gputui.core.record import field, record

GrantForm = Literal["device_request", "nvidia_runtime_env", "cdi", "devices"]
#: When several forms are present, the first of these is the grant's ``source``.
FORM_ORDER: tuple[GrantForm, ...] = ("device_request", "cdi", "nvidia_runtime_env", "devices")
#: What an entry stands for: one named GPU, one of the first N (``--gpus N``), or every GPU.
EntryKind = Literal["id", "count", "all"]

CDI_PREFIX = "nvidia.com/gpu="
_NODE = re.compile(r"^nvidia(\d+)$")
_INDEX = re.compile(r"^\d+(:\d+)?$")
_HOW = {"device_request": "--gpus", "nvidia_runtime_env": "NVIDIA_VISIBLE_DEVICES (nvidia runtime)",
        "cdi": "CDI device", "devices": "device node"}


@record
class HostGpu:
    """One GPU as a grant can name it: NVML index, UUID, device-node minor number. As a rewrite
    target it can also be a MIG device: ``uuid`` its ``MIG-`` UUID, ``mig`` its index on GPU ``index``."""

    index: int
    uuid: str
    minor: int | None = None
    mig: int | None = None

    @property
    def ref(self) -> str:
        """How an index-style form (CDI ``nvidia.com/gpu=…``) names it: "3" or "3:1"."""
        return str(self.index) if self.mig is None else f"{self.index}:{self.mig}"


@record
class HostMig:
    """One MIG device as a grant can name it: ``MIG-`` UUID or ``GPU:instance``."""

    gpu: int
    index: int
    uuid: str

    @property
    def label(self) -> str:
        return f"{self.gpu}:{self.index}"


@record
class HostGpus:
    """This host's GPUs (and, where known, their MIG devices), for resolving what a grant names.

    A MIG device's target key is its ``MIG-`` UUID. When the MIG devices are not
    known (``mig_known`` False: the container source is told GPU UUIDs only), a
    ``MIG-…`` or ``GPU:instance`` identifier is kept as written and resolved later
    against the snapshot by the containers judge.
    """

    gpus: tuple[HostGpu, ...] = ()
    migs: tuple[HostMig, ...] = ()
    mig_known: bool = False

    @classmethod
    def of(cls, gpus: Iterable[Gpu]) -> HostGpus:
        gpus = tuple(gpus)
        return cls(tuple(HostGpu(g.index, g.uuid, g.minor_number) for g in gpus),
                   tuple(HostMig(g.index, m.index, m.uuid) for g in gpus if g.mig_enabled for m in g.mig_devices),
                   mig_known=True)

    def mig(self, key: str | None) -> HostMig | None:
        """The MIG device a key (a ``MIG-`` UUID) names."""
        return next((m for m in self.migs if m.uuid == key), None) if key else None

    @classmethod
    def from_uuids(cls, uuids: Iterable[str], minors: Mapping[int, str] | None = None) -> HostGpus:
        """UUIDs in NVML index order, and device minor -> UUID (what the container source is given)."""
        by_uuid = {u: m for m, u in (minors or {}).items()}
        return cls(tuple(HostGpu(i, u, by_uuid.get(u)) for i, u in enumerate(uuids)))

    def _mig_ref(self, ident: str, gpu: int, what: str) -> tuple[str | None, str | None]:
        """``GPU:instance`` -> the MIG device's UUID (or kept as written while MIG devices are unknown)."""
        if not self.mig_known:
            return ident, None
        index = int(ident.split(":")[1])
        m = next((m for m in self.migs if m.gpu == gpu and m.index == index), None)
        if m is not None:
            return m.uuid, None
        return None, f"{what} names MIG device {ident}, but GPU {gpu} has no MIG device {index}"

    def by_index(self, index: int) -> HostGpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def by_uuid(self, uuid: str | None) -> HostGpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None) if uuid else None

    def by_minor(self, minor: int) -> HostGpu | None:
        return next((g for g in self.gpus if g.minor == minor), None)

    def index_of(self, key: str | None) -> int | None:
        """The GPU index a key names (a MIG device's key names its card)."""
        g = self.by_uuid(key)
        if g is not None:
            return g.index
        m = self.mig(key)
        return m.gpu if m is not None else None

    def resolve(self, ident: str, what: str) -> tuple[str | None, str | None]:
        """An identifier as a grant writes it (index, UUID, unique UUID prefix) -> (target key, problem)."""
        ident = ident.strip()
        if _INDEX.match(ident):
            index = int(ident.split(":")[0])
            g = self.by_index(index)
            if g is None:
                return None, f"{what} names GPU {index}, which does not exist on this host ({len(self.gpus)} GPUs)"
            if ":" not in ident:
                return g.uuid, None
            return self._mig_ref(ident, index, what)
        uuid = match_uuid(ident, (g.uuid for g in self.gpus))
        if uuid is not None:
            return uuid, None
        if ident.upper().startswith("GPU-"):
            return None, f"{what} names {ident}, which is not a GPU on this host"
        if ident.upper().startswith("MIG-"):
            if not self.mig_known:
                return ident, None  # resolved against the snapshot's MIG devices by the containers judge
            mig = match_uuid(ident, (m.uuid for m in self.migs))
            if mig is not None:
                return mig, None
            return None, f"{what} names MIG device {ident}, which does not exist on this host"
        return None, f"{what} names {ident!r}, which gputui does not recognise as a GPU"


@record
class GrantEntry:
    """One thing a grant says, in one form, and what it resolves to on this host."""

    form: GrantForm
    kind: EntryKind
    #: As written: "1", "GPU-…", "count=2", "all", "nvidia.com/gpu=1", "/dev/nvidia3".
    raw: str
    #: The identifier inside ``raw`` ("1" of "nvidia.com/gpu=1"; the path of a device node).
    ident: str
    #: The target key it names (a GPU UUID), None when the host has no such GPU (or for "all").
    key: str | None = None
    problem: str | None = None


@record
class Grant:
    """Every GPU grant a container has, combined."""

    entries: tuple[GrantEntry, ...] = ()
    #: a device request's ``Count`` when it is > 0 (``--gpus N``)
    count: int = 0

    @property
    def forms(self) -> tuple[GrantForm, ...]:
        return tuple(dict.fromkeys(e.form for e in self.entries))

    @property
    def source(self) -> GrantSource:
        return next((f for f in FORM_ORDER if f in self.forms), "none")

    @property
    def all(self) -> bool:
        return any(e.kind == "all" for e in self.entries)

    @property
    def keys(self) -> tuple[str, ...]:
        """The GPUs named, as target keys (UUIDs), each once, in the order written."""
        return tuple(dict.fromkeys(e.key for e in self.entries if e.key is not None))

    @property
    def gpus(self) -> GpuGrant:
        return "all" if self.all else self.keys

    @property
    def raw(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.raw for e in self.entries))

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(e.problem for e in self.entries if e.problem)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def describe(self, host: HostGpus) -> str:
        """e.g. "GPU 0 via --gpus", "all GPUs (--gpus all)", "GPU 0 via --gpus; GPU 3 (/dev/nvidia3) via device node"""
        parts = []
        for form in self.forms:
            entries = [e for e in self.entries if e.form == form]
            how = _HOW[form]
            if any(e.kind == "all" for e in entries):
                parts.append(f"all GPUs ({how} all)")
                continue
            if any(e.kind == "count" for e in entries):
                parts.append(f"the first {self.count} GPU{'s' if self.count > 1 else ''} ({how} {self.count})")
                continue
            named = []
            for e in entries:
                index = host.index_of(e.key)
                mig = host.mig(e.key)
                label = (f"MIG device {mig.label}" if mig is not None else f"GPU {index}" if index is not None
                         else "a GPU this host does not have")
                named.append(f"{label} ({e.raw})" if e.raw != str(index) else label)
            parts.append(f"{', '.join(named)} via {how}")
        return "; ".join(parts) or "none"


def env_dict(env: Iterable[str] | None) -> dict[str, str]:
    """``Config.Env`` as a dict; the first occurrence of a name wins (what getenv() returns)."""
    out: dict[str, str] = {}
    for item in env or ():
        key, sep, value = item.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def is_gpu_request(req: Mapping[str, Any]) -> bool:
    """Is this ``HostConfig.DeviceRequests`` entry a GPU request for the nvidia driver
    (``--gpus``: driver "nvidia…", or no driver and the "gpu" capability)? CDI requests
    are read as their own form."""
    driver = (req.get("Driver") or "").lower()
    if driver == "cdi":
        return False
    if driver.startswith("nvidia"):
        return True
    return driver == "" and any("gpu" in (group or []) for group in req.get("Capabilities") or [])


def is_nvidia_runtime(runtime: str | None) -> bool:
    return (runtime or "").strip().lower().startswith("nvidia")


def node_minor(dev: Mapping[str, Any]) -> int | None:
    """N of an ``nvidiaN`` device node (by its name on the host, else inside the container)."""
    for key in ("PathOnHost", "PathInContainer"):
        m = _NODE.match(os.path.basename(dev.get(key) or ""))
        if m:
            return int(m.group(1))
    return None


def read_grant(attrs: Mapping[str, Any], host: HostGpus, env_is_grant: bool = False) -> Grant:
    """Every GPU grant in a container's inspect data (or a create body), combined and resolved.

    ``env_is_grant``: ``NVIDIA_VISIBLE_DEVICES`` grants GPUs whatever the runtime is called (podman,
    where the NVIDIA OCI hook reads it from every container)."""
    hc = attrs.get("HostConfig") or {}
    cfg = attrs.get("Config")
    env = env_dict((cfg if cfg is not None else attrs).get("Env"))
    entries: list[GrantEntry] = []
    count = 0

    def named(form: GrantForm, raw: str, ident: str, what: str) -> None:
        if ident.strip().lower() == "all":
            entries.append(GrantEntry(form, "all", raw, ident))
        else:
            entries.append(GrantEntry(form, "id", raw, ident, *host.resolve(ident, what)))

    for req in hc.get("DeviceRequests") or []:
        ids = [str(i) for i in (req.get("DeviceIDs") or [])]
        if (req.get("Driver") or "").lower() == "cdi":
            for name in ids:
                if name.startswith(CDI_PREFIX) and name[len(CDI_PREFIX):]:
                    named("cdi", name, name[len(CDI_PREFIX):], f"the CDI device {name}")
            continue
        if not is_gpu_request(req):
            continue
        n = int(req.get("Count") or 0)
        if ids:
            for ident in ids:
                named("device_request", ident, ident, "its device request")
        elif n < 0:
            entries.append(GrantEntry("device_request", "all", "all", "all"))
        elif n > 0:
            count = n
            for index in range(n):
                entries.append(GrantEntry("device_request", "count", f"count={n}", str(index),
                                          *host.resolve(str(index), f"its request for {n} GPUs")))

    nvd = env.get("NVIDIA_VISIBLE_DEVICES")
    if (env_is_grant or is_nvidia_runtime(hc.get("Runtime"))) and nvd is not None and \
            not any(e.form == "device_request" for e in entries) and nvd.strip().lower() not in ("", "none", "void"):
        for ident in (v.strip() for v in nvd.split(",") if v.strip()):
            named("nvidia_runtime_env", ident, ident, "NVIDIA_VISIBLE_DEVICES")

    for dev in hc.get("Devices") or []:
        path = dev.get("PathOnHost") or ""
        if path.startswith(CDI_PREFIX):
            named("cdi", path, path[len(CDI_PREFIX):], f"the CDI device {path}")
            continue
        minor = node_minor(dev)
        if minor is None:
            continue
        raw = dev.get("PathOnHost") or dev.get("PathInContainer") or ""
        g = host.by_minor(minor)
        entries.append(GrantEntry("devices", "id", raw, raw, g.uuid if g else None,
                                  None if g else f"/dev/nvidia{minor} is not a GPU on this host"))
    return Grant(tuple(entries), count)


# -- rewriting ------------------------------------------------------------------------


@record
class _Swap:
    moving: frozenset[tuple[str, str]]  # (form, raw) of the entries that move
    whole: frozenset[str]  # forms moved as a whole ("all" or a count)
    target: HostGpu = field(compare=False)

    def values(self, form: GrantForm, values: list[str], new: str) -> list[str]:
        if form in self.whole:
            return [new]
        out: list[str] = []
        for v in values:
            nv = new if (form, v.strip()) in self.moving else v
            if nv not in out:
                out.append(nv)
        return out


def rewrite_grant(body: dict[str, Any], grant: Grant, moving: Iterable[GrantEntry], target: HostGpu) -> None:
    """Rewrite, in place, the ``moving`` entries of a create body's grant so they name ``target``.

    Each entry is rewritten in its own form; an "all" or count entry rewrites its
    whole form to the one target. Ids keep their spelling where the form has one
    (CDI names by index stay by index); others are written as the target's UUID.
    """
    moving = list(moving)
    swap = _Swap(frozenset((e.form, e.raw) for e in moving),
                 frozenset(e.form for e in moving if e.kind != "id"), target)
    forms = {e.form for e in moving}
    hc = body.setdefault("HostConfig", {})
    if "device_request" in forms:
        for req in hc.get("DeviceRequests") or []:
            if is_gpu_request(req):
                ids = list(req.get("DeviceIDs") or [])
                req["Count"] = 0
                req["DeviceIDs"] = swap.values("device_request", ids or ["all"], target.uuid)
    if "cdi" in forms:
        _rewrite_cdi(hc, grant, moving, swap)
    if "nvidia_runtime_env" in forms:
        env = list(body.get("Env") or [])
        for i, item in enumerate(env):
            if item.startswith("NVIDIA_VISIBLE_DEVICES="):
                values = [v for v in item.split("=", 1)[1].split(",") if v.strip()]
                env[i] = "NVIDIA_VISIBLE_DEVICES=" + ",".join(swap.values("nvidia_runtime_env", values, target.uuid))
                break  # the first occurrence is the one the runtime reads
        body["Env"] = env
    if "devices" in forms:
        node = f"nvidia{target.minor}"
        devices = []
        for dev in hc.get("Devices") or []:
            path = dev.get("PathOnHost") or dev.get("PathInContainer") or ""
            minor = node_minor(dev)
            if ("devices", path) in swap.moving and minor is not None:
                dev = dict(dev)
                for key in ("PathOnHost", "PathInContainer"):
                    value = dev.get(key) or ""
                    if os.path.basename(value) == f"nvidia{minor}":
                        dev[key] = os.path.join(os.path.dirname(value), node)
            devices.append(dev)
        hc["Devices"] = devices


def _rewrite_cdi(hc: dict[str, Any], grant: Grant, moving: list[GrantEntry], swap: _Swap) -> None:
    # Keep the naming the CDI spec uses: nvidia-ctk names devices by index unless told otherwise.
    by_uuid = any(e.ident.lower().startswith(("gpu-", "mig-")) for e in moving if e.form == "cdi")
    new = swap.target.uuid if by_uuid else swap.target.ref
    for req in hc.get("DeviceRequests") or []:
        if (req.get("Driver") or "").lower() != "cdi":
            continue
        ids = list(req.get("DeviceIDs") or [])
        gpu_ids = [i for i in ids if i.startswith(CDI_PREFIX)]
        if gpu_ids:
            others = [i for i in ids if not i.startswith(CDI_PREFIX)]
            req["DeviceIDs"] = others + swap.values("cdi", gpu_ids, CDI_PREFIX + new)
    devices, placed = [], False
    for dev in hc.get("Devices") or []:
        path = dev.get("PathOnHost") or ""
        if path.startswith(CDI_PREFIX) and ("cdi" in swap.whole or ("cdi", path) in swap.moving):
            if placed:
                continue  # "all" or duplicates collapse into the one target device
            dev = dict(dev, PathOnHost=CDI_PREFIX + new, PathInContainer=CDI_PREFIX + new)
            placed = True
        devices.append(dev)
    if hc.get("Devices") is not None:
        hc["Devices"] = devices


__all__ = ["GrantForm", "FORM_ORDER", "HostGpu", "HostMig", "HostGpus", "GrantEntry", "Grant", "read_grant",
           "rewrite_grant", "is_gpu_request", "is_nvidia_runtime", "env_dict", "node_minor", "CDI_PREFIX"]
