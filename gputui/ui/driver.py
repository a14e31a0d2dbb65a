"""A terminal driver whose input thread sleeps until there is input.

Textual's Linux driver reads keys in a thread that wakes ten times a second
(``select`` with a 0.1 s timeout) to notice shutdown and to time out a lone
Escape. On an idle dashboard those wake-ups were about a sixth of gputui's whole
CPU use (measured: ~0.15 % of a core of ~0.95 % at 4 GPUs x 3 processes), so
this driver blocks without a timeout instead and is woken by a pipe when the
app stops reading input. It still polls at 0.1 s while the key parser waits for
the rest of an escape sequence, so a lone Escape is delivered as promptly as
before.

Only the input loop differs; everything else (terminal modes, mouse, resize,
output) is Textual's own driver.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

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
    """:class:`LinuxDriver` with an input thread that does not poll while idle."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._wake_read, False)
        self.exit_event = _WakingEvent(self._wake_write)

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
