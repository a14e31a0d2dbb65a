"""Work the judges skip while it cannot change their answer, and what that skip is keyed on.

The stale judge does not read a process's ring while the history is too short for any ring to cover
the idle window (``History.shorter_than``); the imbalance judge and the imbalance alert share one
poll's conditions, kept from poll to poll on the figures they read and the settings. Each test holds
the inputs that would let the skip answer wrongly and expects the answer a full reading gives."""

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.alerts import AlertJudge
from gputui.core.judges.imbalance import ImbalanceJudge
from gputui.core.judges.stale import judge_stale
from gputui.core.record import replace
from tests.fixtures.synthetic import T0, gpu, proc, snapshot

IDLE = proc(20, 0, 30, sm=0, cpu=0.0)
S = Settings()


def _kinds(history: History, p=IDLE, settings=S):
    return [f.kind for f in judge_stale(p, history, settings, {}, {})]


def _fed(times, rows=(IDLE,), capacity=720):
    h = History(capacity=capacity)
    for t in times:
        h.add(snapshot(T0 + t, [gpu(0, procs=list(rows))]))
    return h


def test_a_full_ring_covers_the_idle_window_however_short_the_history():
    # five polls 1 s apart in a five-sample history: the ring is full, which counts as the window
    assert _kinds(_fed(range(5), capacity=5)) == ["idle-holder"]
    assert _kinds(_fed(range(4), capacity=5)) == []


def test_one_identity_listed_twice_fills_its_ring_twice_as_fast():
    # two rows of one process: two samples a poll, so three polls fill a six-sample ring
    h = _fed(range(3), rows=(IDLE, IDLE), capacity=6)
    assert _kinds(h) == ["idle-holder"]


def test_a_clock_that_stepped_back_is_read_sample_by_sample():
    # polls at 100, 0 and 350 s: 250 s apart first to last, yet the ring's first sample and its last
    # step add up to the 600 s window
    assert _kinds(_fed((100, 0, 350))) == ["idle-holder"]


def test_the_window_is_covered_once_half_of_it_plus_a_long_step_has_passed():
    # two polls 300 s apart: observed 300 s plus a 300 s step
    assert _kinds(_fed((0, 300))) == ["idle-holder"]
    assert _kinds(_fed((0, 299))) == []


def _imbalanced():
    return [gpu(0, util=95, procs=[proc(101, 0, 4, sm=50), proc(102, 0, 4, sm=50)]),
            *(gpu(i, util=5, used_gib=10) for i in (1, 2, 3))]


def test_new_settings_under_the_same_figures_judge_again():
    h, t = History(), T0
    short = replace(S, imbalance_window=5.0)
    judge, alerts = ImbalanceJudge(short), AlertJudge(short)
    gpus = _imbalanced()
    for _ in range(15):
        snap = snapshot(t, gpus)
        t += 1.0
        h.add(snap)
        imb = judge.update(h, snap)
    assert imb.flagged and "GPU 0 at 95%" in imb.message
    assert any(a.kind == "imbalance" for a in alerts.update(h, snap, imb))
    # the same figures, thresholds no GPU reaches: nothing is flagged, nor alerted
    lenient = replace(short, util_high=99.0, util_spread=99.0)
    judge2, alerts2 = ImbalanceJudge(lenient), AlertJudge(lenient)
    for _ in range(15):
        snap = snapshot(t, gpus)
        t += 1.0
        h.add(snap)
        imb = judge2.update(h, snap)
        out = alerts2.update(h, snap, imb)
    assert not imb.flagged
    assert not any(a.kind == "imbalance" for a in out)


def test_the_alert_reads_its_own_settings_conditions_in_the_same_poll():
    # the judge and the alert asked in one poll with different settings objects: each its own conditions
    h = History()
    short = replace(S, imbalance_window=5.0)
    lenient = replace(short, util_high=99.0, util_spread=99.0, imbalance_margin=0.0)
    judge, alerts = ImbalanceJudge(short), AlertJudge(lenient)
    gpus, t = _imbalanced(), T0
    for _ in range(15):
        snap = snapshot(t, gpus)
        t += 1.0
        h.add(snap)
        imb = judge.update(h, snap)
        out = alerts.update(h, snap, imb)
    assert imb.flagged
    alert = next(a for a in out if a.kind == "imbalance")
    # no relaxed condition under the lenient thresholds: the alert falls back to the verdict's message
    assert alert.message == imb.message


def test_one_pass_conditions_equal_each_kinds_own_under_every_margin():
    import random

    from gputui.core.judges.conditions import memory_condition, strict_and_relaxed, utilization_condition
    from gputui.core.judges.placement import GpuLoad

    rnd = random.Random(29)
    for _ in range(3000):
        loads = {}
        for i in rnd.sample(range(8), rnd.randint(0, 6)):
            util = rnd.choice([None, rnd.randint(0, 100), rnd.random() * 100, 50.0])
            memory = rnd.choice([None, rnd.randint(0, 100), rnd.random() * 100, 50.0])
            loads[i] = GpuLoad(i, f"GPU-{i}", rnd.random() < 0.1, util, memory, None, None, 3)
        s = replace(S, imbalance_margin=rnd.choice([0.0, 5.0, 10.0, 30.0, -5.0]),
                    util_spread=rnd.choice([60.0, 10.0]), memory_low=rnd.choice([20.0, 60.0]))
        m = s.imbalance_margin
        assert strict_and_relaxed(loads, s) == (
            (utilization_condition(loads, s), memory_condition(loads, s)),
            (utilization_condition(loads, s, m), memory_condition(loads, s, m)))


def _alerted(judge, h, t, gpus):
    snap = snapshot(t, gpus)
    h.add(snap)
    return [a.kind for a in judge.update(h, snap, ImbalanceJudge(judge.settings).update(h, snap))]


def test_a_quiet_machine_is_judged_again_when_one_gpu_is_another_object():
    h, judge = History(), AlertJudge(S)
    gpus = [gpu(i, temp=50) for i in range(4)]
    for k in range(3):
        assert _alerted(judge, h, T0 + k, gpus) == []
    hot = [*gpus[:3], gpu(3, temp=95)]
    assert "temperature" in _alerted(judge, h, T0 + 3, hot)


def test_a_quiet_machine_is_judged_again_with_a_gpu_more():
    h, judge = History(), AlertJudge(S)
    gpus = [gpu(i, temp=50) for i in range(4)]
    for k in range(3):
        assert _alerted(judge, h, T0 + k, gpus) == []
    assert "temperature" in _alerted(judge, h, T0 + 3, [*gpus, gpu(4, temp=95)])


def test_a_quiet_machine_is_judged_again_under_new_settings():
    h, judge = History(), AlertJudge(S)
    gpus = [gpu(i, temp=50) for i in range(4)]
    for k in range(3):
        assert _alerted(judge, h, T0 + k, gpus) == []
    judge.settings = replace(S, temp_warning=40)
    assert "temperature" in _alerted(judge, h, T0 + 3, gpus)


def test_a_gpu_turning_suspect_is_no_evidence_of_an_imbalance():
    # four idle GPUs; then GPU 3 reads 100% busy with no process and no memory (a broken reading): beside
    # the idle others it would be an imbalance, but a card that looks broken is no evidence of one
    h, judge = History(), ImbalanceJudge(replace(S, imbalance_window=5.0))
    calm = [gpu(0, util=10, procs=[proc(101, 0, 4, sm=10)]), gpu(1, util=10, used_gib=10),
            gpu(2, util=10, used_gib=10), gpu(3, util=10, used_gib=10)]
    t = T0
    for _ in range(12):
        snap = snapshot(t, calm)
        t += 1
        h.add(snap)
        assert not judge.update(h, snap).flagged
    broken = [*calm[:3], gpu(3, util=100, used_gib=0.0)]
    for _ in range(30):
        snap = snapshot(t, broken)
        t += 1
        h.add(snap)
        assert not judge.update(h, snap).flagged


def test_a_gpu_added_beside_the_same_ones_is_weighed():
    h, judge = History(), ImbalanceJudge(replace(S, imbalance_window=5.0, imbalance_hold=0.0))
    busy = [gpu(0, util=90, procs=[proc(101, 0, 4, sm=90)]), gpu(1, util=90, procs=[proc(102, 1, 4, sm=90)])]
    t = T0
    for _ in range(8):
        snap = snapshot(t, busy)
        t += 1
        h.add(snap)
        assert not judge.update(h, snap).flagged
    snap = snapshot(t, [*busy, gpu(2, util=5, used_gib=10)])
    h.add(snap)
    assert judge.update(h, snap).flagged


def test_the_memory_mean_follows_the_window_as_it_slides():
    # the memory percentages' sum is kept while samples come in and summed again once some left: the
    # mean is the window's, exactly as sum() adds its values up
    from gputui.core.judges.placement import gpu_loads
    from tests.fixtures.synthetic import GIB

    h, used = History(), [7.3, 13.1, 29.9, 31.7, 37.3, 41.1, 43.9, 47.7, 3.3, 5.9]
    for k, u in enumerate(used):
        snap = snapshot(T0 + k, [gpu(0, util=10 + k, used_gib=u), gpu(1, util=10, used_gib=1)])
        h.add(snap)
        load = gpu_loads(h, snap.gpus, 3.0)[0]
        values = [100.0 * int(x * GIB) / int(80 * GIB) for x in used[max(0, k - 3):k + 1]]
        assert load.memory == sum(values) / len(values)
        assert load.samples == len(values)


def test_the_observation_is_worded_for_each_span_asked():
    from gputui.core.judges.text import over

    assert [over(x) for x in (5.0, 5.0, 6.0, 0.0, 60, 60.0, 3600.0, 0.0)] == [
        "over 5 s", "over 5 s", "over 6 s", "in one sample", "over 60 s", "over 60 s", "over 60 min",
        "in one sample"]
