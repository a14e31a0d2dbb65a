"""The fleet application: every host Prometheus scrapes, refreshed in a worker thread.

One long-lived thread worker runs :meth:`FleetReader.read` (a fixed number of
PromQL queries, each with a timeout) whenever the UI asks, and posts
:class:`FleetRefreshed` or :class:`FleetFailed`; the handler on the UI thread
updates the screens and only then arms a one-shot event-loop timer for the next
refresh, so refreshes never overlap and a slow Prometheus stretches its own
cycle, never a keypress. When Prometheus is slow or down, the last good data
stays on screen under a banner that says since when, and refreshing goes on.

The host screen asks for its host's history (two range queries) in its own
thread worker: :meth:`FleetApp.request_history` posts :class:`HostHistoryRead`.

Screens that define ``update_fleet(snapshot)`` and ``update_fleet_status(status)``
get every new snapshot and every change of the refresh state.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.worker import get_current_worker

from gputui.core import bugs
from gputui.core.config import Settings
from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.fleet.prom import PrometheusError
from gputui.core.fleet.queries import FleetReader, HostHistory
from gputui.core.fleet.summary import read_summary
from gputui.core.record import replace
from gputui.ui.fleet_status import FleetAppState, FleetStatus

#: Seconds between checks, while a refresh runs, of whether Prometheus is slow.
WATCHDOG_TICK = 1.0


class FleetRefreshed(Message, bubble=False):
    def __init__(self, snapshot: FleetSnapshot, duration: float) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.duration = duration

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FleetRefreshed)


class FleetFailed(Message, bubble=False):
    def __init__(self, error: str, duration: float) -> None:
        super().__init__()
        self.error = error
        self.duration = duration


class HostHistoryRead(Message, bubble=False):
    def __init__(self, history: HostHistory | None, error: str | None) -> None:
        super().__init__()
        self.history = history
        self.error = error


class FleetApp(App[int]):
    """The fleet screen and the host screens it opens."""

    CSS_PATH = "gputui.tcss"
    TITLE = "gputui fleet"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="quit-ctrl-c")]

    def __init__(self, reader: FleetReader, settings: Settings, *, live: bool = True) -> None:
        super().__init__()
        self.reader = reader
        self.settings = settings
        self.live = live
        self.snapshot: FleetSnapshot | None = None
        self.status = FleetStatus(prometheus=reader.client.url, interval=settings.interval)
        self._wanted = threading.Event()
        self._thread_started = False
        self._refreshing = False
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._closing = False
        #: a refresh was asked for while one ran: the next starts as soon as it ends
        self._again = False
        #: gc.freeze() after the first refresh on screen (run_fleet_app sets it, as run_app does for the
        #: dashboard; an app made by a test does not freeze, so its objects can still be collected)
        self.freeze_gc = False

    def get_driver_class(self):
        """The dashboard's quiet Linux driver (no input-thread wake-ups while no key comes)."""
        from textual.drivers.linux_driver import LinuxDriver

        driver = super().get_driver_class()
        if driver is LinuxDriver:
            from gputui.ui.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return driver

    def get_default_screen(self) -> Screen:
        from gputui.ui.screens.fleet import FleetScreen

        return FleetScreen()

    def on_mount(self) -> None:
        self.theme = self.settings.theme
        self._start_refresh()

    def on_unmount(self) -> None:
        self._closing = True
        self._wanted.set()
        for handle in (self._timer, self._watchdog):
            if handle is not None:
                handle.cancel()
        self.reader.close()

    # -- refresh cycle ---------------------------------------------------------------
    def _start_refresh(self) -> None:
        if self._closing or self._refreshing:
            return
        self._timer = None
        self._refreshing = True
        self._started = time.monotonic()
        self._watchdog = asyncio.get_running_loop().call_later(WATCHDOG_TICK, self._check_slow)
        if not self._thread_started:
            self._thread_started = True
            self._refresh_loop()
        self._wanted.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet", description="read the fleet")
    def _refresh_loop(self) -> None:
        worker = get_current_worker()
        while True:
            if not self._wanted.wait(5.0):
                if worker.is_cancelled or self._closing:
                    return
                continue
            self._wanted.clear()
            if worker.is_cancelled or self._closing:
                return
            started = time.monotonic()
            try:
                snapshot = self.reader.read()
            except PrometheusError as exc:
                message: Message = FleetFailed(str(exc), time.monotonic() - started)
            except Exception as exc:  # a bug must not stop refreshing: one sentence (logged), keep going
                message = FleetFailed(bugs.describe(exc, "Reading the fleet failed", "reading the fleet"),
                                      time.monotonic() - started)
            else:
                message = FleetRefreshed(snapshot, time.monotonic() - started)
            if not worker.is_cancelled and not self._closing:
                self.post_message(message)

    def now(self) -> float:
        """The wall clock the screens show ages by: the reader's (injected in tests and screenshots)."""
        return self.reader.clock()

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.snapshot = message.snapshot
        self._set_status(last_ok=self.now(), error=None, slow_for=None, refreshes=self.status.refreshes + 1)
        for screen in self.screen_stack:
            update = getattr(screen, "update_fleet", None)
            if update is not None:
                update(message.snapshot)
        if self.freeze_gc:
            self.freeze_gc = False
            # The app, its screens, widgets and imports and the 2,000 rows' cells live as long as the
            # process: keep them out of the collector's full passes, which rescanned them every few
            # refreshes (each refresh's decoded answers allocate enough to start one).
            gc.collect()
            gc.freeze()
        self._done(message.duration)

    def on_fleet_failed(self, message: FleetFailed) -> None:
        self._set_status(error=message.error, slow_for=None, refreshes=self.status.refreshes + 1)
        self._done(message.duration)

    def _done(self, duration: float) -> None:
        self._refreshing = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._closing or not self.live:
            return
        delay = 0.05 if self._again else max(0.05, self.settings.interval - duration)
        self._again = False
        self._timer = asyncio.get_running_loop().call_later(delay, self._start_refresh)

    def _check_slow(self) -> None:
        self._watchdog = None
        if not self._refreshing or self._closing:
            return
        self._watchdog = asyncio.get_running_loop().call_later(WATCHDOG_TICK, self._check_slow)
        running = time.monotonic() - self._started
        if running >= max(2.0, 2 * self.settings.interval):
            self._set_status(slow_for=running)

    def refresh_now(self) -> None:
        """Refresh as soon as possible (the `R` key)."""
        if self._refreshing:
            self._again = True
            return
        if self._timer is not None:
            self._timer.cancel()
        self._start_refresh()

    def follow_host(self, key: tuple[str, str] | None) -> None:
        """Read every series of this host from now on (its screen is open), or of none."""
        if self.reader.detail != key:
            self.reader.detail = key
            if key is not None:
                self.refresh_now()

    def want_words(self, wanted: bool) -> None:
        """Read the processes' names while the `/` filter is in use (it matches users, containers…)."""
        if self.reader.words != wanted:
            self.reader.words = wanted
            if wanted:
                self.refresh_now()

    def _set_status(self, **changes) -> None:
        status = replace(self.status, **changes)
        if status == self.status:
            return
        self.status = status
        for screen in self.screen_stack:
            update = getattr(screen, "update_fleet_status", None)
            if update is not None:
                update(status)

    # -- one host's history -------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="host-history", description="read a host's history")
    def request_history(self, host: FleetHost) -> None:
        worker = get_current_worker()
        try:
            history: HostHistory | None = self.reader.host_history(host)
            error = None
        except PrometheusError as exc:
            history, error = None, str(exc)
        except Exception as exc:  # the screen says it instead of a traceback
            history, error = None, f"Reading the host's history failed: {exc}."
        if not worker.is_cancelled and not self._closing:
            self.post_message(HostHistoryRead(history, error))

    def on_host_history_read(self, message: HostHistoryRead) -> None:
        for screen in self.screen_stack:
            update = getattr(screen, "update_history", None)
            if update is not None:
                update(message.history, message.error)


def make_fleet_app(reader: FleetReader, settings: Settings, *, live: bool = True) -> FleetApp:
    """The one way to build the fleet app (CLI, tests, benchmarks). A live screen reads its
    queries one after the other (latency matters less than CPU when it repeats every interval),
    and per-host aggregates for the list (:mod:`gputui.core.fleet.summary`)."""
    reader.parallel = False
    reader.cache_static = True
    reader.summary = read_summary
    return FleetApp(reader, settings, live=live)


def run_fleet_app(ctx, reader: FleetReader) -> int:
    from gputui.context import UsageError

    app = make_fleet_app(reader, ctx.settings)
    app.freeze_gc = True
    if ctx.settings.theme not in app.available_themes:
        names = ", ".join(sorted(app.available_themes))
        raise UsageError(f"There is no theme {ctx.settings.theme!r}; choose one of: {names}.")
    try:
        with bugs.hold_stderr():  # --debug tracebacks reach stderr once the screen is given back
            app.run()
    finally:
        reader.close()
    return app.return_code or 0


if TYPE_CHECKING:
    def _is_fleet_app_state(app: FleetApp) -> FleetAppState:  # mypy checks that the app keeps the screens' contract
        return app
