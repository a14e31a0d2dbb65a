"""The fleet screen's refresh state and the typed handle to the fleet app, shared by the fleet app and its
screens (which the app imports)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from textual.dom import DOMNode

from gputui.core.record import record

if TYPE_CHECKING:
    from gputui.core.fleet.model import FleetHost, FleetSnapshot


@record
class FleetStatus:
    """What the banner says: the last good refresh, the current problem, a refresh running long."""

    prometheus: str
    interval: float
    last_ok: float | None = None
    error: str | None = None
    slow_for: float | None = None
    refreshes: int = 0


class FleetAppState(Protocol):
    """What the fleet app shares with its screens (``fleet_app.py`` checks that the app satisfies it)."""

    #: The latest fleet (None before the first refresh).
    snapshot: FleetSnapshot | None
    status: FleetStatus

    def now(self) -> float:
        """The wall clock (POSIX seconds) that ages and "down since" are measured against."""

    def refresh_now(self) -> None:
        """Refresh as soon as possible."""

    def follow_host(self, key: tuple[str, str] | None) -> None:
        """Read every series of this host (its screen is open), or of none."""

    def want_words(self, wanted: bool) -> None:
        """Read what the `/` filter matches (processes' users, containers…) while it is in use."""

    def request_history(self, host: FleetHost) -> object:
        """Read one host's history off the event loop (a thread worker)."""


def fleet_app(node: DOMNode) -> FleetAppState:
    """The typed handle to the running fleet app, for any of its mounted screens."""
    return cast(FleetAppState, node.app)
