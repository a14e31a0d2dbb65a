"""PromQL for the fleet: a fixed set of queries per refresh, whatever the number of hosts.

One refresh (:meth:`FleetReader.read`) sends exactly ``len(FLEET_QUERIES)`` instant
queries, concurrently; the host screen adds ``len(HOST_RANGE_QUERIES)`` range
queries for its one host (:meth:`FleetReader.host_history`). Each query selects
several metric names at once (``{__name__=~"a|b"}``), so the count does not grow
with hosts, GPUs or metrics. :func:`build_fleet` is pure: tests feed it answers.

Hosts
-----
A host is a scrape target (``job``, ``instance``) that exported ``gputui_host_info``
(source ``gputui``) or dcgm-exporter's ``DCGM_FI_DEV_*`` (source ``dcgm``) during the
last hour. It is named by its ``hostname`` / ``Hostname`` label, else its instance.
It is up when its target's ``up`` is 1 (or, for series that arrive without a
target of their own, when it has samples now); a down host shows when it was last
seen (the newest sample in the last hour) and no GPU values, since what it last
said is no longer true.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from gputui.core import metric_names as mn
from gputui.core.fleet.model import (
    ContainerFinding,
    FleetAlert,
    FleetGpu,
    FleetHost,
    FleetProcess,
    FleetSnapshot,
    Source,
)
from gputui.core.fleet.prom import PromClient, PrometheusError, PrometheusUnreachable, RangeSeries, Sample
from gputui.core.record import field, record, replace

MIB = 1024**2
#: How far back a host that stopped answering is still listed (as down).
LOOKBACK = "1h"
#: Resolution of the last-seen time of a host down for longer than RECENT (to the second before).
LAST_SEEN_STEP = "15s"
RECENT = "2m"

GPUTUI_GPU_METRICS = (
    mn.HOST_INFO.name, mn.GPU_INFO.name, mn.GPU_UTILIZATION.name, mn.GPU_MEMORY_USED.name,
    mn.GPU_MEMORY_TOTAL.name, mn.GPU_TEMPERATURE.name, mn.GPU_LOST.name,
)
DCGM_GPU_METRICS = (
    mn.DCGM_GPU_UTIL.name, mn.DCGM_FB_USED.name, mn.DCGM_FB_FREE.name, mn.DCGM_FB_RESERVED.name,
    mn.DCGM_GPU_TEMP.name,
)
STATE_METRICS = (
    mn.ALERT_ACTIVE, mn.IMBALANCE_FLAGGED, mn.STALE_PROCESSES, mn.STALE_GPU_MEMORY,
    mn.CONTAINER_FINDING, mn.CONTAINER_GPU_GRANTED, "gputui_slurm_job_info",
)


def names(metrics: Iterable[str]) -> str:
    """A selector of several metric names: ``{__name__=~"a|b"}``."""
    return '{__name__=~"' + "|".join(metrics) + '"}'


def _seen(metric_selector: str, by: str, source: str) -> str:
    """Newest sample time per target: to the second over the last minutes, to LAST_SEEN_STEP before."""
    recent, hour = (f"max by (job, instance, {by}) (max_over_time(timestamp({metric_selector})[{window}]))"
                    for window in (f"{RECENT}:1s", f"{LOOKBACK}:{LAST_SEEN_STEP}"))
    return f'label_replace({recent} or {hour}, "gputui_source", "{source}", "", "")'


Q_UP = "up"
#: Every host seen in the last hour, with the time of its newest sample.
Q_HOSTS = (_seen("gputui_host_info", "hostname", "gputui") + " or "
           + _seen("DCGM_FI_DEV_FB_USED", "Hostname", "dcgm"))
Q_GPUS = names(GPUTUI_GPU_METRICS + DCGM_GPU_METRICS)
Q_PROCESSES = mn.PROCESS_GPU_MEMORY
Q_STATE = names(STATE_METRICS)
FLEET_QUERIES = (Q_UP, Q_HOSTS, Q_GPUS, Q_PROCESSES, Q_STATE)

#: The live screen splits Q_GPUS: what never changes while an exporter runs (GPU names, UUIDs and
#: sizes, host info) is read again only every STATIC_TTL seconds or when a new target appears; what
#: changes is read every refresh, ``gputui_gpu_lost`` only where it is 1.
_STATIC_GPU_METRICS = ("gputui_host_info", "gputui_gpu_info", "gputui_gpu_memory_total_bytes")
Q_GPU_STATIC = names(_STATIC_GPU_METRICS)
Q_GPU_LIVE = (names(tuple(m for m in GPUTUI_GPU_METRICS + DCGM_GPU_METRICS
                          if m not in _STATIC_GPU_METRICS and m != "gputui_gpu_lost")) + " or gputui_gpu_lost == 1")
LIVE_QUERIES = (Q_UP, Q_HOSTS, Q_GPU_LIVE, Q_PROCESSES, Q_STATE)
STATIC_TTL = 30.0

DCGM_NOTE = ("dcgm-exporter reports no per-process data: run gputui exporter on this host "
             "to see processes, owners and containers.")
NO_GPU_NOTE = "The exporter reports no GPUs on this host."


def target_key(labels: dict[str, str]) -> tuple[str, str] | None:
    instance = labels.get("instance")
    if not instance:
        return None
    return (labels.get("job", ""), instance)


def label_int(text: str | None) -> int | None:
    if text is None or not text.strip().lstrip("-").isdigit():
        return None
    return int(text)


def _mig_device(text: str | None) -> int | None:
    """A MIG device index from a label: 0-63 (an A100 has at most seven), anything else None."""
    if not text or len(text) > 2:
        return None
    value = label_int(text)
    return value if value is not None and 0 <= value < 64 else None


def _finite(value: float) -> bool:
    return math.isfinite(value)


@record(frozen=False)
class _HostDraft:
    job: str
    instance: str
    source: Source
    hostname: str | None = None
    last_seen: float | None = None


@record(frozen=False)
class _GpuDraft:
    index: int
    uuid: str = ""
    name: str | None = None
    util: int | None = None
    used: int | None = None
    total: int | None = None
    free: int | None = None
    reserved: int | None = None
    temperature: int | None = None
    lost: bool = False


class _Problems:
    """Counts of series left out, turned into sentences at the end."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def sentences(self) -> list[str]:
        return [f"{n} {what} {'was' if n == 1 else 'were'} left out." for what, n in sorted(self.counts.items())]


def _inventory(up: Sequence[Sample], seen: Sequence[Sample], gpus: Sequence[Sample],
               now: float, problems: _Problems
               ) -> tuple[dict[tuple[str, str], _HostDraft], dict[tuple[str, str], bool]]:
    targets: dict[tuple[str, str], bool] = {}
    for s in up:
        k = target_key(s.labels)
        if k is not None:
            targets[k] = s.value >= 1
    hosts: dict[tuple[str, str], _HostDraft] = {}

    def note(k: tuple[str, str], source: Source, hostname: str | None, ts: float | None) -> None:
        draft = hosts.get(k)
        if draft is None or (draft.source == "dcgm" and source == "gputui"):
            old = draft
            draft = hosts[k] = _HostDraft(k[0], k[1], source)
            if old is not None:
                draft.last_seen = old.last_seen
        if source != draft.source:
            return  # a gputui exporter with --dcgm-names: its DCGM_* copies say nothing new
        if hostname and not draft.hostname:
            draft.hostname = hostname
        if ts is not None and _finite(ts):
            draft.last_seen = ts if draft.last_seen is None else max(draft.last_seen, ts)

    for s in seen:
        k = target_key(s.labels)
        if k is None:
            problems.add("host series without an instance label")
            continue
        source: Source = "gputui" if s.labels.get("gputui_source") == "gputui" else "dcgm"
        name = s.labels.get("hostname") or s.labels.get("Hostname")
        note(k, source, name, s.value)
    for s in gpus if _missing(targets, hosts) else ():  # a host younger than the newest `seen` step
        labels = s.labels
        instance = labels.get("instance")
        if not instance:
            problems.add("GPU series without an instance label")
            continue
        k = (labels.get("job", ""), instance)
        metric = labels.get("__name__", "")
        known = hosts.get(k)
        if known is not None and metric != "gputui_host_info" and (
                known.source == "gputui" or not metric.startswith("gputui_")):
            continue  # the common case, kept cheap: thousands of GPU series per refresh
        src: Source = "gputui" if metric.startswith("gputui_") else "dcgm"
        note(k, src, labels.get("hostname" if src == "gputui" else "Hostname"), now)
    return hosts, targets


def _missing(targets: dict[tuple[str, str], bool], hosts: dict[tuple[str, str], _HostDraft]) -> bool:
    """Whether the GPU series may name a host `seen` does not: a target that answers but is not a
    known host (new, or no GPU exporter at all), or no `up` series to tell (federated data)."""
    return not targets or any(is_up and k not in hosts for k, is_up in targets.items())


def _gpu_drafts(samples: Sequence[Sample], hosts: dict[tuple[str, str], _HostDraft],
                problems: _Problems) -> dict[tuple[str, str], dict[int, _GpuDraft]]:
    out: dict[tuple[str, str], dict[str, _GpuDraft]] = {}
    isfinite = math.isfinite
    for labels, v in samples:  # thousands per refresh: plain lookups, no helper calls
        k = (labels.get("job", ""), labels.get("instance", ""))
        host = hosts.get(k)
        if host is None:
            continue
        metric = labels.get("__name__", "")
        dcgm = metric.startswith("DCGM_")
        if dcgm != (host.source == "dcgm") or metric == "gputui_host_info":
            continue
        gpu = labels.get("gpu", "")
        per_host = out.get(k)
        if per_host is None:
            per_host = out[k] = {}
        g = per_host.get(gpu)
        if g is None:
            index = label_int(gpu)
            if index is None:
                problems.add("GPU series without a gpu index label")
                continue
            g = per_host[gpu] = _GpuDraft(index)
        if not g.uuid:
            g.uuid = labels.get("UUID" if dcgm else "uuid") or ""
        if not isfinite(v):
            continue
        if metric == "gputui_gpu_info":
            g.name = labels.get("name") or g.name
        elif metric == "gputui_gpu_utilization_ratio":
            g.util = round(v * 100)
        elif metric == "gputui_gpu_memory_used_bytes":
            g.used = int(v)
        elif metric == "gputui_gpu_memory_total_bytes":
            g.total = int(v)
        elif metric == "gputui_gpu_temperature_celsius":
            g.temperature = round(v)
        elif metric == "gputui_gpu_lost":
            g.lost = v >= 1
        elif metric == "DCGM_FI_DEV_GPU_UTIL":
            g.util, g.name = round(v), g.name or labels.get("modelName") or None
        elif metric == "DCGM_FI_DEV_FB_USED":
            g.used = int(v * MIB)
        elif metric == "DCGM_FI_DEV_FB_FREE":
            g.free = int(v * MIB)
        elif metric == "DCGM_FI_DEV_FB_RESERVED":
            g.reserved = int(v * MIB)
        elif metric == "DCGM_FI_DEV_GPU_TEMP":
            g.temperature = round(v)
    result: dict[tuple[str, str], dict[int, _GpuDraft]] = {}
    for k, per_host in out.items():  # keyed by the label text above; by index from here on
        by_index: dict[int, _GpuDraft] = {}
        for g in per_host.values():
            if g.total is None and g.used is not None and g.free is not None:
                g.total = g.used + g.free + (g.reserved or 0)  # dcgm reports used, free and reserved
            by_index[g.index] = g
        result[k] = by_index
    return result


def _processes(samples: Sequence[Sample], problems: _Problems) -> dict[tuple[str, str, int], list[FleetProcess]]:
    out: dict[tuple[str, str, int], list[FleetProcess]] = {}
    for s in samples:
        k = target_key(s.labels)
        index, pid = label_int(s.labels.get("gpu")), label_int(s.labels.get("pid"))
        if k is None or index is None or pid is None:
            problems.add("process series without instance, gpu or pid labels")
            continue
        out.setdefault((k[0], k[1], index), []).append(FleetProcess(
            pid=pid,
            user=s.labels.get("user") or None,
            exe=s.labels.get("exe") or None,
            gpu_memory=int(s.value) if _finite(s.value) else None,
            container=s.labels.get("container") or None,
            image=s.labels.get("image") or None,
            runtime=s.labels.get("runtime") or None,
            pod=s.labels.get("pod") or None,
            namespace=s.labels.get("namespace") or None,
            mig_device=_mig_device(s.labels.get("mig_device")),
        ))
    for procs in out.values():
        procs.sort(key=lambda p: (-(p.gpu_memory or 0), p.pid))
    return out


@record(frozen=False)
class _State:
    alerts: list[FleetAlert]
    findings: list[ContainerFinding]
    grants: list[tuple[str, str]]
    imbalance: bool | None = None
    jobs: list[tuple[str, str, str]] = field(default_factory=list)
    stale_count: int = 0
    stale_memory: int | None = None


def _states(samples: Sequence[Sample]) -> dict[tuple[str, str], _State]:
    out: dict[tuple[str, str], _State] = {}
    for s in samples:
        k = target_key(s.labels)
        if k is None or not _finite(s.value):
            continue
        st = out.setdefault(k, _State([], [], []))
        metric, labels = s.labels.get("__name__", ""), s.labels
        if metric == "gputui_alert_active" and s.value >= 1:
            st.alerts.append(FleetAlert(label_int(labels.get("gpu")), labels.get("kind", ""),
                                        labels.get("severity", "")))
        elif metric == "gputui_imbalance_flagged":
            st.imbalance = s.value >= 1
        elif metric == "gputui_stale_processes":
            st.stale_count += int(s.value)
        elif metric == "gputui_stale_gpu_memory_bytes":
            st.stale_memory = (st.stale_memory or 0) + int(s.value)
        elif metric == "gputui_container_finding" and s.value >= 1 and labels.get("container"):
            st.findings.append(ContainerFinding(labels["container"], labels.get("kind", "")))
        elif (metric == "gputui_container_gpu_granted" and s.value >= 1 and labels.get("via") != "all"
              and labels.get("uuid")):
            st.grants.append((labels["uuid"], labels.get("container", "")))
        elif metric == "gputui_slurm_job_info" and s.value >= 1 and labels.get("uuid") and labels.get("slurm_job"):
            st.jobs.append((labels["uuid"], labels["slurm_job"], labels.get("user", "")))
    return out


def build_fleet(prometheus: str, now: float, up: Sequence[Sample], seen: Sequence[Sample],
                gpus: Sequence[Sample], processes: Sequence[Sample], state: Sequence[Sample],
                queries: int = len(FLEET_QUERIES)) -> FleetSnapshot:
    """The answers of :data:`FLEET_QUERIES` (in that order) as one snapshot."""
    problems = _Problems()
    hosts, targets = _inventory(up, seen, gpus, now, problems)
    gpu_drafts = _gpu_drafts(gpus, hosts, problems)
    procs = _processes(processes, problems)
    states = _states(state)
    built: list[FleetHost] = []
    for k, draft in hosts.items():
        drafts = gpu_drafts.get(k, {})
        is_up = targets[k] if k in targets else bool(drafts)
        gputui = draft.source == "gputui"
        gpu_list = tuple(
            FleetGpu(index=g.index, uuid=g.uuid, name=g.name, utilization_gpu=g.util, memory_used=g.used,
                     memory_total=g.total, temperature=g.temperature, lost=g.lost,
                     processes=tuple(procs.get((k[0], k[1], g.index), ())))
            for g in sorted(drafts.values(), key=lambda d: d.index)
        ) if is_up else ()
        st = states.get(k) if is_up and gputui else None
        stale_count = st.stale_count if st else (0 if is_up and gputui else None)
        stale_memory = st.stale_memory if st and st.stale_memory is not None else (0 if stale_count == 0 else None)
        note = None
        if is_up and not gputui:
            note = DCGM_NOTE
        elif is_up and not gpu_list:
            note = NO_GPU_NOTE
        seen_at = draft.last_seen if draft.last_seen is not None else (now if is_up else None)
        built.append(FleetHost(
            host=draft.hostname or draft.instance, instance=draft.instance, job=draft.job, up=is_up,
            last_seen=datetime.fromtimestamp(seen_at, timezone.utc) if seen_at is not None else None,
            source=draft.source, gpus=gpu_list,
            imbalance_flagged=st.imbalance if st else None,
            stale_gpu_memory=stale_memory if is_up and gputui else None,
            stale_processes=stale_count,
            alerts=tuple(sorted(st.alerts, key=lambda a: (a.gpu is not None, a.gpu or 0, a.kind))) if st else (),
            findings=tuple(st.findings) if st else (),
            grants=tuple(st.grants) if st else (),
            slurm_jobs=tuple(sorted(set(st.jobs))) if st else (),
            note=note,
        ))
    built, warnings = _label(built)
    built.sort(key=lambda h: (h.host.lower(), h.instance, h.job))
    return FleetSnapshot(prometheus=prometheus, time=datetime.fromtimestamp(now, timezone.utc),
                         hosts=tuple(built), warnings=tuple(warnings + problems.sentences()), queries=queries)


def _label(hosts: list[FleetHost]) -> tuple[list[FleetHost], list[str]]:
    """Hosts sharing a hostname are shown with their instance, and said once."""
    by_name: dict[str, list[FleetHost]] = {}
    for h in hosts:
        by_name.setdefault(h.host, []).append(h)
    warnings: list[str] = []
    out: list[FleetHost] = []
    for name, group in sorted(by_name.items()):
        if len(group) > 1:
            instances = ", ".join(sorted(f"{h.instance}" + (f" ({h.job})" if h.job else "") for h in group))
            warnings.append(f"{len(group)} targets report the hostname {name!r} ({instances}): "
                            f"each is shown with its instance.")
            out.extend(replace(h, label=f"{h.host} ({h.instance})") for h in group)
        else:
            out.extend(replace(h, label=h.host) for h in group)
    return out, warnings


# -- the host screen's range queries -----------------------------------------------------


def _quote(text: str) -> str:
    return json.dumps(text)  # a PromQL double-quoted string accepts JSON's escapes


def host_selector(host: FleetHost, metrics: Iterable[str]) -> str:
    return ('{__name__=~"' + "|".join(metrics) + f'",job={_quote(host.job)},instance={_quote(host.instance)}}}')


def host_range_queries(host: FleetHost) -> tuple[str, str]:
    """(utilization, memory used) of every GPU of ``host``, in the host's own metric names."""
    if host.source == "gputui":
        return (host_selector(host, ("gputui_gpu_utilization_ratio",)),
                host_selector(host, ("gputui_gpu_memory_used_bytes",)))
    return (host_selector(host, ("DCGM_FI_DEV_GPU_UTIL",)), host_selector(host, ("DCGM_FI_DEV_FB_USED",)))


HOST_RANGE_QUERIES = 2


@record
class HostHistory:
    """Load and memory (percent) per GPU index of one host, oldest first."""

    key: tuple[str, str]
    start: float
    end: float
    util: dict[int, tuple[tuple[float, float], ...]]
    memory: dict[int, tuple[tuple[float, float], ...]]


def _per_gpu(series: Sequence[RangeSeries], scale: Callable[[int, float], float | None]
             ) -> dict[int, tuple[tuple[float, float], ...]]:
    out: dict[int, tuple[tuple[float, float], ...]] = {}
    for s in series:
        index = label_int(s.labels.get("gpu"))
        if index is None:
            continue
        points = []
        for t, v in s.points:
            scaled = scale(index, v) if _finite(v) else None
            if scaled is not None:
                points.append((t, scaled))
        out[index] = tuple(points)
    return out


# -- the reader ---------------------------------------------------------------------------


class FleetReader:
    """Reads the fleet through one :class:`PromClient`. ``read`` blocks: run it in a worker."""

    def __init__(self, client: PromClient, clock: Callable[[], float] = time.time, *, parallel: bool = True) -> None:
        self.client = client
        self.clock = clock
        #: Send a refresh's queries at once (least wall time, for one-shot commands) or one after the
        #: other (least CPU: parsing answers in several threads at once costs more in GIL hand-offs).
        self.parallel = parallel
        #: Read GPU names and sizes again only every STATIC_TTL seconds (see LIVE_QUERIES): set for
        #: the live screen, whose refreshes would otherwise parse them thousands of times over.
        self.cache_static = False
        self._static: list[Sample] = []
        self._static_at = -STATIC_TTL
        self._static_targets: set[tuple[str, str]] = set()
        self._pool: ThreadPoolExecutor | None = None

    def run_queries(self, queries: Sequence[str], at: float) -> list[list[Sample]]:
        if not self.parallel:
            return [self.client.query(q, at) for q in queries]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(FLEET_QUERIES), thread_name_prefix="gputui-prom")
        futures = [self._pool.submit(self.client.query, q, at) for q in queries]
        results: list[list[Sample]] = []
        errors: list[PrometheusError] = []
        for f in futures:
            try:
                results.append(f.result())
            except PrometheusError as exc:
                errors.append(exc)
                results.append([])
        if errors:  # "unreachable" says the most; else the first problem
            raise next((e for e in errors if isinstance(e, PrometheusUnreachable)), errors[0])
        return results

    def read(self) -> FleetSnapshot:
        """One refresh: ``len(FLEET_QUERIES)`` queries (with ``cache_static``: LIVE_QUERIES, plus
        Q_GPU_STATIC when its answer is older than STATIC_TTL or a new target appeared). Raises
        PrometheusError."""
        now = self.clock()
        if not self.cache_static:
            up, seen, gpus, procs, state = self.run_queries(FLEET_QUERIES, now)
            return build_fleet(self.client.url, now, up, seen, gpus, procs, state)
        stale = time.monotonic() - self._static_at >= STATIC_TTL
        queries = LIVE_QUERIES + ((Q_GPU_STATIC,) if stale else ())
        results = self.run_queries(queries, now)
        up, seen, live, procs, state = results[:5]
        if not stale and any((s.labels.get("job", ""), s.labels.get("instance", "")) not in self._static_targets
                             for s in up if s.value >= 1):
            results.append(self.client.query(Q_GPU_STATIC, now))  # a new target: its GPUs' names now
            stale = True
        if stale:
            self._static = results[5]
            self._static_at = time.monotonic()
            self._static_targets = {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in self._static}
            # a target without gputui series (dcgm-exporter, node_exporter) never has static ones
            self._static_targets |= {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in up}
        return build_fleet(self.client.url, now, up, seen, self._static + live, procs, state,
                           queries=len(results))

    def host_history(self, host: FleetHost, span: float = 600.0, points: int = 120) -> HostHistory:
        """The last ``span`` seconds of one host's GPUs: :data:`HOST_RANGE_QUERIES` range queries."""
        end = self.clock()
        start, step = end - span, max(1.0, span / points)
        util_q, mem_q = host_range_queries(host)
        util = self.client.query_range(util_q, start, end, step)
        memory = self.client.query_range(mem_q, start, end, step)
        totals = {g.index: g.memory_total for g in host.gpus}
        ratio = host.source == "gputui"

        def mem_percent(index: int, used: float) -> float | None:
            total = totals.get(index)
            if not total:
                return None
            return min(100.0, 100.0 * used * (1 if ratio else MIB) / total)

        return HostHistory(
            key=host.key, start=start, end=end,
            util=_per_gpu(util, lambda _i, v: min(100.0, v * 100 if ratio else v)),
            memory=_per_gpu(memory, mem_percent),
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.client.close()
