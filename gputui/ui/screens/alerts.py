"""The alerts panel (key ``!``): what is wrong now, and everything that happened this session.

Two lists. *Active* is the latest snapshot's alerts, critical first, each with
the time its condition began. *This session* is every event the app's
:class:`~gputui.core.judges.alerts.AlertRecorder` saw — an alert raised, changing
severity, or clearing — newest first, so an alert that came and went while
nobody was looking is still here. The header says where the JSON-lines log is
(or why there is none).

Alert messages are whole sentences and can be long, so both lists are Rich
tables that wrap inside a scrolling view rather than one-line table rows.
"""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.core.judges.alerts import AlertEvent, AlertRecorder
from gputui.core.model import Alert, Snapshot
from gputui.ui.base import GpuScreen
from gputui.ui.safe import markup, text
from gputui.ui.widgets.footer import FitFooter

_SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow"}
_EVENT_WORD = {"raised": "raised", "changed": "now", "cleared": "cleared"}


def _when(moment: datetime, today: datetime | None) -> str:
    """HH:MM:SS, with the date in front when it is not the same day as ``today``."""
    if today is not None and moment.date() != today.date():
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.strftime("%H:%M:%S")


def _where(alert: Alert) -> str:
    return f"GPU {alert.gpu}" if alert.gpu is not None else "machine"


def active_table(alerts: tuple[Alert, ...], now: datetime | None) -> Table | Text:
    if not alerts:
        return Text("No active alerts.", style="dim")
    t = Table(box=None, padding=(0, 1), expand=True, show_edge=False, header_style="bold")
    t.add_column("Severity", no_wrap=True)
    t.add_column("Where", no_wrap=True)
    t.add_column("Kind", no_wrap=True)
    t.add_column("Since", no_wrap=True)
    t.add_column("Message", ratio=1)
    for a in alerts:
        t.add_row(Text(a.severity.upper(), style=_SEVERITY_STYLE[a.severity]), _where(a), a.kind,
                  _when(a.since, now), markup(a.message))
    return t


def history_table(events: tuple[AlertEvent, ...], now: datetime | None) -> Table | Text:
    if not events:
        return Text("Nothing has happened since gputui started.", style="dim")
    t = Table(box=None, padding=(0, 1), expand=True, show_edge=False, header_style="bold")
    t.add_column("Time", no_wrap=True)
    t.add_column("Event", no_wrap=True)
    t.add_column("Where", no_wrap=True)
    t.add_column("Kind", no_wrap=True)
    t.add_column("Message", ratio=1)
    for e in reversed(events):
        a = e.alert
        if e.event == "cleared":
            event = Text("cleared", style="green")
        else:
            event = Text(f"{_EVENT_WORD[e.event]} {a.severity}", style=_SEVERITY_STYLE[a.severity])
        t.add_row(_when(e.time, now), event, _where(a), a.kind, text(a.message, style="dim" if e.event == "cleared"
                                                                      else ""))
    return t


class AlertsScreen(GpuScreen[None]):
    """Active alerts and the session's alert history; follows every poll while open."""

    BINDINGS = [
        Binding("escape", "close", "Back", id="alerts-close"),
        Binding("exclamation_mark", "close", "Back", key_display="!", show=False, id="alerts-close-!"),
        Binding("q", "close", "Back", show=False, id="alerts-close-q"),
    ]

    DEFAULT_CSS = """
    AlertsScreen {
        layout: vertical;
        background: $background;
    }
    AlertsScreen #alerts-title {
        height: 1;
        background: $boost;
        color: $foreground;
        text-style: bold;
        padding: 0 1;
    }
    AlertsScreen #alerts-log {
        height: auto;
        color: $foreground 60%;
        padding: 0 1;
    }
    AlertsScreen .alerts-heading {
        height: 1;
        margin-top: 1;
        padding: 0 1;
        text-style: bold underline;
    }
    AlertsScreen #alerts-body {
        height: 1fr;
    }
    AlertsScreen #alerts-active, AlertsScreen #alerts-history {
        height: auto;
        padding: 0 1;
    }
    """

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self._key: tuple | None = None
        #: Used only when the app keeps no recorder: this screen's own record while it is open.
        self._own = AlertRecorder(path=False)

    def compose(self) -> ComposeResult:
        yield Static("Alerts", id="alerts-title")
        yield Static("", id="alerts-log")
        with VerticalScroll(id="alerts-body"):
            yield Static("Active now", classes="alerts-heading")
            yield Static("", id="alerts-active")
            yield Static("This session", classes="alerts-heading")
            yield Static("", id="alerts-history")
        yield FitFooter()

    @property
    def recorder(self) -> AlertRecorder:
        rec = self.gpu_app.alert_recorder
        return rec if isinstance(rec, AlertRecorder) else self._own

    def on_mount(self) -> None:
        snap = self.gpu_app.snapshot or self.snapshot
        if snap is not None:
            self.update_snapshot(snap)
        else:
            self._draw()

    def update_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.recorder is self._own:
            self._own.record(snapshot)
        self._draw()

    def _draw(self) -> None:
        snap = self.snapshot
        rec = self.recorder
        alerts = snap.alerts if snap is not None else ()
        events = rec.events
        key = (alerts, len(events), events[-1] if events else None, rec.error, snap.time.date() if snap else None)
        if key == self._key:
            return
        self._key = key
        now = snap.time if snap is not None else None
        crit = sum(1 for a in alerts if a.severity == "critical")
        counts = f"{len(alerts)} active" + (f", {crit} critical" if crit else "")
        self.query_one("#alerts-title", Static).update(f"Alerts — {counts}")
        self.query_one("#alerts-log", Static).update(text(self._log_line(rec)))  # names a path: no markup
        self.query_one("#alerts-active", Static).update(active_table(alerts, now))
        self.query_one("#alerts-history", Static).update(history_table(events, now))

    def _log_line(self, rec: AlertRecorder) -> str:
        if rec.error:
            return rec.error
        if rec is self._own:
            return "Events seen while this view is open; nothing is written to a log."
        machine = self.gpu_app.machine
        if machine.demo is not None:
            return "Demo mode: the simulated server's alerts are not written to the alert log."
        path = rec.path
        return f"Every event is appended to {path}." if path is not None else "Alerts are not logged."

    def action_close(self) -> None:
        self.app.pop_screen()
