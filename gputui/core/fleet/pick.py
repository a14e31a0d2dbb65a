"""``gputui pick --prometheus``: the best GPUs across the fleet, from windowed averages.

One pick sends :data:`PICK_QUERIES` queries: the fleet refresh plus three windowed
ones (mean utilization, mean and peak memory used over ``--window``), and one more when a
host is down (its last-seen time). Each up host's
GPUs become :class:`GpuLoad`\\ s and go through the same :func:`pick` judge as a local
``gputui pick`` (lost GPUs and GPUs granted to running containers are never
chosen); ``--count N`` keeps the N GPUs on one host. The host whose chosen GPUs
carry the least load wins; ties go to the hostname. A host whose name cannot be
put in a command (:mod:`gputui.core.fleet.remote`) is never chosen: it is named
in :attr:`FleetPick.skipped` instead.

The fleet host screen's ``m`` asks :func:`best_other_gpu` — the same reservations
(:func:`reserved_gpus`) and the same judge, on the newest values.
"""

from __future__ import annotations

import shlex

from gputui.core import metric_names
from gputui.core.fleet.model import FleetGpu, FleetHost, FleetSnapshot
from gputui.core.fleet.queries import (
    FLEET_QUERIES,
    MIB,
    FleetReader,
    build_fleet,
    names,
    one_shot_gpus,
    target_key,
)
from gputui.core.fleet.remote import gpu_uuid_ok, ssh_command, ssh_host, url_host
from gputui.core.fleet.rules import label_int, plausible_window
from gputui.core.judges.placement import GpuLoad, pick
from gputui.core.record import record
from gputui.core.safe_text import clean

FORMATS = ("host-index", "docker", "ssh")
PICK_QUERIES = len(FLEET_QUERIES) + 3


def windowed_queries(window: float) -> tuple[str, str, str]:
    w = f"[{max(1, round(window))}s]"
    util = names((metric_names.GPU_UTILIZATION.name, metric_names.DCGM_GPU_UTIL.name))
    used = names((metric_names.GPU_MEMORY_USED.name, metric_names.DCGM_FB_USED.name))
    return (f"avg_over_time({util}{w})", f"avg_over_time({used}{w})", f"max_over_time({used}{w})")


@record
class FleetPick:
    host: FleetHost | None
    chosen: tuple[int, ...]
    problem: str | None = None
    #: One sentence per host left out because its name cannot be put in a command.
    skipped: tuple[str, ...] = ()


#: (job, instance, GPU index) -> a windowed value.
PerGpu = dict[tuple[str, str, int], float]


def host_loads(host: FleetHost, util: PerGpu, mean_used: PerGpu, peak_used: PerGpu) -> dict[int, GpuLoad]:
    """Each GPU of ``host`` as the placement judge sees it (percent, bytes)."""
    dcgm = host.source == "dcgm"
    out: dict[int, GpuLoad] = {}
    for g in host.gpus:
        k = (host.job, host.instance, g.index)
        u = util.get(k)
        if u is not None and not dcgm:
            u *= 100
        mean, peak = mean_used.get(k), peak_used.get(k)
        if dcgm:
            mean = mean * MIB if mean is not None else None
            peak = peak * MIB if peak is not None else None
        total = g.memory_total
        out[g.index] = GpuLoad(
            index=g.index, uuid=g.uuid, lost=g.lost,
            util=None if g.lost else u,
            memory=100.0 * mean / total if mean is not None and total else None,
            free=g.memory_free,
            free_min=max(0, int(total - peak)) if peak is not None and total is not None else None,
            samples=1,
        )
    return out


def reserved_gpus(host: FleetHost) -> dict[int, tuple[str, ...]]:
    """GPU index -> containers explicitly granted it. The exporter expands a ``--gpus all`` grant to
    every GPU; like a local pick, such a grant reserves no GPU in particular, so a container granted
    every GPU of a multi-GPU host is left out."""
    by_uuid = {g.uuid: g.index for g in host.gpus}
    per_container: dict[str, set[str]] = {}
    for uuid, container in host.grants:
        if uuid in by_uuid:
            per_container.setdefault(container, set()).add(uuid)
    out: dict[int, list[str]] = {}
    for container, uuids in per_container.items():
        if len(by_uuid) > 1 and uuids == set(by_uuid):
            continue
        for uuid in uuids:
            out.setdefault(by_uuid[uuid], []).append(container)
    return {i: tuple(sorted(names)) for i, names in out.items()}


def _held(host: FleetHost, user: str | None) -> tuple[dict[int, str], set[int]]:
    """GPU index -> why it is held for someone else (a house reservation), and the GPUs reserved for
    ``user`` (a ``@group`` is matched against this machine's groups)."""
    from gputui.core.rules import Members

    members = Members()
    by_uuid = {g.uuid: g.index for g in host.gpus}
    held: dict[int, str] = {}
    mine: set[int] = set()
    for uuid, holder, until in host.reservations:
        index = by_uuid.get(uuid)
        if index is None:
            continue
        if members.holds(holder, user):
            mine.add(index)
        else:
            held.setdefault(index, f"reserved for {clean(holder)}" + (f" until {clean(until)}" if until else ""))
    for index in mine:
        held.pop(index, None)
    return held, mine


def _allocated(host: FleetHost) -> dict[int, tuple[str, ...]]:
    """GPU index -> the Slurm jobs it is allocated to, as "job 7 (alice)"."""
    by_uuid = {g.uuid: g.index for g in host.gpus}
    out: dict[int, list[str]] = {}
    for uuid, job, user in host.slurm_jobs:
        if uuid in by_uuid:
            out.setdefault(by_uuid[uuid], []).append(f"job {job} ({user or 'unknown user'})")
    return {i: tuple(names) for i, names in out.items()}


def pick_fleet(reader: FleetReader, count: int = 1, min_free: int | None = None, max_util: float | None = None,
               window: float = 60.0, include_allocated: bool = False,
               user: str | None = None) -> tuple[FleetSnapshot, FleetPick]:
    """Read the fleet and choose (for ``user``: see :func:`choose`). Raises PrometheusError."""
    now = reader.clock()
    results = reader.run_queries(FLEET_QUERIES + windowed_queries(window), now)
    up, seen, info, memory, rest, procs, state = results[:len(FLEET_QUERIES)]
    gpus = one_shot_gpus(seen, info, memory + rest)
    seen, extra = reader.last_seen(seen, now)
    snap = build_fleet(reader.client.url, now, up, seen, gpus, procs, state, queries=PICK_QUERIES + extra)
    per_gpu = []
    for samples in results[len(FLEET_QUERIES):]:
        values: dict[tuple[str, str, int], float] = {}
        for s in samples:
            k, index = target_key(s.labels), label_int(s.labels.get("gpu"))
            if k is not None and index is not None and plausible_window(s.labels.get("__name__", ""), s.value):
                values[(k[0], k[1], index)] = s.value
        per_gpu.append(values)
    return snap, choose(snap, per_gpu[0], per_gpu[1], per_gpu[2], count, min_free, max_util, window,
                        include_allocated, user)


def choose(snap: FleetSnapshot, util: PerGpu, mean_used: PerGpu, peak_used: PerGpu, count: int,
           min_free: int | None, max_util: float | None, window: float, include_allocated: bool = False,
           user: str | None = None) -> FleetPick:
    """The best host and GPUs. ``user``: who asks (a GPU reserved for someone else is never chosen; the
    holder's own reserved GPUs come first on their host)."""
    if not snap.hosts:
        return FleetPick(None, (), f"Prometheus at {clean(snap.prometheus)} knows no GPU host (no gputui_* or "
                                   f"DCGM_FI_DEV_* series in the last hour).")
    up = [h for h in snap.hosts if h.up and h.gpus]
    skipped = []
    for h in up:
        why = ssh_host(h)[1]
        if why:
            skipped.append(why)
    up = [h for h in up if ssh_host(h)[0] is not None]
    if not up and skipped:
        n = len(skipped) - 1
        more = f" ({n} more {'host' if n == 1 else 'hosts'} alike)" if n else ""
        return FleetPick(None, (), f"{skipped[0].rstrip('.')}{more}.", tuple(skipped))
    if not up:
        down = [clean(h.shown) for h in snap.hosts if not h.up]
        listed = ", ".join(down[:5]) + (", …" if len(down) > 5 else "")
        return FleetPick(None, (), f"No GPU host is up ({len(down)} down: {listed}).")
    best: tuple[tuple[bool, float, list[int], str, str], FleetHost, tuple[int, ...]] | None = None
    closest: tuple[tuple[int, str, str], FleetHost, str] | None = None
    for host in up:
        loads = host_loads(host, util, mean_used, peak_used)
        reserved = reserved_gpus(host)
        allocated = {} if include_allocated else _allocated(host)
        held, mine = _held(host, user)
        result = pick(loads, reserved, count=count, min_free=min_free, max_util=max_util, observed=window,
                      allocated=allocated, held=held, prefer=mine)
        if result.ok:
            chosen = [loads[i] for i in result.chosen]  # ranked as rank_key ranks one GPU, summed over the set
            key = (any(g.score is None for g in chosen), sum(g.score or 0.0 for g in chosen),
                   [-(g.free if g.free is not None else -1) for g in chosen], host.host, host.instance)
            if best is None or key < best[0]:
                best = (key, host, result.chosen)
        else:
            usable = sum(1 for g in loads.values()
                         if not g.lost and g.index not in reserved and g.index not in allocated)
            ckey = (-usable, host.host, host.instance)
            if closest is None or ckey < closest[0]:
                closest = (ckey, host, result.problem or "")
    if best is not None:
        return FleetPick(best[1], best[2], skipped=tuple(skipped))
    assert closest is not None
    n_down = sum(1 for h in snap.hosts if not h.up)
    scope = f"{len(up)} host{'s' if len(up) != 1 else ''} up" + (f", {n_down} down" if n_down else "")
    problem = closest[2].rstrip(".")
    return FleetPick(None, (), f"Nothing fits on any GPU host ({scope}); closest is {clean(closest[1].shown)}: "
                               f"{problem[:1].lower()}{problem[1:]}.", tuple(skipped))


def best_other_gpu(host: FleetHost, avoid: int) -> FleetGpu | None:
    """Where the fleet host screen's ``m`` moves a container from GPU ``avoid``: the GPU the placement
    judge ranks first among the others, on the newest values, with :func:`reserved_gpus`'s
    reservations (a ``--gpus all`` container reserves none) — the rule ``pick --prometheus`` uses."""
    loads = {}
    for g in host.gpus:
        loads[g.index] = GpuLoad(index=g.index, uuid=g.uuid, lost=g.lost,
                                 util=None if g.lost or g.utilization_gpu is None else float(g.utilization_gpu),
                                 memory=g.memory_percent, free=g.memory_free, free_min=g.memory_free, samples=1)
    reserved = dict(reserved_gpus(host))
    reserved[avoid] = reserved.get(avoid, ()) + ("the container being moved",)
    held, _ = _held(host, None)  # nor onto a GPU reserved for anyone
    result = pick(loads, reserved, count=1, allocated=_allocated(host), held=held)  # never onto a Slurm job's GPU
    if not result.ok:
        return None
    return next(g for g in host.gpus if g.index == result.chosen[0])


def format_fleet_pick(host: FleetHost, indices: tuple[int, ...], fmt: str) -> str:
    """``gpu-node-03 5``, ``DOCKER_HOST=ssh://gpu-node-03 docker run --gpus device=GPU-…`` or
    ``ssh -- gpu-node-03 CUDA_VISIBLE_DEVICES=5``. The host passed :func:`ssh_host`'s grammar (else
    ValueError: :func:`choose` never picks such a host) and is shell-quoted; a UUID that is not a GPU
    UUID is refused the same way, so the line is safe to paste or ``eval``."""
    target, why = ssh_host(host)
    if target is None:
        raise ValueError(why)
    joined = ",".join(str(i) for i in indices)
    if fmt == "host-index":
        return f"{shlex.quote(target)} {joined}"
    if fmt == "ssh":
        return ssh_command(target, [f"CUDA_VISIBLE_DEVICES={joined}"])
    if fmt == "docker":
        uuids = {g.index: g.uuid for g in host.gpus}
        bad = [uuids[i] for i in indices if not gpu_uuid_ok(uuids[i])]
        if bad:
            raise ValueError(f"{clean(host.shown)[:80]} reports {clean(bad[0])[:80]!r} as a GPU UUID: "
                             f"it is not one, so no docker command is offered; use --format host-index.")
        ids = [uuids[i] for i in indices]
        gpus = f"--gpus device={ids[0]}" if len(ids) == 1 else f"--gpus '\"device={','.join(ids)}\"'"
        return f"DOCKER_HOST={shlex.quote('ssh://' + url_host(target))} docker run {gpus}"
    raise ValueError(f"unknown format {fmt!r}")
