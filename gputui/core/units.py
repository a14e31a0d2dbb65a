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


def throttle_label(reasons: tuple[str, ...]) -> str:
    """Active clock-event reasons in words, idle left out (an idle GPU is not a problem)."""
    return ", ".join(THROTTLE_LABELS.get(r, r.replace("_", " ")) for r in reasons if r != "gpu_idle")
