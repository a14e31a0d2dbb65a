"""A still machine's poll: the GPU source hands in the very same reading, poll after poll.

The real NVML source hands back its last ``GpuReading`` object while nothing it read moved. The
poller then takes the GPUs (with their rows) it built last poll as they are, while the inventory is
the same object and the facts are equal, and judges stale findings only on the GPUs the last
judging found a row a finding could apply to, while the GPUs tuple and the threshold are the same.
The poll's local time keeps its zone for a minute once the zone is the same at both ends.
Each test changes one of those inputs under everything else held still and expects to see it."""

from __future__ import annotations

import calendar
import time
from datetime import datetime, timezone

import pytest

from gputui.core.config import Settings
from gputui.core.model import ContainerInventory, ContainerRecord, Gpu, GpuReading, ProcessFacts, RawProcess
from gputui.core.poller import Poller
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB, T0, cid
from tests.test_poll_rows import _Inventories
from tests.test_poll_steady import zombie_judged_at_once


class _StillReading:
    """One GPU whose reading is the very same object until the test sets another, and a process
    source whose facts objects the test sets (the same objects while it does not)."""

    def __init__(self) -> None:
        gpu = Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="Test GPU",
                  utilization_gpu=0, memory_used=2 * GIB, memory_total=80 * GIB, temperature=40)
        raws = (RawProcess(pid=101, type="compute", gpu_memory=GIB // 4, sm_utilization=0),
                RawProcess(pid=102, type="compute", gpu_memory=GIB // 4, sm_utilization=0))
        self.reading = GpuReading("550", "12.4", (gpu,), {0: raws})
        self.facts_by_pid = {pid: ProcessFacts(pid=pid, visible=True, user="alice", uid=1000, command="python x.py",
                                               exe="python", cpu_percent=0.0, host_memory=1 << 20,
                                               create_time=T0 - 60 + pid, ppid=99, status="sleeping",
                                               cgroup="0::/user.slice\n")
                             for pid in (101, 102)}

    def read(self) -> GpuReading:
        return self.reading

    def facts(self, pids):
        return {pid: self.facts_by_pid[pid] for pid in pids}

    def close(self) -> None:
        pass


def _poller(src: _StillReading, settings: Settings | None = None) -> Poller:
    t = iter(range(10**6))
    return Poller(src, src, settings=settings or Settings(), clock=lambda: T0 + next(t), host="test")


def _rows(poller: Poller) -> dict[int, object]:
    return {p.pid: p for p in poller.poll().gpus[0].processes}


def test_facts_that_change_under_the_very_same_reading_show_at_the_next_poll():
    src = _StillReading()
    poller = _poller(src)
    first = poller.poll()
    assert poller.poll().gpus[0] is first.gpus[0]  # nothing changed: the very same GPU, rows and all
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cpu_percent=75.0, user="bob")
    rows = _rows(poller)
    assert (rows[102].cpu_percent, rows[102].user) == (75.0, "bob")  # type: ignore[attr-defined]
    assert (rows[101].cpu_percent, rows[101].user) == (0.0, "alice")  # type: ignore[attr-defined]


def test_a_new_reading_with_the_same_processes_and_facts_shows_its_figures():
    src = _StillReading()
    poller = _poller(src)
    poller.poll()
    poller.poll()
    gpu = replace(src.reading.gpus[0], temperature=83)
    src.reading = replace(src.reading, gpus=(gpu,))  # the very same process tuples and facts
    g = poller.poll().gpus[0]
    assert g.temperature == 83 and [p.pid for p in g.processes] == [101, 102]


def test_a_container_that_appears_in_the_inventory_is_attributed_under_the_very_same_reading():
    src = _StillReading()
    docker = cid("trainer")
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cgroup=f"0::/system.slice/docker-{docker}.scope\n")
    poller = _poller(src)
    inventories = _Inventories(ContainerInventory(True))
    poller.watcher = inventories  # type: ignore[assignment]
    for _ in range(3):
        assert _rows(poller)[102].container.name is None  # type: ignore[attr-defined]  # the cgroup alone
    inventories.inventory = ContainerInventory(True, containers=(
        ContainerRecord(id=docker, name="trainer", image="pytorch", state="running"),))
    assert _rows(poller)[102].container.name == "trainer"  # type: ignore[attr-defined]


def test_a_process_that_turns_zombie_under_the_very_same_reading_is_judged_stale_at_once():
    src = _StillReading()
    zombie_judged_at_once(src, _poller(src))


def test_an_idle_holder_threshold_lowered_between_still_polls_is_judged_at_once():
    src = _StillReading()
    poller = _poller(src, Settings(idle_window=2.0))
    for _ in range(4):  # each process holds a quarter GiB: under the 1 GiB threshold, nothing to judge
        assert all(not p.stale for p in poller.poll().gpus[0].processes)
    poller.settings = replace(poller.settings, idle_holder_memory=GIB // 8)
    kinds = {p.pid: [f.kind for f in p.stale] for p in poller.poll().gpus[0].processes}
    assert kinds == {101: ["idle-holder"], 102: ["idle-holder"]}


def test_a_row_that_enters_a_container_under_the_very_same_reading_is_listed_with_it():
    src = _StillReading()
    poller = _poller(src)
    assert poller.poll().containers == () and poller.poll().containers == ()
    docker = cid("trainer")
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cgroup=f"0::/system.slice/docker-{docker}.scope\n")
    snap = poller.poll()
    assert [c.id for c in snap.containers] == [docker] and snap.containers[0].pids == (102,)
    assert poller.poll().containers == snap.containers  # and on the polls after, while it stays


def test_pids_that_turn_unseen_under_the_very_same_reading_raise_the_namespace_warning():
    src = _StillReading()
    poller = _poller(src)
    assert poller.poll().warnings == () and poller.poll().warnings == ()
    for pid in (101, 102):
        src.facts_by_pid[pid] = ProcessFacts(pid=pid, visible=False, invisible_reason="other-namespace")
    assert any("--pid=host" in w for w in poller.poll().warnings)
    assert any("--pid=host" in w for w in poller.poll().warnings)  # and while they stay unseen


def test_a_source_error_in_a_new_reading_shows_while_the_facts_stand_still():
    src = _StillReading()
    poller = _poller(src)
    poller.poll()
    poller.poll()
    src.reading = replace(src.reading, errors=("GPU 0: the temperature query failed",))
    assert poller.poll().warnings == ("GPU 0: the temperature query failed",)


#: Central European time by its POSIX rule (no zone file read): summer time from the last Sunday of March,
#: 01:00 UTC, when 02:00 CET becomes 03:00 CEST
_CET = "CET-1CEST,M3.5.0,M10.5.0/3"
_SPRING = calendar.timegm((2026, 3, 29, 1, 0, 0))


#: a zone whose summer time has the winter's offset under another name (what a snapshot's time names)
_RENAMED = "AAA-1BBB-1,M3.5.0,M10.5.0/3"


def _zone(monkeypatch, rule: str):
    monkeypatch.setenv("TZ", rule)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def cet(monkeypatch):
    yield from _zone(monkeypatch, _CET)


@pytest.fixture
def renamed(monkeypatch):
    yield from _zone(monkeypatch, _RENAMED)


def _local(t: float) -> tuple[str, str | None]:
    """What the snapshot's time must say: astimezone() of that moment."""
    stamp = datetime.fromtimestamp(t, tz=timezone.utc).astimezone()
    return stamp.isoformat(), stamp.tzname()


def _clocked_poller(times: list[float]) -> Poller:
    src = _StillReading()
    clock = iter(times)
    return Poller(src, src, settings=Settings(), clock=lambda: next(clock), host="test")


def test_the_snapshot_time_follows_a_summer_time_change_between_polls(cet):
    times = [_SPRING - 90.0 + i for i in range(120)]  # a poll a second across the change
    poller = _clocked_poller(times)
    seen = [(poller.poll().time, t) for t in times]
    assert [(s.isoformat(), s.tzname()) for s, _ in seen] == [_local(t) for _, t in seen]
    assert seen[0][0].tzname() == "CET" and seen[-1][0].tzname() == "CEST"


def test_a_clock_stepped_back_across_a_summer_time_change_shows_the_winter_time(cet):
    times = [_SPRING + 10.0, _SPRING + 11.0, _SPRING - 20.0, _SPRING - 19.0]
    poller = _clocked_poller(times)
    stamps = [poller.poll().time for _ in times]
    assert [(s.isoformat(), s.tzname()) for s in stamps] == [_local(t) for t in times]
    assert [s.tzname() for s in stamps] == ["CEST", "CEST", "CET", "CET"]


def test_the_snapshot_time_follows_a_zone_renamed_at_the_same_offset(renamed):
    times = [_SPRING - 90.0 + i for i in range(120)]
    poller = _clocked_poller(times)
    stamps = [poller.poll().time for _ in times]
    assert [(s.isoformat(), s.tzname()) for s in stamps] == [_local(t) for t in times]
    assert stamps[0].tzname() == "AAA" and stamps[-1].tzname() == "BBB"
