"""How numbers look to a person: one place, so the CLI, the app and messages agree."""

from __future__ import annotations

NA = "N/A"

_GIB = 1024**3
_MIB = 1024**2


def fmt_bytes(value: int | float | None, unit: str | None = None) -> str:
    """Bytes as MiB or GiB (binary, like nvidia-smi): 512 MiB, 17.3 GiB."""
    if value is None:
        return NA
    if unit == "GiB" or (unit is None and abs(value) >= _GIB):
        return f"{value / _GIB:.1f} GiB"
    return f"{value / _MIB:.0f} MiB"


def fmt_gib(value: int | None) -> str:
    """Bytes as a bare GiB number with one decimal (for "used / total GiB" pairs)."""
    return NA if value is None else f"{value / _GIB:.1f}"


def fmt_duration(seconds: float | None, coarse: bool = False) -> str:
    """Compact elapsed time: 42s, 17m, 3h05m, 4d07h. ``coarse`` shows under a minute as
    '<1m', for live columns that would otherwise change (and repaint) every second."""
    if seconds is None:
        return NA
    s = int(max(0, seconds))
    if s < 60:
        return "<1m" if coarse else f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


#: How clock-event (throttle) reasons read on screen and in text output.
THROTTLE_LABELS = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "app clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "thermal (SW)",
    "hw_thermal_slowdown": "thermal (HW)",
    "hw_power_brake_slowdown": "power brake",
    "display_clock_setting": "display clock",
}


def throttle_label(reasons: tuple[str, ...] | None) -> str:
    """Active clock-event reasons in words, idle left out (an idle GPU is not a problem).
    Unknown reasons (None) read as "" too: callers that must say N/A check for None."""
    if reasons is None:
        return ""
    return ", ".join(THROTTLE_LABELS.get(r, r.replace("_", " ")) for r in reasons if r != "gpu_idle")


# -- one rule for every face (text, JSON-adjacent prose, the dashboard) ------------------
#
# * A missing value is "N/A" and stands alone: never "N/AW", "PN/A" or "N/A W".
# * Sizes: GiB with one decimal from 1 GiB up, whole MiB below (50 MiB, not 0.0 GiB).
# * A used amount below its total never reads as the total: 32426 of 32510 MiB is
#   "31.6 / 31.7 GiB" and 99%, never "31.7 / 31.7 GiB 100%" (under 0.1 GiB free: both in MiB).
# * Power keeps its cap and its unit at any size: "1006 / 1000 W".


def _floor1(x: float) -> float:
    return int(x * 10) / 10


def fmt_size(value: int | None) -> str:
    """Bytes for a person: '512 MiB', '17.3 GiB', 'N/A'. Used alike for GPU and process memory."""
    if value is None:
        return NA
    if value >= _GIB:
        return f"{value / _GIB:.1f} GiB"
    return f"{value // _MIB} MiB"


def fmt_size_pair(used: int | None, total: int | None, sep: str = " / ") -> str:
    """'64.6 / 80.0 GiB', '50 MiB / 80.0 GiB', '31.6 / 31.7 GiB' (not full), 'N/A / 80.0 GiB'."""
    if used is None and total is None:
        return NA
    if total is None:
        return f"{fmt_size(used)} / {NA}"
    total_text = f"{total / _GIB:.1f}" if total >= _GIB else f"{total // _MIB}"
    unit = "GiB" if total >= _GIB else "MiB"
    if used is None:
        return f"{NA} / {total_text} {unit}"
    if unit == "GiB" and used < _GIB:
        return f"{used // _MIB} MiB{sep}{total_text} GiB"
    if unit == "MiB":
        return f"{used // _MIB}{sep}{total_text} MiB"
    used_text = f"{used / _GIB:.1f}"
    if used < total and float(used_text) >= float(total_text):
        used_text = f"{_floor1(used / _GIB):.1f}"
        if float(used_text) >= float(total_text):  # less than 0.1 GiB free: only MiB tell them apart
            return f"{used // _MIB}{sep}{total // _MIB} MiB"
    return f"{used_text}{sep}{total_text} GiB"


def used_percent(used: int | None, total: int | None) -> float | None:
    """Percent of ``total`` in use, capped at 99 while anything is free (so it never reads 100%)."""
    if used is None or not total:
        return None
    pct = 100.0 * used / total
    return min(pct, 99.0) if used < total else pct


def fmt_percent(value: float | None) -> str:
    """A whole percentage, 'N/A' when missing; 99.6% of a card that is not full reads '99%'."""
    if value is None:
        return NA
    return f"{min(99, round(value)) if value < 100 else round(value)}%"


def fmt_watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f} W"


def fmt_power_pair(draw: float | None, limit: float | None, sep: str = " / ") -> str:
    """'192 / 1000 W', '145 W / N/A' (cap unknown), 'N/A / 400 W', or 'N/A'. Never cut, never glued."""
    if draw is None and limit is None:
        return NA
    if limit is None:
        return f"{draw:.0f} W / {NA}"
    if draw is None:
        return f"{NA} / {limit:.0f} W"
    return f"{draw:.0f}{sep}{limit:.0f} W"


def fmt_mhz_pair(value: int | None, maximum: int | None, sep: str = " / ") -> str:
    """'1410 / 1980 MHz', '1410 MHz / N/A', 'N/A / 1980 MHz', 'N/A'."""
    if value is None and maximum is None:
        return NA
    if maximum is None:
        return f"{value} MHz / {NA}"
    if value is None:
        return f"{NA} / {maximum} MHz"
    return f"{value}{sep}{maximum} MHz"


def fmt_mhz(value: int | None) -> str:
    return NA if value is None else f"{value} MHz"


def fmt_pstate(value: int | None) -> str:
    """'P0' … 'P15'; a missing P-state is 'N/A', not 'PN/A'."""
    return NA if value is None else f"P{value}"


def truncate(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` characters with a visible ellipsis: a cut value must not look whole."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…" if width > 1 else "…"
