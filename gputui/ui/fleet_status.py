"""The fleet screen's refresh state, shared by the fleet app and its screens (which the app imports)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FleetStatus:
    """What the banner says: the last good refresh, the current problem, a refresh running long."""

    prometheus: str
    interval: float
    last_ok: float | None = None
    error: str | None = None
    slow_for: float | None = None
    refreshes: int = 0
