"""The snapshot model: one poll of the machine, immutable and serialisable.

The JSON schema documented in the README *is* ``Snapshot.to_json()``; fields are
added over time and never renamed. Units: memory in bytes, power in watts,
temperature in degrees Celsius, utilization in percent, times as aware datetimes
(ISO-8601 in JSON). ``None`` means "not available" (N/A on screen, null in JSON);
it is never replaced by a made-up number.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from gputui.core.jobs_model import Allocation, JobRef, SlurmStatus
from gputui.core.record import field, fields, is_record, record

ProcessType = Literal["compute", "graphics", "compute+graphics"]
#: Who runs a container: Docker, podman (its Docker-compatible API), containerd outside Kubernetes
#: (nerdctl, ctr), a Kubernetes pod (any CRI), or an engine gputui only sees in a cgroup path.
Runtime = Literal["docker", "podman", "containerd", "kubernetes", "other"]
#: How a container was granted GPUs: Docker's and podman's forms, or the kubelet's device list (Kubernetes).
GrantSource = Literal["device_request", "nvidia_runtime_env", "cdi", "devices", "kubelet", "none"]
Severity = Literal["warning", "critical"]

#: A container's GPU grant: a tuple of GPU UUIDs, or the string "all".
GpuGrant = tuple[str, ...] | Literal["all"]


@record
class Finding:
    """One judged fact with a kind (machine-readable) and one explanatory sentence."""

    kind: str
    message: str
    #: Judged on less observation than its documented window (a one-shot, the first minutes).
    provisional: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "provisional": self.provisional}


@record
class ContainerRef:
    """The container a process belongs to, as attached to that process."""

    id: str
    name: str | None = None
    image: str | None = None
    compose_project: str | None = None
    compose_service: str | None = None
    runtime: Runtime = "docker"
    #: Kubernetes: pod name and namespace where known (containerd: its namespace).
    pod: str | None = None
    namespace: str | None = None
    #: Docker only: whether the id was confirmed by the Docker API.
    confirmed: bool = False
    #: Kubernetes: the pod's UID (from the cgroup path or the CRI labels).
    pod_uid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "image": self.image,
            "compose_project": self.compose_project,
            "compose_service": self.compose_service,
            "runtime": self.runtime,
            "pod": self.pod,
            "namespace": self.namespace,
            "pod_uid": self.pod_uid,
        }

    @property
    def label(self) -> str:
        """What a human calls it: name, else pod, else the short id."""
        if self.name:
            return self.name
        if self.pod:
            return f"{self.namespace}/{self.pod}" if self.namespace else self.pod
        return self.id[:12]


@record
class RawProcess:
    """A GPU process as NVML reports it, before enrichment."""

    pid: int
    type: ProcessType
    gpu_memory: int | None
    sm_utilization: int | None = None
    #: Index (within its GPU) of the MIG device it runs on, None outside MIG mode.
    mig_device: int | None = None


@record
class MigMode:
    """A MIG-capable GPU's mode: current, and pending (what it becomes after a GPU reset)."""

    current: bool
    pending: bool

    def to_json(self) -> dict[str, Any]:
        return {"current": self.current, "pending": self.pending}


class MemoryFigures:
    """Free memory and percent used from ``memory_used``/``memory_total`` (either may be N/A),
    for every record that has those two fields: a GPU, a MIG device, a fleet host's GPU."""

    memory_used: int | None
    memory_total: int | None

    @property
    def memory_free(self) -> int | None:
        if self.memory_total is None or self.memory_used is None:
            return None
        return max(0, self.memory_total - self.memory_used)

    @property
    def memory_percent(self) -> float | None:
        if not self.memory_total or self.memory_used is None:
            return None
        return 100.0 * self.memory_used / self.memory_total


@record
class MigDevice(MemoryFigures):
    """One MIG device (GPU instance + compute instance) of a GPU in MIG mode."""

    #: Its NVML MIG device index within its GPU (``0:1`` on screen is GPU 0, index 1).
    index: int
    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    #: The profile name, e.g. "3g.40gb" (from the device name), or None.
    profile: str | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    sm_count: int | None = None
    #: PIDs of the processes on this instance.
    processes: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "gpu_instance_id": self.gpu_instance_id,
            "compute_instance_id": self.compute_instance_id,
            "profile": self.profile,
            "memory_used": self.memory_used,
            "memory_total": self.memory_total,
            "sm_count": self.sm_count,
            "processes": list(self.processes),
        }


@record
class ProcessFacts:
    """What the process source knows about a host PID (psutil, /proc)."""

    pid: int
    visible: bool
    #: Why it is not visible: "vanished" (exited between listing and reading) or
    #: "other-namespace" (NVML knows it, this PID namespace does not).
    invisible_reason: str | None = None
    user: str | None = None
    uid: int | None = None
    command: str | None = None
    #: Base name of the executable (/proc/PID/exe, or ``comm`` when that cannot be read): never a word
    #: of the command line, which the process writes itself (argv[0] can be anything).
    exe: str | None = None
    cpu_percent: float | None = None
    host_memory: int | None = None
    #: Process start time as a POSIX timestamp (psutil's create_time): with pid
    #: it is the identity shared by the table, the history and the kill guard.
    create_time: float | None = None
    ppid: int | None = None
    #: psutil status string: "running", "sleeping", "zombie", "disk-sleep", ...
    status: str | None = None
    #: Raw contents of /proc/PID/cgroup, for container attribution.
    cgroup: str | None = None
    #: True when the parent died and the process was re-parented to init or a subreaper.
    orphaned: bool = False


@record
class Process:
    """One process on one GPU: NVML's view joined with the host's."""

    pid: int
    gpu_index: int
    type: ProcessType
    gpu_memory: int | None
    sm_utilization: int | None
    user: str | None = None
    command: str | None = None
    #: the executable's base name (see ProcessFacts.exe)
    exe: str | None = None
    cpu_percent: float | None = None
    host_memory: int | None = None
    started: datetime | None = None
    visible: bool = True
    invisible_reason: str | None = None
    create_time: float | None = None
    ppid: int | None = None
    status: str | None = None
    uid: int | None = None
    orphaned: bool = False
    container: ContainerRef | None = None
    stale: tuple[Finding, ...] = ()
    #: Index (within its GPU) of the MIG device it runs on, None outside MIG mode.
    mig_device: int | None = None
    #: The batch job (Slurm) it belongs to, None off a Slurm node or outside any job.
    job: JobRef | None = None

    @property
    def mig_label(self) -> str | None:
        """``GPU:instance`` (as nvidia-smi and CUDA name MIG devices), or None outside MIG mode."""
        return None if self.mig_device is None else f"{self.gpu_index}:{self.mig_device}"

    @property
    def key(self) -> tuple[int, int]:
        """The row key used by tables and histories: (GPU index, PID)."""
        return (self.gpu_index, self.pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "type": self.type,
            "gpu_memory": self.gpu_memory,
            "sm_utilization": self.sm_utilization,
            "user": self.user,
            "command": self.command,
            "exe": self.exe,
            "cpu_percent": self.cpu_percent,
            "host_memory": self.host_memory,
            "started": _iso(self.started),
            "visible": self.visible,
            "container": self.container.to_json() if self.container else None,
            "stale": [{"kind": f.kind, "message": f.message} for f in self.stale],
            "mig_device": self.mig_device,
            "job": self.job.to_json() if self.job is not None else None,
        }


@record
class Gpu(MemoryFigures):
    """One GPU as read in one poll. Every optional field is None when N/A."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    utilization_gpu: int | None = None
    utilization_memory: int | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    temperature: int | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    fan_speed: int | None = None
    clock_sm: int | None = None
    clock_memory: int | None = None
    clock_sm_max: int | None = None
    clock_memory_max: int | None = None
    pstate: int | None = None
    #: Active clock-event reasons; None when the driver does not report them (N/A, not "none").
    throttle_reasons: tuple[str, ...] | None = ()
    ecc_errors: int | None = None
    persistence_mode: bool | None = None
    #: Minor number of /dev/nvidiaN (differs from the NVML index on some hosts).
    minor_number: int | None = None
    lost: bool = False
    processes: tuple[Process, ...] = ()
    #: MIG mode of a MIG-capable GPU (A100/H100/H200); None where the GPU or driver cannot say.
    mig_mode: MigMode | None = None
    #: Its MIG devices while MIG mode is on (current), in index order.
    mig_devices: tuple[MigDevice, ...] = ()
    #: The batch jobs (Slurm) this GPU is allocated to.
    allocated_to: tuple[Allocation, ...] = ()
    #: Memory the driver keeps for itself (bytes; memory info v2), outside used and free.
    memory_reserved: int | None = None
    #: Memory (HBM) temperature, °C.
    memory_temperature: int | None = None
    #: Energy used since the driver loaded, millijoules.
    total_energy_consumption: int | None = None
    #: PCIe replays (link retries) since the driver loaded.
    pcie_replay_counter: int | None = None
    #: Video encoder and decoder utilization, %.
    encoder_utilization: int | None = None
    decoder_utilization: int | None = None
    #: Rows remapped for correctable and uncorrectable memory errors, and whether a remap failed.
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_failure: bool | None = None
    #: The last XID critical error since gputui started watching (0: none); None where events are N/A.
    xid_last: int | None = None

    @property
    def mig_enabled(self) -> bool:
        """True when the card is split into MIG devices now (its own load is not reported then)."""
        return self.mig_mode is not None and self.mig_mode.current

    @property
    def mig_reset_pending(self) -> bool:
        """True when a MIG mode change waits for a GPU reset (pending differs from current)."""
        return self.mig_mode is not None and self.mig_mode.current != self.mig_mode.pending

    def mig_device(self, index: int) -> MigDevice | None:
        for m in self.mig_devices:
            if m.index == index:
                return m
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "utilization_gpu": self.utilization_gpu,
            "utilization_memory": self.utilization_memory,
            "memory_used": self.memory_used,
            "memory_total": self.memory_total,
            "temperature": self.temperature,
            "power_draw": self.power_draw,
            "power_limit": self.power_limit,
            "fan_speed": self.fan_speed,
            "clock_sm": self.clock_sm,
            "clock_memory": self.clock_memory,
            "clock_sm_max": self.clock_sm_max,
            "clock_memory_max": self.clock_memory_max,
            "pstate": self.pstate,
            "throttle_reasons": None if self.throttle_reasons is None else list(self.throttle_reasons),
            "ecc_errors": self.ecc_errors,
            "persistence_mode": self.persistence_mode,
            "lost": self.lost,
            "processes": [p.to_json() for p in self.processes],
            "mig_mode": self.mig_mode.to_json() if self.mig_mode is not None else None,
            "mig_devices": [m.to_json() for m in self.mig_devices],
            "allocated_to": [a.to_json() for a in self.allocated_to],
            "memory_reserved": self.memory_reserved,
            "memory_temperature": self.memory_temperature,
            "total_energy_consumption": self.total_energy_consumption,
            "pcie_replay_counter": self.pcie_replay_counter,
            "encoder_utilization": self.encoder_utilization,
            "decoder_utilization": self.decoder_utilization,
            "remapped_rows_correctable": self.remapped_rows_correctable,
            "remapped_rows_uncorrectable": self.remapped_rows_uncorrectable,
            "remapped_rows_failure": self.remapped_rows_failure,
            "xid_last": self.xid_last,
        }


@record
class GpuReading:
    """What a GPU source returns for one poll (processes not yet enriched)."""

    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[Gpu, ...]
    #: Raw NVML processes per GPU index.
    processes: dict[int, tuple[RawProcess, ...]] = field(default_factory=dict)
    #: Problems worth a status-line warning (e.g. a query failing with UNKNOWN).
    errors: tuple[str, ...] = ()
    nvml_version: str | None = None


@record
class ContainerRecord:
    """A container as the container source knows it: identity plus its grant."""

    id: str
    name: str
    image: str | None
    state: str
    compose_project: str | None = None
    compose_service: str | None = None
    runtime: Runtime = "docker"
    gpus: GpuGrant = ()
    grant_source: GrantSource = "none"
    cuda_visible_devices: str | None = None
    nvidia_visible_devices: str | None = None
    #: The raw grant values as written (indices, UUIDs, CDI names), for messages.
    grant_raw: tuple[str, ...] = ()
    #: Host PID of the container's main process (State.Pid), or None.
    main_pid: int | None = None
    restart_policy: str | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: Grant problems found while resolving (e.g. an index that does not exist).
    grant_problems: tuple[str, ...] = ()
    #: When the container (last) started, as a POSIX timestamp (State.StartedAt), or None.
    started_at: float | None = None
    #: containerd: its namespace; Kubernetes: the pod's namespace, name and UID.
    namespace: str | None = None
    pod: str | None = None
    pod_uid: str | None = None

    def ref(self) -> ContainerRef:
        return ContainerRef(
            id=self.id,
            name=self.name,
            image=self.image,
            compose_project=self.compose_project,
            compose_service=self.compose_service,
            runtime=self.runtime,
            confirmed=True,
            pod=self.pod,
            namespace=self.namespace,
            pod_uid=self.pod_uid,
        )


@record
class ContainerInventory:
    """What a container source returns for one poll."""

    available: bool
    error: str | None = None
    containers: tuple[ContainerRecord, ...] = ()


@record
class Container:
    """A container in a snapshot: its grant against what it really uses."""

    id: str
    name: str
    image: str | None
    state: str
    gpus: GpuGrant
    grant_source: GrantSource
    cuda_visible_devices: str | None
    gpu_memory: int
    pids: tuple[int, ...]
    findings: tuple[Finding, ...] = ()
    compose_project: str | None = None
    compose_service: str | None = None
    runtime: Runtime = "docker"
    #: Indices of GPUs its processes actually run on.
    used_gpus: tuple[int, ...] = ()
    #: Indices of GPUs it is granted (resolved against this host).
    granted_gpus: tuple[int, ...] = ()
    restart_policy: str | None = None
    #: False for a container seen only in a cgroup path: no engine told its grant.
    grant_known: bool = True
    namespace: str | None = None
    pod: str | None = None
    pod_uid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "image": self.image,
            "state": self.state,
            "gpus": self.gpus if self.gpus == "all" else list(self.gpus),
            "grant_source": self.grant_source,
            "cuda_visible_devices": self.cuda_visible_devices,
            "gpu_memory": self.gpu_memory,
            "pids": list(self.pids),
            "findings": [f.to_json() for f in self.findings],
            "compose_project": self.compose_project,
            "compose_service": self.compose_service,
            "runtime": self.runtime,
            "used_gpus": list(self.used_gpus),
            "granted_gpus": list(self.granted_gpus),
            "namespace": self.namespace,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
        }


@record
class Suggestion:
    """One concrete move proposed by the imbalance judge."""

    from_gpu: int
    to_gpu: int
    reason: str
    container: str | None = None
    pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "pid": self.pid,
            "from_gpu": self.from_gpu,
            "to_gpu": self.to_gpu,
            "reason": self.reason,
        }


@record
class Imbalance:
    flagged: bool = False
    kinds: tuple[str, ...] = ()
    message: str | None = None
    suggestion: Suggestion | None = None
    #: Flagged on an observation shorter than ``imbalance_hold``: what was seen, not yet sustained.
    provisional: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "flagged": self.flagged,
            "provisional": self.provisional,
            "kinds": list(self.kinds),
            "message": self.message,
            "suggestion": self.suggestion.to_json() if self.suggestion else None,
        }


@record
class Alert:
    gpu: int | None
    kind: str
    severity: Severity
    message: str
    since: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "since": _iso(self.since),
        }


@record
class RuleViolation:
    """One house rule broken now (see :mod:`gputui.core.rules`): what, by whom, where, and the fix."""

    rule: str
    user: str | None
    gpu: int | None
    container: str | None
    since: datetime
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "user": self.user, "gpu": self.gpu, "container": self.container,
                "since": _iso(self.since), "message": self.message}


@record
class ReservationView:
    """A live GPU reservation as the faces show it (never its token)."""

    id: str
    gpu: int
    uuid: str
    holder: str
    until: datetime
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "gpu": self.gpu, "uuid": self.uuid, "for": self.holder,
                "until": _iso(self.until), "note": self.note}


@record
class DockerStatus:
    available: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "error": self.error}


@record
class Snapshot:
    """One poll of the whole machine, judged. Immutable; build a new one per poll."""

    host: str
    time: datetime
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[Gpu, ...]
    docker: DockerStatus = DockerStatus(False, "not polled")
    containers: tuple[Container, ...] = ()
    imbalance: Imbalance = Imbalance()
    alerts: tuple[Alert, ...] = ()
    #: Source problems worth a visible warning (NVML errors, PID namespace).
    warnings: tuple[str, ...] = ()
    nvml_version: str | None = None
    #: How many seconds of history the judges looked at.
    window: float = 0.0
    #: House rules broken now, and the live reservations (empty without a rules folder).
    rule_violations: tuple[RuleViolation, ...] = ()
    reservations: tuple[ReservationView, ...] = ()
    #: One sentence when the rules or reservations file was refused.
    rules_error: str | None = None
    #: The Slurm node's scheduler status, None off Slurm.
    slurm: SlurmStatus | None = None

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    @property
    def processes(self) -> tuple[Process, ...]:
        return tuple(p for g in self.gpus for p in g.processes)

    def container(self, name_or_id: str) -> Container | None:
        for c in self.containers:
            if c.name == name_or_id or c.id == name_or_id:
                return c
        for c in self.containers:
            if len(name_or_id) >= 4 and c.id.startswith(name_or_id):
                return c
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "time": _iso(self.time),
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "gpus": [g.to_json() for g in self.gpus],
            "docker": self.docker.to_json(),
            "containers": [c.to_json() for c in self.containers],
            "imbalance": self.imbalance.to_json(),
            "alerts": [a.to_json() for a in self.alerts],
            "warnings": list(self.warnings),
            "window": self.window,
            "rule_violations": [v.to_json() for v in self.rule_violations],
            "reservations": [r.to_json() for r in self.reservations],
            "rules_error": self.rules_error,
            "slurm": self.slurm.to_json() if self.slurm is not None else None,
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


def describe_fields(obj: Any) -> list[tuple[str, Any]]:
    """(name, value) pairs of a record, for detail views."""
    if not is_record(obj):
        raise TypeError(f"{obj!r} is not a record")
    return [(f.name, getattr(obj, f.name)) for f in fields(obj)]


#: NVML clock-event (throttle) reason bits -> the names gputui shows and writes to JSON.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

#: Reasons that mean "slowed down by heat or power", which alerts and the UI call out.
THERMAL_OR_POWER = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def match_uuid(ident: str, uuids: Iterable[str]) -> str | None:
    """The one GPU UUID ``ident`` names: equal ignoring case, or a prefix of at least
    8 characters that fits exactly one (CUDA_VISIBLE_DEVICES accepts such prefixes, so
    the container view and migration must read them alike). None when it names none
    or is ambiguous."""
    low = ident.strip().lower()
    by_low = {u.lower(): u for u in uuids}
    if low in by_low:
        return by_low[low]
    hits = [u for k, u in by_low.items() if len(low) >= 8 and k.startswith(low)]
    return hits[0] if len(hits) == 1 else None


def resolve_gpu(ident: str, gpus: Iterable[Gpu]) -> Gpu | None:
    """The one rule for a GPU identifier a person types (``--gpu``, ``migrate --to``/``--from``):
    an index, a whole UUID (any case), or a UUID prefix of at least 8 characters that fits
    exactly one GPU. None when it names no GPU or more than one."""
    pool = list(gpus)
    text = str(ident).strip()
    if text.isdigit():
        return next((g for g in pool if g.index == int(text)), None)
    uuid = match_uuid(text, (g.uuid for g in pool))
    return next((g for g in pool if g.uuid == uuid), None) if uuid is not None else None


@functools.lru_cache(maxsize=64)  # a handful of masks in a machine's life; read every poll per GPU
def throttle_names(mask: int) -> tuple[str, ...]:
    """Names of the set bits of an NVML clock-event-reasons mask, in bit order."""
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)
