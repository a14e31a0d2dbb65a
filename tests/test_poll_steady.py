"""What a poll reuses from the last one is keyed on what it was built from: a changed input is seen.

The poller keeps a GPU's rows while NVML hands in the same process tuple and every PID's facts are
the same; the history keeps each GPU's rings while that GPU's rows are the same tuple; the stale judge
keeps which rows a finding could apply to. Each test changes one input under everything else held
still (the same objects poll after poll, as the real sources hand them out) and expects to see it."""

import pytest

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.alerts import AlertJudge
from gputui.core.judges.conditions import strict_and_relaxed
from gputui.core.judges.imbalance import trusted_loads
from gputui.core.judges.placement import GpuLoad, gpu_loads
from gputui.core.model import Gpu, GpuReading, ProcessFacts, RawProcess
from gputui.core.poller import Poller
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB, T0, cid, gpu, proc, snapshot


class _Still:
    """One GPU and its process list, handed out as the very same objects until the test changes
    them, and a process source whose facts objects the test sets (the real sources' steady state)."""

    def __init__(self) -> None:
        self.gpu = Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="Test GPU",
                       utilization_gpu=0, memory_used=2 * GIB, memory_total=80 * GIB, temperature=40)
        self.raws = (RawProcess(pid=101, type="compute", gpu_memory=GIB // 4, sm_utilization=0),
                     RawProcess(pid=102, type="compute", gpu_memory=GIB // 4, sm_utilization=0))
        self.facts_by_pid = {pid: ProcessFacts(pid=pid, visible=True, user="alice", uid=1000, command="python x.py",
                                               exe="python", cpu_percent=0.0, host_memory=1 << 20,
                                               create_time=T0 - 60 + pid, ppid=99, status="sleeping",
                                               cgroup="0::/user.slice\n")
                             for pid in (101, 102)}

    def read(self) -> GpuReading:
        return GpuReading("550", "12.4", (self.gpu,), {0: self.raws})

    def facts(self, pids):
        return {pid: self.facts_by_pid[pid] for pid in pids}

    def close(self) -> None:
        pass


def _poller(src: _Still) -> Poller:
    t = iter(range(10**6))
    return Poller(src, src, settings=Settings(), clock=lambda: T0 + next(t), host="test")


def test_a_process_whose_facts_change_under_an_unchanged_nvml_list_shows_them_at_the_next_poll():
    src = _Still()
    poller = _poller(src)
    first = poller.poll()
    assert poller.poll().gpus[0] is first.gpus[0]  # nothing changed: the very same GPU, rows and all
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cpu_percent=75.0, host_memory=9 << 20)
    row = {p.pid: p for p in poller.poll().gpus[0].processes}
    assert row[102].cpu_percent == 75.0 and row[102].host_memory == 9 << 20
    assert row[101].cpu_percent == 0.0
    src.facts_by_pid[101] = replace(src.facts_by_pid[101], user="bob")
    assert {p.pid: p.user for p in poller.poll().gpus[0].processes} == {101: "bob", 102: "alice"}


def test_new_nvml_figures_with_the_same_facts_show_at_the_next_poll():
    src = _Still()
    poller = _poller(src)
    poller.poll()
    poller.poll()
    src.raws = (replace(src.raws[0], sm_utilization=90, gpu_memory=GIB), src.raws[1])
    row = {p.pid: p for p in poller.poll().gpus[0].processes}
    assert (row[101].sm_utilization, row[101].gpu_memory) == (90, GIB)
    assert row[102].sm_utilization == 0


def zombie_judged_at_once(src, poller) -> None:
    """Three quiet polls of ``src`` (PIDs 101 and 102, ``facts_by_pid``), then 101 turns zombie: stale that poll."""
    for _ in range(3):
        assert all(not p.stale for p in poller.poll().gpus[0].processes)
    src.facts_by_pid[101] = replace(src.facts_by_pid[101], status="zombie")
    stale = {p.pid: [f.kind for f in p.stale] for p in poller.poll().gpus[0].processes}
    assert stale == {101: ["zombie"], 102: []}


def test_a_process_that_turns_zombie_under_an_unchanged_nvml_list_is_judged_stale_at_once():
    src = _Still()
    zombie_judged_at_once(src, _poller(src))


def test_a_gpu_whose_reading_changes_with_the_same_processes_shows_the_new_reading_and_the_rows():
    src = _Still()
    poller = _poller(src)
    poller.poll()
    src.gpu = replace(src.gpu, temperature=83)
    g = poller.poll().gpus[0]
    assert g.temperature == 83 and [p.pid for p in g.processes] == [101, 102]


def test_history_records_each_polls_figures_whether_a_gpu_hands_in_the_same_rows_or_new_ones():
    a, b = proc(11, 0, sm=0, cpu=0.0), proc(12, 0, sm=5, cpu=1.0)
    rows = gpu(0, procs=[a, b])
    h = History()
    h.add(snapshot(T0, [rows]))
    h.add(snapshot(T0 + 1, [rows]))  # the very same GPU and tuple: the steady state
    h.add(snapshot(T0 + 2, [gpu(0, procs=[replace(a, sm_utilization=80, cpu_percent=40.0), b])]))
    h.add(snapshot(T0 + 3, [rows]))
    key_a = (0, a.pid, a.create_time)
    assert [(s.sm_utilization, s.cpu_percent) for s in h.process(key_a)] == [(0, 0.0), (0, 0.0), (80, 40.0), (0, 0.0)]
    assert [s.sm_utilization for s in h.process((0, b.pid, b.create_time))] == [5, 5, 5, 5]


def test_history_forgets_the_processes_of_a_gpu_that_left_the_snapshot_while_the_others_stood_still():
    a, b = proc(11, 0), proc(21, 1)
    g0, g1 = gpu(0, procs=[a]), gpu(1, procs=[b])
    h = History()
    h.add(snapshot(T0, [g0, g1]))
    h.add(snapshot(T0 + 1, [g0, g1]))
    h.add(snapshot(T0 + 2, [g0]))  # GPU 1 is no longer listed; GPU 0 hands in the same rows
    key_a, key_b = (0, a.pid, a.create_time), (1, b.pid, b.create_time)
    assert h.process(key_b) == () and h.first_seen(key_b) is None
    assert len(h.process(key_a)) == 3
    h.add(snapshot(T0 + 3, [g0, g1]))  # back: a new observation
    assert len(h.process(key_b)) == 1 and h.first_seen(key_b) == T0 + 3


def test_history_drops_a_departed_process_when_another_gpu_stood_still():
    a, b, c = proc(11, 0), proc(21, 1), proc(22, 1)
    g0 = gpu(0, procs=[a])
    h = History()
    h.add(snapshot(T0, [g0, gpu(1, procs=[b, c])]))
    h.add(snapshot(T0 + 1, [g0, gpu(1, procs=[b])]))
    assert h.process((1, c.pid, c.create_time)) == ()
    h.add(snapshot(T0 + 2, [g0, gpu(1, procs=[b])]))
    assert len(h.process((0, a.pid, a.create_time))) == 3 and len(h.process((1, b.pid, b.create_time))) == 3


def _alert_kinds(snap) -> list[str]:
    return sorted(a.kind for a in snap.alerts if a.gpu == 0)


@pytest.mark.parametrize(("change", "kind"), [
    ({"temperature": 95}, "temperature"),
    ({"throttle_reasons": ("hw_thermal_slowdown",)}, "throttle"),
    ({"memory_used": 79 * GIB}, "memory-full"),
    ({"memory_total": 2 * GIB + GIB // 20}, "memory-full"),
    ({"lost": True}, "lost"),
], ids=["temperature", "throttle", "memory-used", "memory-total", "lost"])
def test_an_alert_input_that_changes_on_a_quiet_gpu_raises_its_alert(change, kind):
    """A GPU with every alert idle is not judged again while what the verdicts read is the same:
    each input, changed alone, must still raise its alert."""
    src = _Still()
    poller = _poller(src)
    for _ in range(3):
        assert _alert_kinds(poller.poll()) == []
    src.gpu = replace(src.gpu, **change)
    assert kind in _alert_kinds(poller.poll())


def test_a_busy_gpu_whose_processes_leave_turns_suspect_on_a_quiet_gpu():
    src = _Still()
    src.gpu = replace(src.gpu, utilization_gpu=100, memory_used=GIB // 2)
    poller = _poller(src)
    for _ in range(3):
        assert _alert_kinds(poller.poll()) == []
    src.raws = ()
    assert _alert_kinds(poller.poll()) == ["suspect"]


def test_a_threshold_changed_between_polls_is_judged_on_a_quiet_gpu():
    judge = AlertJudge(Settings())
    h = History()
    g = gpu(0, temp=80)
    for t in range(3):
        snap = snapshot(T0 + t, [g])
        h.add(snap)
        assert judge.update(h, snap) == ()
    judge.settings = replace(judge.settings, temp_warning=75)
    snap = snapshot(T0 + 3, [g])
    h.add(snap)
    assert [a.kind for a in judge.update(h, snap)] == ["temperature"]


def test_an_idle_gpu_without_processes_that_reads_full_load_turns_suspect_on_a_quiet_gpu():
    src = _Still()
    src.gpu, src.raws = replace(src.gpu, utilization_gpu=0, memory_used=GIB // 2), ()
    poller = _poller(src)
    for _ in range(3):
        assert _alert_kinds(poller.poll()) == []
    src.gpu = replace(src.gpu, utilization_gpu=100)
    assert _alert_kinds(poller.poll()) == ["suspect"]


def test_the_trusted_loads_of_one_poll_follow_the_gpus_asked_about_and_the_window():
    """Computed once per poll (the imbalance judge and its alert both ask): another tuple of GPUs or
    another window under the same history is computed afresh."""
    h = History()
    steady = [gpu(0, util=0, procs=[proc(1, 0)]), gpu(1, util=10, procs=[proc(2, 1)])]
    h.add(snapshot(T0, steady))
    now = snapshot(T0 + 30, [gpu(0, util=100, procs=[proc(1, 0)]), steady[1]])
    h.add(now)
    assert trusted_loads(h, now, Settings())[0].util == 50
    assert trusted_loads(h, now, replace(Settings(), imbalance_window=10))[0].util == 100
    broken = snapshot(T0 + 30, [now.gpus[0], gpu(1, util=100, used_gib=0.1)])  # GPU 1 reads broken
    assert set(trusted_loads(h, broken, Settings())) == {0}
    assert set(trusted_loads(h, now, Settings())) == {0, 1}


def test_a_window_load_kept_while_every_figure_is_one_value_follows_each_change():
    """A GPU's windowed load is reused while each figure of its window is all one value: a new value,
    one more sample, a figure that moves alone or the GPU's own identity must each show."""
    h = History()

    def poll(t: int, g=None, **kw):
        g = g if g is not None else gpu(0, **kw)
        h.add(snapshot(T0 + t, [g]))
        return gpu_loads(h, (g,), 60.0)[0]

    for t in range(4):
        load = poll(t, util=50, used_gib=8, total_gib=80)
    assert (load.util, load.memory, load.samples, load.free) == (50, 10, 4, 72 * GIB)
    assert poll(4, util=50, used_gib=8, total_gib=80).samples == 5
    load = poll(5, util=100, used_gib=8, total_gib=80)
    assert load.util == (5 * 50 + 100) / 6
    h = History()
    for t in range(4):
        load = poll(t, util=50, used_gib=8, total_gib=80)
    load = poll(4, util=50, used_gib=40, total_gib=80)
    assert load.memory == (4 * 10 + 50) / 5 and load.free == 40 * GIB and load.free_min == 40 * GIB
    h = History()
    for t in range(4):
        load = poll(t, util=50, used_gib=8, total_gib=80)
    load = poll(4, util=50, used_gib=16, total_gib=160)  # the same percent used, more free
    assert load.memory == 10 and load.free == 144 * GIB and load.free_min == 72 * GIB
    h = History()
    g = gpu(0, util=50, used_gib=8)
    for t in range(4):
        poll(t, g)
    assert poll(4, replace(g, uuid="GPU-other")).uuid == "GPU-other"


def test_a_short_window_load_follows_each_figure_and_the_sample_count():
    """With a window of three samples a figure becomes all one value again quickly: each new value,
    each figure alone, the count of samples and a window that is not all one value must each show."""
    h = History()

    def poll(t: int, g, asked=None) -> object:
        h.add(snapshot(T0 + t, [g]))
        return gpu_loads(h, (asked or g,), 2.5)[0]

    g = gpu(0, util=50, used_gib=8, total_gib=80)
    for t in range(4):
        load = poll(t, g)
    assert (load.util, load.memory, load.samples) == (50, 10, 3)
    t = 4
    asked = None
    for change, check, keep_asked in (
            ({"utilization_gpu": 70}, lambda x: x.util == 70, False),
            ({"memory_used": 72 * GIB, "memory_total": 144 * GIB},  # more used, the same free
             lambda x: x.memory == 50 and x.free == 72 * GIB, False),
            ({"uuid": "GPU-other"}, lambda x: x.uuid == "GPU-other", False),
            ({"memory_used": 144 * GIB, "memory_total": 288 * GIB},  # the same percent, more free in the window
             lambda x: x.memory == 50 and x.free_min == 144 * GIB, True)):
        asked = g if keep_asked else None  # the GPU asked about as it was: only the window's figures move
        g = replace(g, **change)  # one change at a time, kept
        for _ in range(3):  # three polls: the window is all the new value
            load = poll(t, g, asked)
            t += 1
        assert check(load), change
    # the GPU asked about is not the one sampled: its own free memory, the window's least
    assert poll(t, g, replace(g, memory_used=100 * GIB)).free == 188 * GIB  # of 288
    # 50, 50, 100 then 50, 100, 100: the newest value and the count are those of an earlier window
    for u in (50, 50, 50, 100, 100):
        t += 1
        load = poll(t, replace(g, utilization_gpu=u))
    assert load.util == (50 + 100 + 100) / 3
    # no figure at all: only the count of samples moves
    h = History()
    blank = replace(g, utilization_gpu=None, memory_used=None, memory_total=None)
    assert [poll(t, blank).samples for t in range(3)] == [1, 2, 3]


def _loads(*figures: tuple[float, float]) -> dict:
    return {i: GpuLoad(index=i, uuid=f"GPU-{i}", lost=False, util=u, memory=m, free=GIB, free_min=GIB, samples=1)
            for i, (u, m) in enumerate(figures)}


def conditions(loads: dict, settings: Settings, relax: float = 0.0) -> tuple:
    """(utilization, memory) conditions of ``loads``, ``relax`` points more lenient than ``settings``."""
    stricts, relaxeds = strict_and_relaxed(loads, replace(settings, imbalance_margin=relax))
    return relaxeds if relax else stricts


def test_imbalance_conditions_follow_each_threshold_the_margin_and_the_loads():
    """Each threshold, the margin and the loads, changed alone, change the conditions judged."""
    s = replace(Settings(), util_spread=80)  # high/low alone decide utilization here
    hot = _loads((85, 95), (15, 10))
    assert all(conditions(hot, s))
    assert conditions(hot, replace(s, util_high=90))[0] is None
    assert conditions(hot, replace(s, util_low=10))[0] is None
    assert conditions(hot, replace(s, memory_high=96))[1] is None
    assert conditions(hot, replace(s, memory_low=5))[1] is None
    spread = _loads((70, 10), (5, 10))
    assert conditions(spread, s)[0] is None
    assert conditions(spread, replace(s, util_spread=60))[0] is not None
    near = _loads((75, 10), (25, 10))
    assert conditions(near, s)[0] is None
    assert conditions(near, s, 10.0)[0] is not None
    assert conditions(_loads((75, 10), (15, 10)), s)[0] is None  # another load, the same thresholds
    assert conditions(_loads((85, 10), (15, 10)), s)[0] is not None
    assert conditions(_loads((85, 50), (15, 10)), s)[1] is None
    assert conditions(_loads((85, 95), (15, 10)), s)[1] is not None
    lost = _loads((85, 95), (15, 10))
    lost[1] = replace(lost[1], lost=True)  # the only other GPU is lost: nothing to compare with
    assert conditions(lost, s) == (None, None)
    assert conditions(_loads((85, 95), (15, 10)), s)[0].coldest == 1
    moved = _loads((85, 95), (15, 10))
    moved[1] = replace(moved[1], index=7)  # the same figures on another GPU: the condition names it
    assert conditions(moved, s)[0].coldest == 7
    assert conditions({i: replace(g, samples=2) for i, g in moved.items()}, s)[0].coldest == 7


def test_the_pids_asked_about_follow_a_new_process_tuple_from_the_source():
    src = _Still()
    poller = _poller(src)
    poller.poll()
    poller.poll()  # the same tuple twice: the PIDs asked are the last poll's
    src.facts_by_pid[103] = replace(src.facts_by_pid[102], pid=103, user="carol")
    src.raws = (*src.raws, RawProcess(pid=103, type="compute", gpu_memory=GIB // 4, sm_utilization=0))
    row = {p.pid: p for p in poller.poll().gpus[0].processes}[103]
    assert row.visible and row.user == "carol"


def test_a_row_that_enters_a_container_is_listed_with_it_without_a_container_source():
    src = _Still()
    poller = _poller(src)
    assert poller.poll().containers == () and poller.poll().containers == ()
    docker = cid("trainer")
    src.facts_by_pid[102] = replace(src.facts_by_pid[102], cgroup=f"0::/system.slice/docker-{docker}.scope\n")
    snap = poller.poll()
    assert [c.id for c in snap.containers] == [docker] and snap.containers[0].pids == (102,)
    assert poller.poll().containers == snap.containers  # and on the polls after, while it stays


def test_uuid_problems_kept_for_the_same_cards_follow_each_figure_they_are_found_from():
    from gputui.core.model import MigDevice
    from gputui.core.plausible import uuid_problems

    good = [Gpu(index=i, uuid=f"GPU-{i}", name="Test GPU") for i in range(2)]
    assert uuid_problems(good) == {} and uuid_problems(good) == {}
    assert set(uuid_problems([good[0], replace(good[1], uuid="GPU-0")])) == {0, 1}  # a UUID changed
    assert uuid_problems(good) == {}
    assert set(uuid_problems([good[0], replace(good[1], uuid="")])) == {1}
    assert set(uuid_problems([good[0], replace(good[1], index=5, uuid="")])) == {5}  # the index alone
    assert uuid_problems([good[0], replace(good[1], uuid="", lost=True)]) == {}  # lost: not suspect
    assert set(uuid_problems([good[0], replace(good[1], uuid="")])) == {1}  # the lost flag alone
    a = MigDevice(index=0, uuid="MIG-a", gpu_instance_id=1, compute_instance_id=0, profile="1g.10gb")
    b = replace(a, uuid="MIG-b")
    assert uuid_problems([replace(good[0], mig_devices=(a,)), replace(good[1], mig_devices=(b,))]) == {}
    shared = uuid_problems([replace(good[0], mig_devices=(a,)), replace(good[1], mig_devices=(a,))])
    assert set(shared) == {0, 1}  # a MIG device's UUID alone
    for index in (3, 4):  # a MIG device's index alone
        found = uuid_problems([replace(good[0], mig_devices=(replace(a, index=index),)),
                               replace(good[1], mig_devices=(a,))])
        assert f"0:{index}" in found[0]


def test_a_running_window_load_equals_its_window_read_afresh_poll_after_poll():
    """The running window keeps the utilization's sum and the least free memory as samples come and
    go: after every poll of a long, changing series (whole and fractional utilization, figures
    missing, lost samples) each figure equals the one read from the window's samples afresh."""
    import random

    rnd = random.Random(29)
    h = History()
    window = 7.5
    g = gpu(0, util=50, used_gib=8, total_gib=80)
    for t in range(120):
        util = rnd.choice([None, rnd.randrange(101), rnd.randrange(101), 12.3 if t > 90 else 3])
        used = rnd.choice([None, rnd.randrange(81) * GIB, rnd.randrange(81) * GIB])
        lost = rnd.random() < 0.05
        g = replace(g, utilization_gpu=util, memory_used=used, lost=lost)
        h.add(snapshot(T0 + t, [g]))
        load = gpu_loads(h, (g,), window)[0]
        samples = [s for s in h.gpu_ring(0) if s.t >= T0 + t - window and not s.lost]
        if g.lost or not samples:
            continue
        utils = [float(s.utilization) for s in samples if s.utilization is not None]
        frees = [max(0, s.memory_total - s.memory_used) for s in samples
                 if s.memory_used is not None and s.memory_total is not None]
        assert load.util == (sum(utils) / len(utils) if utils else None), t
        assert load.free_min == (min(frees) if frees else None), t
        assert load.samples == len(samples), t
