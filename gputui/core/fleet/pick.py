"""``gputui pick --prometheus``: the best GPUs across the fleet, from windowed averages.

One pick sends :data:`PICK_QUERIES` queries: the fleet refresh plus three windowed
ones (mean utilization, mean and peak memory used over ``--window``). Each up host's
GPUs become :class:`GpuLoad`\\ s and go through the same :func:`pick` judge as a local
``gputui pick`` (lost GPUs and GPUs granted to running containers are never
chosen); ``--count N`` keeps the N GPUs on one host. The host whose chosen GPUs
carry the least load wins; ties go to the hostname.
"""

from __future__ import annotations

import shlex

from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.fleet.queries import FLEET_QUERIES, MIB, FleetReader, build_fleet, label_int, target_key
from gputui.core.judges.placement import GpuLoad, pick
from gputui.core.record import record
from gputui.core.safe_text import clean

FORMATS = ("host-index", "docker", "ssh")
PICK_QUERIES = len(FLEET_QUERIES) + 3


def windowed_queries(window: float) -> tuple[str, str, str]:
    w = f"[{max(1, round(window))}s]"
    util = '{__name__=~"gputui_gpu_utilization_ratio|DCGM_FI_DEV_GPU_UTIL"}'
    used = '{__name__=~"gputui_gpu_memory_used_bytes|DCGM_FI_DEV_FB_USED"}'
    return (f"avg_over_time({util}{w})", f"avg_over_time({used}{w})", f"max_over_time({used}{w})")


@record
class FleetPick:
    host: FleetHost | None
    chosen: tuple[int, ...]
    problem: str | None = None


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


def _reserved(host: FleetHost) -> dict[int, tuple[str, ...]]:
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


def _allocated(host: FleetHost) -> dict[int, tuple[str, ...]]:
    """GPU index -> the Slurm jobs it is allocated to, as "job 7 (alice)"."""
    by_uuid = {g.uuid: g.index for g in host.gpus}
    out: dict[int, list[str]] = {}
    for uuid, job, user in host.slurm_jobs:
        if uuid in by_uuid:
            out.setdefault(by_uuid[uuid], []).append(f"job {job} ({user or 'unknown user'})")
    return {i: tuple(names) for i, names in out.items()}


def pick_fleet(reader: FleetReader, count: int = 1, min_free: int | None = None, max_util: float | None = None,
               window: float = 60.0, include_allocated: bool = False) -> tuple[FleetSnapshot, FleetPick]:
    """Read the fleet and choose. Raises PrometheusError."""
    now = reader.clock()
    results = reader.run_queries(FLEET_QUERIES + windowed_queries(window), now)
    up, seen, gpus, procs, state = results[:len(FLEET_QUERIES)]
    snap = build_fleet(reader.client.url, now, up, seen, gpus, procs, state, queries=PICK_QUERIES)
    per_gpu = []
    for samples in results[len(FLEET_QUERIES):]:
        values: dict[tuple[str, str, int], float] = {}
        for s in samples:
            k, index = target_key(s.labels), label_int(s.labels.get("gpu"))
            if k is not None and index is not None and s.value == s.value:
                values[(k[0], k[1], index)] = s.value
        per_gpu.append(values)
    return snap, choose(snap, per_gpu[0], per_gpu[1], per_gpu[2], count, min_free, max_util, window,
                        include_allocated)


def choose(snap: FleetSnapshot, util: PerGpu, mean_used: PerGpu, peak_used: PerGpu, count: int,
           min_free: int | None, max_util: float | None, window: float, include_allocated: bool = False) -> FleetPick:
    if not snap.hosts:
        return FleetPick(None, (), f"Prometheus at {clean(snap.prometheus)} knows no GPU host (no gputui_* or "
                                   f"DCGM_FI_DEV_* series in the last hour).")
    up = [h for h in snap.hosts if h.up and h.gpus]
    if not up:
        down = [clean(h.shown) for h in snap.hosts if not h.up]
        listed = ", ".join(down[:5]) + (", …" if len(down) > 5 else "")
        return FleetPick(None, (), f"No GPU host is up ({len(down)} down: {listed}).")
    best: tuple[tuple[bool, float, list[int], str, str], FleetHost, tuple[int, ...]] | None = None
    closest: tuple[tuple[int, str, str], FleetHost, str] | None = None
    for host in up:
        loads = host_loads(host, util, mean_used, peak_used)
        reserved = _reserved(host)
        allocated = {} if include_allocated else _allocated(host)
        result = pick(loads, reserved, count=count, min_free=min_free, max_util=max_util, observed=window,
                      allocated=allocated)
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
        return FleetPick(best[1], best[2])
    assert closest is not None
    n_down = sum(1 for h in snap.hosts if not h.up)
    scope = f"{len(up)} host{'s' if len(up) != 1 else ''} up" + (f", {n_down} down" if n_down else "")
    problem = closest[2].rstrip(".")
    return FleetPick(None, (), f"Nothing fits on any GPU host ({scope}); closest is {clean(closest[1].shown)}: "
                               f"{problem[:1].lower()}{problem[1:]}.")


def format_fleet_pick(host: FleetHost, indices: tuple[int, ...], fmt: str) -> str:
    """``gpu-node-03 5``, ``DOCKER_HOST=ssh://gpu-node-03 docker run --gpus device=GPU-…`` or
    ``ssh gpu-node-03 CUDA_VISIBLE_DEVICES=5``. The host is shell-quoted when it needs it
    (a label is outside text), so the line is safe to paste or ``eval``."""
    target = clean(host.ssh_target)
    joined = ",".join(str(i) for i in indices)
    if fmt == "host-index":
        return f"{target} {joined}"
    if fmt == "ssh":
        return f"ssh {shlex.quote(target)} CUDA_VISIBLE_DEVICES={joined}"
    if fmt == "docker":
        uuids = {g.index: g.uuid for g in host.gpus}
        ids = [shlex.quote(clean(uuids[i])) for i in indices]
        gpus = f"--gpus device={ids[0]}" if len(ids) == 1 else f"--gpus '\"device={','.join(ids)}\"'"
        return f"DOCKER_HOST={shlex.quote('ssh://' + target)} docker run {gpus}"
    raise ValueError(f"unknown format {fmt!r}")
