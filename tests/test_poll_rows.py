"""A churning poll's rows: every figure moving, each row is still the process's own, with its newest figures.

When NVML hands in a new process list with the same PIDs in the same order (the state of a busy
machine: every process's SM % moves every second), the poller rebuilds each row against the row
at its place in the last poll: a row whose facts object is the one it was built from keeps its
container, and only NVML's figures are copied in. Each test moves one input at a time under that
churn (new NVML entries every poll) and expects to see it; dropping that input from what the
poller compares makes the test fail. The plausibility rule's one-pass check and the Docker status
kept while the inventory says the same are held to the same standard."""

from __future__ import annotations

import math

import pytest

from gputui.core.config import Settings
from gputui.core.model import ContainerInventory, ContainerRecord, Gpu, GpuReading, ProcessFacts, RawProcess
from gputui.core.plausible import LIMITS, plausible_gpu
from gputui.core.poller import Poller
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB, T0, cid


class _Churning:
    """One GPU whose process entries are new objects on every read (NVML's figures moving), and a
    process source whose facts objects the test sets (the same objects while it does not)."""

    def __init__(self, pids: tuple[int, ...] = (101, 102)) -> None:
        self.gpu = Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="Test GPU",
                       utilization_gpu=0, memory_used=2 * GIB, memory_total=80 * GIB, temperature=40)
        self.entries = {pid: {"type": "compute", "gpu_memory": GIB // 4, "sm_utilization": 0, "mig_device": None}
                        for pid in pids}
        self.order = list(pids)
        self.facts_by_pid: dict[int, ProcessFacts] = {
            pid: ProcessFacts(pid=pid, visible=True, user="alice", uid=1000, command=f"python job{pid}.py",
                              exe="python", cpu_percent=0.0, host_memory=1 << 20, create_time=T0 - 60 + pid,
                              ppid=99, status="sleeping", cgroup="0::/user.slice\n")
            for pid in pids}

    def read(self) -> GpuReading:
        raws = tuple(RawProcess(pid=pid, **self.entries[pid]) for pid in self.order)  # type: ignore[arg-type]
        return GpuReading("550", "12.4", (self.gpu,), {0: raws})

    def facts(self, pids):
        return {pid: self.facts_by_pid[pid] for pid in pids if pid in self.facts_by_pid}

    def close(self) -> None:
        pass


class _Inventories:
    """Stands in for the container watcher: hands out the inventory the test sets, the same object
    until it sets another (as the watcher does between refreshes)."""

    def __init__(self, inventory: ContainerInventory) -> None:
        self.inventory = inventory

    def set_gpus(self, uuids, minors) -> None:
        pass

    def latest(self, wait: float = 0.0) -> ContainerInventory:
        return self.inventory

    def stop(self) -> None:
        pass


def _poller(src: _Churning) -> Poller:
    t = iter(range(10**6))
    return Poller(src, src, settings=Settings(), clock=lambda: T0 + next(t), host="test")


def _rows(poller: Poller) -> dict[int, tuple]:
    return {p.pid: (p.type, p.gpu_memory, p.sm_utilization, p.mig_device, p.user, p.cpu_percent, p.command,
                    p.container.id if p.container else None)
            for p in poller.poll().gpus[0].processes}


@pytest.mark.parametrize(("name", "value"), [("sm_utilization", 77), ("gpu_memory", 3 * GIB),
                                             ("type", "compute+graphics"), ("mig_device", 2)])
def test_each_nvml_figure_of_a_churning_process_shows_at_the_next_poll(name, value):
    src = _Churning()
    poller = _poller(src)
    for _ in range(3):
        before = _rows(poller)  # new entries every poll, equal figures: the rows stay as they are
    src.entries[102][name] = value
    after = _rows(poller)
    field = ("type", "gpu_memory", "sm_utilization", "mig_device").index(name)
    assert after[102][field] == value
    assert after[101] == before[101] and after[102][4:] == before[102][4:]  # nothing else moved


def test_facts_that_change_under_churning_nvml_figures_show_at_the_next_poll():
    src = _Churning()
    poller = _poller(src)
    for tick in range(3):
        src.entries[101]["sm_utilization"] = src.entries[102]["sm_utilization"] = tick * 10
        _rows(poller)
    src.entries[101]["sm_utilization"] = src.entries[102]["sm_utilization"] = 55
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cpu_percent=80.0, user="bob")
    rows = _rows(poller)
    assert rows[102][2] == 55 and rows[102][4:6] == ("bob", 80.0)
    assert rows[101][2] == 55 and rows[101][4:6] == ("alice", 0.0)


def test_a_container_that_appears_in_the_inventory_is_attributed_under_churning_figures():
    src = _Churning()
    docker = cid("trainer")
    # the process's cgroup names a Docker container the daemon does not list yet
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cgroup=f"0::/system.slice/docker-{docker}.scope\n")
    poller = _poller(src)
    inventories = _Inventories(ContainerInventory(True))
    poller.watcher = inventories  # type: ignore[assignment]
    for tick in range(3):
        src.entries[102]["sm_utilization"] = tick
        assert _rows(poller)[102][7] == docker  # attributed from the cgroup alone
    assert poller.poll().gpus[0].processes[1].container.name is None  # type: ignore[union-attr]
    # the daemon lists it now (a new inventory); the process's facts are the very same object
    inventories.inventory = ContainerInventory(True, containers=(
        ContainerRecord(id=docker, name="trainer", image="pytorch", state="running"),))
    src.entries[102]["sm_utilization"] = 42
    row = {p.pid: p for p in poller.poll().gpus[0].processes}[102]
    assert row.sm_utilization == 42 and row.container is not None and row.container.name == "trainer"


def test_processes_that_swap_places_keep_their_own_figures_even_without_facts():
    src = _Churning()
    src.facts_by_pid.clear()  # both vanished: no facts object tells the rows apart
    poller = _poller(src)
    src.entries[101]["sm_utilization"], src.entries[102]["sm_utilization"] = 11, 22
    for _ in range(3):
        rows = _rows(poller)
    assert (rows[101][2], rows[102][2]) == (11, 22)
    src.order.reverse()
    snap = poller.poll()
    assert [(p.pid, p.sm_utilization, p.visible) for p in snap.gpus[0].processes] == [(102, 22, False),
                                                                                      (101, 11, False)]


def test_the_docker_status_follows_the_inventory_each_poll():
    src = _Churning()
    poller = _poller(src)
    inventories = _Inventories(ContainerInventory(False, "waiting for the Docker daemon"))
    poller.watcher = inventories  # type: ignore[assignment]
    assert poller.poll().docker.error == "waiting for the Docker daemon"
    assert poller.poll().docker.error == "waiting for the Docker daemon"
    inventories.inventory = ContainerInventory(False, "the Docker daemon is not responding")
    assert poller.poll().docker.error == "the Docker daemon is not responding"
    inventories.inventory = ContainerInventory(True, None)
    docker = poller.poll().docker
    assert docker.available and docker.error is None
    inventories.inventory = ContainerInventory(False, None)
    assert not poller.poll().docker.available


_GOOD = Gpu(index=0, uuid="GPU-1", name="Test GPU", utilization_gpu=50, utilization_memory=10, memory_used=GIB,
            memory_total=80 * GIB, temperature=60, power_draw=300.0, power_limit=700.0, fan_speed=40, clock_sm=1500,
            clock_memory=2600, clock_sm_max=1980, clock_memory_max=2619, pstate=0, ecc_errors=0,
            memory_reserved=GIB // 2, memory_temperature=70, total_energy_consumption=10**9, pcie_replay_counter=0,
            encoder_utilization=0, decoder_utilization=0, remapped_rows_correctable=0, remapped_rows_uncorrectable=0,
            xid_last=0)


@pytest.mark.parametrize("name", sorted(LIMITS))
@pytest.mark.parametrize("how", ["below", "above", "nan"])
def test_each_checked_gpu_field_out_of_range_alone_is_dropped_and_named(name, how):
    low, high, label = LIMITS[name]
    value = {"below": low - 1, "above": high + 1, "nan": math.nan}[how]
    fixed, dropped = plausible_gpu(replace(_GOOD, **{name: value}))
    assert getattr(fixed, name) is None and len(dropped) == 1 and dropped[0].startswith(label)
    assert replace(fixed, **{name: getattr(_GOOD, name)}) == _GOOD  # nothing else touched


def test_a_working_cards_reading_is_kept_as_it_is_and_memory_beyond_the_total_is_dropped():
    assert plausible_gpu(_GOOD) == (_GOOD, [])
    assert plausible_gpu(replace(_GOOD, memory_total=None, memory_used=10**15))[1] == []
    fixed, dropped = plausible_gpu(replace(_GOOD, memory_used=81 * GIB))
    assert fixed.memory_used is None and dropped == [f"memory used ({81 * GIB} bytes of {80 * GIB})"]
    fixed, dropped = plausible_gpu(replace(_GOOD, memory_reserved=81 * GIB))
    assert fixed.memory_reserved is None and dropped == [f"memory reserved ({81 * GIB} bytes of {80 * GIB})"]


def test_a_process_that_enters_a_container_under_churning_figures_is_listed_with_it():
    src = _Churning()
    poller = _poller(src)
    for tick in range(3):
        src.entries[101]["sm_utilization"] = src.entries[102]["sm_utilization"] = tick
        assert poller.poll().containers == ()
    docker = cid("trainer")
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cgroup=f"0::/system.slice/docker-{docker}.scope\n")
    for tick in range(3, 6):  # and on the polls after, while it stays, its figures still moving
        src.entries[101]["sm_utilization"] = src.entries[102]["sm_utilization"] = tick
        snap = poller.poll()
        assert [c.id for c in snap.containers] == [docker] and snap.containers[0].pids == (102,)
        assert {p.pid: p.sm_utilization for p in snap.gpus[0].processes} == {101: tick, 102: tick}


def test_new_but_equal_facts_with_moving_nvml_figures_show_the_new_figures():
    src = _Churning()
    poller = _poller(src)
    for _ in range(3):
        _rows(poller)
    # the source hands in a new facts object saying the same (it re-read the process), as the figures move
    src.facts_by_pid[102] = replace(src.facts_by_pid[102])
    src.entries[102]["sm_utilization"] = 64
    rows = _rows(poller)
    assert rows[102][2] == 64 and rows[102][4:6] == ("alice", 0.0) and rows[101][2] == 0
