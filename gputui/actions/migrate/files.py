"""What a container holds besides its configuration, and what becomes of it in a migration.

* Its own filesystem (the writable layer: ``pip install``s, notebooks, checkpoints outside a volume).
  :func:`read_files` reads ``/containers/{id}/changes`` and ``SizeRw`` for the plan;
  :func:`commit_layer` commits the *stopped* original into ``gputui-layer/<name>:<stamp>`` and the
  copy is created from that image, so every file, mode, owner, mtime and deletion survives as Docker
  stored it. The image stays while the copy uses it; the one the backup was made from (an earlier
  migration's) goes with the backup (:func:`drop_layer_image`); an undone migration removes its own
  (:func:`undo_layer`).
* Its tmpfs mounts: measured with ``du`` inside the running container (contents are lost).
* Its networks: what ``docker network inspect`` says, kept in the journal so a network pruned while a
  migration was interrupted is named with the command that recreates it (:func:`missing_networks`), and
  the original is joined to the recreated one before it starts (:func:`rejoin_networks`).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

from gputui.actions.container_ops import connect_networks
from gputui.actions.journal import Journal
from gputui.actions.migrate.body import create_body, name_of
from gputui.actions.migrate.model import MigrationRun, ProgressFn, size_text
from gputui.actions.migrate.plan import (
    LAYER_CONTAINER_LABEL,
    LAYER_LABEL,
    LAYER_REPO,
    ContainerFiles,
    tmpfs_paths,
)
from gputui.actions.migrate.record import notify
from gputui.core.errors import clause

#: Seconds between two "still committing" lines while a large layer is committed.
COMMIT_TICK = 5.0
#: The HTTP timeout of a commit: a floor, plus a second for every this many bytes (a slow disk).
COMMIT_FLOOR_S = 300.0
COMMIT_BYTES_PER_S = 20 * 1024 * 1024
#: Seconds ``du`` may take to measure a tmpfs.
DU_TIMEOUT = 20.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def read_files(api: Any, attrs: dict[str, Any], discard: bool) -> ContainerFiles:
    """The container's changed paths, their size, its tmpfs mounts' use and its networks (for the plan)."""
    cid = attrs.get("Id", "")
    changes = api.diff(cid) or []
    sized = api._result(api._get(api._url("/containers/{0}/json", cid), params={"size": 1}), True)
    size_rw = sized.get("SizeRw")
    size = int(size_rw) if isinstance(size_rw, int) and 0 <= size_rw < 1 << 50 else None
    running = bool((attrs.get("State") or {}).get("Running"))
    # a stopped container's tmpfs mounts are gone already: empty
    tmpfs = {p: _tmpfs_use(api, cid, p) if running else (0, "") for p in tmpfs_paths(attrs)}
    networks = {}
    for net in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}):
        try:
            found = api.inspect_network(net)
        except Exception:
            continue
        networks[net] = {k: found.get(k) for k in ("Id", "Name", "Driver", "IPAM", "Internal", "EnableIPv6",
                                                    "Attachable", "Options", "Labels")}
    return ContainerFiles(changes=tuple(c for c in changes if isinstance(c, dict)), size_rw=size, tmpfs=tmpfs,
                          discard=discard, networks=networks)


def _tmpfs_use(api: Any, cid: str, path: str) -> tuple[int | None, str]:
    """Bytes a tmpfs holds, by ``du -s -k`` inside the container; (None, why) when it cannot say."""
    try:
        ex = api.exec_create(cid, ["du", "-s", "-k", path], stdout=True, stderr=True)
        out = api.exec_start(ex["Id"], demux=False)
        code = (api.exec_inspect(ex["Id"]) or {}).get("ExitCode")
    except Exception as exc:
        return None, f"du could not run in the container ({clause(exc)})"
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)
    first = text.strip().split()[:1]
    if code != 0 or not first or not first[0].isdigit():
        return None, "du is not in the image or failed"
    return int(first[0]) * 1024, ""


def commit_layer(api: Any, run: MigrationRun, journal: Journal, progress: ProgressFn | None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """Commit the stopped original into ``plan.layer_image``, telling how long it takes while it does."""
    plan = run.plan
    image = plan.layer_image or ""
    repo, _, tag = image.rpartition(":")
    size = size_text(plan.layer_bytes)
    labels = plan.body.get("Labels") or {}
    changes = [f"LABEL {json.dumps(key)}={json.dumps(str(labels.get(key) or ''))}"
               for key in (LAYER_LABEL, LAYER_CONTAINER_LABEL)]
    timeout = COMMIT_FLOOR_S + (plan.layer_bytes or 0) / COMMIT_BYTES_PER_S
    params = {"container": plan.container_id, "repo": repo, "tag": tag, "pause": False, "changes": changes,
              "comment": f"gputui migrate: the files of {plan.container_name} outside its volumes"}
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["image"] = api._result(api._post_json(api._url("/commit"), data=None, params=params,
                                                       timeout=timeout), True)
        except BaseException as exc:  # handed to the waiting thread
            done["error"] = exc

    paths = f"{plan.layer_paths} path{'s' if plan.layer_paths != 1 else ''}"
    notify(progress, "create", "info", f"commit the stopped original's files ({paths}, {size}) into {image}")
    run.layer_started = True
    journal.update(layer_started=True)
    started = time.monotonic()
    worker = threading.Thread(target=work, name="gputui-commit", daemon=True)
    run.commit_thread = worker
    worker.start()
    while worker.is_alive():
        worker.join(COMMIT_TICK)
        if worker.is_alive():
            notify(progress, "create", "info", f"committing {size}: {time.monotonic() - started:.0f} s so far")
    if "error" in done:
        raise done["error"]
    run.layer_image_id = str((done.get("image") or {}).get("Id") or "")
    run.commit_seconds = time.monotonic() - started
    journal.update(layer_image_id=run.layer_image_id)
    rate = (plan.layer_bytes or 0) / run.commit_seconds if run.commit_seconds > 0 else 0
    notify(progress, "create", "info", f"committed {size} into {image} in {run.commit_seconds:.1f} s"
                                       + (f" ({size_text(rate)}/s)" if rate else ""))


def undo_layer(api: Any, run: MigrationRun, progress: ProgressFn | None) -> str | None:
    """Remove the image an undone migration committed (after a commit still in flight ends). None if done."""
    worker = run.commit_thread
    if worker is not None and worker.is_alive():
        notify(progress, "create", "undoing", "wait for the commit Docker is still carrying out")
        worker.join(COMMIT_FLOOR_S + (run.plan.layer_bytes or 0) / COMMIT_BYTES_PER_S)
    notify(progress, "create", "undoing", f"remove the image {run.plan.layer_image}")
    try:
        api.remove_image(run.plan.layer_image)
    except Exception as exc:
        if "No such image" not in clause(exc) and "404" not in clause(exc):
            return f"removing the image {run.plan.layer_image}: {clause(exc)}"
    return None


def drop_layer_image(api: Any, backup_attrs: dict[str, Any]) -> None:
    """Once the backup is removed: the image it was created from, when an earlier migration committed it."""
    ref = str((backup_attrs.get("Config") or {}).get("Image") or "")
    if not ref.startswith(LAYER_REPO + "/"):
        return
    try:
        api.remove_image(ref)
    except Exception:
        pass  # another container uses it: it stays, like any image in use


def layer_audit(plan: Any, run: MigrationRun) -> dict[str, Any]:
    """The audit record's fields on the container's own files."""
    if not plan.layer_paths:
        return {}
    return {"layer_paths": plan.layer_paths, "layer_bytes": plan.layer_bytes,
            "layer": "discarded" if plan.layer_discarded else "committed",
            "layer_image": plan.layer_image, "layer_image_id": run.layer_image_id,
            "commit_seconds": round(run.commit_seconds, 3) if run.commit_seconds is not None else None}


def missing_networks(api: Any, d: dict[str, Any]) -> str | None:
    """The networks of the original that no longer exist, as a sentence with the commands that recreate
    them as the journal recorded them; None when every one exists."""
    import docker

    original = d.get("original") or {}
    fixes = []
    for net in sorted((original.get("NetworkSettings") or {}).get("Networks") or {}):
        try:
            api.inspect_network(net)
        except docker.errors.NotFound:
            fixes.append(create_command(net, (d.get("networks") or {}).get(net) or {}))
    if not fixes:
        return None
    what = "network was" if len(fixes) == 1 else "networks were"
    return (f"the original container's {what} removed while the migration was interrupted (docker network "
            f"prune?); recreate {'it' if len(fixes) == 1 else 'them'} with "
            f"{' and '.join(repr(f) for f in fixes)}, then run 'gputui migrate --recover' again")


def create_command(net: str, facts: dict[str, Any]) -> str:
    """``docker network create`` for a network as recorded (driver, subnets, gateways, flags), every part
    validated (a part that does not parse is left out, never quoted into the line)."""
    if not _NAME.match(net):
        return "docker network create ... (the recorded name is not a valid network name)"
    parts = ["docker", "network", "create"]
    driver = str(facts.get("Driver") or "bridge")
    if _NAME.match(driver):
        parts += ["--driver", driver]
    for cfg in ((facts.get("IPAM") or {}).get("Config") or [])[:8]:
        for flag, key, kind in (("--subnet", "Subnet", "net"), ("--gateway", "Gateway", "ip"),
                                ("--ip-range", "IPRange", "net")):
            value = str((cfg or {}).get(key) or "")
            try:
                text = str(ipaddress.ip_network(value, strict=False) if kind == "net" else ipaddress.ip_address(value))
            except ValueError:
                continue
            parts += [flag, text]
    if facts.get("Internal") is True:
        parts.append("--internal")
    if facts.get("EnableIPv6") is True:
        parts.append("--ipv6")
    if facts.get("Attachable") is True:
        parts.append("--attachable")
    parts.append(net)
    return " ".join(shlex.quote(p) for p in parts)


def rejoin_networks(api: Any, cid: str, old: dict[str, Any], d: dict[str, Any], progress: ProgressFn | None) -> None:
    """Networks removed and recreated while the migration was interrupted have new ids, and Docker will not
    start a container still joined to the old ones: leave each such one and join it again as configured."""
    original = d.get("original") or {}
    joined = (original.get("NetworkSettings") or {}).get("Networks") or {}
    body, connect, _ = create_body(original, str((original.get("Config") or {}).get("Image") or ""))
    configs = dict((body.get("NetworkingConfig") or {}).get("EndpointsConfig") or {})
    configs.update(dict(connect))
    for net, ep in sorted(joined.items()):
        try:
            now = api.inspect_network(net)
        except Exception:
            continue
        if not (ep or {}).get("NetworkID") or now.get("Id") == ep.get("NetworkID"):
            continue
        notify(progress, "create", "undoing", f"join {name_of(old)} to the recreated network {net} again")
        api.disconnect_container_from_network(cid, net, force=True)
        connect_networks(api, cid, [(net, configs.get(net) or {})])
