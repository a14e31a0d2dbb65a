"""The contract between the app and its screens, typed.

:class:`AppState` is what screens and widgets may use of the running :class:`~gputui.ui.app.GpuTuiApp`
(``app.py`` checks that the app satisfies it); :func:`app_state` gives any mounted node that typed
handle. :class:`GpuScreen` and :class:`GpuModal` are the bases of every gputui screen: the app calls
their :meth:`~Listening.update_snapshot` after each poll and :meth:`~Listening.update_poll_status`
when the polling state changes, on every screen of the stack, and offers their
:meth:`~Listening.palette_commands` in the command palette. The defaults do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from textual.app import SystemCommand
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen

from gputui.core.config import Settings
from gputui.core.history import GpuSample, History
from gputui.core.judges.alerts import AlertRecorder
from gputui.core.model import Snapshot
from gputui.ui.widgets.status import PollStatus

if TYPE_CHECKING:
    from gputui.core.machine import Machine

ResultT = TypeVar("ResultT")
T = TypeVar("T")


class AppState(Protocol):
    """What the app shares with its screens and widgets."""

    #: The latest snapshot (None before the first poll).
    snapshot: Snapshot | None
    #: Per GPU index, the kept samples (a copy made by the poll thread: safe on the UI thread).
    gpu_history: Mapping[int, tuple[GpuSample, ...]]
    #: The machine (``machine.demo`` is the simulation in --demo).
    machine: Machine
    settings: Settings
    poll_status: PollStatus
    #: Alert events of this session.
    alert_recorder: AlertRecorder

    def request_poll(self) -> None:
        """Poll again as soon as possible (after an action changed the machine)."""

    def set_paused(self, paused: bool) -> None:
        """Stop or resume polling."""

    def read_history(self, read: Callable[[History | None], T]) -> T:
        """``read(history)`` under the poll lock; ``read(None)`` when a poll holds it too long."""
        ...


def app_state(node: DOMNode) -> AppState:
    """The typed handle to the running gputui app, for any mounted screen or widget."""
    return cast(AppState, node.app)


class Listening:
    """What the app calls on every screen of its stack; each default does nothing."""

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """A poll finished: show ``snapshot``."""

    def update_poll_status(self, status: PollStatus) -> None:
        """The polling state changed (success, failure, slow poll, pause)."""

    def palette_commands(self) -> Iterable[SystemCommand]:
        """Commands this screen adds to the command palette."""
        return ()


class GpuScreen(Listening, Screen[ResultT]):
    """A full gputui screen."""

    @property
    def gpu_app(self) -> AppState:
        return app_state(self)


class GpuModal(Listening, ModalScreen[ResultT]):
    """A gputui dialog over another screen."""

    @property
    def gpu_app(self) -> AppState:
        return app_state(self)
