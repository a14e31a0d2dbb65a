"""A slow source read on its own thread: the newest answer, never a wait on the source.

The container inventory (Docker, podman, containerd) and Slurm's job list come from
daemons that can hang for as long as they like. :class:`BackgroundReader` calls such a
read every ``period`` seconds on a daemon thread and keeps its newest answer, so a poll
takes that answer at once; a read still running after ``timeout`` seconds makes the
source count as down (the caller words it) until the read returns. A read that raises
is turned into an answer by ``failed`` and never ends the thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundReader(Generic[T]):
    """Calls ``read()`` every ``period`` seconds (or at once on :meth:`refresh_now`) on a daemon thread."""

    def __init__(self, read: Callable[[], T], failed: Callable[[Exception], T], *, name: str,
                 period: float, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._failed, self._clock = read, failed, clock
        self.name, self.period, self.timeout = name, period, timeout
        self._latest: T | None = None
        self._started_at: float | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._first = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def refresh_now(self) -> None:
        """Read again at once (after an action changed what the source reports)."""
        self._wake.set()

    def newest(self, wait: float = 0.0) -> tuple[T | None, bool]:
        """(the newest answer or None before the first, whether a read has run longer than ``timeout``).

        ``wait`` > 0 waits up to that long for the first answer.
        """
        if wait > 0:
            self._first.wait(wait)
        with self._lock:
            latest, started = self._latest, self._started_at
        return latest, started is not None and self._clock() - started > self.timeout

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._started_at = self._clock()
            try:
                answer = self._read()
            except Exception as exc:  # a source should not raise; never let it kill the thread
                answer = self._failed(exc)
            with self._lock:
                self._latest = answer
                self._started_at = None
            self._first.set()
            self._wake.wait(self.period)
            self._wake.clear()
