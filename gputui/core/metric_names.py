"""Every Prometheus metric gputui writes or reads: one table for the exporter, the fleet and the history.

``gputui exporter`` builds each family from its entry here (name, HELP text, label names; for the GPU
value series also the :class:`~gputui.core.model.Gpu` field it comes from and the factor to the exported
unit) and the fleet's and history's PromQL select by the same ``.name``, so the two sides can never spell a
metric differently. Names follow the Prometheus conventions (base units; ``_bytes``, ``_celsius``,
``_watts``, ``_hertz``, ``_ratio`` for 0–1); series are added over time, never renamed. The ``DCGM_*``
entries are dcgm-exporter's own names and units: ``exporter --dcgm-names`` writes them, the fleet reads
them from gputui and from real dcgm-exporters alike. No module but this one spells a metric name
(``tests/test_fleet_trust.py`` checks).
"""

from __future__ import annotations

from gputui.core.record import record

MIB = 1024 * 1024


@record
class Metric:
    """One exported series name."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    #: its unit as the help text says it ("" for a count or a flag)
    unit: str = ""
    #: the Gpu field it is read from ("" when it is not one field), and the factor applied to it
    field: str = ""
    scale: float = 1.0


#: the older name of the record
MetricName = Metric

_GPU = ("gpu", "uuid")

HOST_INFO = Metric("gputui_host_info", "The machine and the exporter: 1, with versions as labels.",
                   ("hostname", "driver_version", "cuda_version", "gputui_version"))
SOURCE_UP = Metric("gputui_source_up", "1 when the source answered the last poll, else 0.", ("source",))
LAST_POLL = Metric("gputui_last_poll_timestamp_seconds", "When the last successful poll ran, Unix time.")
POLL_DURATION = Metric("gputui_poll_duration_seconds", "How long one poll of NVML, /proc and the judges took.")

GPU_INFO = Metric("gputui_gpu_info", "A GPU: 1 per GPU, with its name and PCI bus id.",
                  ("gpu", "uuid", "name", "pci_bus_id"))
GPU_UTILIZATION = Metric("gputui_gpu_utilization_ratio", "GPU (SM) utilization, 0-1.", _GPU, "ratio",
                         "utilization_gpu", 0.01)
GPU_MEMORY_UTILIZATION = Metric("gputui_gpu_memory_utilization_ratio",
                                "GPU memory controller (bandwidth) utilization, 0-1.", _GPU, "ratio",
                                "utilization_memory", 0.01)
GPU_MEMORY_USED = Metric("gputui_gpu_memory_used_bytes", "GPU memory in use, bytes.", _GPU, "bytes", "memory_used")
GPU_MEMORY_TOTAL = Metric("gputui_gpu_memory_total_bytes", "GPU memory in total, bytes.", _GPU, "bytes",
                          "memory_total")
GPU_TEMPERATURE = Metric("gputui_gpu_temperature_celsius", "GPU core temperature, degrees Celsius.", _GPU,
                         "celsius", "temperature")
GPU_POWER = Metric("gputui_gpu_power_watts", "GPU power draw, watts.", _GPU, "watts", "power_draw")
GPU_POWER_LIMIT = Metric("gputui_gpu_power_limit_watts", "GPU power limit in force, watts.", _GPU, "watts",
                         "power_limit")
GPU_FAN = Metric("gputui_gpu_fan_ratio", "GPU fan speed as a share of its maximum, 0-1.", _GPU, "ratio",
                 "fan_speed", 0.01)
GPU_SM_CLOCK = Metric("gputui_gpu_sm_clock_hertz", "GPU SM clock, hertz.", _GPU, "hertz", "clock_sm", 1e6)
GPU_LOST = Metric("gputui_gpu_lost", "1 when the GPU fell off the bus or stopped answering, else 0.", _GPU, "",
                  "lost")
#: the per-GPU value series, in the order they are exported
GPU_VALUES = (GPU_UTILIZATION, GPU_MEMORY_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_TEMPERATURE,
              GPU_POWER, GPU_POWER_LIMIT, GPU_FAN, GPU_SM_CLOCK)
GPU_THROTTLED = Metric("gputui_gpu_throttled", "1 per active clock-throttle reason.", (*_GPU, "reason"))
STALE_PROCESSES = Metric("gputui_stale_processes", "Processes holding GPU memory judged stale, per kind.",
                         (*_GPU, "kind"))
STALE_GPU_MEMORY = Metric("gputui_stale_gpu_memory_bytes", "GPU memory held by processes judged stale, bytes.",
                          _GPU)
MIG_MEMORY_USED = Metric("gputui_mig_device_memory_used_bytes", "Memory in use on a MIG device, bytes.",
                         (*_GPU, "mig_uuid", "profile"))
MIG_MEMORY_TOTAL = Metric("gputui_mig_device_memory_total_bytes", "Memory of a MIG device, bytes.",
                          (*_GPU, "mig_uuid", "profile"))

#: a process's owner: its container (any runtime) or Kubernetes pod
_OWNER = ("container", "image", "compose_project", "compose_service", "runtime", "pod", "namespace")
PROCESS_GPU_MEMORY = Metric(
    "gputui_process_gpu_memory_bytes",
    "GPU memory a process holds, bytes; container labels are empty for host processes.",
    ("gpu", "uuid", "pid", "user", "exe", *_OWNER, "mig_uuid", "mig_device"))
#: the label a Slurm node adds to the process series (Prometheus owns the label "job")
SLURM_JOB_LABEL = "slurm_job"
PROCESS_SM_UTILIZATION = Metric("gputui_process_sm_utilization_ratio", "A process's share of the GPU's SMs, 0-1.",
                                ("gpu", "uuid", "pid", "mig_uuid"))
PROCESS_SERIES_DROPPED = Metric(
    "gputui_process_series_dropped",
    "GPU processes left out of the process series by the cap (smallest GPU memory first).")

CONTAINER_GPU_MEMORY = Metric("gputui_container_gpu_memory_bytes", "GPU memory a container's processes hold, bytes.",
                              _OWNER)
CONTAINER_GPU_GRANTED = Metric("gputui_container_gpu_granted",
                               "1 per GPU a container is granted ('all' grants expand to every GPU); via = how.",
                               ("container", "uuid", "gpu", "via", "pod", "namespace"))
CONTAINER_FINDING = Metric("gputui_container_finding", "1 per finding about a container's GPU grant or use.",
                           ("container", "kind", "pod", "namespace"))

IMBALANCE_FLAGGED = Metric("gputui_imbalance_flagged", "1 while the GPUs are judged imbalanced, else 0.")
IMBALANCE_SUGGESTION = Metric("gputui_imbalance_suggestion", "1 while a suggested move stands.",
                              ("container", "pid", "from_gpu", "to_gpu"))
ALERT_ACTIVE = Metric("gputui_alert_active", "1 per active alert (gpu is empty for machine-wide alerts).",
                      ("gpu", "kind", "severity"))
RULE_VIOLATION = Metric("gputui_rule_violation", "1 per house rule broken now (gputui.core.rules).",
                        ("rule", "user", "gpu", "container"))
RESERVATION = Metric("gputui_reservation", "1 per reserved GPU; until is the end, ISO 8601.",
                     ("gpu", "uuid", "user", "until"))
SLURM_JOB_INFO = Metric("gputui_slurm_job_info", "1 per GPU allocated to a Slurm job, with the job as labels.",
                        (SLURM_JOB_LABEL, "user", "name", "gpu", "uuid"))
SLURM_JOB_END = Metric("gputui_slurm_job_end_timestamp_seconds", "When a Slurm job's time limit ends, Unix time.",
                       (SLURM_JOB_LABEL,))

# -- the recording rules' series (contrib/prometheus/gputui-history-rules.yml) --------------
@record
class Recorded:
    """What the history rules record each minute per host (job, instance) and per ``label``: the GPUs a
    key holds memory on, those weighted by the GPU's mean utilization, those under 5 % utilization,
    and the processes' mean memory in bytes. ``usage --prometheus`` sums them when they cover a period."""

    label: str
    held: str
    busy: str
    idle: str
    memory: str


#: per GPU, each minute's mean utilization 0-1 (recorded for every GPU, held or not)
RECORDED_GPU_UTILIZATION = "gputui:gpu_utilization_ratio:avg1m"
RECORDED_BY_USER = Recorded("user", "gputui:user_gpus_held:1m", "gputui:user_gpus_busy:1m",
                            "gputui:user_gpus_idle_held:1m", "gputui:user_gpu_memory_bytes:1m")
RECORDED_BY_CONTAINER = Recorded("container", "gputui:container_gpus_held:1m", "gputui:container_gpus_busy:1m",
                                 "gputui:container_gpus_idle_held:1m", "gputui:container_gpu_memory_bytes:1m")
RECORDED_BY_IMAGE = Recorded("image", "gputui:image_gpus_held:1m", "gputui:image_gpus_busy:1m",
                             "gputui:image_gpus_idle_held:1m", "gputui:image_gpu_memory_bytes:1m")
RECORDED_BY_GPU = Recorded("gpu", "gputui:gpu_held:1m", "gputui:gpu_busy_held:1m", "gputui:gpu_idle_held:1m",
                           "gputui:gpu_memory_held_bytes:1m")
#: the seconds between two recorded samples (the rules' group interval)
RECORDED_INTERVAL = 60.0


# -- dcgm-exporter's names (``--dcgm-names``), in its units ---------------------------------
#: the host label: ``Hostname`` in released dcgm-exporter, ``hostname`` on its main branch
DCGM_HOST_LABELS = ("Hostname", "hostname")


def dcgm_labels(host_label: str = "Hostname") -> tuple[str, ...]:
    """The labels of every DCGM_* series; GPU_I_* are empty except on a MIG instance's series."""
    return ("gpu", "UUID", "pci_bus_id", "device", "modelName", host_label, "GPU_I_PROFILE", "GPU_I_ID",
            "container", "pod", "namespace")


DCGM_LABELS = dcgm_labels()


def _dcgm(name: str, help: str, unit: str, field: str, scale: float = 1.0) -> Metric:
    return Metric(f"DCGM_FI_DEV_{name}", help, DCGM_LABELS, unit, field, scale)


DCGM_GPU_UTIL = _dcgm("GPU_UTIL", "GPU utilization (in %).", "%", "utilization_gpu")
DCGM_MEM_COPY_UTIL = _dcgm("MEM_COPY_UTIL", "Memory utilization (in %).", "%", "utilization_memory")
DCGM_ENC_UTIL = _dcgm("ENC_UTIL", "Encoder utilization (in %).", "%", "encoder_utilization")
DCGM_DEC_UTIL = _dcgm("DEC_UTIL", "Decoder utilization (in %).", "%", "decoder_utilization")
DCGM_FB_USED = _dcgm("FB_USED", "Framebuffer memory used (in MiB).", "MiB", "memory_used", 1 / MIB)
DCGM_FB_FREE = _dcgm("FB_FREE", "Framebuffer memory free (in MiB).", "MiB", "memory_free", 1 / MIB)
DCGM_FB_RESERVED = _dcgm("FB_RESERVED", "Framebuffer memory reserved (in MiB).", "MiB", "memory_reserved", 1 / MIB)
DCGM_GPU_TEMP = _dcgm("GPU_TEMP", "GPU temperature (in C).", "C", "temperature")
DCGM_MEMORY_TEMP = _dcgm("MEMORY_TEMP", "Memory temperature (in C).", "C", "memory_temperature")
DCGM_POWER_USAGE = _dcgm("POWER_USAGE", "Power draw (in W).", "W", "power_draw")
DCGM_TOTAL_ENERGY_CONSUMPTION = _dcgm("TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).",
                                      "mJ", "total_energy_consumption")
DCGM_SM_CLOCK = _dcgm("SM_CLOCK", "SM clock frequency (in MHz).", "MHz", "clock_sm")
DCGM_MEM_CLOCK = _dcgm("MEM_CLOCK", "Memory clock frequency (in MHz).", "MHz", "clock_memory")
DCGM_PCIE_REPLAY_COUNTER = _dcgm("PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "", "pcie_replay_counter")
#: (dcgm-exporter also labels it with the code, ``err_code``; its ``err_msg`` text is not served)
DCGM_XID_ERRORS = Metric("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
                         DCGM_LABELS + ("err_code",), "", "xid_last")
DCGM_UNCORRECTABLE_REMAPPED_ROWS = _dcgm("UNCORRECTABLE_REMAPPED_ROWS",
                                         "Number of remapped rows for uncorrectable errors", "",
                                         "remapped_rows_uncorrectable")
DCGM_CORRECTABLE_REMAPPED_ROWS = _dcgm("CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
                                       "", "remapped_rows_correctable")
DCGM_ROW_REMAP_FAILURE = _dcgm("ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "",
                               "remapped_rows_failure")
#: every DCGM_* series gputui exports, per GPU, in dcgm-exporter's default-counters order
DCGM_GPU = (DCGM_SM_CLOCK, DCGM_MEM_CLOCK, DCGM_MEMORY_TEMP, DCGM_GPU_TEMP, DCGM_POWER_USAGE,
            DCGM_TOTAL_ENERGY_CONSUMPTION, DCGM_PCIE_REPLAY_COUNTER, DCGM_GPU_UTIL, DCGM_MEM_COPY_UTIL,
            DCGM_ENC_UTIL, DCGM_DEC_UTIL, DCGM_XID_ERRORS, DCGM_FB_FREE, DCGM_FB_USED, DCGM_FB_RESERVED,
            DCGM_UNCORRECTABLE_REMAPPED_ROWS, DCGM_CORRECTABLE_REMAPPED_ROWS, DCGM_ROW_REMAP_FAILURE)
#: the DCGM_* series also given per MIG instance (GPU_I_ID, GPU_I_PROFILE): what a MIG device reports
DCGM_MIG = (DCGM_FB_USED, DCGM_FB_FREE)

#: Every entry above, for the checks that no other module spells a name.
ALL: tuple[Metric, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Metric))
