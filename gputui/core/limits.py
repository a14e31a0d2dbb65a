"""The one rule for numbers a person types: finite and in range, or one sentence.

``float("nan")``, ``float("inf")`` and ``1e308`` are all valid Python floats, and
each breaks something downstream (a timer armed for ever, a comparison that is
never true, ``int(inf)`` raising ``OverflowError``). Every number from a flag or
the config file goes through :func:`check_number` (argparse through
:func:`flag_type`) before anything acts on it, against the range in
:data:`RANGES` (or one given by the caller).
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["RANGES", "NumberError", "check_number", "flag_type", "parse_number"]

DAY = 86400.0
#: Settings field -> (lowest, highest) accepted value, both inclusive.
RANGES: dict[str, tuple[float, float]] = {
    "interval": (0.25, 3600.0),
    "imbalance_window": (0.0, DAY),
    "util_high": (0.0, 100.0),
    "util_low": (0.0, 100.0),
    "util_spread": (0.0, 100.0),
    "memory_high": (0.0, 100.0),
    "memory_low": (0.0, 100.0),
    "temp_warning": (0.0, 150.0),
    "temp_critical": (0.0, 150.0),
    "memory_full": (0.0, 100.0),
    "idle_holder_memory": (0.0, float(1 << 50)),  # 1 PiB: more than any GPU holds
    "idle_window": (0.0, 7 * DAY),
    "idle_cpu": (0.0, 100000.0),  # percent of one core, summed over up to 1000 cores
    "idle_grant_window": (0.0, 7 * DAY),
    "docker_timeout": (0.1, 3600.0),
    "imbalance_hold": (0.0, DAY),
    "imbalance_margin": (0.0, 100.0),
    "alert_hold": (0.0, DAY),
    "temp_hysteresis": (0.0, 150.0),
    "memory_hysteresis": (0.0, 100.0),
    "slow_link_graphs": (0.25, 3600.0),  # seconds between graph redraws on a slow link
}

#: seconds to wait or observe from a command-line flag (kill/migrate --timeout, snapshot --window)
SECONDS_RANGE = (0.0, DAY)


class NumberError(ValueError):
    """A number that is not finite or not in range. ``str(exc)`` is one sentence without a final period."""


def _fmt(x: float) -> str:
    return f"{x:g}" if abs(x) < 1e15 else f"{x:.3g}"


def check_number(name: str, value: float, low: float, high: float, unit: str = "") -> float:
    """``value`` if it is a finite number in [low, high]; else :class:`NumberError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberError(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise NumberError(f"{name} must be a finite number, not {value}")
    if not low <= value <= high:
        suffix = f" {unit}" if unit else ""
        raise NumberError(f"{name} must be between {_fmt(low)} and {_fmt(high)}{suffix}, not {_fmt(value)}")
    return value


def parse_number(name: str, text: str, low: float, high: float, unit: str = "", integer: bool = False) -> float:
    """``text`` read as a number and checked by :func:`check_number`."""
    try:
        value: float = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise NumberError(f"{name} must be {kind}{' of ' + unit if unit else ''}, not {text!r}") from None
    return check_number(name, value, low, high, unit)


def flag_type(name: str, low: float, high: float, unit: str = "",
              integer: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` that accepts only finite numbers in [low, high]."""

    def convert(text: str) -> float:
        try:
            return parse_number(name, text, low, high, unit, integer)
        except NumberError as exc:
            import argparse  # only to refuse: a one-shot command line is read without argparse (cli._fast_args)

            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name.lstrip("-").replace("-", "_")
    return convert
