"""The gputui dashboard application, and the contract every screen plugs into.

Build it with :func:`make_app` (the one factory shared by the CLI, the tests, the
screenshots and the benchmarks); the CLI calls :func:`run_app`.

Polling
-------
One thread worker at a time runs ``Poller.poll()`` (blocking NVML, /proc and
Docker calls never touch the event loop) and posts :class:`PollFinished` or
:class:`PollFailed`. The handler on the UI thread updates the screens and only
then arms a one-shot timer for the next poll, so polls never overlap and a slow
source stretches its own cycle, never the UI's. A failing poll shows one
sentence in the status line until a poll succeeds again.

Idle cost: every wake-up of the process costs CPU (~120 us on a small VM, where
the whole idle dashboard uses ~7 ms a second), so an idle second has as
few as possible: the next-poll and slow-poll timers are plain event-loop
handles (a cancelled one never wakes the loop), the poll thread sleeps on its
event, and the terminal's input thread sleeps until a key comes
(:mod:`gputui.ui.driver`). What remains is one poll, one handling and one frame.

Interrupted actions
-------------------
At start (not in ``--demo``, whose server is simulated) a thread worker asks
:func:`gputui.actions.journal.pending_journals` whether an interrupted migration
left a journal. Each one becomes a notification and a status-line warning that
stays until a later check (every 30 s while any is pending) finds it gone, i.e.
until ``gputui migrate --recover`` has run.

Contract with the screens
-------------------------
:mod:`gputui.ui.base` types it: every screen derives from ``GpuScreen`` or
``GpuModal``; after every successful poll the app calls ``update_snapshot`` on
every screen of the stack, and ``update_poll_status`` whenever the polling state
changes (success, failure, slow poll, pause). A screen reads what the app shares
(:class:`~gputui.ui.base.AppState`: ``snapshot``, ``gpu_history``, ``machine``,
``settings``, ``poll_status``, ``alert_recorder``, ``request_poll()``,
``set_paused()``, ``read_history()``) through its typed ``gpu_app`` handle, and
reads ``gpu_app.snapshot`` in ``on_mount`` for its first picture. The live
``History`` is written by the poll thread: read it only through
``read_history``.

The dashboard opens the other screens: ``c`` containers (there ``m`` migrates
the highlighted container), ``!`` alerts, ``m`` migrate (the highlighted
process's container, or the imbalance suggestion, as ``m``/Enter on the
focused banner does), ``k`` kill the highlighted process, ``K`` kill every stale
process the table shows (its GPU and text filters apply), in one confirmation.

``process`` is the :class:`Process` under the table's cursor. ``check_action``
disables (greys in the footer) ``k`` without a highlighted process, ``K``
without a stale process in view, ``m`` without a process or a suggested
container, and every kill and migrate binding in read-only mode.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import Worker, get_current_worker

from gputui.core import bugs
from gputui.core.config import Settings
from gputui.core.errors import clause
from gputui.core.history import GpuSample, History
from gputui.core.judges.alerts import AlertRecorder
from gputui.core.model import Gpu, Snapshot
from gputui.core.poller import Poller
from gputui.ui import keys
from gputui.ui.base import AppState, Listening
from gputui.ui.messages import JournalsChecked, PollFailed, PollFinished
from gputui.ui.safe import markup
from gputui.ui.widgets.status import PollStatus

if TYPE_CHECKING:
    from gputui.core.machine import Machine


T = TypeVar("T")

#: Seconds between journal checks while an interrupted migration is pending.
JOURNAL_RECHECK = 30.0
#: Seconds between checks, while a poll runs, of whether it has run too long.
WATCHDOG_TICK = 1.0


class GpuTuiApp(App[int]):
    """The live dashboard. Owns the poller; screens show what it polls."""

    CSS_PATH = "gputui.tcss"
    TITLE = "gputui"
    SUB_TITLE = "who is on which GPU"

    BINDINGS = [
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="quit-ctrl-c"),
    ]

    def __init__(
        self,
        machine: Machine,
        settings: Settings,
        poller: Poller,
        *,
        live: bool = True,
    ) -> None:
        self.settings = settings  # read by get_driver_class, during Textual's __init__
        super().__init__()
        self.machine = machine
        self.poller = poller
        #: False polls once at start (and on request) and never by timer: frozen screenshots.
        self.live = live
        self.snapshot: Snapshot | None = None
        self.gpu_history: Mapping[int, tuple[GpuSample, ...]] = {}
        self._graphs_at = 0.0
        self.poll_status = PollStatus(
            interval=settings.interval,
            read_only=settings.read_only,
            containers_enabled=machine.containers is not None,
        )
        #: Alert events of this session (the alerts screen lists them); appended to
        #: $XDG_STATE_HOME/gputui/alerts.jsonl, except for the simulated demo server.
        self.alert_recorder = AlertRecorder(path=False if machine.demo is not None else None)
        #: Polls completed (success or failure); tests wait on it.
        self.polls_done = 0
        #: gc.freeze() after the first poll on screen (run_app sets it; an app made by a test does not
        #: freeze, so its objects can still be collected after it).
        self.freeze_gc = False
        self._polling = False
        self._repoll = False
        self._poll_started = 0.0
        #: The next poll (an event-loop timer: see ``_start_poll``).
        self._timer: asyncio.TimerHandle | None = None
        #: Armed while a poll runs, to report a hung source.
        self._watchdog: asyncio.TimerHandle | None = None
        #: Set by the UI to ask the poll thread for one poll.
        self._poll_wanted = threading.Event()
        self._poll_thread: Worker[None] | None = None
        #: Held by the worker while it polls; closing the poller waits for it.
        self._poll_lock = threading.Lock()
        self._closing = False

    @property
    def current_theme(self) -> Theme:
        """Textual's answer without its copy of every registered theme: Textual asks for every line
        of every frame (its ANSI theme), and the copies were ~4 % of a churning dashboard's CPU. Read
        afresh each time (no cache): a theme switch or a re-registered theme shows at once."""
        theme = self._registered_themes.get(self.theme)
        return theme if theme is not None else super().current_theme

    # -- start and stop -----------------------------------------------------------
    def get_driver_class(self):
        """Textual's Linux driver, but with an input thread that sleeps while no key comes.

        and output that sends only the cells that changed (see :mod:`gputui.ui.driver`).
        Any other driver (Windows, ``TEXTUAL_DRIVER``) is kept, and ``driver = "textual"``
        (``GPUTUI_DRIVER=textual``) keeps Textual's own.
        """
        from textual.drivers.linux_driver import LinuxDriver

        driver = super().get_driver_class()
        if driver is LinuxDriver and self.settings.driver == "gputui":
            from gputui.ui.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return driver

    def get_default_screen(self) -> Screen:
        from gputui.ui.screens.dashboard import DashboardScreen

        return DashboardScreen()

    def on_mount(self) -> None:
        if self.settings.keymap:  # [keymap] in the config (ids checked by run_app)
            self.set_keymap(dict(self.settings.keymap))
        self.theme = self.settings.theme
        if self.settings.slow_link:
            self.add_class("-slow-link")  # gputui.tcss: one colour per graph
        self._start_poll()
        if self.machine.demo is None:
            self._check_journals()

    # -- journals of interrupted actions ------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="journals",
          description="look for interrupted migrations")
    def _check_journals(self) -> None:
        """Reads the state directory (file I/O and flock probes): never on the event loop."""
        from gputui.actions.journal import pending_journals

        try:
            found = pending_journals("migrate")
            sentences = tuple(p.describe() for p in found[:3])  # a folder of junk is one line, not thousands
            if len(found) > 3:
                sentences += (f"{len(found) - 3} more interrupted migrations; run 'gputui migrate --recover'.",)
        except Exception as exc:  # an unreadable state directory (one sentence), or a bug (logged)
            sentences = (bugs.describe(exc, "Could not look for interrupted migrations",
                                       "looking for interrupted migrations"),)
        if not self._closing:
            self.post_message(JournalsChecked(sentences))

    def on_journals_checked(self, message: JournalsChecked) -> None:
        new = [s for s in message.sentences if s not in self.poll_status.journals]
        self._set_status(journals=message.sentences)
        for sentence in new:
            self.notify(markup(sentence), title="Interrupted migration", severity="warning", timeout=20)
        if message.sentences and not self._closing:
            # Keep looking, so the warning goes away once `gputui migrate --recover` has run.
            self.set_timer(JOURNAL_RECHECK, self._check_journals)

    def on_unmount(self) -> None:
        self._closing = True
        self._poll_wanted.set()  # wake the poll thread so it ends
        for timer in (self._timer, self._watchdog):
            if timer is not None:
                timer.cancel()
        # A poll in flight finishes first (NVML must not be shut down under a read).
        if self._poll_lock.acquire(timeout=2.0):
            try:
                self.poller.close()
            finally:
                self._poll_lock.release()

    # -- polling ------------------------------------------------------------------
    def _start_poll(self) -> None:
        if self._closing:
            return
        if self._polling:
            self._repoll = True
            return
        self._timer = None
        self._polling = True
        self._poll_started = time.monotonic()
        # Plain event-loop timers, not Textual's: a Textual timer is a task that wakes
        # at every tick even while paused, and each wake-up of an idle process costs
        # (~120 us of CPU on a small VM, a tenth of the idle dashboard's budget). A
        # cancelled handle never wakes the loop.
        self._watchdog = asyncio.get_running_loop().call_later(WATCHDOG_TICK, self._poll_is_slow)
        if self._poll_thread is None:
            self._poll_thread = self._poll_loop()
        self._poll_wanted.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll", description="poll the machine")
    def _poll_loop(self) -> None:
        """The poll thread: one ``poller.poll()`` each time the UI asks, never two at once.

        One long-lived thread worker rather than one worker per poll: a worker's
        start-up (task, thread hand-off, three state messages) cost more CPU than
        the poll itself at 1 Hz. The UI still decides when to poll (a one-shot
        timer armed after the previous poll's message was handled).
        """
        worker = get_current_worker()
        while True:
            # A timeout so a cancelled worker notices even if nobody sets the event.
            if not self._poll_wanted.wait(5.0):
                if worker.is_cancelled or self._closing:
                    return
                continue
            self._poll_wanted.clear()
            if worker.is_cancelled or self._closing:
                return
            self._poll_once(worker)

    def _poll_once(self, worker) -> None:
        started = time.monotonic()
        try:
            with self._poll_lock:
                if self._closing:
                    return
                snapshot = self.poller.poll()
                history = self.poller.history
                gpu_history = {i: history.gpu(i) for i in history.gpu_indices()}
            # Alert events and their log line are written here, off the event loop.
            events = self.alert_recorder.record(snapshot)
            if self.settings.bell and any(e.rings for e in events) and not worker.is_cancelled:
                self.call_from_thread(self.bell)
        except Exception as exc:  # a source failure, or a bug (logged): a status-line sentence
            if not worker.is_cancelled:
                self.post_message(PollFailed(describe_error(exc), time.monotonic() - started))
            return
        if not worker.is_cancelled:
            self.post_message(PollFinished(snapshot, gpu_history, time.monotonic() - started))

    def on_poll_finished(self, message: PollFinished) -> None:
        self.snapshot = message.snapshot
        self._take_history(message.gpu_history)
        self._set_status(last_ok=message.snapshot.time, error=None, slow_for=None)
        for screen in self._listening_screens():
            screen.update_snapshot(message.snapshot)
        if self.freeze_gc:
            self.freeze_gc = False
            # The app, its screens, widgets, styles and imports live as long as the process: keep
            # them out of the collector's full passes, which would rescan them every few polls.
            gc.collect()
            gc.freeze()
        self._poll_done(message.duration)

    def _take_history(self, gpu_history: Mapping[int, tuple[GpuSample, ...]]) -> None:
        """The graphs' samples; with ``slow_link`` they move every ``slow_link_graphs`` seconds only.

        Every moved graph re-sends its cells; the numbers beside the graphs still refresh every poll.
        """
        now = time.monotonic()
        if (self.settings.slow_link and self.gpu_history and gpu_history.keys() == self.gpu_history.keys()
                and now - self._graphs_at < self.settings.slow_link_graphs):
            return
        self.gpu_history = gpu_history
        self._graphs_at = now

    def on_poll_failed(self, message: PollFailed) -> None:
        self._set_status(error=message.error, slow_for=None)
        self._poll_done(message.duration)

    def _poll_done(self, duration: float) -> None:
        self.polls_done += 1
        self._polling = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._closing:
            return
        if self._repoll:
            self._repoll = False
            self._start_poll()
        elif self.live and not self.poll_status.paused:
            # Aim at one poll per interval; a poll slower than that stretches the cycle.
            delay = max(0.05, self.settings.interval - duration)
            self._timer = asyncio.get_running_loop().call_later(delay, self._start_poll)

    def _poll_is_slow(self) -> None:
        """Ticks once a second only while a poll runs; says so once it has run long."""
        self._watchdog = None
        if not self._polling or self._closing:
            return
        self._watchdog = asyncio.get_running_loop().call_later(WATCHDOG_TICK, self._poll_is_slow)
        running = time.monotonic() - self._poll_started
        if running >= max(2.0, 3 * self.settings.interval):
            self._set_status(slow_for=running)

    @property
    def poll_in_flight(self) -> bool:
        """A poll is running in the poll thread."""
        return self._polling

    @property
    def next_poll_armed(self) -> bool:
        """The timer of the next poll is set (never while paused)."""
        return self._timer is not None

    def request_poll(self) -> None:
        """Poll as soon as possible (after an action changed the machine)."""
        if self.poller.watcher is not None:
            self.poller.watcher.refresh_now()
        if self._polling:
            self._repoll = True
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._start_poll()

    def set_paused(self, paused: bool) -> None:
        """Stop or resume polling (the screen stays as it is while paused)."""
        if paused == self.poll_status.paused:
            return
        self._set_status(paused=paused)
        if paused:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        else:
            self.request_poll()

    def _set_status(self, **changes) -> None:
        from gputui.core.record import replace

        status = replace(self.poll_status, **changes)
        if status != self.poll_status:
            self.poll_status = status
            for screen in self._listening_screens():
                screen.update_poll_status(status)

    def _listening_screens(self) -> list[Listening]:
        return [s for s in self.screen_stack if isinstance(s, Listening)]

    def read_history(self, read: Callable[[History | None], T]) -> T:
        """``read(history)`` under the poll lock (the poll thread writes the live History);
        ``read(None)`` when a poll holds the lock for more than two seconds."""
        if self._poll_lock.acquire(timeout=2.0):
            try:
                return read(self.poller.history)
            finally:
                self._poll_lock.release()
        return read(None)

    # -- command palette ----------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, Listening):
            yield from screen.palette_commands()


if TYPE_CHECKING:
    def _is_app_state(app: GpuTuiApp) -> AppState:  # mypy checks that the app keeps the screens' contract
        return app


def describe_error(exc: BaseException) -> str:
    """One sentence for a failed poll: the driver's (or another source's) fault, or a bug in gputui
    (its traceback logged, see :mod:`gputui.core.bugs`)."""
    if bugs.expected(exc):
        return f"Could not read the GPUs: {clause(exc)}. Retrying."
    return bugs.report(exc, "polling the GPUs")


def make_app(
    machine: Machine,
    settings: Settings,
    gpu_filter: Callable[[Gpu], bool] | None = None,
    clock: Callable[[], float] | None = None,
    *,
    live: bool = True,
    container_wait: float | None = None,
) -> GpuTuiApp:
    """The one way to build the dashboard (CLI, tests, screenshots, benchmarks).

    ``container_wait``: how long the first poll waits for the first container
    inventory. The demo answers at once, so it waits (deterministic first
    picture); a real Docker daemon may be slow, so the first frame does not wait.
    """
    if container_wait is None:
        container_wait = 2.0 if machine.demo is not None else 0.0
    poller = machine.poller(settings, gpu_filter=gpu_filter, container_wait=container_wait, clock=clock)
    return GpuTuiApp(machine, settings, poller, live=live)


def run_app(ctx) -> int:
    """Entry point for ``gputui`` with no subcommand: open the machine, run, close.

    Errors that stop the dashboard from starting (no driver, a bad --gpu, an
    unknown theme) are raised as the CLI's exceptions, which print one sentence.
    """
    from gputui.context import UsageError

    machine = ctx.open_machine()
    try:
        gpu_filter = None
        if getattr(ctx.args, "gpu", None):
            gpu_filter = ctx.gpu_filter(machine.gpu.read().gpus)
        app = make_app(machine, ctx.settings, gpu_filter=gpu_filter)
        app.freeze_gc = True
        problem = keys.check_keymap(ctx.settings.keymap)
        if problem is not None:
            raise UsageError(problem)
        if ctx.settings.theme not in app.available_themes:
            names = ", ".join(sorted(app.available_themes))
            raise UsageError(f"There is no theme {ctx.settings.theme!r}; choose one of: {names}.")
        with bugs.hold_stderr():  # --debug tracebacks reach stderr once the screen is given back
            app.run()
        return app.return_code or 0
    finally:
        machine.close()

