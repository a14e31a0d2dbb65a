"""The one background reader the container inventory and Slurm's job list are read through."""

import threading

import pytest

from gputui.core.jobs import SlurmWatcher
from gputui.core.model import ContainerInventory
from gputui.core.poller import ContainerWatcher
from gputui.core.sources.background import BackgroundReader
from gputui.core.sources.slurm import SlurmReading

pytestmark = pytest.mark.unit


class _Slow:
    """A source whose next read blocks until the test lets it answer."""

    def __init__(self) -> None:
        self.answers: list[object] = []
        self.go = threading.Event()
        self.entered = threading.Event()

    def next(self) -> object:
        self.entered.set()
        assert self.go.wait(10)
        self.go.clear()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _answer(src: _Slow, value: object) -> None:
    src.entered.clear()
    src.answers.append(value)
    src.go.set()


def test_a_hung_read_reads_as_down_after_the_timeout_and_recovers_when_it_answers():
    now = [100.0]
    src = _Slow()
    reader: BackgroundReader[object] = BackgroundReader(src.next, lambda exc: f"failed: {exc}", name="t-reader",
                                                        period=3600, timeout=5, clock=lambda: now[0])
    assert reader.newest() == (None, False)  # nothing asked yet, nothing hung
    reader.start()
    _answer(src, "first")
    assert reader.newest(wait=10) == ("first", False)
    reader.refresh_now()
    assert src.entered.wait(10)  # the second read is running and does not answer
    now[0] += 4
    assert reader.newest() == ("first", False)  # still within the timeout: the last answer stands
    now[0] += 2
    assert reader.newest() == ("first", True)  # past it: the caller shows the source as down
    _answer(src, RuntimeError("socket closed"))  # a read that raises answers through `failed`
    for _ in range(500):
        if reader.newest()[0] != "first":
            break
        threading.Event().wait(0.01)
    assert reader.newest() == ("failed: socket closed", False)
    reader.refresh_now()
    assert src.entered.wait(10)  # the thread lived on: it reads again
    _answer(src, "back")
    for _ in range(500):
        if reader.newest()[0] == "back":
            break
        threading.Event().wait(0.01)
    assert reader.newest() == ("back", False)
    reader.stop()


class _HungDocker:
    def __init__(self) -> None:
        self.release = threading.Event()

    def inventory(self, uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        assert self.release.wait(10)
        return ContainerInventory(True, None, ())


class _HungSlurm:
    def __init__(self) -> None:
        self.release = threading.Event()

    def read(self, on_pids=None) -> SlurmReading:  # type: ignore[no-untyped-def]
        on_pids({42: ("7", None)})  # slurmd answered; squeue hangs
        assert self.release.wait(10)
        return SlurmReading(True)


def test_both_watchers_word_a_hung_daemon_as_before():
    now = [0.0]
    docker, slurm = _HungDocker(), _HungSlurm()
    containers = ContainerWatcher(docker, period=3600, timeout=5, clock=lambda: now[0])  # type: ignore[arg-type]
    jobs = SlurmWatcher(slurm, period=3600, timeout=5, clock=lambda: now[0])  # type: ignore[arg-type]
    try:
        assert containers.latest() == ContainerInventory(False, "waiting for the Docker daemon")
        containers.set_gpus(("GPU-0",), {0: "GPU-0"})
        first = jobs.latest()
        assert not first.available
        now[0] = 6
        assert containers.latest() == ContainerInventory(False, "the Docker daemon is not responding")
        hung = jobs.latest()
        assert (hung.available, hung.error, hung.pids) == (False, "slurmctld is not responding", {42: ("7", None)})
        docker.release.set()
        slurm.release.set()
        for _ in range(500):
            if containers.latest().available and jobs.latest().available:
                break
            threading.Event().wait(0.01)
        assert containers.latest().available and jobs.latest().available
    finally:
        docker.release.set()
        slurm.release.set()
        containers.stop()
        jobs.stop()
