"""Driver values no hardware can report become N/A, with a warning naming the field.

A wrapped counter or a driver bug reports 4294967295 °C, more memory used than
the card has, a process holding 18446744073604694016 bytes, 250 % utilisation or
5,000,000 W. Judged as real, such a value raises a CRITICAL alert, a "500 %
used" finding, or an integer that JavaScript consumers of the JSON cannot
represent (above 2^53). Every GPU source passes its reading through
:func:`plausible_reading` before anything judges it: an impossible value becomes
``None`` (shown as N/A, never alerted on) and the reading carries one sentence
per GPU naming the fields that were dropped.

A UUID names a card to Docker, CUDA and every grant: :func:`uuid_problems` calls a
card suspect when its UUID is empty, shared with another card, or not a name
(letters, digits and ``-`` only, at most :data:`UUID_MAX` characters). The reading
says so, and ``pick`` never offers such a card — ``--gpus device=GPU-dup,GPU-dup``
would hand a job a card nobody chose.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any

from gputui.core.model import Gpu, GpuReading, RawProcess
from gputui.core.record import replace

__all__ = ["JSON_SAFE_INT", "LIMITS", "PlausibleMemo", "implausible", "plausible_reading", "uuid_problems"]

#: The longest UUID taken as a name (NVML's are 40 characters: ``GPU-`` and 36).
UUID_MAX = 96

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
    "memory_reserved": (0, PIB, "memory reserved"),
    "memory_temperature": (-60, 200, "memory temperature"),
    "total_energy_consumption": (0, JSON_SAFE_INT, "energy consumption"),  # mJ
    "pcie_replay_counter": (0, JSON_SAFE_INT, "PCIe replay count"),
    "encoder_utilization": (0, 100, "encoder utilization"),
    "decoder_utilization": (0, 100, "decoder utilization"),
    "remapped_rows_correctable": (0, 1_000_000, "correctable remapped rows"),  # a card has a few hundred spares
    "remapped_rows_uncorrectable": (0, 1_000_000, "uncorrectable remapped rows"),
    "xid_last": (0, 65_535, "last XID"),
}


@functools.lru_cache(maxsize=1024)  # a machine has a few UUIDs, asked about several times a poll
def _uuid_text_ok(uuid: str) -> bool:
    return 0 < len(uuid) <= UUID_MAX and all(c.isascii() and (c.isalnum() or c == "-") for c in uuid)


#: the last uuid_problems() answer and what it was found from (one slot: a poll asks twice, then the next
#: poll asks about the same cards; the tuple is replaced whole, so threads see one or the other)
_UUID_LAST: tuple[list[Any], dict[int, str]] | None = None


def uuid_problems(gpus: Iterable[Gpu]) -> dict[int, str]:
    """GPU index -> why its UUID cannot name it (empty, shared with another card, not a name), for
    the cards whose UUID is suspect; empty when every card has a UUID of its own. A lost card that
    never answered has no UUID: it is lost, not suspect. Reused while every card's index, UUID, lost
    flag and MIG devices' indices and UUIDs (all it reads) are the last call's."""
    global _UUID_LAST
    gpus = list(gpus)
    key: list[Any] = list(map(_IDENTITY, gpus))  # one C call per card
    if any(map(_MIGS, gpus)):
        key.append(tuple([tuple([(m.index, m.uuid) for m in g.mig_devices]) for g in gpus]))
    last = _UUID_LAST
    if last is not None and last[0] == key:
        return dict(last[1])
    problems = _uuid_problems(gpus)
    _UUID_LAST = (key, problems)
    return dict(problems)


#: what uuid_problems reads of a card besides its MIG devices, and those
_IDENTITY = operator.attrgetter("index", "uuid", "lost")
_MIGS = operator.attrgetter("mig_devices")


def _uuid_problems(gpus: list[Gpu]) -> dict[int, str]:
    seen: dict[str, list[int]] = {}
    for g in gpus:
        if g.uuid:
            seen.setdefault(g.uuid, []).append(g.index)
    problems: dict[int, str] = {}
    for g in gpus:
        if not g.uuid and g.lost:
            continue
        if not g.uuid:
            problems[g.index] = f"GPU {g.index} reports an empty UUID"
        elif not _uuid_text_ok(g.uuid):
            problems[g.index] = f"GPU {g.index} reports a UUID that is not a name ({g.uuid[:UUID_MAX]!r})"
        elif len(seen[g.uuid]) > 1:
            others = " and ".join(f"GPU {i}" for i in seen[g.uuid] if i != g.index)
            problems[g.index] = f"GPU {g.index} reports the UUID {g.uuid}, which {others} reports too"
    # A MIG device's UUID is what CUDA and Docker are given for it: the same rule, its card answering for it.
    mig_seen: dict[str, int] = {}
    for g in gpus:
        for m in g.mig_devices:
            mig_seen[m.uuid] = mig_seen.get(m.uuid, 0) + 1
    for g in gpus:
        for m in g.mig_devices:
            if g.index in problems:
                break
            if not _uuid_text_ok(m.uuid) or mig_seen[m.uuid] > 1 or m.uuid in seen:
                problems[g.index] = (f"MIG device {g.index}:{m.index} reports the UUID {m.uuid[:UUID_MAX]!r}, "
                                     "which is empty, not a name or not its own")
    return problems


def _bad(value: Any, low: float, high: float) -> bool:
    return value is not None and not (low <= value <= high)  # nan fails too


def implausible(name: str, value: float | None) -> bool:
    """Whether ``value`` is one no GPU can report for the Gpu field ``name`` (NaN and ±inf included):
    the rule of :func:`plausible_gpu`, for readers of other sources (the fleet's Prometheus answers)."""
    low, high, _ = LIMITS[name]
    return _bad(value, low, high)


def _as_it_is_source() -> str:
    """:func:`_as_it_is`'s source: one test per LIMITS field, its bounds as constants (LIMITS' own
    numbers), then memory within the total. Straight-line code: no tuple of values, no loop, no
    unpacking of bounds per field (a churning poll checks every card's reading)."""
    lines = ["def _as_it_is(g):"]
    for name, (low, high, _) in LIMITS.items():
        lines += [f"    v = g.{name}", f"    if v is not None and not ({low!r} <= v <= {high!r}):",
                  "        return False"]
    lines += ["    total = g.memory_total", "    if total is None:", "        return True",
              "    used, reserved = g.memory_used, g.memory_reserved",
              "    return (used is None or used <= total) and (reserved is None or reserved <= total)"]
    return "\n".join(lines) + "\n"


_namespace: dict[str, Any] = {}
exec(_as_it_is_source(), {}, _namespace)  # built from LIMITS above, nothing from outside
#: whether a working card's reading has every checked value in range (or N/A; nan fails) and memory
#: within the total: every reading of a working card, which is then kept as it is
_as_it_is: Any = _namespace["_as_it_is"]


def plausible_gpu(gpu: Gpu) -> tuple[Gpu, list[str]]:
    """``gpu`` with impossible values set to None, and the names of the fields dropped."""
    if gpu.lost or _as_it_is(gpu):  # only then is anything named or copied
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
    reserved = changes.get("memory_reserved", gpu.memory_reserved)
    if reserved is not None and total is not None and reserved > total:
        changes["memory_reserved"] = None
        dropped.append(f"memory reserved ({reserved} bytes of {total})")
    if not changes:
        return gpu, []
    return replace(gpu, **changes), dropped


def _plausible_processes(procs: tuple[RawProcess, ...], total: int | None) -> tuple[tuple[RawProcess, ...], list[str]]:
    ceiling = total if total is not None else PIB
    for p in procs:  # one pass without a call: most readings have nothing to drop
        memory, sm = p.gpu_memory, p.sm_utilization
        if memory is not None and not 0 <= memory <= ceiling or sm is not None and not 0 <= sm <= 100:
            break
    else:
        return procs, []
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


_NO_MEMO: PlausibleMemo = {}  # never written: plausible_reading writes only a memo it is given


def plausible_reading(reading: GpuReading, memo: PlausibleMemo | None = None) -> GpuReading:
    """``reading`` with every impossible value N/A and one warning per GPU that had any. ``memo``: a
    dict the caller keeps from reading to reading; a GPU whose Gpu and process tuple are the very
    objects judged last time is not judged again (both are immutable)."""
    gpus: list[Gpu] = []
    source = reading.processes
    processes: dict[int, tuple[RawProcess, ...]] | None = None  # copied at the first GPU with a process fixed
    warnings: list[str] = []
    memo_get = (memo if memo is not None else _NO_MEMO).get
    for gpu in reading.gpus:
        index = gpu.index
        procs = source.get(index)
        hit = memo_get(index)
        if hit is not None and hit[0] is gpu and hit[1] is procs:
            fixed, fixed_procs, dropped = hit[2], hit[3], hit[4]
        else:
            fixed, dropped = plausible_gpu(gpu)
            fixed_procs = procs
            if procs:  # (the very tuple back when nothing is dropped)
                fixed_procs, more = _plausible_processes(procs, fixed.memory_total)
                dropped += more
            if memo is not None:
                memo[index] = (gpu, procs, fixed, fixed_procs, dropped)  # never changed after this
        if dropped:
            if fixed_procs is not procs and fixed_procs is not None:
                if processes is None:
                    processes = dict(source)
                processes[index] = fixed_procs
            warnings.append(f"GPU {index}: the driver reported impossible values, shown as N/A: "
                            f"{', '.join(dropped)}.")
        gpus.append(fixed)
    for _, problem in sorted(uuid_problems(gpus).items()):
        warnings.append(f"{problem}: the card is suspect (a driver fault) and is never picked.")
    if not warnings:  # nothing dropped, no suspect card: the reading as it came
        return reading
    return replace(reading, gpus=tuple(gpus), processes=processes if processes is not None else dict(source),
                   errors=reading.errors + tuple(warnings))
