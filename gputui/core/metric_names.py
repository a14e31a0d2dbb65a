"""The one table of exported metric names: the exporter writes them, the fleet reader reads them.

Each :class:`MetricName` says the series name, its help text, its unit as it reads in the
help, its labels, and the :class:`~gputui.core.model.Gpu` field it comes from (with the
factor from gputui's unit to the exported one). ``gputui/exporter/metrics.py`` builds its
families from these entries and ``gputui/core/fleet/queries.py`` asks Prometheus for the
same names, so a rename cannot reach one side only.
"""

from __future__ import annotations

from gputui.core.record import record

MIB = 1024 * 1024


@record
class MetricName:
    """One exported series name."""

    name: str
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    #: the Gpu field it is read from ("" when it is not one field), and the factor applied to it
    field: str = ""
    scale: float = 1.0


# -- gputui's own GPU series (gpu + uuid labels) ------------------------------------------
GPU = ("gpu", "uuid")
HOST_INFO = MetricName("gputui_host_info", "The machine and the exporter: 1, with versions as labels.",
                       labels=("hostname", "driver_version", "cuda_version", "gputui_version"))
GPU_INFO = MetricName("gputui_gpu_info", "A GPU: 1 per GPU, with its name and PCI bus id.",
                      labels=("gpu", "uuid", "name", "pci_bus_id"))
GPU_UTILIZATION = MetricName("gputui_gpu_utilization_ratio", "GPU (SM) utilization, 0-1.", "ratio", GPU,
                             "utilization_gpu", 0.01)
GPU_MEMORY_UTILIZATION = MetricName("gputui_gpu_memory_utilization_ratio",
                                    "GPU memory controller (bandwidth) utilization, 0-1.", "ratio", GPU,
                                    "utilization_memory", 0.01)
GPU_MEMORY_USED = MetricName("gputui_gpu_memory_used_bytes", "GPU memory in use, bytes.", "bytes", GPU,
                             "memory_used")
GPU_MEMORY_TOTAL = MetricName("gputui_gpu_memory_total_bytes", "GPU memory in total, bytes.", "bytes", GPU,
                              "memory_total")
GPU_TEMPERATURE = MetricName("gputui_gpu_temperature_celsius", "GPU core temperature, degrees Celsius.", "celsius",
                             GPU, "temperature")
GPU_POWER = MetricName("gputui_gpu_power_watts", "GPU power draw, watts.", "watts", GPU, "power_draw")
GPU_POWER_LIMIT = MetricName("gputui_gpu_power_limit_watts", "GPU power limit in force, watts.", "watts", GPU,
                             "power_limit")
GPU_FAN = MetricName("gputui_gpu_fan_ratio", "GPU fan speed as a share of its maximum, 0-1.", "ratio", GPU,
                     "fan_speed", 0.01)
GPU_SM_CLOCK = MetricName("gputui_gpu_sm_clock_hertz", "GPU SM clock, hertz.", "hertz", GPU, "clock_sm", 1e6)
GPU_LOST = MetricName("gputui_gpu_lost", "1 when the GPU fell off the bus or stopped answering, else 0.", "", GPU,
                      "lost")
#: the per-GPU value series, in the order they are exported
GPU_VALUES = (GPU_UTILIZATION, GPU_MEMORY_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_TEMPERATURE,
              GPU_POWER, GPU_POWER_LIMIT, GPU_FAN, GPU_SM_CLOCK)

# -- judgements and processes the fleet reads ----------------------------------------------
ALERT_ACTIVE = "gputui_alert_active"
IMBALANCE_FLAGGED = "gputui_imbalance_flagged"
STALE_PROCESSES = "gputui_stale_processes"
STALE_GPU_MEMORY = "gputui_stale_gpu_memory_bytes"
CONTAINER_FINDING = "gputui_container_finding"
CONTAINER_GPU_GRANTED = "gputui_container_gpu_granted"
PROCESS_GPU_MEMORY = "gputui_process_gpu_memory_bytes"

# -- dcgm-exporter's names (``--dcgm-names``), in its units ---------------------------------
#: the host label: ``Hostname`` in released dcgm-exporter, ``hostname`` on its main branch
DCGM_HOST_LABELS = ("Hostname", "hostname")


def dcgm_labels(host_label: str = "Hostname") -> tuple[str, ...]:
    """The labels of every DCGM_* series; GPU_I_* are empty except on a MIG instance's series."""
    return ("gpu", "UUID", "pci_bus_id", "device", "modelName", host_label, "GPU_I_PROFILE", "GPU_I_ID",
            "container", "pod", "namespace")


def _dcgm(name: str, help: str, unit: str, field: str, scale: float = 1.0) -> MetricName:
    return MetricName(f"DCGM_FI_DEV_{name}", help, unit, dcgm_labels(), field, scale)


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
DCGM_XID_ERRORS = MetricName("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "",
                             dcgm_labels() + ("err_code",), "xid_last")
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
