"""The C structs the NVML query rules read (``nvml_query.py``): nvml.h's process, memory, utilization and
sample layouts that nvidia-ml-py does not define or that are read without its wrappers, and the
``struct`` formats that read them from a buffer's bytes in one call."""

from __future__ import annotations

import ctypes
from struct import Struct

__all__ = ["MEMORY_V2", "PSTATE_UNKNOWN", "RUNNING", "MemoryV1", "MemoryV2", "ProcessInfoV1", "ProcessInfoV2",
           "SAMPLE", "SAMPLES_BY_COUNT", "Utilization", "UtilizationSample", "process_struct", "samples_struct"]

#: nvml.h's NVML_PSTATE_UNKNOWN: the driver could not say (read as N/A)
PSTATE_UNKNOWN = 32


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: what drivers before R450 fill (nvidia-ml-py no longer defines it)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t, also what the ``_v3`` functions fill (nvml.h's nvmlProcessInfo_t)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class Utilization(ctypes.Structure):
    """nvmlUtilization_t."""

    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class MemoryV1(ctypes.Structure):
    """nvmlMemory_t."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    """nvmlMemory_v2_t; ``version`` must be set to :data:`MEMORY_V2` before the call."""

    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


#: nvml.h's nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2), the struct's size and version 2
MEMORY_V2 = ctypes.sizeof(MemoryV2) | (2 << 24)


class UtilizationSample(ctypes.Structure):
    """nvmlProcessUtilizationSample_t."""

    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


#: nvmlProcessUtilizationSample_t's pid, timeStamp and smUtil in native layout (memUtil, encUtil, decUtil skipped)
SAMPLE = Struct(f"@I{UtilizationSample.timeStamp.offset - 4}xQI12x")


#: compute (False) and graphics (True) process lists: the family, and each function's struct, newest first
RUNNING = {
    graphics: (f"{kind}_processes", {f"{base}_v3": ProcessInfoV2, f"{base}_v2": ProcessInfoV2, base: ProcessInfoV1},
               (f"{base}_v3", f"{base}_v2", base))
    for graphics, kind, base in ((False, "compute", "nvmlDeviceGetComputeRunningProcesses"),
                                 (True, "graphics", "nvmlDeviceGetGraphicsRunningProcesses"))
}


#: Structs reading n process-utilization samples at once, by n
SAMPLES_BY_COUNT: dict[int, Struct] = {}


def samples_struct(n: int) -> Struct | None:
    """A Struct reading ``n`` samples' (pid, timeStamp, smUtil) in one call (None past 4096 samples)."""
    whole = SAMPLES_BY_COUNT.get(n)
    if whole is None and n <= 4096:
        whole = SAMPLES_BY_COUNT[n] = Struct("@" + SAMPLE.format[1:] * n)
    return whole


#: a process-info struct's pid and usedGpuMemory in native layout, by struct (None: not read this way)
_PROCESS: dict[type, Struct | None] = {}


def process_struct(kind: type) -> Struct | None:
    """A Struct reading one ``kind`` process entry's (pid, usedGpuMemory) from its bytes (the rest skipped),
    checked against the ctypes layout; None where the layouts differ."""
    if kind not in _PROCESS:
        pid, mem, size = kind.pid, kind.usedGpuMemory, ctypes.sizeof(kind)  # type: ignore[attr-defined]
        layout: Struct | None = None
        if pid.offset == 0 and pid.size == 4 and mem.size == 8 and mem.offset >= 4:
            layout = Struct(f"@I{mem.offset - 4}xQ{size - mem.offset - 8}x")
            if layout.size != size:
                layout = None
        _PROCESS[kind] = layout
    return _PROCESS[kind]
