"""``who``/``usage`` across a fleet, from the exporters' series in Prometheus.

Time is cut into buckets of ``step`` seconds (60 s, coarser for long periods so that a series
has at most :data:`MAX_POINTS` points); a range query evaluates each bucket's ``*_over_time``
over exactly that bucket (a millisecond short: Prometheus 2 ranges include both ends), so a
process counts for a bucket when any sample of it fell inside — never through Prometheus's
five-minute lookback, and the same on backfilled blocks (which have no staleness markers) as on
live scrapes. As the recorder measures a hold from its first sighting to its last, a run of n
buckets is n - 1 steps long: each bucket counts from the one before it. Three range queries
whatever the fleet's size: ``who`` asks for the processes' peak memory, their SM and the hosts'
names; ``usage`` for the processes' mean memory, the GPUs' utilization and the hosts' names.

The figures are the SQLite backend's (:mod:`gputui.core.sources.history_store`), to within one
bucket per hold: a hold runs from its first bucket to its last.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gputui.core import metric_names as mn
from gputui.core.fleet.prom import PromClient, RangeSeries
from gputui.core.sources.history_store import IDLE_UTIL, Holding, Usage, key_of

STEP = 60.0
MAX_POINTS = 10_000
#: ``who --at`` looks this far either side of the moment for the start and end of each hold.
AT_REACH = 86400.0


def step_for(since: float, until: float) -> float:
    """The bucket: a whole number of minutes, at most MAX_POINTS buckets in the period."""
    return max(STEP, math.ceil((until - since) / MAX_POINTS / STEP) * STEP)


def _window(step: float) -> str:
    """The range of one bucket: (t - step, t]."""
    return f"{int(step * 1000) - 1}ms"


def _gpu_selector(gpus: Sequence[int]) -> str:
    return "{gpu=~\"" + "|".join(str(int(g)) for g in gpus) + "\"}" if gpus else ""


def _host_of(series: RangeSeries, names: dict[tuple[str, str], str]) -> str:
    labels = series.labels
    k = (labels.get("job", ""), labels.get("instance", ""))
    return names.get(k) or labels.get("hostname") or labels.get("instance", "") or "?"


def _hosts(client: PromClient, start: float, end: float, step: float) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    query = f"max by (job, instance, hostname) (max_over_time({mn.HOST_INFO.name}[{_window(step)}]))"
    for s in client.query_range(query, start, end, step):
        name = s.labels.get("hostname")
        if name:
            out[(s.labels.get("job", ""), s.labels.get("instance", ""))] = name
    return out


def _empty(text: str) -> str | None:
    return text or None


def holdings(client: PromClient, since: float, until: float, gpus: Sequence[int] = (),
             now: float | None = None) -> list[Holding]:
    """Every hold overlapping [since, until]: one per run of buckets in which a series (host, GPU,
    PID, user, container) had a sample. For one moment (since == until) the holds around it, whole."""
    at = since == until
    lo, hi = (since - AT_REACH, until + AT_REACH) if at else (since, until)
    if now is not None:
        hi = min(hi, max(now, since))
    step = step_for(lo, hi)
    start = math.floor(lo / step) * step + step  # a bucket (t - step, t] per evaluation
    end = max(start, math.ceil(hi / step) * step)
    sel = _gpu_selector(gpus)
    window = _window(step)
    memory = client.query_range(f"max_over_time({mn.PROCESS_GPU_MEMORY.name}{sel}[{window}])", start, end, step)
    sm = client.query_range(f"avg_over_time({mn.PROCESS_SM_UTILIZATION.name}{sel}[{window}])", start, end, step)
    names = _hosts(client, start, end, step)
    sm_points: dict[tuple[str, str, str, str], dict[float, float]] = {}
    for s in sm:
        lab = s.labels
        sm_points[(lab.get("job", ""), lab.get("instance", ""), lab.get("gpu", ""), lab.get("pid", ""))] = \
            dict(s.points)
    last_bucket = end
    out: list[Holding] = []
    for s in memory:
        lab = s.labels
        try:
            gpu, pid = int(lab.get("gpu", "")), int(lab.get("pid", ""))
        except ValueError:
            continue
        host = _host_of(s, names)
        sms = sm_points.get((lab.get("job", ""), lab.get("instance", ""), lab.get("gpu", ""), lab.get("pid", "")), {})
        for run in _runs([t for t, _ in s.points], step):
            values = [v for t, v in s.points if run[0] <= t <= run[-1]]
            first, last = run[0], run[-1]
            if at and not first <= since <= last:
                continue
            if last < since or first > until:
                continue
            sm_values = [sms[t] * 100 for t in run if t in sms]
            out.append(Holding(
                host=host, gpu=gpu, pid=pid, start_time=first, user=_empty(lab.get("user", "")),
                container_id=None, container_name=_empty(lab.get("container", "")), image=_empty(lab.get("image", "")),
                compose_project=_empty(lab.get("compose_project", "")),
                compose_service=_empty(lab.get("compose_service", "")), runtime=None, job=None,
                exe=_empty(lab.get("exe", "")), first_seen=first, last_seen=last,
                running=now is not None and run[-1] >= last_bucket and last_bucket >= now - step,
                mem_peak=int(max(values)) if values else None,
                mem_byte_s=sum(values[1:]) * step,
                sm_mean=sum(sm_values) / len(sm_values) if sm_values else None, busy_s=0.0, idle_s=0.0))
    out.sort(key=lambda h: (h.first_seen, h.host, h.gpu, h.pid))
    return out


def _runs(times: list[float], step: float) -> list[list[float]]:
    runs: list[list[float]] = []
    for t in sorted(times):
        if runs and t - runs[-1][-1] <= step * 1.5:
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def usage(client: PromClient, since: float, until: float, by: str) -> tuple[list[Usage], Usage]:
    """Per key over [since, until], bucket by bucket: GPU-hours held (buckets in which the key had a
    process with memory on the GPU), busy and idle hours from the GPU's mean utilization in those
    buckets, memory GiB-hours from the processes' mean memory, and the most GPUs held in one bucket."""
    step = step_for(since, until)
    start = math.floor(since / step) * step + step
    end = max(start, math.floor(until / step) * step)
    memory = client.query_range(f"avg_over_time({mn.PROCESS_GPU_MEMORY.name}[{_window(step)}])", start, end, step)
    util = client.query_range(f"avg_over_time({mn.GPU_UTILIZATION.name}[{_window(step)}])", start, end, step)
    names = _hosts(client, start, end, step)
    util_of: dict[tuple[str, str], dict[float, float]] = {}
    for s in util:
        util_of[(_host_of(s, names), s.labels.get("gpu", ""))] = dict(s.points)
    #: key -> bucket -> GPUs held; key -> memory byte-seconds
    held: dict[str, dict[float, set[tuple[str, str]]]] = {}
    mem: dict[str, float] = {}
    for s in memory:
        probe = Holding(host=_host_of(s, names), gpu=_int(s.labels.get("gpu", "")), pid=0, start_time=0.0,
                        user=_empty(s.labels.get("user", "")), container_id=None,
                        container_name=_empty(s.labels.get("container", "")), image=_empty(s.labels.get("image", "")),
                        compose_project=_empty(s.labels.get("compose_project", "")),
                        compose_service=_empty(s.labels.get("compose_service", "")), runtime=None, job=None, exe=None,
                        first_seen=0.0, last_seen=0.0, running=False, mem_peak=None, mem_byte_s=0.0, sm_mean=None,
                        busy_s=0.0, idle_s=0.0)
        key = key_of(probe, by)
        gpu = (probe.host, s.labels.get("gpu", ""))
        buckets = held.setdefault(key, {})
        previous = None
        for t, v in s.points:
            buckets.setdefault(t, set()).add(gpu)
            if previous is not None and t - previous <= step * 1.5:  # a bucket counts from the one before
                mem[key] = mem.get(key, 0.0) + v * step
            previous = t
    rows = [_row(key, buckets, mem.get(key, 0.0), util_of, step) for key, buckets in held.items()]
    rows.sort(key=lambda u: (-u.gpu_hours_held, u.key))
    everyone: dict[float, set[tuple[str, str]]] = {}
    for buckets in held.values():
        for t, gpus in buckets.items():
            everyone.setdefault(t, set()).update(gpus)
    total = Usage("total", sum(u.gpu_hours_held for u in rows), sum(u.busy_gpu_hours for u in rows),
                  sum(u.memory_gib_hours for u in rows), sum(u.idle_hold_hours for u in rows),
                  max((len(g) for g in everyone.values()), default=0))
    return rows, total


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _row(key: str, buckets: dict[float, set[tuple[str, str]]], mem_byte_s: float,
         util_of: dict[tuple[str, str], dict[float, float]], step: float) -> Usage:
    held = busy = idle = 0.0
    for t, gpus in buckets.items():
        before = buckets.get(t - step, set())
        for gpu in gpus:
            if gpu not in before:
                continue  # the first bucket of a run: the hold starts here
            held += step
            u = util_of.get(gpu, {}).get(t)
            if u is not None:
                busy += step * u
                if u * 100 < IDLE_UTIL:
                    idle += step
    peak = max((len(g) for g in buckets.values()), default=0)
    return Usage(key, held / 3600, busy / 3600, mem_byte_s / 1024**3 / 3600, idle / 3600, peak)
