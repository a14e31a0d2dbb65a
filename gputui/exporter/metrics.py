"""The metric contract of ``gputui exporter``: one judged Snapshot -> metric families.

Names follow the Prometheus conventions (base units; ``_bytes``, ``_celsius``,
``_watts``, ``_hertz``, ``_ratio`` for 0–1). Series are added over time, never
renamed; the README's "Many servers" section documents each one.

* Every GPU series carries ``gpu`` (the NVML index) and ``uuid``.
* A value the driver does not report is absent, never 0.
* The command line is never exported (arguments carry tokens and passwords), nor any
  environment value: a process is named by the base name of its executable only
  (``Process.exe``: /proc/PID/exe, or ``comm`` when that cannot be read; never argv[0]).
* Process series are capped (largest GPU memory first);
  ``gputui_process_series_dropped`` says how many were left out.

Nothing here does I/O: :func:`build_families` is called at scrape time on the
newest snapshot, which the poll thread published earlier.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gputui import __version__
from gputui.core import metric_names as mn
from gputui.core.model import Container, Gpu, Process, Snapshot
from gputui.core.record import record

MIB = 1024 * 1024
DEFAULT_MAX_PROCESSES = 200
PROCESS_LABELS = list(mn.PROCESS_GPU_MEMORY.labels)
CONTAINER_LABELS = list(mn.CONTAINER_GPU_MEMORY.labels)
DCGM_LABELS = list(mn.DCGM_LABELS)


@record
class ExportOptions:
    """What the operator chose on the command line."""

    hostname: str | None = None
    dcgm_names: bool = False
    max_processes: int = DEFAULT_MAX_PROCESSES
    #: False with --no-docker: then there is no docker source to report up or down.
    docker: bool = True
    #: the host label of the DCGM_* series: "Hostname" (released dcgm-exporter) or "hostname" (its main branch)
    dcgm_host_label: str = "Hostname"


@record
class PollStatus:
    """What the poll thread last saw, published together with the snapshot."""

    snapshot: Snapshot | None
    #: True when the last poll read NVML; False when it failed (the snapshot is then dropped).
    nvml_up: bool
    #: POSIX time of the last successful poll, or None before the first.
    last_poll: float | None


def _gauge(metric: mn.Metric, labels: list[str] | None = None) -> GaugeMetricFamily:
    """An empty family of ``metric`` (name, HELP and labels from :mod:`gputui.core.metric_names`; ``labels``
    where a face adds its own, e.g. dcgm's host label spelling, a Slurm node's job)."""
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels) if labels is None else labels)


def _s(value: object) -> str:
    """A label value. Text that is not valid UTF-8 (bytes from /proc kept by surrogateescape) would
    make the whole scrape fail to encode, so such characters become visible escapes instead."""
    if value is None:
        return ""
    text = str(value)
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Gpus:
    """The per-GPU families, filled one GPU at a time."""

    def __init__(self) -> None:
        self.info = _gauge(mn.GPU_INFO)
        #: the value series: (family, Gpu field, factor), from the one table of names
        self.values = [(_gauge(m), m.field, m.scale) for m in mn.GPU_VALUES]
        self.lost = _gauge(mn.GPU_LOST)
        self.throttled = _gauge(mn.GPU_THROTTLED)
        self.stale = _gauge(mn.STALE_PROCESSES)
        self.stale_memory = _gauge(mn.STALE_GPU_MEMORY)
        self.mig_used = _gauge(mn.MIG_MEMORY_USED)
        self.mig_total = _gauge(mn.MIG_MEMORY_TOTAL)

    def add(self, g: Gpu) -> None:
        lab = [str(g.index), g.uuid]
        self.info.add_metric([str(g.index), _s(g.uuid), _s(g.name), _s(g.pci_bus_id)], 1)
        self.lost.add_metric(lab, 1 if g.lost else 0)
        for family, field, scale in self.values:
            value = getattr(g, field)
            if value is not None:
                family.add_metric(lab, value * scale)
        for reason in g.throttle_reasons or ():  # None: the driver does not say, so no series
            self.throttled.add_metric(lab + [reason], 1)
        counts: dict[str, int] = {}
        held = 0
        for p in g.processes:
            if p.stale:
                held += p.gpu_memory or 0
            for kind in {f.kind for f in p.stale}:
                counts[kind] = counts.get(kind, 0) + 1
        for kind, n in sorted(counts.items()):
            self.stale.add_metric(lab + [kind], n)
        self.stale_memory.add_metric(lab, held)
        for m in g.mig_devices if g.mig_enabled and not g.lost else ():
            mig = lab + [_s(m.uuid), _s(m.profile)]
            if m.memory_used is not None:
                self.mig_used.add_metric(mig, m.memory_used)
            if m.memory_total is not None:
                self.mig_total.add_metric(mig, m.memory_total)

    def families(self) -> list[Metric]:
        return [self.info, *(family for family, _, _ in self.values), self.lost, self.throttled, self.stale,
                self.stale_memory, self.mig_used, self.mig_total]


def _gpu_families(gpus: tuple[Gpu, ...], memo: dict[str, object] | None) -> list[Metric]:
    """The per-GPU families; the same GPU objects as last time (the poller hands an unchanged GPU
    out again) give the same families back."""
    last = memo.get("gpus") if memo is not None else None
    if isinstance(last, tuple) and len(last[0]) == len(gpus) \
            and all(a is b for a, b in zip(last[0], gpus, strict=True)):
        kept: list[Metric] = last[1]
        return kept
    built = _Gpus()
    for g in gpus:
        built.add(g)
    families = built.families()
    if memo is not None:
        memo["gpus"] = (gpus, families)
    return families


def _container_labels(p: Process) -> list[str]:
    c = p.container
    if c is None:
        return ["", "", "", "", "", "", ""]
    return [_s(c.label), _s(c.image), _s(c.compose_project), _s(c.compose_service), c.runtime, _s(c.pod),
            _s(c.namespace)]


def _process_families(snap: Snapshot, cap: int, memo: dict[str, object] | None = None) -> list[Metric]:
    """The process series. With a ``memo`` (the collector's, kept from scrape to scrape), the same
    process rows as last time (the poller hands an unchanged process's row out again) give the same
    families back: they are built from nothing else but the cap and the GPUs' UUIDs."""
    uuid_of = {g.index: g.uuid for g in snap.gpus}
    mig_of = {(g.index, m.index): m.uuid for g in snap.gpus for m in g.mig_devices}
    procs = [p for g in snap.gpus for p in g.processes]
    key = (cap, uuid_of, mig_of, snap.slurm is not None)
    last = memo.get("processes") if memo is not None else None
    if isinstance(last, tuple) and last[0] == key and len(last[1]) == len(procs) \
            and all(a is b for a, b in zip(last[1], procs, strict=True)):
        families: list[Metric] = last[2]
        return families
    families = _build_process_families(list(procs), cap, uuid_of, mig_of, slurm=snap.slurm is not None)
    if memo is not None:
        memo["processes"] = (key, procs, families)
    return families


def _build_process_families(procs: list[Process], cap: int, uuid_of: dict[int, str],
                            mig_of: dict[tuple[int, int], str], slurm: bool = False) -> list[Metric]:
    # on a Slurm node each process series names its job (slurm_job: Prometheus owns the label "job")
    memory = _gauge(mn.PROCESS_GPU_MEMORY, PROCESS_LABELS + [mn.SLURM_JOB_LABEL] if slurm else None)
    sm = _gauge(mn.PROCESS_SM_UTILIZATION)
    dropped = _gauge(mn.PROCESS_SERIES_DROPPED)
    if len(procs) > cap:
        procs.sort(key=lambda p: p.gpu_memory or 0, reverse=True)
    kept = procs[:cap]
    seen: set[tuple[int, int]] = set()
    for p in kept:
        key = (p.gpu_index, p.pid)
        if key in seen:  # one series per (gpu, pid): a duplicate would make Prometheus reject the scrape
            continue
        seen.add(key)
        head = [str(p.gpu_index), uuid_of[p.gpu_index], str(p.pid)]
        # the MIG device it runs on ("" on a whole GPU, like the container labels of a host process)
        mig = _s(mig_of.get((p.gpu_index, p.mig_device), "")) if p.mig_device is not None else ""
        if p.gpu_memory is not None:
            job = [p.job.id if p.job is not None else ""] if slurm else []
            # mig_device: the MIG device's index on its GPU, so a reader can say "5:1" as the dashboard does
            device = str(p.mig_device) if mig and p.mig_device is not None else ""
            memory.add_metric(head + [_s(p.user), _s(p.exe or "")] + _container_labels(p) + [mig, device] + job,
                              p.gpu_memory)
        if p.sm_utilization is not None:
            sm.add_metric(head + [mig], p.sm_utilization / 100)
    dropped.add_metric([], len(procs) - len(kept))
    return [memory, sm, dropped]


def _container_families(containers: Iterable[Container], gpus: tuple[Gpu, ...]) -> list[Metric]:
    memory = _gauge(mn.CONTAINER_GPU_MEMORY)
    granted = _gauge(mn.CONTAINER_GPU_GRANTED)
    finding = _gauge(mn.CONTAINER_FINDING)
    uuid_of = {g.index: g.uuid for g in gpus}
    # Two pods may both name a container "cuda": pod and namespace keep their series apart, and a
    # series is never given twice (Prometheus would reject the whole scrape).
    seen: set[tuple[str, ...]] = set()

    def once(*labels: str) -> bool:
        if labels in seen:
            return False
        seen.add(labels)
        return True

    for c in containers:
        name, pod, ns = _s(c.name), _s(c.pod), _s(c.namespace)
        head = [name, _s(c.image), _s(c.compose_project), _s(c.compose_service), c.runtime, pod, ns]
        if once("m", *head):
            memory.add_metric(head, c.gpu_memory)
        for index in c.granted_gpus:
            labels = [name, uuid_of.get(index, ""), str(index), c.grant_source, pod, ns]
            if once("g", *labels):
                granted.add_metric(labels, 1)
        for kind in sorted({f.kind for f in c.findings}):
            if once("f", name, kind, pod, ns):
                finding.add_metric([name, kind, pod, ns], 1)
    return [memory, granted, finding]


def _slurm_families(snap: Snapshot) -> list[Metric]:
    """A Slurm node's jobs: one info series per allocated GPU (join on gpu; the job is not a label of
    every GPU series), and when each job's time limit ends."""
    info = _gauge(mn.SLURM_JOB_INFO)
    end = _gauge(mn.SLURM_JOB_END)
    uuid_of = {g.index: g.uuid for g in snap.gpus}
    assert snap.slurm is not None
    for j in snap.slurm.jobs:
        for i in j.gpus:
            if i in uuid_of:
                info.add_metric([_s(j.id), _s(j.user), _s(j.name), str(i), uuid_of[i]], 1)
        if j.end_time is not None:
            end.add_metric([_s(j.id)], j.end_time)
    return [info, end]


def _judgement_families(snap: Snapshot) -> list[Metric]:
    flagged = _gauge(mn.IMBALANCE_FLAGGED)
    flagged.add_metric([], 1 if snap.imbalance.flagged else 0)
    suggestion = _gauge(mn.IMBALANCE_SUGGESTION)
    s = snap.imbalance.suggestion
    if s is not None:
        suggestion.add_metric([_s(s.container), _s(s.pid), str(s.from_gpu), str(s.to_gpu)], 1)
    alert = _gauge(mn.ALERT_ACTIVE)
    seen: set[tuple[str, str, str]] = set()
    for a in snap.alerts:
        key = (_s(a.gpu), a.kind, a.severity)
        if key not in seen:
            seen.add(key)
            alert.add_metric(list(key), 1)
    return [flagged, suggestion, alert]


def _rule_families(snap: Snapshot) -> list[Metric]:
    """The house rules: 1 per violation now, 1 per reserved GPU (only where a rules folder has either)."""
    broken = _gauge(mn.RULE_VIOLATION)
    seen: set[tuple[str, str, str, str]] = set()
    for v in snap.rule_violations:
        key = (v.rule, _s(v.user), _s(v.gpu), _s(v.container))
        if key not in seen:
            seen.add(key)
            broken.add_metric(list(key), 1)
    reserved = _gauge(mn.RESERVATION)
    for r in snap.reservations:
        reserved.add_metric([str(r.gpu), r.uuid, r.holder, r.until.isoformat(timespec="seconds")], 1)
    return [broken, reserved]


def _dcgm_container(g: Gpu, snap: Snapshot) -> tuple[str, str, str]:
    """The one container to name on a GPU's dcgm series, as dcgm-exporter's (container, pod, namespace):
    the one holding most memory on it, else the only container granted it; empty when none or ambiguous.
    pod and namespace are a Kubernetes container's (empty for others, as dcgm-exporter leaves them)."""
    held: dict[tuple[str, str, str], int] = {}
    for p in g.processes:
        c = p.container
        if c is not None:
            key = (c.label, _s(c.pod), _s(c.namespace)) if c.runtime == "kubernetes" else (c.label, "", "")
            held[key] = held.get(key, 0) + (p.gpu_memory or 0)
    if held:
        return max(sorted(held), key=lambda key: held[key])
    granted = [(c.name, _s(c.pod), _s(c.namespace)) if c.runtime == "kubernetes" else (c.name, "", "")
               for c in snap.containers if g.index in c.granted_gpus]
    return granted[0] if len(granted) == 1 else ("", "", "")


def _dcgm_families(snap: Snapshot, hostname: str, host_label: str = "Hostname") -> list[Metric]:
    """dcgm-exporter's names, units and labels for every default counter NVML can give (the table in
    core/metric_names.py), so dcgm dashboards work unchanged. A MIG-enabled GPU also has one series per
    MIG instance (GPU_I_ID, GPU_I_PROFILE) for what an instance reports."""
    labels = list(mn.dcgm_labels(host_label))
    base = len(labels)
    # a series' own labels after the common ones (XID_ERRORS: err_code, the XID as text)
    families = {m.name: _gauge(m, labels + list(m.labels[base:])) for m in mn.DCGM_GPU}
    mig_fields = {m.name for m in mn.DCGM_MIG}
    for g in snap.gpus:
        if g.lost:
            continue
        device = f"nvidia{g.minor_number if g.minor_number is not None else g.index}"
        head = [str(g.index), _s(g.uuid), _s(g.pci_bus_id), device, _s(g.name), _s(hostname)]
        who = [_s(v) for v in _dcgm_container(g, snap)]  # container, pod, namespace
        migs = g.mig_devices if g.mig_enabled else ()
        for m in mn.DCGM_GPU:
            family = families[m.name]
            value = getattr(g, m.field)
            if value is not None:
                own = [str(int(value))] if len(m.labels) > base else []
                family.add_metric(head + ["", ""] + who + own, float(value) * m.scale)
            if m.name not in mig_fields:
                continue
            seen: set[int] = set()  # one series per GPU instance (its compute instances share its memory)
            for mig in migs:
                mig_value = getattr(mig, m.field)
                if mig_value is not None and mig.gpu_instance_id is not None and mig.gpu_instance_id not in seen:
                    seen.add(mig.gpu_instance_id)
                    family.add_metric(head + [_s(mig.profile), str(mig.gpu_instance_id)] + who,
                                      float(mig_value) * m.scale)
    return list(families.values())


def build_families(status: PollStatus, options: ExportOptions,
                   memo: dict[str, object] | None = None) -> Iterator[Metric]:
    """Every family of the contract for the newest poll (the poll histogram is separate). ``memo``:
    a dict the caller keeps from call to call, so that families whose inputs are the very same
    objects as last time are handed out again (never changed after they are built)."""
    snap = status.snapshot
    hostname = options.hostname or (snap.host if snap is not None else os.uname().nodename)
    host = _gauge(mn.HOST_INFO)
    host.add_metric([_s(hostname), _s(snap and snap.driver_version), _s(snap and snap.cuda_driver_version),
                     __version__], 1)
    yield host
    up = _gauge(mn.SOURCE_UP)
    up.add_metric(["nvml"], 1 if status.nvml_up else 0)
    if options.docker:
        up.add_metric(["docker"], 1 if snap is not None and snap.docker.available else 0)
    if snap is not None and snap.slurm is not None:
        up.add_metric(["slurm"], 1 if snap.slurm.available else 0)
    yield up
    if status.last_poll is not None:
        last = _gauge(mn.LAST_POLL)
        last.add_metric([], status.last_poll)
        yield last
    if snap is None:
        return
    yield from _gpu_families(snap.gpus, memo)
    yield from _process_families(snap, options.max_processes, memo)
    yield from _container_families(snap.containers, snap.gpus)
    yield from _judgement_families(snap)
    if snap.rule_violations or snap.reservations:
        yield from _rule_families(snap)
    if snap.slurm is not None:
        yield from _slurm_families(snap)
    if options.dcgm_names:
        yield from _dcgm_families(snap, hostname, options.dcgm_host_label)
