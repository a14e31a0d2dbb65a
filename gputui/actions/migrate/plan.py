"""Planning a migration (:func:`plan_migration`, pure): preflight refusals, the target's fitness, the
successor's create body and the human diff; the targets a dialog offers (:func:`target_options`).
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gputui.actions.container_ops import (
    daemon_would_start,
    effective_command,
    running_command,
)
from gputui.actions.migrate.body import body_diff, create_body, name_of, preflight, rewrite_cuda_visible
from gputui.actions.migrate.model import (
    BACKUP_INFIX,
    READ_ONLY,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    size_text,
)
from gputui.core.grants import Grant, GrantEntry, HostGpu, HostGpus, read_grant, rewrite_grant
from gputui.core.mig import parse_mig_ref, resolve_mig
from gputui.core.model import Gpu, MigDevice, Snapshot
from gputui.core.record import field, record
from gputui.core.safe_text import clean as clean_text
from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    pass


def resolve_target(gpus: tuple[Gpu, ...], text: str) -> Gpu:
    """GPU index or UUID (or a unique UUID prefix) -> the GPU. Raises MigrationNotFound / MigrationRefused."""
    t = str(text).strip()
    if t.lower().startswith("mig-"):
        raise MigrationRefused("mig", f"{t} is a MIG instance; gputui migrates containers between whole GPUs only.")
    key = HostGpus.of(gpus).resolve(t, "")[0] if (t.isdigit() or t.lower().startswith("gpu-")) else None
    idx = next((g.index for g in gpus if g.uuid == key), None)
    if idx is None:
        present = ", ".join(str(g.index) for g in gpus) or "none"
        raise MigrationNotFound(f"There is no GPU {t!r} on this machine (GPUs present: {present}).")
    return next(g for g in gpus if g.index == idx)


def resolve_destination(gpus: tuple[Gpu, ...], text: str) -> tuple[Gpu, MigDevice | None]:
    """``--to``: a whole GPU (index, UUID) or a MIG device (``GPU:instance``, ``MIG-`` UUID) -> (card, MIG
    device or None). A card in MIG mode is not a whole-GPU target: CUDA can use only its MIG devices."""
    t = str(text).strip()
    hit = resolve_mig(gpus, t)
    if hit is not None:
        return hit
    if parse_mig_ref(t) is not None or t.lower().startswith("mig-"):
        present = ", ".join(f"{g.index}:{m.index}" for g in gpus for m in g.mig_devices) or "none"
        raise MigrationNotFound(f"There is no MIG device {t!r} on this machine (MIG devices present: {present}).")
    g = resolve_target(gpus, t)
    if g.mig_enabled:
        choices = ", ".join(f"{g.index}:{m.index} ({m.profile or '?'})" for m in g.mig_devices) or \
            "none exist yet"
        raise MigrationRefused("mig-card", f"GPU {g.index} is split into MIG devices, so no container can be "
                                           f"given the whole card; choose one of them with --to: {choices}.")
    return g, None


def mig_target_refusal(card: Gpu, mig: MigDevice, peak_memory: int | None, force: bool = False,
                       name: str = "the container") -> str | None:
    """Why MIG device ``mig`` of ``card`` cannot take the container (one sentence), or None."""
    label = f"MIG device {card.index}:{mig.index} ({mig.profile or 'unknown profile'})"
    if card.lost:
        return f"GPU {card.index} is lost (it fell off the bus or stopped answering)."
    free = mig.memory_free
    if force or not peak_memory or free is None:
        return None
    if peak_memory > free:
        return (f"{label} has {fmt_bytes(free)} free but {name} has used up to {fmt_bytes(peak_memory)}; "
                f"use --force to move it anyway.")
    return None


def compose_change(service: str, uuid: str) -> str:
    """The compose-file fragment that pins a service to one GPU (what ``compose up`` would otherwise revert)."""
    return "\n".join([
        "services:",
        f"  {service}:",
        "    deploy:",
        "      resources:",
        "        reservations:",
        "          devices:",
        "            - driver: nvidia",
        f'              device_ids: ["{uuid}"]',
        "              capabilities: [gpu]",
    ])


def target_refusal(target: Gpu, peak_memory: int | None, usage_on_target: int = 0,
                   force: bool = False, name: str = "the container") -> str | None:
    """Why ``target`` cannot take the container (one sentence), or None. The UI lists targets with this."""
    if target.lost:
        return f"GPU {target.index} is lost (it fell off the bus or stopped answering)."
    if force or not peak_memory:
        return None
    free = target.memory_free
    if free is None:
        return None
    room = free + usage_on_target
    if peak_memory > room:
        return (f"GPU {target.index} has {fmt_bytes(room)} free but {name} has used up to "
                f"{fmt_bytes(peak_memory)}; use --force to move it anyway.")
    return None


def _moving(grant: Grant, host: HostGpus, gpus: tuple[Gpu, ...], tgt: Gpu, from_gpu: str | int | None,
            name: str) -> tuple[list[GrantEntry], bool, tuple[int, ...]]:
    """Which grant entries move to ``tgt``: (entries, granted all GPUs?, host indices they leave)."""
    src = resolve_target(gpus, str(from_gpu)) if from_gpu is not None else None
    whole = [e for e in grant.entries if e.kind != "id"]
    if whole:
        if grant.all:
            from_idx = tuple(sorted(g.index for g in gpus))
        else:
            from_idx = tuple(i for i in (host.index_of(e.key) for e in whole) if i is not None)
        if src is not None and src.index not in from_idx:
            raise MigrationRefused("not-held", f"{name} does not hold GPU {src.index}.")
        if not grant.all and len(set(from_idx)) == 1 and from_idx[0] == tgt.index:
            raise MigrationRefused("same-gpu", f"{name} is already on GPU {tgt.index}.")
        return whole, grant.all, tuple(dict.fromkeys(from_idx))
    held = tuple(i for i in (host.index_of(k) for k in grant.keys) if i is not None)
    if tgt.index in held:
        raise MigrationRefused("same-gpu", f"{name} is already on GPU {tgt.index}." if len(held) == 1
                               else f"{name} already holds GPU {tgt.index}.")
    if src is not None:
        moving = [e for e in grant.entries if e.key == src.uuid]
        if not moving:
            holds = f" (it holds GPU {', '.join(map(str, held))})" if held else ""
            raise MigrationRefused("not-held", f"{name} does not hold GPU {src.index}{holds}.")
    elif len(held) > 1:
        raise MigrationRefused("ambiguous", f"{name} holds GPUs {', '.join(map(str, held))}; say which one to "
                                            f"move with --from.")
    elif held:
        moving = [e for e in grant.entries if host.index_of(e.key) == held[0]]
    else:
        moving = list(grant.entries)  # names only GPUs this host lacks: moving it makes it usable again
    return moving, False, tuple(dict.fromkeys(i for i in (host.index_of(e.key) for e in moving) if i is not None))


def _moving_mig(grant: Grant, host: HostGpus, gpus: tuple[Gpu, ...], target_key: str, target_label: str,
                from_gpu: str | int | None, name: str
                ) -> tuple[list[GrantEntry], bool, tuple[int, ...], tuple[str, ...]]:
    """:func:`_moving` by target key, for moves that involve MIG devices (to one, from one, or both):
    (entries, granted all GPUs?, card indices they leave, MIG devices they leave)."""
    whole = [e for e in grant.entries if e.kind != "id"]
    if whole:
        from_idx = tuple(sorted(g.index for g in gpus)) if grant.all else \
            tuple(i for i in (host.index_of(e.key) for e in whole) if i is not None)
        return whole, grant.all, tuple(dict.fromkeys(from_idx)), ()

    def label(key: str) -> str:
        m = host.mig(key)
        return f"MIG device {m.label}" if m is not None else f"GPU {host.index_of(key)}"

    keys = grant.keys
    if target_key in keys:
        raise MigrationRefused("same-gpu", f"{name} is already on {target_label}." if len(keys) == 1
                               else f"{name} already holds {target_label}.")
    if from_gpu is not None:
        src = str(from_gpu).strip()
        hit = resolve_mig(gpus, src)
        src_key = hit[1].uuid if hit is not None else resolve_target(gpus, src).uuid
        moving = [e for e in grant.entries if e.key == src_key]
        if not moving:
            held = ", ".join(label(k) for k in keys)
            raise MigrationRefused("not-held", f"{name} does not hold {label(src_key)}"
                                               f"{f' (it holds {held})' if held else ''}.")
    elif len(keys) > 1:
        raise MigrationRefused("ambiguous", f"{name} holds {', '.join(label(k) for k in keys)}; say which one to "
                                            f"move with --from.")
    elif keys:
        moving = [e for e in grant.entries if e.key == keys[0]]
    else:
        moving = list(grant.entries)  # names only devices this host lacks: moving it makes it usable again
    moved_keys = [e.key for e in moving if e.key is not None]
    from_idx = tuple(dict.fromkeys(i for i in (host.index_of(k) for k in moved_keys) if i is not None))
    from_migs = tuple(dict.fromkeys(m.label for m in (host.mig(k) for k in moved_keys) if m is not None))
    return moving, False, from_idx, from_migs


def _command_diff(before: list[str] | None, after: list[str] | None) -> tuple[str, ...]:
    """The effective command as a diff line pair when the copy would run something else."""
    if before is None or after is None or before == after:
        return ()
    return (f"- (runs) = {json.dumps(before)}", f"+ (runs) = {json.dumps(after)}")


def _stopped_note(name: str, start_once: bool) -> str:
    if start_once:
        return (f"{name} is stopped with restart policy 'always', so Docker would start it at its next start; "
                f"the copy is started once, verified and stopped again, so Docker does the same with it.")
    return (f"{name} is not running: the copy is created but not started, so nothing is verified (it may "
            f"fail when it is started).")


def runtime_refusal(name: str, runtime: str, pod: str | None = None, namespace: str | None = None) -> str | None:
    """Why a container of this runtime cannot be migrated (one sentence naming what owns its placement),
    or None for Docker. gputui recreates containers through the Docker Engine API only: podman's compat
    API does not give back the devices, CDI names and hooks it would have to recreate identically."""
    if runtime == "docker":
        return None
    if runtime == "podman":
        return (f"{name} is a podman container, which gputui does not migrate (podman's API does not return "
                f"everything needed to recreate it identically); recreate it with "
                f"'podman run --device nvidia.com/gpu=N' on the GPU you want.")
    if runtime == "kubernetes":
        where = f" {namespace}/{pod}" if pod else ""
        return (f"{name} runs in Kubernetes pod{where}, whose placement the controller and its nvidia.com/gpu "
                f"limits own; gputui does not migrate pods.")
    if runtime == "containerd":
        return (f"{name} is a containerd container, whose placement its creator (nerdctl, a compose file) owns; "
                f"gputui migrates Docker containers only.")
    return f"{name} runs in a container Docker does not manage ({runtime}); gputui migrates Docker containers."


def plan_migration(
    attrs: dict[str, Any],
    gpus: tuple[Gpu, ...],
    target: str | int,
    *,
    others: Iterable[dict[str, Any]] = (),
    image_tag_id: str | None = None,
    image_config: dict[str, Any] | None = None,
    peak_memory: int | None = None,
    usage: dict[int, int] | None = None,
    force: bool = False,
    from_gpu: str | int | None = None,
    read_only: bool = False,
    now: float | None = None,
    demo: bool = False,
    files: ContainerFiles | None = None,
    api_version: str | None = None,
) -> MigrationPlan:
    """The pure planner: inspect data + this host's GPUs + the target -> a plan, or MigrationRefused.

    ``image_tag_id`` is the id the container's image *tag* points to now
    (``images.get(Config.Image).id``; None if the tag is gone). ``usage`` is the
    container's current GPU memory per GPU index (from the snapshot) and
    ``peak_memory`` the most it has held at once (from the history). ``files`` is what the container's
    own filesystem and tmpfs mounts hold (:class:`ContainerFiles`; None: not read, nothing carried).
    Over 80 lines only by its signature and the plan's thirty fields; the refusals, the image, ports,
    compose, the files are helpers.
    """
    name = name_of(attrs)
    usage = usage or {}
    others = list(others)
    files = files or ContainerFiles()
    mv = _admit(attrs, gpus, target, others=others, peak_memory=peak_memory, usage=usage, force=force,
                from_gpu=from_gpu, read_only=read_only)
    tgt, tmig, host, grant, moving, to_uuid, to_label = (mv.tgt, mv.tmig, mv.host, mv.grant, mv.moving,
                                                          mv.to_uuid, mv.to_label)
    cfg = attrs.get("Config") or {}
    image, image_ref, warnings = _pinned_image(attrs, image_tag_id, name)

    base, connect, keeps = create_body(attrs, image_ref, image_config, api_version)
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now if now is not None else time.time()))
    layer = _layer(attrs, files, name, stamp, force)
    new = copy.deepcopy(base)
    if layer.image is not None:
        new["Image"] = layer.image
        labels = new["Labels"] = dict(new.get("Labels") or {})
        labels.setdefault(LAYER_LABEL, image_ref)  # where it came from, kept across migrations
        labels[LAYER_CONTAINER_LABEL] = name  # the image's labels too: the copy's are exactly the body's
    rewrite_grant(new, grant, moving, HostGpu(tgt.index, to_uuid, tgt.minor_number if tmig is None else None,
                                              mig=tmig.index if tmig is not None else None))
    after_grant = read_grant(new, host)
    visible_after = 1 if after_grant.all else max(1, len(after_grant.keys))
    from_uuids = {g.uuid for g in gpus if g.index in mv.from_idx} | {e.key for e in moving if host.mig(e.key)}
    warnings += rewrite_cuda_visible(new, {u for u in from_uuids if u}, to_uuid, visible_after, name)
    if mv.from_all or grant.count > 1:
        only = f"{to_label} only" if after_grant.keys == (to_uuid,) else after_grant.describe(host)
        warnings.append(f"{name} was granted {grant.describe(host).split(' (')[0]}; after the move it is "
                        f"granted {only}.")
    hc = attrs.get("HostConfig") or {}
    warnings += _ports_and_room(hc, mv, peak_memory, usage, name)
    compose_warnings, change = _compose(cfg.get("Labels") or {}, name, to_uuid)
    warnings += compose_warnings
    state = attrs.get("State") or {}
    health = cfg.get("Healthcheck") or {}
    command = running_command(attrs)
    after = effective_command(new, image_config)
    if command is not None and after is not None and after != command:
        warnings.append(f"The copy would run {json.dumps(after)} instead of {json.dumps(command)}; the migration "
                        f"will be rolled back at the create step.")
    if not state.get("Running"):
        warnings.append(_stopped_note(name, daemon_would_start(attrs)))
    first = (cfg.get("Labels") or {}).get(LAYER_LABEL)
    if first and str(cfg.get("Image") or "").startswith(LAYER_REPO + "/"):
        keeps.append(f"image {cfg.get('Image')}: {first} plus the files an earlier migration committed "
                     f"(label {LAYER_LABEL})")
    if (state.get("Health") or {}).get("Status") == "unhealthy":
        warnings.append(f"{name}'s healthcheck reports unhealthy now: the copy must report healthy, or the "
                        f"migration is rolled back and {name} is put back as it is (unhealthy).")
    warnings += _missing_links(hc, connect, base, others, name)
    return MigrationPlan(
        container_id=attrs.get("Id", ""),
        container_name=name,
        image=image,
        image_ref=image_ref,
        grant_form=moving[0].form,
        grant_before=grant.describe(host),
        grant_after=after_grant.describe(host),
        from_gpus=mv.from_idx,
        from_all=mv.from_all,
        to_gpu=tgt.index,
        to_uuid=to_uuid,
        to_mig=tmig.index if tmig is not None else None,
        from_migs=mv.from_migs,
        backup_name=f"{name}{BACKUP_INFIX}{stamp}",
        stop_timeout=int(cfg.get("StopTimeout") or 10),
        stop_signal=str(cfg.get("StopSignal") or "SIGTERM"),
        restart_policy=dict(hc.get("RestartPolicy") or {"Name": "no", "MaximumRetryCount": 0}),
        was_running=bool(state.get("Running")),
        start_stopped=daemon_would_start(attrs),
        command=tuple(command) if command is not None else None,
        has_healthcheck=bool(health.get("Test")) and health["Test"][0] != "NONE",
        body=new,
        original_body=base,
        connect=tuple(connect),
        diff=body_diff(base, new) + _command_diff(command, effective_command(new, image_config)),
        keeps=tuple(keeps),
        warnings=tuple(warnings),
        compose_change=change,
        peak_memory=peak_memory or None,
        forced=force,
        demo=demo,
        attrs=copy.deepcopy(attrs),
        layer_paths=len(layer.changes),
        layer_bytes=files.size_rw if layer.changes else 0,
        layer_sample=tuple(layer.changes[:LAYER_SAMPLE]),
        layer_image=layer.image,
        layer_discarded=bool(layer.changes) and files.discard,
        tmpfs=layer.tmpfs,
        networks=copy.deepcopy(files.networks),
    )


#: The label on a copy created from a committed writable layer: the image reference it was first made from.
LAYER_LABEL = "io.gputui.migrate.image"
#: The label naming the container whose files a committed image holds (on the image and the copy).
LAYER_CONTAINER_LABEL = "io.gputui.migrate.container"
#: The repository committed writable layers go to (``<repo>/<container>:<timestamp>``).
LAYER_REPO = "gputui-layer"
#: How many changed paths a plan lists.
LAYER_SAMPLE = 8
#: ``docker diff`` letters by the changes API's Kind.
_KIND = {0: "C", 1: "A", 2: "D"}


@record
class ContainerFiles:
    """What a container holds outside its volumes, read by the engine for the planner.

    ``changes`` are ``/containers/{id}/changes`` entries (``{"Path", "Kind"}``), ``size_rw`` inspect's
    ``SizeRw``; ``tmpfs`` maps a tmpfs mount to (bytes it holds, or None and why it was not measured);
    ``discard`` is ``--discard-changes``; ``networks`` what ``docker network inspect`` says of its networks.
    """

    changes: tuple[dict[str, Any], ...] = ()
    size_rw: int | None = None
    tmpfs: dict[str, tuple[int | None, str]] = field(default_factory=dict, hash=False, compare=False)
    discard: bool = False
    networks: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@record
class _Layer:
    changes: list[str]
    image: str | None
    tmpfs: tuple[tuple[str, int | None, str], ...]


def tmpfs_paths(attrs: dict[str, Any]) -> list[str]:
    """Every tmpfs mount of the container (``--tmpfs`` and ``--mount type=tmpfs``)."""
    hc = attrs.get("HostConfig") or {}
    paths = [str(p) for p in (hc.get("Tmpfs") or {})]
    paths += [str(m.get("Target")) for m in hc.get("Mounts") or [] if m.get("Type") == "tmpfs" and m.get("Target")]
    return sorted(set(paths))


def carried_changes(changes: Iterable[dict[str, Any]], attrs: dict[str, Any]) -> list[str]:
    """``docker diff`` lines of what a commit carries that a person would call a file of the container:
    nothing under a mount (volumes, binds, tmpfs: they travel or vanish on their own), not the mount
    points Docker made, not a directory listed only because something in it changed."""
    mounts = {str(m.get("Destination")) for m in attrs.get("Mounts") or [] if m.get("Destination")}
    mounts |= set(tmpfs_paths(attrs))
    entries: list[tuple[str, int]] = [
        (c["Path"][:4096], c["Kind"] if type(c.get("Kind")) is int and c["Kind"] in _KIND else 0)
        for c in changes if isinstance(c, dict) and isinstance(c.get("Path"), str) and c["Path"].startswith("/")]
    parents: set[str] = set()  # every folder that holds another changed path (a long pip install lists 100 000)
    for path, _ in entries:
        cut = path.rfind("/")
        while cut > 0 and path[:cut] not in parents:
            parents.add(path[:cut])
            cut = path.rfind("/", 0, cut)

    def under(path: str, top: str) -> bool:
        return path == top or path.startswith(top.rstrip("/") + "/")

    out = []
    for path, kind in entries:
        if any(under(path, m) for m in mounts):
            continue
        if any(under(m, path) for m in mounts) and kind != 2:
            continue  # a folder Docker made to hold a mount point
        if kind == 0 and (path in parents or path == "/"):
            continue
        out.append(f"{_KIND[kind]} {path}")
    return out


def _layer(attrs: dict[str, Any], files: ContainerFiles, name: str, stamp: str, force: bool) -> _Layer:
    """What happens to the container's own files: carried (commit into an image), discarded, or nothing to
    do; and its tmpfs mounts, refused when one holds data unless ``force``."""
    changes = carried_changes(files.changes, attrs)
    tmpfs = []
    for path in tmpfs_paths(attrs):
        used, why = files.tmpfs.get(path, (None, "not read"))
        tmpfs.append((path, used, why))
        if used and not force:
            raise MigrationRefused("tmpfs", f"The tmpfs {path} of {name} holds {size_text(used)}, which a "
                                            f"migration loses (tmpfs lives in memory); copy it out first, or "
                                            f"use --force to move it anyway.")
    image = None
    if changes and not files.discard:
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "container"
        image = f"{LAYER_REPO}/{slug[:100]}:{stamp}"
    return _Layer(changes, image, tuple(tmpfs))


def _missing_links(hc: dict[str, Any], connect: list[tuple[str, dict[str, Any]]], body: dict[str, Any],
                   others: list[dict[str, Any]], name: str) -> list[str]:
    """Links to containers that do not exist: the copy's create (or network connect) would fail."""
    known = {name_of(o) for o in others} | {str(o.get("Id", "")) for o in others}
    endpoints = list(((body.get("NetworkingConfig") or {}).get("EndpointsConfig") or {}).items()) + list(connect)
    links = [("", link) for link in (body.get("HostConfig") or {}).get("Links") or []]
    links += [(net, link) for net, ep in endpoints for link in (ep or {}).get("Links") or []]
    out = []
    for net, link in links:
        target = str(link).partition(":")[0].lstrip("/")
        if target and target not in known:
            where = f" on network {net}" if net else ""
            out.append(f"{name} links to container {target}{where}, which does not exist: creating the copy will "
                       f"fail and the migration will be rolled back.")
    return out


@record
class _Move:
    """What a plan moves, once every refusal has passed: the target card (and MIG device), the grant and
    the entries of it that move, and where they leave from."""

    tgt: Gpu
    tmig: MigDevice | None
    host: HostGpus
    grant: Grant
    moving: list[GrantEntry]
    from_all: bool
    from_idx: tuple[int, ...]
    from_migs: tuple[str, ...]

    @property
    def to_uuid(self) -> str:
        return self.tmig.uuid if self.tmig is not None else self.tgt.uuid

    @property
    def to_label(self) -> str:
        return f"GPU {self.tgt.index}" if self.tmig is None else f"MIG device {self.tgt.index}:{self.tmig.index}"


def _admit(attrs: dict[str, Any], gpus: tuple[Gpu, ...], target: str | int, *, others: Iterable[dict[str, Any]],
           peak_memory: int | None, usage: dict[int, int], force: bool, from_gpu: str | int | None,
           read_only: bool) -> _Move:
    """Every refusal a plan can meet before anything is built: read-only, preflight, the target (a GPU or a
    MIG device), the grant (none, device nodes that cannot name the target) and room on the target.
    Raises MigrationRefused."""
    name = name_of(attrs)
    if read_only:
        raise MigrationRefused("read-only", READ_ONLY)
    preflight(attrs, others)
    job = next((p.job for g in gpus for p in g.processes
                if p.job is not None and p.container is not None and p.container.id == attrs.get("Id")), None)
    if job is not None:
        raise MigrationRefused("slurm-job", f"{name} runs inside Slurm job {job.id}: Slurm owns its placement, so "
                                            f"gputui does not move it ('scontrol requeue {job.id}' if the job is "
                                            "requeueable).")
    tgt, tmig = resolve_destination(gpus, str(target))
    host = HostGpus.of(gpus)
    grant = read_grant(attrs, host)
    if not grant:
        raise MigrationRefused("no-grant", f"{name} has no GPU grant to move; give it one with "
                                           f"--gpus when you create it.")
    if tgt.lost:
        raise MigrationRefused("target-lost", target_refusal(tgt, None) or "")
    to_uuid = tmig.uuid if tmig is not None else tgt.uuid
    to_label = f"GPU {tgt.index}" if tmig is None else f"MIG device {tgt.index}:{tmig.index}"
    from_migs: tuple[str, ...] = ()
    if tmig is not None or any(host.mig(k) is not None for k in grant.keys):
        moving, from_all, from_idx, from_migs = _moving_mig(grant, host, gpus, to_uuid, to_label, from_gpu, name)
    else:
        moving, from_all, from_idx = _moving(grant, host, gpus, tgt, from_gpu, name)
    if any(e.form == "devices" for e in moving) and (tgt.minor_number is None or tmig is not None):
        raise MigrationRefused("target-minor", f"{name} is given GPUs as /dev/nvidiaN nodes, which cannot name a "
                                               f"MIG device." if tmig is not None else
                               f"{name} is given GPUs as /dev/nvidiaN nodes and the device "
                               f"node of GPU {tgt.index} is not known.")
    refusal = (mig_target_refusal(tgt, tmig, peak_memory, force, name) if tmig is not None
               else target_refusal(tgt, peak_memory, usage.get(tgt.index, 0), force, name))
    if refusal:
        raise MigrationRefused("no-fit", refusal)
    return _Move(tgt, tmig, host, grant, moving, from_all, from_idx, from_migs)


def _pinned_image(attrs: dict[str, Any], image_tag_id: str | None, name: str) -> tuple[str, str, list[str]]:
    """(image as configured, image the copy uses, warnings): a tag that moved or is gone pins the id."""
    cfg = attrs.get("Config") or {}
    image = cfg.get("Image") or attrs.get("Image", "")
    warnings: list[str] = []
    image_ref = image
    if attrs.get("Image") and image_tag_id != attrs["Image"]:
        image_ref = attrs["Image"]
        if image_tag_id is None:
            warnings.append(f"The image tag {image} no longer exists; the new container uses the same image "
                            f"by id ({image_ref[:19]}).")
        else:
            warnings.append(f"The image tag {image} now points to another image; the new container keeps "
                            f"the one {name} runs, by id ({image_ref[:19]}).")
    return image, image_ref, warnings


def _ports_and_room(hc: dict[str, Any], mv: _Move, peak_memory: int | None, usage: dict[int, int],
                    name: str) -> list[str]:
    """Warnings about random host ports (they change) and a forced move onto a target without room."""
    warnings: list[str] = []
    for port, bindings in (hc.get("PortBindings") or {}).items():
        for b in bindings or []:
            if not (b or {}).get("HostPort"):
                warnings.append(f"Port {port} is published on a random host port; the new container gets a "
                                f"new one.")
    tgt = mv.tgt
    room = mv.tmig.memory_free if mv.tmig is not None else (
        None if tgt.memory_free is None else tgt.memory_free + usage.get(tgt.index, 0))
    if peak_memory and room is not None and peak_memory > room:
        warnings.append(f"Forced: {mv.to_label} has {fmt_bytes(room)} free, less than the "
                        f"{fmt_bytes(peak_memory)} {name} has used.")
    return warnings


def _compose(labels: dict[str, Any], name: str, to_uuid: str) -> tuple[list[str], str | None]:
    """A compose service's warning (the next 'up' moves it back) and the compose-file change that keeps it."""
    if "com.docker.compose.project" not in labels and "com.docker.compose.service" not in labels:
        return [], None
    service = labels.get("com.docker.compose.service") or name
    project = labels.get("com.docker.compose.project") or "?"
    where = labels.get("com.docker.compose.project.config_files")
    warning = (f"{name} belongs to compose project {project}: the next 'docker compose up' that "
               f"recreates service {service} puts it back on its old GPU unless the compose file "
               f"changes{f' ({where})' if where else ''}.")
    return [warning], compose_change(clean_text(service), to_uuid)  # display text: one line per YAML line


def container_usage(snapshot: Snapshot | None, container_id: str) -> dict[int, int]:
    """GPU memory per GPU index held now by the container's processes."""
    out: dict[int, int] = {}
    if snapshot is None:
        return out
    for g in snapshot.gpus:
        for p in g.processes:
            if p.container is not None and p.container.id == container_id:
                out[g.index] = out.get(g.index, 0) + (p.gpu_memory or 0)
    return out


def observed_peak(snapshot: Snapshot | None, container_id: str, history: Any = None) -> int | None:
    """The most GPU memory the container held at once: from the history when there is one, else now."""
    now = sum(container_usage(snapshot, container_id).values())
    past = 0
    if history is not None:
        try:
            past = int(history.container_peak_memory(container_id))
        except Exception:
            past = 0
    peak = max(now, past)
    return peak or None


@record
class TargetOption:
    """One row of the dialog's target chooser."""

    index: int
    uuid: str
    memory_free: int | None
    utilization: int | None
    refusal: str | None
    suggested: bool = False
    current: bool = False
    #: a MIG device of GPU ``index`` (its index and profile), None for a whole GPU
    mig: int | None = None
    profile: str | None = None

    @property
    def ref(self) -> str:
        """What ``--to`` takes for it: "6", or "5:1" for a MIG device."""
        return str(self.index) if self.mig is None else f"{self.index}:{self.mig}"


def target_options(snapshot: Snapshot, container_id: str, peak_memory: int | None, force: bool = False,
                   current: tuple[int, ...] = ()) -> list[TargetOption]:
    """Every GPU as a target for this container: the suggested one first, then by free memory."""
    usage = container_usage(snapshot, container_id)
    sug = snapshot.imbalance.suggestion
    name = next((c.name for c in snapshot.containers if c.id == container_id), None) or next(
        (p.container.name for p in snapshot.processes
         if p.container is not None and p.container.id == container_id and p.container.name), "the container")
    suggested = None
    if sug is not None and sug.container is not None and sug.container in (container_id, name):
        suggested = sug.to_gpu
    out = []
    on_migs = {(p.gpu_index, p.mig_device) for p in snapshot.processes
               if p.container is not None and p.container.id == container_id and p.mig_device is not None}
    for g in snapshot.gpus:
        if g.mig_enabled and not g.lost:  # not a whole GPU: each of its MIG devices is a target
            for m in g.mig_devices:
                now = (g.index, m.index) in on_migs
                refusal = f"{name} is already on MIG device {g.index}:{m.index}." if now and len(on_migs) == 1 \
                    else mig_target_refusal(g, m, peak_memory, force, name)
                out.append(TargetOption(g.index, m.uuid, m.memory_free, None, refusal, current=now, mig=m.index,
                                        profile=m.profile))
            continue
        refusal = target_refusal(g, peak_memory, usage.get(g.index, 0), force, name)
        if g.index in current and len(current) == 1:
            refusal = f"{name} is already on GPU {g.index}."
        out.append(TargetOption(g.index, g.uuid, g.memory_free, g.utilization_gpu, refusal,
                                suggested=g.index == suggested, current=g.index in current))
    out.sort(key=lambda o: (not o.suggested, o.refusal is not None, -(o.memory_free or 0), o.index, o.mig or 0))
    return out
