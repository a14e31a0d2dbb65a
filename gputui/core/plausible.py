"""Driver values no hardware can report become N/A, with a warning naming the field.

A wrapped counter or a driver bug reports 4294967295 °C, more memory used than
the card has, a process holding 18446744073604694016 bytes, 250 % utilisation or
5,000,000 W. Judged as real, such a value raises a CRITICAL alert, a "500 %
used" finding, or an integer that JavaScript consumers of the JSON cannot
represent (above 2^53). Every GPU source passes its reading through
:func:`plausible_reading` before anything judges it: an impossible value becomes
``None`` (shown as N/A, never alerted on) and the reading carries one sentence
per GPU naming the fields that were dropped.
"""

from __future__ import annotations

from typing import Any

from gputui.core.model import Gpu, GpuReading, RawProcess
from gputui.core.record import replace

__all__ = ["JSON_SAFE_INT", "LIMITS", "PlausibleMemo", "implausible", "plausible_reading"]

#: The largest integer every JSON consumer reads exactly (IEEE double).
JSON_SAFE_INT = 2**53
PIB = 1 << 50

#: Gpu field -> (lowest, highest) a real GPU can report, and the name used in the warning.
LIMITS: dict[str, tuple[float, float, str]] = {
    "utilization_gpu": (0, 100, "GPU utilization"),
    "utilization_memory": (0, 100, "memory utilization"),
    "temperature": (-60, 200, "temperature"),  # °C; sensors below -60 or above 200 are broken
    "power_draw": (0, 10_000, "power draw"),  # W; the largest modules draw a few kW
    "power_limit": (0, 10_000, "power limit"),
    "fan_speed": (0, 200, "fan speed"),  # NVML allows "over 100 %" on some boards
    "clock_sm": (0, 20_000, "SM clock"),  # MHz
    "clock_memory": (0, 50_000, "memory clock"),
    "clock_sm_max": (0, 20_000, "maximum SM clock"),
    "clock_memory_max": (0, 50_000, "maximum memory clock"),
    "pstate": (0, 15, "performance state"),
    "memory_total": (1, PIB, "total memory"),
    "memory_used": (0, PIB, "memory used"),
    "ecc_errors": (0, JSON_SAFE_INT, "ECC error count"),
}


def _bad(value: Any, low: float, high: float) -> bool:
    return value is not None and not (low <= value <= high)  # nan fails too


def implausible(name: str, value: float | None) -> bool:
    """Whether ``value`` is one no GPU can report for the Gpu field ``name`` (NaN and ±inf included):
    the rule of :func:`plausible_gpu`, for readers of other sources (the fleet's Prometheus answers)."""
    low, high, _ = LIMITS[name]
    return _bad(value, low, high)


def plausible_gpu(gpu: Gpu) -> tuple[Gpu, list[str]]:
    """``gpu`` with impossible values set to None, and the names of the fields dropped."""
    if gpu.lost:
        return gpu, []
    changes: dict[str, Any] = {}
    dropped: list[str] = []
    for name, (low, high, label) in LIMITS.items():
        value = getattr(gpu, name)
        if _bad(value, low, high):
            changes[name] = None
            dropped.append(f"{label} ({value})")
    used = changes.get("memory_used", gpu.memory_used)
    total = changes.get("memory_total", gpu.memory_total)
    if used is not None and total is not None and used > total:
        changes["memory_used"] = None
        dropped.append(f"memory used ({used} bytes of {total})")
    if not changes:
        return gpu, []
    return replace(gpu, **changes), dropped


def _plausible_processes(procs: tuple[RawProcess, ...], total: int | None) -> tuple[tuple[RawProcess, ...], list[str]]:
    ceiling = total if total is not None else PIB
    out: list[RawProcess] = []
    dropped: list[str] = []
    for p in procs:
        if p.gpu_memory is not None and not 0 <= p.gpu_memory <= ceiling:
            dropped.append(f"GPU memory of PID {p.pid} ({p.gpu_memory} bytes)")
            p = replace(p, gpu_memory=None)
        if p.sm_utilization is not None and not 0 <= p.sm_utilization <= 100:
            dropped.append(f"SM utilization of PID {p.pid} ({p.sm_utilization})")
            p = replace(p, sm_utilization=None)
        out.append(p)
    return tuple(out), dropped


#: per GPU index: the Gpu and process tuple last judged, and what they were judged to be
PlausibleMemo = dict[int, tuple[Gpu, tuple[RawProcess, ...] | None, Gpu, tuple[RawProcess, ...] | None, list[str]]]


def plausible_reading(reading: GpuReading, memo: PlausibleMemo | None = None) -> GpuReading:
    """``reading`` with every impossible value N/A and one warning per GPU that had any. ``memo``: a
    dict the caller keeps from reading to reading; a GPU whose Gpu and process tuple are the very
    objects judged last time is not judged again (both are immutable)."""
    gpus: list[Gpu] = []
    processes = dict(reading.processes)
    warnings: list[str] = []
    changed = False
    for gpu in reading.gpus:
        procs = processes.get(gpu.index)
        hit = memo.get(gpu.index) if memo is not None else None
        if hit is not None and hit[0] is gpu and hit[1] is procs:
            fixed, fixed_procs, dropped = hit[2], hit[3], list(hit[4])
        else:
            fixed, dropped = plausible_gpu(gpu)
            fixed_procs = procs
            if procs:
                fixed_procs, more = _plausible_processes(procs, fixed.memory_total)
                if not more:
                    fixed_procs = procs
                dropped += more
            if memo is not None:
                memo[gpu.index] = (gpu, procs, fixed, fixed_procs, list(dropped))
        if fixed_procs is not procs and fixed_procs is not None:
            processes[gpu.index] = fixed_procs
        if dropped:
            changed = True
            warnings.append(f"GPU {gpu.index}: the driver reported impossible values, shown as N/A: "
                            f"{', '.join(dropped)}.")
        gpus.append(fixed)
    if not changed:
        return reading
    return replace(reading, gpus=tuple(gpus), processes=processes, errors=reading.errors + tuple(warnings))
