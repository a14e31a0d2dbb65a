"""The imbalance judge's conditions: the busiest GPU against the others, by utilization and by memory.

What :mod:`~gputui.core.judges.imbalance` judges each poll (see its docstring for the thresholds and the
hysteresis): each kind's :class:`Condition` in a dict of windowed loads, strict or some points more
lenient, and both at once in one pass per kind.
"""

from __future__ import annotations

from operator import attrgetter

from gputui.core.config import Settings
from gputui.core.judges.placement import GpuLoad
from gputui.core.record import record


@record
class Condition:
    """One kind of imbalance found in a window: the hot GPU against the others."""

    kind: str
    hot: int
    hot_value: float
    coldest: int
    coldest_value: float
    others: tuple[int, ...]
    others_mean: float
    #: the configured low threshold: under it the others' mean reads as "idle" (wording only)
    low: float


#: (utilization, memory)
Conditions = tuple[Condition | None, Condition | None]

_INDEX = attrgetter("index")


def _known(loads: dict[int, GpuLoad], attr: str) -> list[GpuLoad]:
    known = [g for g in loads.values() if not g.lost and getattr(g, attr) is not None]
    known.sort(key=_INDEX)
    return known


def _extremes(known: list[GpuLoad], values: list[float]) -> tuple[GpuLoad, float, GpuLoad, float]:
    """The busiest GPU and its value, then the idlest and its: the lowest index among equals (``known`` is
    in index order, ``values`` its figures in the same order)."""
    hot = cold = known[0]
    hv = cv = values[0]
    for g, v in zip(known, values, strict=True):
        if v > hv:
            hot, hv = g, v
        elif v < cv:
            cold, cv = g, v
    return hot, hv, cold, cv


def _holds(hv: float, cv: float, high: float, low: float, spread: float | None) -> bool:
    """The imbalance test on the busiest and the idlest value: one at or over ``high`` while the other is at or
    under ``low``, or (where a spread applies) further apart than ``spread``."""
    return (hv >= high and cv <= low) or (spread is not None and hv - cv > spread)


def _made(kind: str, known: list[GpuLoad], values: list[float], hot: GpuLoad, hv: float, cold: GpuLoad,
          cv: float, nominal_low: float) -> Condition:
    """The Condition of a test that holds: the hot GPU against the others and their mean."""
    others = [v for g, v in zip(known, values, strict=True) if g is not hot]
    return Condition(kind, hot.index, hv, cold.index, cv, tuple([g.index for g in known if g is not hot]),
                     sum(others) / len(others), nominal_low)


def _condition(kind: str, known: list[GpuLoad], attr: str, high: float, low: float,
               spread: float | None, nominal_low: float) -> Condition | None:
    if len(known) < 2:
        return None
    values = [getattr(g, attr) for g in known]
    hot, hv, cold, cv = _extremes(known, values)
    if not _holds(hv, cv, high, low, spread):
        return None
    return _made(kind, known, values, hot, hv, cold, cv, nominal_low)


def utilization_condition(loads: dict[int, GpuLoad], settings: Settings, relax: float = 0.0) -> Condition | None:
    """The utilisation imbalance in these loads, with thresholds ``relax`` points more lenient."""
    return _condition("utilization", _known(loads, "util"), "util", settings.util_high - relax,
                      settings.util_low + relax, settings.util_spread - relax, settings.util_low)


def memory_condition(loads: dict[int, GpuLoad], settings: Settings, relax: float = 0.0) -> Condition | None:
    """The memory imbalance in these loads, with thresholds ``relax`` points more lenient."""
    return _condition("memory", _known(loads, "memory"), "memory", settings.memory_high - relax,
                      settings.memory_low + relax, None, settings.memory_low)


def strict_and_relaxed(loads: dict[int, GpuLoad], settings: Settings) -> tuple[Conditions, Conditions]:
    """(:func:`utilization_condition`, :func:`memory_condition`) of ``loads`` strict and ``imbalance_margin``
    points more lenient, in one pass per kind: the busiest and the idlest GPU, the others and their mean
    are the same under both thresholds (one Condition serves both where both hold)."""
    margin = settings.imbalance_margin
    alive = [g for g in loads.values() if not g.lost]
    alive.sort(key=_INDEX)
    found: list[Condition | None] = []
    for kind, high, low, spread, nominal in (
            ("utilization", settings.util_high, settings.util_low, settings.util_spread, settings.util_low),
            ("memory", settings.memory_high, settings.memory_low, None, settings.memory_low)):
        known = [g for g in alive if (g.util if kind == "utilization" else g.memory) is not None]
        if len(known) < 2:
            found += (None, None)
            continue
        values: list[float] = [g.util if kind == "utilization" else g.memory for g in known]  # type: ignore[misc]
        hot, hv, cold, cv = _extremes(known, values)
        strict = _holds(hv, cv, high, low, spread)
        relaxed = _holds(hv, cv, high - margin, low + margin, None if spread is None else spread - margin)
        if not (strict or relaxed):
            found += (None, None)
            continue
        cond = _made(kind, known, values, hot, hv, cold, cv, nominal)
        found += (cond if strict else None, cond if relaxed else None)
    return (found[0], found[2]), (found[1], found[3])
