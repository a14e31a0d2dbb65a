"""The fleet's join: the answers of the fleet queries (:mod:`gputui.core.fleet.queries`) as one
:class:`~gputui.core.fleet.model.FleetSnapshot`. :func:`build_fleet` is pure: tests feed it answers.

What it trusts and what it flags is the queries module's "Trust": a GPU index or PID label is
ASCII digits, bounded; text labels are cut; values pass the driver's range rule; a series or value
that breaks a rule is left out or shown as N/A, and its host carries one sentence saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

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
from gputui.core.fleet.names import (
    ALERT_ACTIVE,
    CONTAINER_FINDING,
    CONTAINER_GPU_GRANTED,
    DCGM_FB_FREE,
    DCGM_FB_RESERVED,
    DCGM_FB_USED,
    DCGM_GPU_TEMP,
    DCGM_GPU_UTIL,
    GPU_INFO,
    GPU_LOST,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    HOST_INFO,
    IMBALANCE_FLAGGED,
    RESERVATION,
    RULE_VIOLATION,
    SLURM_JOB_INFO,
    STALE_GPU_MEMORY,
    STALE_PROCESSES,
)
from gputui.core.fleet.prom import Sample
from gputui.core.fleet.remote import HOST_MAX, NAME_MAX, host_problem
from gputui.core.fleet.rules import FIELD_LABEL, PID_MAX, Problems, fit, label_int, value_text
from gputui.core.fleet.scrapes import GONE
from gputui.core.plausible import JSON_SAFE_INT, LIMITS, PIB, implausible
from gputui.core.record import field, record, replace

MIB = 1024**2
_UTIL_LOW, _UTIL_HIGH, _ = LIMITS["utilization_gpu"]
_USED_LOW, _USED_HIGH, _ = LIMITS["memory_used"]
_TOTAL_LOW, _TOTAL_HIGH, _ = LIMITS["memory_total"]
_TEMP_LOW, _TEMP_HIGH, _ = LIMITS["temperature"]
#: Text this short is never cut (rules.fit): checked inline in the loops over thousands of series.
_SHORT = NAME_MAX // 4

#: Queries of a one-shot refresh, counted in FleetSnapshot.queries by default (queries.FLEET_QUERIES).
ONE_SHOT_QUERIES = 7

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
        if known is not None and metric != HOST_INFO and (
                known.source == "gputui" or not metric.startswith("gputui_")):
            continue  # the common case, kept cheap: thousands of GPU series per refresh
        src: Source = "gputui" if metric.startswith("gputui_") else "dcgm"
        note(k, src, labels.get("hostname" if src == "gputui" else "Hostname"), now)
    return hosts, targets


def _missing(targets: dict[tuple[str, str], bool], hosts: dict[tuple[str, str], _HostDraft]) -> bool:
    """Whether the GPU series may name a host `seen` does not: a target that answers but is not a
    known host (new, or no GPU exporter at all), or no `up` series to tell (federated data)."""
    return not targets or any(is_up and k not in hosts for k, is_up in targets.items())


#: What _gpu_drafts does with each GPU metric: one small number a name, looked up once a series (the
#: names compared one after the other were a tenth of a 2,000-host refresh). dcgm-exporter's from _D_UTIL on.
_UTIL, _USED, _TEMP, _TOTAL, _INFO, _LOST, _OTHER, _D_UTIL, _D_USED, _D_FREE, _D_RESERVED, _D_TEMP, _D_OTHER = range(13)
_SKIP = -1
_GPU_KIND = {GPU_UTILIZATION: _UTIL, GPU_MEMORY_USED: _USED, GPU_TEMPERATURE: _TEMP, GPU_MEMORY_TOTAL: _TOTAL,
             GPU_INFO: _INFO, GPU_LOST: _LOST, HOST_INFO: _SKIP, DCGM_GPU_UTIL: _D_UTIL, DCGM_FB_USED: _D_USED,
             DCGM_FB_FREE: _D_FREE, DCGM_FB_RESERVED: _D_RESERVED, DCGM_GPU_TEMP: _D_TEMP}
_UNSEEN: object = object()


def _gpu_drafts(samples: Sequence[Sample], hosts: dict[tuple[str, str], _HostDraft],
                problems: Problems) -> dict[tuple[str, str], dict[int, _GpuDraft]]:
    out: dict[tuple[str, str], dict[str, _GpuDraft]] = {}
    #: (host, GPU index) -> the fields dropped as impossible, with the value sent
    dropped: dict[tuple[tuple[str, str], int], list[str]] = {}

    def bad(k: tuple[str, str], g: _GpuDraft, field: str, value: float, sent: float) -> bool:
        if not implausible(field, value):
            return False
        dropped.setdefault((k, g.index), []).append(f"{FIELD_LABEL[field]} ({value_text(sent)})")
        return True
    #: (job, instance) -> its GPU drafts by gpu label and whether it is a dcgm-exporter host; None: no host
    books: dict[tuple[str, str], Any] = {}
    kinds = _GPU_KIND
    for labels, v in samples:  # tens of thousands per refresh: plain lookups, no helper calls
        get = labels.get
        metric = get("__name__", "")
        kind = kinds.get(metric)
        if kind is None:  # a name not read here still makes its GPU known
            kind = _D_OTHER if metric.startswith("DCGM_") else _OTHER
        elif kind == _SKIP:
            continue
        k = (get("job", ""), get("instance", ""))
        book = books.get(k, _UNSEEN)
        if book is _UNSEEN:
            host = hosts.get(k)
            book = books[k] = None if host is None else (out.setdefault(k, {}), host.source == "dcgm")
        dcgm = kind >= _D_UTIL
        if book is None or dcgm != book[1]:
            continue  # not a host, or a gputui exporter's --dcgm-names copies
        per_host = book[0]
        gpu = get("gpu", "")
        g = per_host.get(gpu)
        if g is None:
            index = label_int(gpu)
            if index is None:
                problems.leave_out(k, "GPU series whose gpu label is not a GPU index", gpu,
                                   plural="GPU series whose gpu label is not a GPU index")
                continue
            g = per_host[gpu] = _GpuDraft(index)
        if not g.uuid:
            uuid = get("UUID" if dcgm else "uuid") or ""
            g.uuid = uuid if len(uuid) <= _SHORT else problems.cut(k, uuid)
        if v != v:  # NaN: not reported
            continue
        # the driver's limits inline (the common case: thousands of values, each in range); out of
        # range, bad() says why
        if kind == _UTIL:
            if _UTIL_LOW <= v * 100 <= _UTIL_HIGH or not bad(k, g, "utilization_gpu", v * 100, v):
                g.util = round(v * 100)
        elif kind == _USED:
            if _USED_LOW <= v <= _USED_HIGH or not bad(k, g, "memory_used", v, v):
                g.used = int(v)
        elif kind == _TEMP:
            if _TEMP_LOW <= v <= _TEMP_HIGH or not bad(k, g, "temperature", v, v):
                g.temperature = round(v)
        elif kind == _TOTAL:
            if _TOTAL_LOW <= v <= _TOTAL_HIGH or not bad(k, g, "memory_total", v, v):
                g.total = int(v)
        elif kind == _INFO:
            name = get("name") or ""
            g.name = (name if len(name) <= _SHORT else problems.cut(k, name)) or g.name
        elif kind == _LOST:
            g.lost = v >= 1
        elif kind == _D_UTIL:
            g.name = g.name or problems.cut(k, get("modelName") or "") or None
            if not bad(k, g, "utilization_gpu", v, v):
                g.util = round(v)
        elif kind == _D_USED:
            if not bad(k, g, "memory_used", v * MIB, v):
                g.used = int(v * MIB)
        elif kind == _D_FREE:
            if not bad(k, g, "memory_used", v * MIB, v):
                g.free = int(v * MIB)
        elif kind == _D_RESERVED:
            if not bad(k, g, "memory_used", v * MIB, v):
                g.reserved = int(v * MIB)
        elif kind == _D_TEMP:
            if not bad(k, g, "temperature", v, v):
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
        if metric in (STALE_PROCESSES, STALE_GPU_MEMORY) and not 0 <= s.value <= JSON_SAFE_INT:
            problems.leave_out(k, f"impossible {metric} value", value_text(s.value))
            continue
        if metric == ALERT_ACTIVE and s.value >= 1:
            st.alerts.append(FleetAlert(label_int(labels.get("gpu")), cut(k, labels.get("kind", "")),
                                        cut(k, labels.get("severity", ""))))
        elif metric == IMBALANCE_FLAGGED:
            st.imbalance = s.value >= 1
        elif metric == STALE_PROCESSES:
            st.stale_count = min(JSON_SAFE_INT, st.stale_count + int(s.value))
        elif metric == STALE_GPU_MEMORY:
            st.stale_memory = min(JSON_SAFE_INT, (st.stale_memory or 0) + int(s.value))
        elif metric == CONTAINER_FINDING and s.value >= 1 and labels.get("container"):
            st.findings.append(ContainerFinding(cut(k, labels["container"]), cut(k, labels.get("kind", ""))))
        elif (metric == CONTAINER_GPU_GRANTED and s.value >= 1 and labels.get("via") != "all"
              and labels.get("uuid")):
            st.grants.append((cut(k, labels["uuid"]), cut(k, labels.get("container", ""))))
        elif metric == SLURM_JOB_INFO and s.value >= 1 and labels.get("uuid") and labels.get("slurm_job"):
            st.jobs.append((cut(k, labels["uuid"]), cut(k, labels["slurm_job"]), cut(k, labels.get("user", ""))))
        elif metric == RESERVATION and s.value >= 1 and labels.get("uuid") and labels.get("user"):
            st.reservations.append((cut(k, labels["uuid"]), cut(k, labels["user"]), cut(k, labels.get("until", ""))))
        elif metric == RULE_VIOLATION and s.value >= 1 and labels.get("rule"):
            gpu = label_int(labels.get("gpu"))
            st.violations.append((cut(k, labels["rule"]), cut(k, labels.get("user", "")),
                                  "" if gpu is None else str(gpu), cut(k, labels.get("container", ""))))
    return out


def build_fleet(prometheus: str, now: float, up: Sequence[Sample], seen: Sequence[Sample],
                gpus: Sequence[Sample], processes: Sequence[Sample], state: Sequence[Sample],
                queries: int = ONE_SHOT_QUERIES,
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
