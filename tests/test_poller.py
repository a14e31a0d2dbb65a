"""The pipeline every face runs: one poll -> one judged, immutable snapshot."""


import threading
import time

import pytest

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH, DemoMachine
from gputui.core.machine import open_machine
from gputui.core.model import ContainerInventory
from gputui.core.record import FrozenRecordError


def test_poll_builds_an_immutable_snapshot_and_grows_history():
    t = [FROZEN_EPOCH]
    machine = open_machine(demo=True, demo_clock=lambda: t[0])
    poller = machine.poller(Settings(), container_wait=2.0)
    snap = poller.poll()
    with pytest.raises(FrozenRecordError):
        snap.host = "elsewhere"  # type: ignore[misc]
    assert len(snap.gpus) == 8
    assert {p.pid for p in snap.processes} >= {4101, 4201, 4501}
    for _ in range(4):
        t[0] += 1.0
        poller.poll()
    assert len(poller.history.gpu(0)) == 5
    assert poller.history.span == pytest.approx(4.0)
    poller.close()


def test_frozen_demo_is_frozen():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    a = machine.poller(Settings(), container_wait=2.0).poll()
    b = machine.poller(Settings(), container_wait=2.0).poll()
    assert a.to_json() == b.to_json()


def test_demo_load_moves_over_time():
    t = [FROZEN_EPOCH]
    demo = DemoMachine(clock=lambda: t[0])
    series = []
    for _ in range(30):
        series.append(demo.read().gpus[0].utilization_gpu)
        t[0] += 5
    assert len(set(series)) > 3
    assert min(series) >= 80  # GPU 0 stays piled up


class HungContainers:
    """A container source whose daemon never answers."""

    def __init__(self):
        self.release = threading.Event()

    def inventory(self, uuids, minors):
        self.release.wait(30)
        return ContainerInventory(True, None, ())

    def close(self):
        self.release.set()


def test_hung_docker_never_delays_a_gpu_poll():
    demo = DemoMachine()
    hung = HungContainers()
    from gputui.core.poller import Poller

    poller = Poller(demo, demo, hung, settings=Settings(docker_timeout=0.5))
    try:
        started = time.monotonic()
        snap = poller.poll()
        assert time.monotonic() - started < 0.5
        assert len(snap.gpus) == 8 and not snap.docker.available
        time.sleep(0.7)
        started = time.monotonic()
        snap = poller.poll()
        assert time.monotonic() - started < 0.5
        assert snap.docker.error == "the Docker daemon is not responding"
    finally:
        hung.release.set()
        poller.close()


def test_demo_migration_and_kill_act_on_the_simulation():
    t = [FROZEN_EPOCH]
    machine = open_machine(demo=True, demo_clock=lambda: t[0])
    poller = machine.poller(Settings(), container_wait=2.0)
    before = poller.poll()
    assert any(p.pid == 4201 for p in before.gpu(0).processes)
    machine.demo.move_container("bert-finetune", 6)
    machine.demo.kill_process(5388)
    t[0] += 1
    poller.watcher.refresh_now()
    time.sleep(0.2)
    after = poller.poll()
    assert all(p.command is None or "finetune" not in p.command for p in after.gpu(0).processes)
    assert any(p.command and "finetune" in p.command for p in after.gpu(6).processes)
    assert 5388 not in {p.pid for p in after.processes}
    poller.close()


def test_history_forgets_a_process_that_left_and_starts_afresh_when_it_returns():
    """A departed process's samples and first sighting go (the ghost and idle judges count from
    them); one that returns starts a new observation, also when another took its place meanwhile."""
    from gputui.core.history import History
    from tests.fixtures.synthetic import T0, gpu, proc, snapshot

    a, b, c = proc(11, 0), proc(12, 0), proc(13, 0)
    key_a, key_b, key_c = ((0, p.pid, p.create_time) for p in (a, b, c))
    h = History()
    h.add(snapshot(T0, [gpu(0, procs=[a, b])]))
    h.add(snapshot(T0 + 1, [gpu(0, procs=[a, b])]))
    assert len(h.process(key_b)) == 2 and h.first_seen(key_b) == T0
    h.add(snapshot(T0 + 2, [gpu(0, procs=[a, c])]))  # as many processes as before, one of them new
    assert h.process(key_b) == () and h.first_seen(key_b) is None
    assert len(h.process(key_a)) == 3 and h.first_seen(key_c) == T0 + 2
    h.add(snapshot(T0 + 3, [gpu(0, procs=[a])]))
    assert h.process(key_c) == () and h.first_seen(key_c) is None
    h.add(snapshot(T0 + 4, [gpu(0, procs=[a, b])]))
    assert len(h.process(key_b)) == 1 and h.first_seen(key_b) == T0 + 4
