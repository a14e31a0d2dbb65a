"""HostProcessSource's steady state: an idle process's facts are handed back without reading (or
the kernel generating) its /proc/PID/stat line while its CPU clock stands still and its parent
lives. Whatever changes must still show on the very next read."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from gputui.core.sources.processes import HostProcessSource


def _until(check, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the process did not get there in time")
        time.sleep(0.01)


class _Clock:
    """The source's clock, moved one poll interval at a time (no orphan re-check or RSS re-read falls due)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def tick(self) -> None:
        self.t += 1.0


@pytest.fixture
def started():
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.functional  # processes of its own
def test_an_idle_process_whose_parent_exits_or_that_is_stopped_shows_it_on_the_next_read(started) -> None:
    # A shell that starts `sleep` in the background and then waits: sleep's parent is the shell.
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; read x"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    started.append(shell)
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    _until(lambda: psutil.Process(pid).name() == "sleep" and psutil.Process(pid).status() == psutil.STATUS_SLEEPING)
    clock = _Clock()
    src = HostProcessSource(clock=clock)
    try:
        first = src.facts([pid])[pid]
        assert first.visible and first.ppid == shell.pid
        clock.tick()
        src.facts([pid])
        clock.tick()
        steady = src.facts([pid])[pid]
        assert steady.ppid == shell.pid and steady.cpu_percent == 0.0 and steady.status == "sleeping"

        shell.kill()  # sleep did not run: it is re-parented all the same
        shell.wait()
        _until(lambda: psutil.Process(pid).ppid() != shell.pid)
        clock.tick()
        after = src.facts([pid])[pid]
        assert after.ppid == psutil.Process(pid).ppid() != shell.pid

        clock.tick()
        src.facts([pid])  # steady again under its new parent
        psutil.Process(pid).send_signal(signal.SIGSTOP)
        _until(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED)
        clock.tick()
        assert src.facts([pid])[pid].status == "stopped"
    finally:
        src.close()
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.functional  # a process of its own
def test_an_idle_process_that_starts_working_shows_its_cpu_on_the_next_read(started) -> None:
    busy = subprocess.Popen(["sh", "-c", "read x; while :; do :; done"], stdin=subprocess.PIPE, text=True)
    started.append(busy)
    clock = _Clock()
    src = HostProcessSource(clock=clock)
    try:
        for _ in range(3):
            idle = src.facts([busy.pid])[busy.pid]
            clock.tick()
        assert idle.cpu_percent == 0.0
        assert busy.stdin is not None
        busy.stdin.write("go\n")
        busy.stdin.flush()
        ticks = psutil.Process(busy.pid).cpu_times()
        _until(lambda: sum(psutil.Process(busy.pid).cpu_times()[:2]) > sum(ticks[:2]) + 0.05)
        working = src.facts([busy.pid])[busy.pid]
        assert working.cpu_percent is not None and working.cpu_percent > 0
        assert working.status in ("running", "sleeping")  # preempted or not: what a user sees is the CPU
    finally:
        src.close()


@pytest.mark.functional  # a process of its own
def test_cpu_used_between_two_close_reads_shows_once_the_process_sleeps_again(started) -> None:
    # Works a fixed amount of CPU when told, then sleeps again (blocked on its next line).
    worker = subprocess.Popen([sys.executable, "-c", "import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
                               "while time.process_time() - t < 0.2:\n    pass\nsys.stdin.readline()\n"],
                              stdin=subprocess.PIPE, text=True)
    started.append(worker)
    _until(lambda: psutil.Process(worker.pid).status() == psutil.STATUS_SLEEPING)
    clock = _Clock()
    src = HostProcessSource(clock=clock)
    try:
        for _ in range(3):
            clock.tick()
            idle = src.facts([worker.pid])[worker.pid]
        assert idle.cpu_percent == 0.0
        assert worker.stdin is not None
        ticks = sum(psutil.Process(worker.pid).cpu_times()[:2])
        worker.stdin.write("go\n")
        worker.stdin.flush()
        _until(lambda: sum(psutil.Process(worker.pid).cpu_times()[:2]) >= ticks + 0.15
               and psutil.Process(worker.pid).status() == psutil.STATUS_SLEEPING)
        # A read too soon after the last for a CPU figure: the work is seen in the stat line, the figure waits.
        clock.t += 0.05
        assert src.facts([worker.pid])[worker.pid].cpu_percent == 0.0
        # The process has not run since: its CPU clock stands still, yet the work is still to be counted.
        clock.tick()
        later = src.facts([worker.pid])[worker.pid]
        assert later.cpu_percent is not None and later.cpu_percent > 0
    finally:
        src.close()
