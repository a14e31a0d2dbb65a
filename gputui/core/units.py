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


def fmt_duration(seconds: float | None) -> str:
    """Compact uptime: 42s, 17m, 3h05m, 4d07h."""
    if seconds is None:
        return NA
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def short_throttle(name: str) -> str:
    """Throttle reason names as shown in narrow columns."""
    return {
        "gpu_idle": "idle",
        "applications_clocks_setting": "app-clocks",
        "sw_power_cap": "power-cap",
        "hw_slowdown": "hw-slowdown",
        "sync_boost": "sync-boost",
        "sw_thermal_slowdown": "sw-thermal",
        "hw_thermal_slowdown": "hw-thermal",
        "hw_power_brake_slowdown": "power-brake",
        "display_clock_setting": "display-clock",
    }.get(name, name)
