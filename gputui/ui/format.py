"""Short, fixed-width text for numbers on screen.

Pure functions so the widgets, the detail screen and the tests agree on one way
to write a size, a duration or a missing value. ``None`` is always "N/A": the
model never invents a number and neither does the screen.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from gputui.core import units
from gputui.core.units import fmt_duration, throttle_label  # noqa: F401  (throttle_label is used as fmt.throttle_label)

NA = "N/A"
#: Texts kept per function below: each is pure, and a dashboard asks for the same few numbers every poll.
KEEP = 4096
GIB = 1024**3
MIB = 1024**2


@lru_cache(maxsize=KEEP, typed=True)
def size(value: int | None, na: str = NA) -> str:
    """Bytes as GiB with one decimal above 1 GiB, else whole MiB: '34.0G', '600M'."""
    if value is None:
        return na
    if value >= GIB:
        return f"{value / GIB:.1f}G"
    return f"{value // MIB}M"


@lru_cache(maxsize=KEEP, typed=True)
def size_pair(used: int | None, total: int | None) -> str:
    """'64.6/80.0 GiB', '50 MiB/80.0 GiB': :func:`gputui.core.units.fmt_size_pair` without spaces."""
    return units.fmt_size_pair(used, total, sep="/")


def percent(value: float | None, width: int = 3) -> str:
    """A right-aligned whole percentage: ' 86%'; 'N/A' when missing; a non-full 99.6% is ' 99%'."""
    return units.fmt_percent(value).rjust(width + 1)


def mem_percent(used: int | None, total: int | None, width: int = 3) -> str:
    """Memory in use as a percentage that never reads 100% while anything is free."""
    return percent(units.used_percent(used, total), width)


def watts(value: float | None) -> str:
    return units.fmt_watts(value)


@lru_cache(maxsize=KEEP, typed=True)
def power_pair(draw: float | None, limit: float | None) -> str:
    """'312/400 W', '1006/1000 W', '145 W / N/A': the cap and the unit are never cut."""
    return units.fmt_power_pair(draw, limit, sep="/")


def temperature(value: int | None) -> str:
    return NA if value is None else f"{value}°C"


def mhz(value: int | None) -> str:
    return NA if value is None else f"{value}"


def duration(seconds: float | None) -> str:
    """Elapsed time in at most six characters: '<1m', '12m', '5h20m', '3d04h'.

    Whole minutes: a column of uptimes that changed every second would repaint
    every row of the table on every poll."""
    return fmt_duration(seconds, coarse=True)


def uptime(started: datetime | None, now: datetime) -> str:
    """How long a process has run, measured against the snapshot's time (not the wall
    clock), so a frozen snapshot always reads the same."""
    if started is None:
        return NA
    return duration((now - started).total_seconds())


@lru_cache(maxsize=KEEP, typed=True)
def cpu(value: float | None) -> str:
    if value is None:
        return NA
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def clock_time(moment: datetime | None) -> str:
    return "--:--:--" if moment is None else moment.strftime("%H:%M:%S")


def short_gpu_name(name: str) -> str:
    """'NVIDIA A100-SXM4-80GB' -> 'A100-SXM4-80GB': the vendor is the same on every card."""
    for prefix in ("NVIDIA ", "Nvidia ", "nvidia "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def fit(text: str, width: int) -> str:
    """Cut to ``width`` cells with an ellipsis, or pad to it."""
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: width - 1] + "…" if width > 1 else text[:width]
    return text.ljust(width)
