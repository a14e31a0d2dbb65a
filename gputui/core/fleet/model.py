"""The fleet model: one refresh of every host Prometheus knows, immutable and serialisable.

``FleetSnapshot.to_json()`` *is* the ``gputui fleet --json`` schema in the README;
fields are added over time and never renamed. Units as in the snapshot schema:
bytes, percent, degrees Celsius, ISO-8601 times. ``None`` is N/A, never a made-up 0.
Label values are kept as Prometheus returned them: faces clean them
(:func:`gputui.core.safe_text.clean`) before they reach a terminal.
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from gputui.core.model import MemoryFigures
from gputui.core.record import record

Source = Literal["gputui", "dcgm"]

#: A GPU counts as busy at this utilization (percent) or above, or when a process holds memory on it.
BUSY_UTILIZATION = 10
#: Without process data (dcgm-exporter), a GPU whose memory is this full (percent) counts as busy too.
BUSY_MEMORY_PERCENT = 10.0


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


@record
class FleetProcess:
    """One GPU process as the exporter reports it (never its command line)."""

    pid: int
    user: str | None
    exe: str | None
    gpu_memory: int | None
    container: str | None
    image: str | None = None
    #: the exporter's runtime, pod and namespace labels (None from exporters that predate them)
    runtime: str | None = None
    pod: str | None = None
    namespace: str | None = None
    #: The MIG device it runs on (its index on the GPU), when the exporter says.
    mig_device: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "user": self.user, "exe": self.exe, "gpu_memory": self.gpu_memory,
                "container": self.container, "runtime": self.runtime, "pod": self.pod, "namespace": self.namespace}

    @property
    def owner(self) -> str | None:
        """The container as a person names it: Kubernetes as namespace/pod/container, other engines
        than Docker with the engine in brackets."""
        if not self.container:
            return None
        if self.runtime == "kubernetes" and self.pod:
            return f"{self.namespace}/{self.pod}/{self.container}" if self.namespace else f"{self.pod}/{self.container}"
        if self.runtime and self.runtime != "docker":
            return f"{self.container} ({self.runtime})"
        return self.container


@record
class FleetGpu(MemoryFigures):
    """One GPU of one host, from the newest samples."""

    index: int
    uuid: str
    name: str | None = None
    utilization_gpu: int | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    temperature: int | None = None
    lost: bool = False
    processes: tuple[FleetProcess, ...] = ()

    def busy(self, has_process_data: bool) -> bool:
        """Working or held: utilization at BUSY_UTILIZATION or above, or a process on it
        (without process data, memory at BUSY_MEMORY_PERCENT or above). A lost GPU is neither busy
        nor idle (:attr:`FleetHost.lost_gpus`)."""
        if self.lost:
            return False
        if self.utilization_gpu is not None and self.utilization_gpu >= BUSY_UTILIZATION:
            return True
        if has_process_data:
            return bool(self.processes)
        percent = self.memory_percent
        return percent is not None and percent >= BUSY_MEMORY_PERCENT

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "uuid": self.uuid, "name": self.name,
            "utilization_gpu": self.utilization_gpu, "memory_used": self.memory_used,
            "memory_total": self.memory_total, "temperature": self.temperature, "lost": self.lost,
            "processes": [p.to_json() for p in self.processes],
        }


@record
class FleetAlert:
    gpu: int | None
    kind: str
    severity: str

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "kind": self.kind, "severity": self.severity}


@record
class ContainerFinding:
    container: str
    kind: str


@record
class HostSummary:
    """One host's GPUs as the host list shows them, aggregated by Prometheus (the live fleet screen
    reads these instead of every GPU's series: :mod:`gputui.core.fleet.summary`)."""

    gpus: int = 0
    busy: int = 0
    lost: int = 0
    memory_used: int | None = None
    memory_total: int | None = None
    hottest: int | None = None
    #: What the `/` filter matches besides the host's own names: GPU models, and while a filter is
    #: typed, its processes' users, executables, containers, images and PIDs.
    words: tuple[str, ...] = ()


@record
class FleetHost:
    """One host: an exporter target told apart by its hostname label, else its instance."""

    host: str
    instance: str
    job: str
    up: bool
    last_seen: datetime | None
    source: Source
    gpus: tuple[FleetGpu, ...] = ()
    imbalance_flagged: bool | None = None
    #: GPU memory held by stale processes (bytes), where the exporter says.
    stale_gpu_memory: int | None = None
    #: How many processes the exporter judged stale (idle holders, orphans, ...).
    stale_processes: int | None = None
    alerts: tuple[FleetAlert, ...] = ()
    findings: tuple[ContainerFinding, ...] = ()
    #: (GPU UUID, container) for every explicit grant (``--gpus all`` reserves no GPU in particular).
    grants: tuple[tuple[str, str], ...] = ()
    #: (GPU UUID, Slurm job, user) for every GPU a Slurm job is allocated (gputui_slurm_job_info).
    slurm_jobs: tuple[tuple[str, str, str], ...] = ()
    #: House rules: (GPU UUID, user or @group, until) per reserved GPU (gputui_reservation), and the rules
    #: broken now as (rule, user, gpu, container) (gputui_rule_violation).
    reservations: tuple[tuple[str, str, str], ...] = ()
    rule_violations: tuple[tuple[str, str, str, str], ...] = ()
    #: One sentence about what this host cannot show (dcgm-only: no processes).
    note: str | None = None
    #: What a person calls it on screen: the hostname, with the instance when two targets share it.
    label: str = ""
    #: One sentence per problem with what this host's exporter sent (an impossible value shown as
    #: N/A, a series left out, a label cut, a name no command can carry); empty when none.
    problems: tuple[str, ...] = ()
    #: The host list's figures from per-host aggregates, when ``gpus`` is not read (the live screen's
    #: list); None when ``gpus`` holds every GPU.
    summary: HostSummary | None = None

    @property
    def key(self) -> tuple[str, str]:
        """Identity across refreshes: (job, instance)."""
        return (self.job, self.instance)

    @property
    def shown(self) -> str:
        return self.label or self.host

    @property
    def has_process_data(self) -> bool:
        return self.source == "gputui"

    @property
    def ssh_target(self) -> str:
        """What ``ssh`` and ``DOCKER_HOST=ssh://`` need: the hostname, else the instance without its port."""
        if self.host != self.instance:
            return self.host
        host = self.instance
        if host.startswith("["):
            return host[1:].split("]", 1)[0]
        return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

    @cached_property
    def gpu_count(self) -> int:
        return self.summary.gpus if self.summary is not None else len(self.gpus)

    @cached_property
    def busy_gpus(self) -> int:
        if self.summary is not None:
            return self.summary.busy
        return sum(1 for g in self.gpus if g.busy(self.has_process_data))

    @cached_property
    def lost_gpus(self) -> int:
        """GPUs NVML no longer answers for: counted apart, never as idle."""
        if self.summary is not None:
            return self.summary.lost
        return sum(1 for g in self.gpus if g.lost)

    @cached_property
    def memory_used(self) -> int | None:
        if self.summary is not None:
            return self.summary.memory_used
        known = [g.memory_used for g in self.gpus if g.memory_used is not None]
        return sum(known) if known else None

    @cached_property
    def memory_total(self) -> int | None:
        if self.summary is not None:
            return self.summary.memory_total
        known = [g.memory_total for g in self.gpus if g.memory_total is not None]
        return sum(known) if known else None

    @cached_property
    def hottest(self) -> int | None:
        if self.summary is not None:
            return self.summary.hottest
        known = [g.temperature for g in self.gpus if g.temperature is not None]
        return max(known) if known else None

    @cached_property
    def containers_with_findings(self) -> tuple[str, ...]:
        return tuple(sorted({f.container for f in self.findings}))

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "instance": self.instance, "job": self.job, "up": self.up,
            "last_seen": iso(self.last_seen), "source": self.source,
            "gpus": [g.to_json() for g in self.gpus],
            "imbalance_flagged": self.imbalance_flagged,
            "stale_gpu_memory": self.stale_gpu_memory,
            "stale_processes": self.stale_processes,
            "alerts": [a.to_json() for a in self.alerts],
            "containers_with_findings": [
                {"container": c, "kinds": sorted({f.kind for f in self.findings if f.container == c})}
                for c in self.containers_with_findings],
            "note": self.note,
            "slurm_jobs": [{"job": j, "user": u or None, "gpu": next((g.index for g in self.gpus if g.uuid == uuid),
                                                                     None), "uuid": uuid}
                           for uuid, j, u in self.slurm_jobs],
            "problems": list(self.problems),
            "reservations": sorted(({"gpu": next((g.index for g in self.gpus if g.uuid == uuid), None), "uuid": uuid,
                                     "for": holder, "until": until or None}
                                    for uuid, holder, until in self.reservations),
                                   key=lambda r: (r["gpu"] is None, r["gpu"] or 0, r["for"])),
            "rule_violations": [{"rule": r, "user": u or None, "gpu": int(g) if g else None, "container": c or None}
                                for r, u, g, c in self.rule_violations],
        }


@record
class FleetSnapshot:
    """One refresh: every host, in a stable order (hostname, then instance)."""

    prometheus: str
    time: datetime
    hosts: tuple[FleetHost, ...]
    #: Problems with the data worth a sentence: duplicate hostnames, series without labels.
    warnings: tuple[str, ...] = ()
    #: PromQL queries this refresh issued.
    queries: int = 0

    def host(self, key: tuple[str, str]) -> FleetHost | None:
        for h in self.hosts:
            if h.key == key:
                return h
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheus": self.prometheus,
            "time": iso(self.time),
            "hosts": [h.to_json() for h in self.hosts],
            "warnings": list(self.warnings),
        }
