"""A program on its own pseudo-terminal, for tests that type keys and read every byte it writes."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import termios
import threading
import time


class PtyApp:
    def __init__(self, argv: list[str], env: dict[str, str], size: tuple[int, int] = (120, 40)) -> None:
        pid, fd = os.forkpty()
        if pid == 0:  # the child
            try:
                fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.returncode: int | None = None
        self._data = bytearray()
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                if self.returncode is not None:
                    return
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._data += data
                self._last = time.monotonic()

    def output(self) -> bytes:
        with self._lock:
            return bytes(self._data)

    def resize(self, size: tuple[int, int]) -> None:
        """Resize the terminal (the kernel sends the program SIGWINCH)."""
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))

    def send(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait_for(self, needle: bytes, timeout: float, since: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.output()[since:]:
                return
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} was not written within {timeout} s; the end of the output was:\n"
                             f"{self.output()[-2000:]!r}")

    def wait_quiet(self, quiet: float, timeout: float) -> None:
        """Until nothing was written for ``quiet`` seconds (the frame after a key is complete)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                idle = time.monotonic() - self._last
            if idle >= quiet:
                return
            time.sleep(0.02)

    def wait_for_more(self, nbytes: int, timeout: float) -> None:
        start = len(self.output())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.output()) - start < nbytes:
            time.sleep(0.05)

    def wait_exit(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                return self.returncode
            time.sleep(0.02)
        return None

    def close(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait_exit(5) is None:
                os.kill(self.pid, signal.SIGKILL)
                self.wait_exit(5)
        self._thread.join(timeout=2)
        try:
            os.close(self.fd)
        except OSError:
            pass
