"""gputui's terminal driver: input that sleeps until a key comes, output that sends only changes.

Output: every write goes through :class:`gputui.ui.output.ScreenDiff`, which
sends the terminal only the cells that changed (see that module). Over ssh this
is most of the bytes of a running dashboard.

Input: Textual's Linux driver reads keys in a thread that wakes ten times a second
(``select`` with a 0.1 s timeout) to notice shutdown and to time out a lone
Escape. On an idle dashboard those wake-ups were about a sixth of gputui's whole
CPU use (measured: ~0.15 % of a core of ~0.95 % at 4 GPUs x 3 processes), so
this driver blocks without a timeout instead and is woken by a pipe when the
app stops reading input. It still polls at 0.1 s while the key parser waits for
the rest of an escape sequence, so a lone Escape is delivered as promptly as
before.

Everything else (terminal modes, mouse, resize, the writer thread) is Textual's
own driver. ``GPUTUI_DRIVER=textual`` (or ``driver = "textual"`` in the config
file) runs Textual's driver unchanged.

Textual internals relied on (tests/test_driver.py fails if any changes):
``textual._xterm_parser.XTermParser`` with ``feed``/``tick`` and the
``_timeout_time`` it arms while an escape sequence is incomplete;
``LinuxDriver.run_input_thread``, ``exit_event``, ``fileno``, ``_file``,
``process_message``, ``_debug``; the SIGWINCH handler ``start_application_mode`` installs (ours
runs first, notes that the size must be read again, and calls it) and ``stop_application_mode``
removes; and the output vocabulary of Textual's renderer
(cursor positions, SGR, text, line feeds), which ``ScreenDiff`` models.
"""

from __future__ import annotations

import os
import selectors
import signal
import threading
from codecs import getincrementaldecoder

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

from gputui.ui.output import ScreenDiff

#: Seconds between wake-ups while an escape sequence is incomplete (Textual's own period).
PENDING_POLL = 0.1


class _WakingEvent(threading.Event):
    """The driver's exit event: setting it also wakes the sleeping input thread."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        try:
            os.write(self._wake_fd, b"x")
        except OSError:  # the pipe is full (already woken) or closed: nothing to do
            pass


class QuietLinuxDriver(LinuxDriver):
    """:class:`LinuxDriver` with an input thread that does not poll while idle and output that sends changes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._screen_diff = ScreenDiff(self._terminal_cells())
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._wake_read, False)
        self.exit_event = _WakingEvent(self._wake_write)
        #: The terminal's size as last read, and whether a SIGWINCH is known to announce its next change
        #: (only while application mode's handler is in place: otherwise every write reads it again).
        self._cells = self._screen_diff.width, self._screen_diff.height
        self._cells_watched = False
        self._cells_stale = True
        self._textual_winch: object = None

    def _terminal_cells(self) -> tuple[int, int]:
        try:
            cols, rows = os.get_terminal_size(self._file.fileno() if self._file is not None else self.fileno)
        except (OSError, ValueError):  # not a terminal (tests, pipes): a fixed model size
            return (80, 24)
        return (cols, rows)

    def write(self, data: str) -> None:
        diff = self._screen_diff
        # A terminal may truncate or reflow its cells when resized: a new size forgets them. The size is
        # read again only after a SIGWINCH (a system call per write was ~2 % of the idle dashboard's CPU).
        if self._cells_stale or not self._cells_watched:
            self._cells_stale = False  # before the read: a SIGWINCH during it makes the next write read again
            self._cells = self._terminal_cells()
        diff.resize(self._cells)
        data = diff.feed(data)
        if data:
            super().write(data)

    def _on_winch(self, signum: int, frame: object) -> None:
        """SIGWINCH, before Textual's own handler: the next write reads the size again."""
        self._cells_stale = True
        textual_handler = self._textual_winch
        if callable(textual_handler):
            textual_handler(signum, frame)

    def start_application_mode(self) -> None:
        self._screen_diff.forget()
        self._cells_watched = False
        super().start_application_mode()
        # Textual installs its SIGWINCH handler (it posts the Resize event); ours runs first and chains to it.
        # The kernel sends SIGWINCH on every size change, also when Textual reads sizes in-band instead.
        self._textual_winch = signal.getsignal(signal.SIGWINCH)
        signal.signal(signal.SIGWINCH, self._on_winch)
        self._cells_stale = self._cells_watched = True

    def stop_application_mode(self) -> None:
        self._cells_watched = False  # Textual removes the handler: every write reads the size again
        super().stop_application_mode()

    def run_input_thread(self) -> None:
        # select(), as Textual uses: kqueue does not watch terminals on macOS.
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ, "tty")
        selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def pending() -> bool:
            # The parser arms a deadline while it waits for the rest of an escape sequence.
            return getattr(parser, "_timeout_time", True) is not None

        try:
            while not self.exit_event.is_set():
                for key, _mask in selector.select(PENDING_POLL if pending() else None):
                    if key.data == "wake":
                        self._drain_wake()
                        continue
                    data = decode(os.read(self.fileno, 4096))
                    if data:
                        for event in parser.feed(data):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
            # Input that arrived before the stop is still delivered (as Textual's driver does).
            for key, _mask in selector.select(0):
                if key.data == "tty":
                    data = decode(os.read(self.fileno, 4096), final=True)
                    if data:
                        for event in parser.feed(data):
                            self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
        finally:
            selector.close()
            self._drain_wake()
            try:
                for _event in parser.feed(""):
                    pass
            except Exception:  # an unfinished sequence at shutdown: nothing to deliver
                pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_read, 512):
                pass
        except OSError:  # empty (EAGAIN) or closed
            pass

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
