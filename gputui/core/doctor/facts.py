"""What ``gputui doctor`` knows about the machine: frozen facts, gathered by
:mod:`gputui.core.doctor.gather` (through :mod:`gputui.core.doctor.probes`) and judged by
:mod:`gputui.core.doctor.checks`. None in a field means the driver or the host does not report it.
"""

from __future__ import annotations

from gputui.core.doctor.mig import MigFacts
from gputui.core.doctor.slurm import SlurmFacts
from gputui.core.record import field, record


@record
class GpuHealth:
    """What doctor needs to know about one GPU. None = the driver does not report it (N/A)."""

    index: int
    name: str
    uuid: str = ""
    lost: bool = False
    minor_number: int | None = None
    persistence_mode: bool | None = None
    #: Uncorrectable (volatile) ECC errors as the GPU source reports them.
    ecc_errors: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    throttle_reasons: tuple[str, ...] | None = ()
    temperature: int | None = None
    power_draw: float | None = None
    power_limit: float | None = None


@record
class NvmlFacts:
    ok: bool
    #: One sentence from the GPU source when NVML could not be used.
    error: str | None = None
    #: "library-not-found", "driver-not-loaded", "mismatch", "no-permission" or "other".
    error_kind: str | None = None
    library_path: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    bindings_version: str | None = None
    #: Version of the loaded kernel module (/proc/driver/nvidia/version), when readable.
    kernel_module_version: str | None = None
    gpus: tuple[GpuHealth, ...] = ()
    #: NVML functions this driver lacks (their fields are N/A).
    missing_functions: tuple[str, ...] = ()
    #: NVIDIA PCI display devices bound to another kernel driver: (address, driver or None).
    foreign_bound: tuple[tuple[str, str | None], ...] = ()
    demo: bool = False


@record
class DeviceNode:
    path: str
    exists: bool
    is_char_device: bool = True
    usable: bool = False
    #: "root:video 0660" style description, for messages.
    owner: str | None = None
    #: The group that may use it, when group membership would grant access.
    group: str | None = None


@record
class DeviceFacts:
    nodes: tuple[DeviceNode, ...]
    user: str
    #: Groups the running process has now.
    groups: tuple[str, ...] = ()
    #: Groups /etc/group lists the user in (a new membership needs a new login).
    listed_groups: tuple[str, ...] = ()
    demo: bool = False


@record
class ContainerEnvFacts:
    in_container: bool
    #: Why we think so: "/.dockerenv", "/run/.containerenv", "cgroup", "container env", ...
    evidence: str | None = None
    host_pid_namespace: bool | None = None
    host_cgroup_namespace: bool | None = None
    #: NVML listed PIDs and none of them is visible here.
    gpu_pids_invisible: bool = False
    demo: bool = False


@record
class DockerFacts:
    #: False when --no-docker was given: the Docker checks are not run.
    checked: bool = True
    endpoint: str = "unix:///var/run/docker.sock"
    socket_path: str | None = "/var/run/docker.sock"
    socket_exists: bool | None = None
    socket_accessible: bool | None = None
    socket_owner: str | None = None
    socket_group: str | None = None
    in_group_now: bool | None = None
    in_group_listed: bool | None = None
    user: str = ""
    reachable: bool = False
    error: str | None = None
    server_version: str | None = None
    api_version: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    #: authorization plugins the daemon asks about every request (docker info Plugins.Authorization)
    authz_plugins: tuple[str, ...] = ()
    #: CDI spec directories the daemon reads (None: this Docker does not report or support CDI).
    cdi_spec_dirs: tuple[str, ...] | None = None
    #: NVIDIA CDI spec files found on this host.
    cdi_specs: tuple[str, ...] = ()
    #: nvidia-container-runtime-hook as dockerd would find it, and where we looked.
    hook_path: str | None = None
    hook_searched: str = "dockerd's PATH"
    #: The hook file changed after dockerd started (dockerd looks it up at start).
    hook_newer_than_daemon: bool = False
    #: nvidia-cdi-hook on dockerd's PATH: Docker 29.2+ registers its NVIDIA driver with it too.
    cdi_hook_path: str | None = None
    dockerd_pid: int | None = None
    demo: bool = False


@record
class ContainerFinding:
    container: str
    kind: str
    message: str


@record
class RulesFacts:
    """The house rules folder and the guard, as doctor found them."""

    #: the rules file read, and why it was refused (None: usable or absent)
    path: str = "/etc/gputui/rules.toml"
    present: bool = False
    error: str | None = None
    limits: tuple[str, ...] = ()
    reservations: int = 0
    #: authorization plugins dockerd reported (None: Docker not asked or not answering)
    authz_plugins: tuple[str, ...] | None = ()
    #: plugin name -> None when it answered /Plugin.Activate as authz, else why not
    plugin_answers: tuple[tuple[str, str | None], ...] = ()
    #: the Docker error when dockerd refused doctor's own requests
    docker_error: str | None = None
    #: False for --no-docker
    docker_checked: bool = True
    #: the demo's simulated rules: there is no dockerd to ask about a guard
    demo: bool = False


@record
class RuntimeProbe:
    """One container runtime's socket as doctor found it."""

    #: "Docker", "podman", "containerd", "kubelet"
    name: str
    address: str
    ok: bool
    #: one sentence when it could not be read
    error: str | None = None
    #: what it told (namespaces, pods), for the message
    detail: str | None = None


@record
class RuntimeFacts:
    checked: bool = True
    probes: tuple[RuntimeProbe, ...] = ()
    #: Kubernetes containers running GPU processes whose pod names no source told (pod UID only)
    unnamed_pods: tuple[str, ...] = ()


@record
class RecorderFacts:
    """``gputui record`` on this host, from the status file it keeps (None fields: none running)."""

    running: bool = False
    pid: int | None = None
    db: str | None = None
    writing: bool = False
    #: Why it is not writing: one sentence.
    problem: str | None = None


@record
class DoctorFacts:
    nvml: NvmlFacts
    devices: DeviceFacts
    container_env: ContainerEnvFacts
    docker: DockerFacts
    #: Findings of the containers judge (unpinned, env-conflict, ...), None when not available.
    container_findings: tuple[ContainerFinding, ...] | None = None
    #: Why the container findings are not available.
    containers_error: str | None = None
    demo: bool = False
    host: str = ""
    #: MIG modes, MIG devices and MIG grants (empty: no GPU reports MIG mode); None when NVML could not be read.
    mig: MigFacts | None = field(default_factory=MigFacts)
    rules: RulesFacts = field(default_factory=RulesFacts)
    #: This Slurm node's facts; None off Slurm (then no Slurm check is listed).
    slurm: SlurmFacts | None = None
    #: which container runtimes answer (Docker, podman, containerd, the kubelet)
    runtimes: RuntimeFacts = field(default_factory=lambda: RuntimeFacts(checked=False))
    #: The history recorder (``gputui record``), if one runs here.
    recorder: RecorderFacts = field(default_factory=RecorderFacts)
