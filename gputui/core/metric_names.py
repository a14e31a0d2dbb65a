"""Every Prometheus metric gputui writes or reads: one table for the exporter and the fleet.

``gputui exporter`` builds each family from its entry here (name, HELP text, label
names) and the fleet's PromQL selects by the same ``.name``, so the two can never
spell a metric differently. Names follow the Prometheus conventions (base units;
``_bytes``, ``_celsius``, ``_watts``, ``_hertz``, ``_ratio`` for 0–1); series are
added over time, never renamed. The ``DCGM_*`` entries are dcgm-exporter's own
names and units: ``exporter --dcgm-names`` writes them, the fleet reads them from
gputui and from real dcgm-exporters alike (``DCGM_FI_DEV_FB_RESERVED`` is only read).
No module but this one spells a metric name (``tests/test_fleet_trust.py`` checks).
"""

from __future__ import annotations

from gputui.core.record import record


@record
class Metric:
    name: str
    help: str
    labels: tuple[str, ...] = ()


_GPU = ("gpu", "uuid")

HOST_INFO = Metric("gputui_host_info", "The machine and the exporter: 1, with versions as labels.",
                   ("hostname", "driver_version", "cuda_version", "gputui_version"))
SOURCE_UP = Metric("gputui_source_up", "1 when the source answered the last poll, else 0.", ("source",))
LAST_POLL = Metric("gputui_last_poll_timestamp_seconds", "When the last successful poll ran, Unix time.")
POLL_DURATION = Metric("gputui_poll_duration_seconds", "How long one poll of NVML, /proc and the judges took.")

GPU_INFO = Metric("gputui_gpu_info", "A GPU: 1 per GPU, with its name and PCI bus id.",
                  ("gpu", "uuid", "name", "pci_bus_id"))
GPU_UTILIZATION = Metric("gputui_gpu_utilization_ratio", "GPU (SM) utilization, 0-1.", _GPU)
GPU_MEMORY_UTILIZATION = Metric("gputui_gpu_memory_utilization_ratio",
                                "GPU memory controller (bandwidth) utilization, 0-1.", _GPU)
GPU_MEMORY_USED = Metric("gputui_gpu_memory_used_bytes", "GPU memory in use, bytes.", _GPU)
GPU_MEMORY_TOTAL = Metric("gputui_gpu_memory_total_bytes", "GPU memory in total, bytes.", _GPU)
GPU_TEMPERATURE = Metric("gputui_gpu_temperature_celsius", "GPU core temperature, degrees Celsius.", _GPU)
GPU_POWER = Metric("gputui_gpu_power_watts", "GPU power draw, watts.", _GPU)
GPU_POWER_LIMIT = Metric("gputui_gpu_power_limit_watts", "GPU power limit in force, watts.", _GPU)
GPU_FAN = Metric("gputui_gpu_fan_ratio", "GPU fan speed as a share of its maximum, 0-1.", _GPU)
GPU_SM_CLOCK = Metric("gputui_gpu_sm_clock_hertz", "GPU SM clock, hertz.", _GPU)
GPU_LOST = Metric("gputui_gpu_lost", "1 when the GPU fell off the bus or stopped answering, else 0.", _GPU)
GPU_THROTTLED = Metric("gputui_gpu_throttled", "1 per active clock-throttle reason.", (*_GPU, "reason"))
STALE_PROCESSES = Metric("gputui_stale_processes", "Processes holding GPU memory judged stale, per kind.",
                         (*_GPU, "kind"))
STALE_GPU_MEMORY = Metric("gputui_stale_gpu_memory_bytes", "GPU memory held by processes judged stale, bytes.",
                          _GPU)
MIG_MEMORY_USED = Metric("gputui_mig_device_memory_used_bytes", "Memory in use on a MIG device, bytes.",
                         (*_GPU, "mig_uuid", "profile"))
MIG_MEMORY_TOTAL = Metric("gputui_mig_device_memory_total_bytes", "Memory of a MIG device, bytes.",
                          (*_GPU, "mig_uuid", "profile"))

PROCESS_GPU_MEMORY = Metric(
    "gputui_process_gpu_memory_bytes",
    "GPU memory a process holds, bytes; container labels are empty for host processes.",
    ("gpu", "uuid", "pid", "user", "exe", "container", "image", "compose_project", "compose_service", "mig_uuid"))
PROCESS_SM_UTILIZATION = Metric("gputui_process_sm_utilization_ratio", "A process's share of the GPU's SMs, 0-1.",
                                ("gpu", "uuid", "pid", "mig_uuid"))
PROCESS_SERIES_DROPPED = Metric(
    "gputui_process_series_dropped",
    "GPU processes left out of the process series by the cap (smallest GPU memory first).")

CONTAINER_GPU_MEMORY = Metric("gputui_container_gpu_memory_bytes", "GPU memory a container's processes hold, bytes.",
                              ("container", "image", "compose_project", "compose_service"))
CONTAINER_GPU_GRANTED = Metric("gputui_container_gpu_granted",
                               "1 per GPU a container is granted ('all' grants expand to every GPU); via = how.",
                               ("container", "uuid", "gpu", "via"))
CONTAINER_FINDING = Metric("gputui_container_finding", "1 per finding about a container's GPU grant or use.",
                           ("container", "kind"))

IMBALANCE_FLAGGED = Metric("gputui_imbalance_flagged", "1 while the GPUs are judged imbalanced, else 0.")
IMBALANCE_SUGGESTION = Metric("gputui_imbalance_suggestion", "1 while a suggested move stands.",
                              ("container", "pid", "from_gpu", "to_gpu"))
ALERT_ACTIVE = Metric("gputui_alert_active", "1 per active alert (gpu is empty for machine-wide alerts).",
                      ("gpu", "kind", "severity"))

DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "container")
DCGM_GPU_UTIL = Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", DCGM_LABELS)
DCGM_FB_USED = Metric("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", DCGM_LABELS)
DCGM_FB_FREE = Metric("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", DCGM_LABELS)
DCGM_FB_RESERVED = Metric("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", DCGM_LABELS)
DCGM_GPU_TEMP = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", DCGM_LABELS)
DCGM_POWER_USAGE = Metric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", DCGM_LABELS)
DCGM_SM_CLOCK = Metric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", DCGM_LABELS)
DCGM_MEM_CLOCK = Metric("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", DCGM_LABELS)

#: Every entry above, for the checks that no other module spells a name.
ALL: tuple[Metric, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Metric))
