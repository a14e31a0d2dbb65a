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

Trust
-----
Labels and values are written by each host's exporter, so any host may send
anything. One label rule: a GPU index or PID is ASCII digits only, and bounded
(``gpu="²"``, ``gpu="٣"`` or a 5,000-digit label is not an index); a hostname is
cut at 253 bytes, other text labels at 256. One value rule, the driver's
(:func:`gputui.core.plausible.implausible`): finite and in range, so an integer
stays bounded. A series or value that breaks a rule is left out or shown as N/A,
and its host carries one sentence saying so (:attr:`FleetHost.problems`); no
answer makes a refresh fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from gputui.core import metric_names

# the host screen's range queries, re-exported where they were defined before
from gputui.core.fleet.history_host import HOST_RANGE_QUERIES as HOST_RANGE_QUERIES
from gputui.core.fleet.history_host import HostHistory as HostHistory
from gputui.core.fleet.history_host import host_range_queries as host_range_queries
from gputui.core.fleet.history_host import host_selector as host_selector
from gputui.core.fleet.history_host import per_gpu
from gputui.core.fleet.live_memory import Kept
from gputui.core.fleet.model import (
    ContainerFinding,
    FleetAlert,
    FleetGpu,
    FleetHost,
    FleetProcess,
    FleetSnapshot,
    HostSummary,
    Source,
)
from gputui.core.fleet.prom import PromClient, PrometheusError, PrometheusUnreachable, Sample
from gputui.core.fleet.remote import HOST_MAX, NAME_MAX, host_problem
from gputui.core.fleet.rules import FIELD_LABEL, PID_MAX, Problems, fit, label_int, value_text
from gputui.core.plausible import JSON_SAFE_INT, LIMITS, PIB, implausible
from gputui.core.record import field, record, replace

MIB = 1024**2
# The metric names read here, from the table the exporter writes by (gputui.core.metric_names); plain strings,
# since the loops below compare thousands of samples' names with them.
_ALERT_ACTIVE = metric_names.ALERT_ACTIVE.name
_CONTAINER_FINDING = metric_names.CONTAINER_FINDING.name
_CONTAINER_GPU_GRANTED = metric_names.CONTAINER_GPU_GRANTED.name
_DCGM_FB_FREE = metric_names.DCGM_FB_FREE.name
_DCGM_FB_RESERVED = metric_names.DCGM_FB_RESERVED.name
_DCGM_FB_USED = metric_names.DCGM_FB_USED.name
_DCGM_GPU_TEMP = metric_names.DCGM_GPU_TEMP.name
_DCGM_GPU_UTIL = metric_names.DCGM_GPU_UTIL.name
_GPU_INFO = metric_names.GPU_INFO.name
_GPU_LOST = metric_names.GPU_LOST.name
_GPU_MEMORY_TOTAL = metric_names.GPU_MEMORY_TOTAL.name
_GPU_MEMORY_USED = metric_names.GPU_MEMORY_USED.name
_GPU_TEMPERATURE = metric_names.GPU_TEMPERATURE.name
_GPU_UTILIZATION = metric_names.GPU_UTILIZATION.name
_HOST_INFO = metric_names.HOST_INFO.name
_IMBALANCE_FLAGGED = metric_names.IMBALANCE_FLAGGED.name
_PROCESS_GPU_MEMORY = metric_names.PROCESS_GPU_MEMORY.name
_STALE_GPU_MEMORY = metric_names.STALE_GPU_MEMORY.name
_STALE_PROCESSES = metric_names.STALE_PROCESSES.name
_SLURM_JOB_INFO = metric_names.SLURM_JOB_INFO.name
_RULE_VIOLATION = metric_names.RULE_VIOLATION.name
_RESERVATION = metric_names.RESERVATION.name
_UTIL_LOW, _UTIL_HIGH, _ = LIMITS["utilization_gpu"]
_USED_LOW, _USED_HIGH, _ = LIMITS["memory_used"]
_TOTAL_LOW, _TOTAL_HIGH, _ = LIMITS["memory_total"]
_TEMP_LOW, _TEMP_HIGH, _ = LIMITS["temperature"]
#: Text this short is never cut (rules.fit): checked inline in the loops over thousands of series.
_SHORT = NAME_MAX // 4
#: How far back a host that stopped answering is still listed (as down).
LOOKBACK = "1h"
#: Resolution of the last-seen time of a host down for longer than RECENT (to the second before).
LAST_SEEN_STEP = "15s"
RECENT = "2m"

GPUTUI_GPU_METRICS = (_HOST_INFO, _GPU_INFO, _GPU_UTILIZATION, _GPU_MEMORY_USED, _GPU_MEMORY_TOTAL, _GPU_TEMPERATURE,
                      _GPU_LOST)
DCGM_GPU_METRICS = (_DCGM_GPU_UTIL, _DCGM_FB_USED, _DCGM_FB_FREE, _DCGM_FB_RESERVED, _DCGM_GPU_TEMP)
STATE_METRICS = (_ALERT_ACTIVE, _IMBALANCE_FLAGGED, _STALE_PROCESSES, _STALE_GPU_MEMORY, _CONTAINER_FINDING,
                 _CONTAINER_GPU_GRANTED, _SLURM_JOB_INFO, _RULE_VIOLATION, _RESERVATION)


def names(metrics: Iterable[str]) -> str:
    """A selector of several metric names: ``{__name__=~"a|b"}``."""
    return '{__name__=~"' + "|".join(metrics) + '"}'


def _seen(metric_selector: str, by: str, source: str) -> str:
    """Newest sample time per target: to the second over the last minutes, to LAST_SEEN_STEP before."""
    recent, hour = (f"max by (job, instance, {by}) (max_over_time(timestamp({metric_selector})[{window}]))"
                    for window in (f"{RECENT}:1s", f"{LOOKBACK}:{LAST_SEEN_STEP}"))
    return f'label_replace({recent} or {hour}, "gputui_source", "{source}", "", "")'


#: The suffix of ``gputui_source`` on a host seen in the last hour but not now (see _hosts).
GONE = "-gone"


def _hosts(metric: str, by: str, source: str) -> str:
    """Every target that sent ``metric`` in the last hour: those that send it now with the time of
    their newest sample (``timestamp()`` at the instant: one sample per series), the others (down, or
    gone from the scrape configuration) marked ``source-gone``, without a time (``last_over_time`` over
    the raw samples). Their last-seen time costs a subquery of ``timestamp()`` (:func:`gone_query`), so
    it is asked for them only, not for the whole fleet's 240 steps a series."""
    live = f"max by (job, instance, {by}) (timestamp({metric}))"
    gone = f"max by (job, instance, {by}) (last_over_time({metric}[{LOOKBACK}]) unless on (job, instance) {metric})"
    return (f'label_replace({live}, "gputui_source", "{source}", "", "") or '
            f'label_replace({gone}, "gputui_source", "{source}{GONE}", "", "")')


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 pattern matching only itself: every ASCII punctuation mark escaped."""
    return text.translate(_ESCAPES)


_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_ESCAPES = str.maketrans({c: "\\" + c for c in _PUNCTUATION})
_HOST_METRICS = (("gputui", "hostname", _HOST_INFO), ("dcgm", "Hostname", _DCGM_FB_USED))


def gone_query(seen: Sequence[Sample]) -> str | None:
    """The last-seen times of the hosts :data:`Q_HOSTS` marks gone (None when none is): the old
    subquery, over those targets' instances only."""
    parts = []
    for source, by, metric in _HOST_METRICS:
        instances = sorted({s.labels.get("instance", "") for s in seen
                            if s.labels.get("gputui_source") == source + GONE} - {""})
        if instances:
            pattern = "|".join(_regex_literal(i) for i in instances)
            parts.append(_seen(f"{metric}{{instance=~{_quote(pattern)}}}", by, source))
    return " or ".join(parts) or None


def _slim(metrics: Iterable[str], by: str) -> str:
    """The series of ``metrics`` with only the labels the fleet reads (a scrape's other labels —
    the UUID on every GPU series, the target's own labels — would be most of the answer's bytes)."""
    return f"max by (__name__, job, instance, {by}) ({names(metrics)})"


Q_UP = "up"
#: Every host seen in the last hour; the time of its newest sample, for those answering now.
Q_HOSTS = " or ".join(_hosts(metric, by, source) for source, by, metric in _HOST_METRICS)
#: the labels _processes reads (the UUID, compose and MIG UUID labels were a third of the answer)
Q_PROCESSES = (f"max by (job, instance, gpu, pid, user, exe, container, image, runtime, pod, namespace, mig_device) "
               f"({_PROCESS_GPU_MEMORY})")
Q_STATE = names(STATE_METRICS)

#: The live screen splits Q_GPUS: what never changes while an exporter runs (GPU names, UUIDs and
#: sizes, host info) is read again only every STATIC_TTL seconds or when a new target appears; what
#: changes is read every refresh, ``gputui_gpu_lost`` only where it is 1.
_STATIC_GPU_METRICS = (_HOST_INFO, _GPU_INFO, _GPU_MEMORY_TOTAL)
Q_GPU_STATIC = " or ".join((_slim((_HOST_INFO,), "hostname"), _slim((_GPU_INFO,), "gpu, uuid, name"),
                            _slim((_GPU_MEMORY_TOTAL,), "gpu")))
Q_GPU_LIVE = " or ".join((_slim((_GPU_UTILIZATION, _GPU_MEMORY_USED, _GPU_TEMPERATURE), "gpu"),
                          names(DCGM_GPU_METRICS), f"max by (__name__, job, instance, gpu) ({_GPU_LOST} == 1)"))
LIVE_QUERIES = (Q_UP, Q_HOSTS, Q_GPU_LIVE, Q_PROCESSES, Q_STATE)
#: A one-shot refresh: the GPU series in two queries Prometheus evaluates side by side (each is
#: tens of thousands of series over a large fleet, most of a refresh's time), ``gputui_gpu_lost``
#: only where it is 1.
FLEET_QUERIES = (Q_UP, Q_HOSTS, Q_GPU_STATIC, Q_GPU_LIVE, Q_PROCESSES, Q_STATE)
STATIC_TTL = 30.0

DCGM_NOTE = ("dcgm-exporter reports no per-process data: run gputui exporter on this host "
             "to see processes, owners and containers.")
NO_GPU_NOTE = "The exporter reports no GPUs on this host."


def target_key(labels: dict[str, str]) -> tuple[str, str] | None:
    instance = labels.get("instance")
    if not instance:
        return None
    return (labels.get("job", ""), instance)


def _mig_device(text: str | None) -> int | None:
    """A MIG device index from a label: 0-63 (an A100 has at most seven), anything else None."""
    if not text or len(text) > 2:
        return None
    value = label_int(text)
    return value if value is not None and 0 <= value < 64 else None


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


def _inventory(up: Sequence[Sample], seen: Sequence[Sample], gpus: Sequence[Sample],
               now: float, problems: Problems
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
            if type(hostname) is not str:
                return
            draft.hostname = fit(hostname, HOST_MAX)
            if draft.hostname != hostname:
                problems.flag(k, f"Its hostname label is {len(hostname.encode('utf-8', 'surrogateescape'))} "
                                 f"bytes long: shown cut to {HOST_MAX}.")
        if ts is not None and 0 < ts < 2**33:  # a time datetime can hold (NaN and ±inf fail too)
            draft.last_seen = ts if draft.last_seen is None else max(draft.last_seen, ts)

    for s in seen:
        k = target_key(s.labels)
        if k is None:
            problems.add("host series without an instance label")
            continue
        marked = s.labels.get("gputui_source") or ""
        source: Source = "gputui" if marked.startswith("gputui") else "dcgm"
        name = s.labels.get("hostname") or s.labels.get("Hostname")
        note(k, source, name, None if marked.endswith(GONE) else s.value)  # gone: gone_query's answer says when
    for s in gpus if _missing(targets, hosts) else ():  # a host younger than the newest `seen` step
        labels = s.labels
        instance = labels.get("instance")
        if not instance:
            problems.add("GPU series without an instance label")
            continue
        k = (labels.get("job", ""), instance)
        metric = labels.get("__name__", "")
        known = hosts.get(k)
        if known is not None and metric != _HOST_INFO and (
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
                problems: Problems) -> dict[tuple[str, str], dict[int, _GpuDraft]]:
    out: dict[tuple[str, str], dict[str, _GpuDraft]] = {}
    #: (host, GPU index) -> the fields dropped as impossible, with the value sent
    dropped: dict[tuple[tuple[str, str], int], list[str]] = {}

    def bad(where: tuple[tuple[str, str], int], field: str, value: float) -> bool:
        if not implausible(field, value):
            return False
        dropped.setdefault(where, []).append(f"{FIELD_LABEL[field]} ({value_text(v)})")
        return True
    for labels, v in samples:  # thousands per refresh: plain lookups, no helper calls
        k = (labels.get("job", ""), labels.get("instance", ""))
        host = hosts.get(k)
        if host is None:
            continue
        metric = labels.get("__name__", "")
        dcgm = metric.startswith("DCGM_")
        if dcgm != (host.source == "dcgm") or metric == _HOST_INFO:
            continue
        gpu = labels.get("gpu", "")
        per_host = out.get(k)
        if per_host is None:
            per_host = out[k] = {}
        g = per_host.get(gpu)
        if g is None:
            index = label_int(gpu)
            if index is None:
                problems.leave_out(k, "GPU series whose gpu label is not a GPU index", gpu,
                                   plural="GPU series whose gpu label is not a GPU index")
                continue
            g = per_host[gpu] = _GpuDraft(index)
        if not g.uuid:
            uuid = labels.get("UUID" if dcgm else "uuid") or ""
            g.uuid = uuid if len(uuid) <= _SHORT else problems.cut(k, uuid)
        if v != v:  # NaN: not reported
            continue
        where = (k, g.index)
        # the driver's limits inline (the common case: thousands of values, each in range); out of
        # range, bad() says why
        if metric == _GPU_INFO:
            name = labels.get("name") or ""
            g.name = (name if len(name) <= _SHORT else problems.cut(k, name)) or g.name
        elif metric == _GPU_UTILIZATION:
            if _UTIL_LOW <= v * 100 <= _UTIL_HIGH or not bad(where, "utilization_gpu", v * 100):
                g.util = round(v * 100)
        elif metric == _GPU_MEMORY_USED:
            if _USED_LOW <= v <= _USED_HIGH or not bad(where, "memory_used", v):
                g.used = int(v)
        elif metric == _GPU_MEMORY_TOTAL:
            if _TOTAL_LOW <= v <= _TOTAL_HIGH or not bad(where, "memory_total", v):
                g.total = int(v)
        elif metric == _GPU_TEMPERATURE:
            if _TEMP_LOW <= v <= _TEMP_HIGH or not bad(where, "temperature", v):
                g.temperature = round(v)
        elif metric == _GPU_LOST:
            g.lost = v >= 1
        elif metric == _DCGM_GPU_UTIL:
            g.name = g.name or problems.cut(k, labels.get("modelName") or "") or None
            if not bad(where, "utilization_gpu", v):
                g.util = round(v)
        elif metric == _DCGM_FB_USED:
            if not bad(where, "memory_used", v * MIB):
                g.used = int(v * MIB)
        elif metric == _DCGM_FB_FREE:
            if not bad(where, "memory_used", v * MIB):
                g.free = int(v * MIB)
        elif metric == _DCGM_FB_RESERVED:
            if not bad(where, "memory_used", v * MIB):
                g.reserved = int(v * MIB)
        elif metric == _DCGM_GPU_TEMP:
            if not bad(where, "temperature", v):
                g.temperature = round(v)
    result: dict[tuple[str, str], dict[int, _GpuDraft]] = {}
    for k, per_host in out.items():  # keyed by the label text above; by index from here on
        by_index: dict[int, _GpuDraft] = {}
        for g in per_host.values():
            if g.total is None and g.used is not None and g.free is not None:
                g.total = g.used + g.free + (g.reserved or 0)  # dcgm reports used, free and reserved
            if g.used is not None and g.total is not None and g.used > g.total:
                dropped.setdefault((k, g.index), []).append(f"memory used ({g.used} bytes of {g.total})")
                g.used = None
            by_index[g.index] = g
        result[k] = by_index
    for (k, index), fields in sorted(dropped.items()):
        problems.flag(k, f"GPU {index}: Prometheus reported impossible values, shown as N/A: {', '.join(fields)}.")
    return result


def _processes(samples: Sequence[Sample], problems: Problems) -> dict[tuple[str, str, int], list[FleetProcess]]:
    out: dict[tuple[str, str, int], list[FleetProcess]] = {}
    cut = problems.cut
    for labels, value in samples:
        k = target_key(labels)
        if k is None:
            problems.add("process series without an instance label")
            continue
        gpu, pid_text = labels.get("gpu"), labels.get("pid")
        index, pid = label_int(gpu), label_int(pid_text, PID_MAX)
        if index is None or pid is None:
            what = "process series whose gpu or pid label is not a number"
            problems.leave_out(k, what, gpu if index is None else pid_text, plural=what)
            continue
        memory = None
        if value == value:
            if 0 <= value <= PIB:
                memory = int(value)
            else:
                problems.leave_out(k, "impossible process memory value", value_text(value), "shown as N/A")
        user, exe, container, image = (labels.get("user"), labels.get("exe"), labels.get("container"),
                                       labels.get("image"))
        out.setdefault((k[0], k[1], index), []).append(FleetProcess(
            pid=pid,
            # fit() keeps text of a quarter of its limit as is: the common case without a call
            user=(user if len(user) <= _SHORT else cut(k, user)) if user else None,
            exe=(exe if len(exe) <= _SHORT else cut(k, exe)) if exe else None,
            gpu_memory=memory,
            container=(container if len(container) <= _SHORT else cut(k, container)) if container else None,
            image=(image if len(image) <= _SHORT else cut(k, image)) if image else None,
            runtime=cut(k, labels["runtime"]) if labels.get("runtime") else None,
            pod=cut(k, labels["pod"]) if labels.get("pod") else None,
            namespace=cut(k, labels["namespace"]) if labels.get("namespace") else None,
            mig_device=_mig_device(labels.get("mig_device")),
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
    #: house rules: (GPU UUID, user or @group, until) per reserved GPU; (rule, user, gpu, container) broken now
    reservations: list[tuple[str, str, str]] = field(default_factory=list)
    violations: list[tuple[str, str, str, str]] = field(default_factory=list)
    stale_count: int = 0
    stale_memory: int | None = None


def _states(samples: Sequence[Sample], problems: Problems) -> dict[tuple[str, str], _State]:
    out: dict[tuple[str, str], _State] = {}
    cut = problems.cut
    for s in samples:
        k = target_key(s.labels)
        if k is None or s.value != s.value:
            continue
        st = out.setdefault(k, _State([], [], []))
        metric, labels = s.labels.get("__name__", ""), s.labels
        if metric in (_STALE_PROCESSES, _STALE_GPU_MEMORY) and not 0 <= s.value <= JSON_SAFE_INT:
            problems.leave_out(k, f"impossible {metric} value", value_text(s.value))
            continue
        if metric == _ALERT_ACTIVE and s.value >= 1:
            st.alerts.append(FleetAlert(label_int(labels.get("gpu")), cut(k, labels.get("kind", "")),
                                        cut(k, labels.get("severity", ""))))
        elif metric == _IMBALANCE_FLAGGED:
            st.imbalance = s.value >= 1
        elif metric == _STALE_PROCESSES:
            st.stale_count = min(JSON_SAFE_INT, st.stale_count + int(s.value))
        elif metric == _STALE_GPU_MEMORY:
            st.stale_memory = min(JSON_SAFE_INT, (st.stale_memory or 0) + int(s.value))
        elif metric == _CONTAINER_FINDING and s.value >= 1 and labels.get("container"):
            st.findings.append(ContainerFinding(cut(k, labels["container"]), cut(k, labels.get("kind", ""))))
        elif (metric == _CONTAINER_GPU_GRANTED and s.value >= 1 and labels.get("via") != "all"
              and labels.get("uuid")):
            st.grants.append((cut(k, labels["uuid"]), cut(k, labels.get("container", ""))))
        elif metric == _SLURM_JOB_INFO and s.value >= 1 and labels.get("uuid") and labels.get("slurm_job"):
            st.jobs.append((cut(k, labels["uuid"]), cut(k, labels["slurm_job"]), cut(k, labels.get("user", ""))))
        elif metric == _RESERVATION and s.value >= 1 and labels.get("uuid") and labels.get("user"):
            st.reservations.append((cut(k, labels["uuid"]), cut(k, labels["user"]), cut(k, labels.get("until", ""))))
        elif metric == _RULE_VIOLATION and s.value >= 1 and labels.get("rule"):
            gpu = label_int(labels.get("gpu"))
            st.violations.append((cut(k, labels["rule"]), cut(k, labels.get("user", "")),
                                  "" if gpu is None else str(gpu), cut(k, labels.get("container", ""))))
    return out


def build_fleet(prometheus: str, now: float, up: Sequence[Sample], seen: Sequence[Sample],
                gpus: Sequence[Sample], processes: Sequence[Sample], state: Sequence[Sample],
                queries: int = len(FLEET_QUERIES),
                summaries: dict[tuple[str, str], HostSummary] | None = None,
                problems: Problems | None = None) -> FleetSnapshot:
    """The answers of :data:`FLEET_QUERIES` (in that order, the two GPU queries' as one list) as one
    snapshot; ``seen`` with :func:`gone_query`'s answer, if it was sent. ``summaries``: the gputui
    hosts' list figures from aggregates (:mod:`gputui.core.fleet.summary`), their GPUs not read."""
    problems = Problems() if problems is None else problems
    hosts, targets = _inventory(up, seen, gpus, now, problems)
    gpu_drafts = _gpu_drafts(gpus, hosts, problems)
    procs = _processes(processes, problems)
    states = _states(state, problems)
    built: list[FleetHost] = []
    for k, draft in hosts.items():
        drafts = gpu_drafts.get(k, {})
        is_up = targets[k] if k in targets else bool(drafts)
        gputui = draft.source == "gputui"
        summary = summaries.get(k) if summaries is not None and gputui and is_up else None
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
        elif is_up and not gpu_list and not (summary is not None and summary.gpus):
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
            slurm_jobs=tuple(sorted(set(st.jobs))) if st and st.jobs else (),
            reservations=tuple(sorted(set(st.reservations))) if st and st.reservations else (),
            rule_violations=tuple(sorted(set(st.violations))) if st and st.violations else (),
            note=note, summary=summary, label=draft.hostname or draft.instance,
        ))
        why = host_problem(built[-1].ssh_target)
        if why is not None:
            problems.flag(k, f"No ssh command is offered for this host: its name cannot be put in one "
                             f"safely ({why}).")
        flags = problems.host_sentences(k)
        if flags:
            built[-1] = replace(built[-1], problems=flags)
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
            out.extend(group)  # built with label=host
    return out, warnings


def _quote(text: str) -> str:
    return json.dumps(text)  # a PromQL double-quoted string accepts JSON's escapes


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
        #: The live screen's refresh (:func:`gputui.core.fleet.summary.read_summary`, set by the app):
        #: per-host aggregates for the list, every series of the ``detail`` host (the one whose
        #: screen is open), the processes only while ``words`` (the `/` filter is in use).
        self.summary: Callable[[FleetReader, float], FleetSnapshot] | None = None
        self.detail: tuple[str, str] | None = None
        self.words = False
        #: What the live screen's last refresh keeps for the next (made by ``read_summary``).
        self.kept: Kept | None = None

    def run_queries(self, queries: Sequence[str], at: float) -> list[list[Sample]]:
        if not self.parallel:
            return [self.client.query(q, at) for q in queries]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="gputui-prom")
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
        if self.summary is not None:
            return self.summary(self, now)
        if not self.cache_static:
            up, seen, static, live, procs, state = self.run_queries(FLEET_QUERIES, now)
            seen, extra = self.last_seen(seen, now)
            return build_fleet(self.client.url, now, up, seen, static + live, procs, state,
                               queries=len(FLEET_QUERIES) + extra)
        stale = time.monotonic() - self._static_at >= STATIC_TTL
        queries = LIVE_QUERIES + ((Q_GPU_STATIC,) if stale else ())
        results = self.run_queries(queries, now)
        up, seen, live, procs, state = results[:5]
        seen, extra = self.last_seen(seen, now)
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
                           queries=len(results) + extra)

    def last_seen(self, seen: list[Sample], now: float) -> tuple[list[Sample], int]:
        """Q_HOSTS's answer with the last-seen times of the hosts it marks gone (one more query, only
        when some host is down), and the number of queries that took."""
        query = gone_query(seen)
        if query is None:
            return seen, 0
        return seen + self.client.query(query, now), 1

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
            util=per_gpu(util, lambda _i, v: min(100.0, v * 100 if ratio else v)),
            memory=per_gpu(memory, mem_percent),
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.client.close()
