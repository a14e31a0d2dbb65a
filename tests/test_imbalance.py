"""The imbalance judge over synthetic histories: what flags, what does not, when it clears,
which cause it names and which single move it proposes."""

from __future__ import annotations

import json

import pytest

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.imbalance import assess
from tests.fixtures.synthetic import Feed, container, gpu, proc, snapshot


def balanced(t, n=4, util=10):
    return [gpu(i, util=util, used_gib=10) for i in range(n)]


def piled(t, hot=95, cold=5, n=4):
    return [gpu(0, util=hot, used_gib=10)] + [gpu(i, util=cold, used_gib=10) for i in range(1, n)]


def flags(snaps):
    return [s.imbalance.flagged for s in snaps]


def test_balanced_machine_is_not_flagged():
    feed = Feed()
    assert not any(flags(feed.run(120, balanced)))


def test_a_spike_does_not_flag():
    feed = Feed()
    feed.run(60, balanced)
    # GPU 0 jumps to 100% for 3 polls while the others idle at 5%: a momentary spike.
    spike = feed.run(3, lambda t: piled(t, hot=100, cold=5))
    after = feed.run(60, balanced)
    assert not any(flags(spike + after))


def test_sustained_imbalance_flags_after_the_window_mean_and_the_hold():
    feed = Feed()
    feed.run(60, balanced)
    snaps = feed.run(120, piled)
    f = flags(snaps)
    assert f[-1] is True
    first = f.index(True)
    # Not before the 60 s mean crossed the line and the condition held 10 s; no flicker after.
    assert first >= 30
    assert all(f[first:])
    imb = snaps[-1].imbalance
    assert imb.kinds == ("utilization",)
    assert imb.message.startswith("GPU 0 at 95% while GPUs 1-3 average 5% over 60 s")


def test_recovery_clears_only_after_the_hysteresis():
    s = Settings()
    relaxed = s.with_overrides(util_high=s.util_high - s.imbalance_margin, util_low=s.util_low + s.imbalance_margin,
                               util_spread=s.util_spread - s.imbalance_margin)
    feed = Feed(s)
    assert feed.run(120, piled)[-1].imbalance.flagged
    flagged, relaxed_holds = [], []
    for _ in range(120):
        snap = feed.step(balanced(0))
        flagged.append(snap.imbalance.flagged)
        relaxed_holds.append(assess(feed.history, snap, relaxed).flagged)
    assert flagged[0] and flagged[10], "a recovery must not clear the flag at once"
    cleared = flagged.index(False)
    assert not any(flagged[cleared:]), "once cleared it stays cleared: no flicker"
    # The 60 s mean drains slowly; the relaxed condition fails some 25 s in, and the flag
    # clears exactly the hold (10 polls at 1 s) after that.
    gone = relaxed_holds.index(False)
    assert gone >= 15
    assert cleared == gone + int(s.imbalance_hold)


def test_hovering_near_the_threshold_neither_flickers_on_nor_off():
    feed = Feed()
    # Alternating 20 s blocks above and below the line: the 60 s mean hovers near 80%.
    def hover(t):
        hot = 84 if int(t) // 5 % 2 else 76
        return [gpu(0, util=hot, used_gib=10)] + [gpu(i, util=22, used_gib=10) for i in range(1, 4)]

    snaps = feed.run(300, hover)
    f = flags(snaps)
    transitions = sum(1 for a, b in zip(f, f[1:], strict=False) if a != b)
    assert transitions <= 1


def test_once_flagged_a_slightly_better_state_keeps_the_flag():
    feed = Feed()
    feed.run(120, piled)
    # 78% vs 22%: fails the strict thresholds (80/20, spread 60), passes the relaxed ones.
    snaps = feed.run(300, lambda t: [gpu(0, util=78, used_gib=10)] + [gpu(i, util=22, used_gib=10)
                                                                          for i in range(1, 4)])
    assert all(flags(snaps))


def test_a_single_sample_is_judged_as_it_is():
    feed = Feed()
    snap = feed.step(piled(0))
    assert snap.imbalance.flagged
    assert "in one sample" in snap.imbalance.message
    assert not Feed().step(balanced(0)).imbalance.flagged


def test_a_short_observation_judges_the_whole_observation():
    # snapshot --window 5: a spike in the first of five samples is diluted, not reported.
    feed = Feed()
    feed.step(piled(0, hot=100))
    snaps = feed.run(4, balanced)
    assert snaps[-1].imbalance.flagged is False


def test_spread_above_the_threshold_flags_without_the_80_20_pattern():
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=75, used_gib=10), gpu(1, util=10, used_gib=10)])
    assert snaps[-1].imbalance.flagged
    assert snaps[-1].imbalance.message.startswith("GPU 0 at 75% while GPU 1 is at 10%")


def test_memory_imbalance():
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=10, used_gib=8), gpu(1, util=10, used_gib=76),
                                    gpu(2, util=10, used_gib=4)])
    imb = snaps[-1].imbalance
    assert imb.kinds == ("memory",)
    assert imb.message.startswith("GPU 1's memory is 95% used while GPUs 0, 2 average 8% over 29 s")


def test_lost_and_unreported_gpus_are_left_out():
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=95, used_gib=10), gpu(1, lost=True), gpu(2, util=None)])
    assert not snaps[-1].imbalance.flagged


def _pileup(t, extra_containers=(), gpu3_free_gib=60.0):
    """GPU 0: llama (pinned, 34 GiB), bert (--gpus all, 18 GiB) and a host job; GPU 2 idle but
    nearly full; GPU 3 quiet with room; GPU 1 moderately busy."""
    g0 = [proc(101, 0, 34, sm=50, container="llama"), proc(102, 0, 18, sm=30, container="bert"),
          proc(103, 0, 9, sm=10)]
    gpus = [gpu(0, util=92, procs=g0), gpu(1, util=35, used_gib=20), gpu(2, util=2, used_gib=75),
            gpu(3, util=8, used_gib=80 - gpu3_free_gib)]
    containers = [container("llama", (0,)), container("bert", "all"), *extra_containers]
    return gpus, containers


def test_cause_and_suggestion_move_the_unpinned_container_to_the_quietest_gpu_with_room():
    feed = Feed()
    snaps = feed.run(90, _pileup)
    imb = snaps[-1].imbalance
    assert imb.flagged
    assert ("3 jobs (2 containers) piled on GPU 0; bert has no GPU pinned (--gpus all) and defaulted to GPU 0"
            in imb.message)
    s = imb.suggestion
    assert (s.container, s.pid, s.from_gpu, s.to_gpu) == ("bert", None, 0, 3)
    assert s.reason.startswith("GPU 3 has 60.0 GiB free (bert peaked at 18.0 GiB) and the lowest load")
    # GPU 2 is the least busy (2%) but 94% full: its load (busy + memory used) is the highest.
    assert "GPU 2" not in s.reason
    assert "no GPU pinned" in s.reason
    # The JSON face carries it exactly.
    doc = json.loads(json.dumps(snaps[-1].to_json()))
    assert doc["imbalance"]["suggestion"]["container"] == "bert"
    assert doc["imbalance"]["kinds"] == ["utilization"]


def test_the_target_must_hold_the_movers_observed_peak():
    feed = Feed()
    # bert peaked at 30 GiB a minute ago; GPU 3 has 25 GiB free now: too small.
    def early(t):
        gpus, cs = _pileup(t, gpu3_free_gib=25)
        g0 = gpus[0]
        procs = tuple(p if p.pid != 102 else proc(102, 0, 30, sm=30, container="bert") for p in g0.processes)
        return [gpu(0, util=92, procs=procs)] + gpus[1:], cs

    feed.run(20, early)
    snaps = feed.run(40, lambda t: _pileup(t, gpu3_free_gib=25))
    s = snaps[-1].imbalance.suggestion
    # Neither GPU 3 (25 GiB) nor GPU 2 (5 GiB) holds bert's 30 GiB peak; GPU 1 (60 GiB free) does.
    assert s is not None and s.container == "bert" and s.to_gpu == 1
    assert "bert peaked at 30.0 GiB" in s.reason


def test_a_gpu_granted_to_another_container_is_never_the_target():
    feed = Feed()
    snaps = feed.run(60, lambda t: _pileup(t, extra_containers=[container("reserve", (3,))]))
    s = snaps[-1].imbalance.suggestion
    assert s.to_gpu == 1
    assert "GPU 3 is granted to reserve" in s.reason


def test_pinned_containers_move_most_recent_first_and_kubernetes_stale_and_multi_gpu_never():
    def make(t):
        g0 = [proc(201, 0, 10, sm=30, container="old", create_time=1000.0),
              proc(202, 0, 10, sm=30, container="new", create_time=5000.0),
              proc(203, 0, 10, sm=30, container="pod", runtime="kubernetes", create_time=9000.0),
              proc(204, 0, 10, sm=30, container="stale", create_time=9500.0, orphaned=True, ppid=1),
              proc(205, 0, 10, sm=30, container="wide", create_time=9900.0)]
        gpus = [gpu(0, util=95, procs=g0), gpu(1, util=3, used_gib=1, procs=[proc(206, 1, 0.2, sm=1,
                                                                                  container="wide")]),
                gpu(2, util=40, used_gib=1)]
        cs = [container("old", (0,)), container("new", (0,)), container("pod", (0,), runtime="kubernetes"),
              container("stale", (0,)), container("wide", (0, 1))]
        return gpus, cs

    snaps = Feed().run(30, make)
    assert [f.kind for f in snaps[-1].gpu(0).processes[3].stale] == ["orphan"]  # the poller judged it stale
    s = snaps[-1].imbalance.suggestion
    assert s.container == "new"
    assert "started most recently" in s.reason
    assert "new, old, pod, stale and wide are all granted GPU 0" in snaps[-1].imbalance.message


def test_without_a_movable_container_a_host_process_is_suggested():
    def make(t):
        g0 = [proc(301, 0, 20, sm=60, container="pod", runtime="kubernetes"), proc(302, 0, 6, sm=30)]
        return [gpu(0, util=92, procs=g0), gpu(1, util=2, used_gib=1)], [container("pod", (0,), runtime="kubernetes")]

    s = Feed().run(30, make)[-1].imbalance.suggestion
    assert (s.container, s.pid, s.to_gpu) == (None, 302, 1)
    assert "CUDA_VISIBLE_DEVICES=1" in s.reason


def test_a_job_that_stopped_computing_is_a_mover_until_its_busy_samples_leave_the_window():
    """Moving a job that computes nothing lowers nothing: a job counts as computing while its SM mean
    over the window (60 s) is above zero, so one that went idle is proposed until its last busy
    sample is older than the window, and not after."""
    def make(busy_until: float):
        def gpus(t: float):
            g0 = [proc(301, 0, 20, sm=0), proc(302, 0, 6, sm=40 if t < busy_until else 0)]
            return [gpu(0, util=92, procs=g0), gpu(1, util=2, used_gib=1)]
        return gpus

    feed = Feed()
    switch = feed.t + 30
    snaps = feed.run(30, make(switch)) + feed.run(60, make(switch))  # the last at switch + 59 s
    assert [s.imbalance.suggestion.pid for s in snaps[15:]] == [302] * len(snaps[15:])  # type: ignore[union-attr]
    last = feed.run(1, make(switch))[-1].imbalance
    assert last.flagged and last.suggestion is None
    feed.run(5, make(feed.t + 3))  # busy again for a few polls: a mover again
    assert feed.run(1, make(0))[-1].imbalance.suggestion.pid == 302  # type: ignore[union-attr]


def test_one_job_alone_on_the_hot_gpu_gets_no_suggestion():
    def make(t):
        return [gpu(0, util=97, procs=[proc(401, 0, 40, sm=97, container="big")]), gpu(1, util=1, used_gib=1)], \
            [container("big", (0,))]

    imb = Feed().run(30, make)[-1].imbalance
    assert imb.flagged and imb.suggestion is None
    assert "piled" not in imb.message


def test_an_unpinned_container_on_another_gpu_is_said_to_run_there_not_to_default():
    def make(t):
        g2 = [proc(501, 2, 5, sm=50, container="a"), proc(502, 2, 5, sm=45, container="b")]
        gpus = [gpu(0, util=3, used_gib=1), gpu(1, util=2, used_gib=1), gpu(2, util=97, procs=g2)]
        return gpus, [container("a", "all", grant_source="nvidia_runtime_env"), container("b", (2,))]

    imb = Feed().run(30, make)[-1].imbalance
    assert "a has no GPU pinned (NVIDIA_VISIBLE_DEVICES=all) and runs on GPU 2" in imb.message
    assert imb.suggestion.container == "a"


def test_judge_uses_the_configured_window_and_thresholds():
    s = Settings(imbalance_window=10.0, util_high=60.0, util_low=30.0)
    feed = Feed(s)
    feed.run(60, balanced)
    snaps = feed.run(25, lambda t: piled(t, hot=65, cold=25))
    assert snaps[-1].imbalance.flagged
    assert "over 10 s" in snaps[-1].imbalance.message


def test_assess_without_history_uses_the_snapshot_itself():
    snap = snapshot(0, piled(0))
    assert assess(History(), snap, Settings()).flagged


@pytest.mark.parametrize("argv", [["snapshot", "--demo", "--json", "--no-docker"], ["snapshot", "--demo", "--json"]])
def test_demo_snapshot_json_reports_the_pile_up(argv, capsys):
    from gputui.cli import main

    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    imb = doc["imbalance"]
    assert imb["flagged"] and "utilization" in imb["kinds"]
    assert imb["message"].startswith("GPU 0 at ")
    if "--no-docker" not in argv:
        assert imb["suggestion"]["container"] == "bert-finetune"
        assert imb["suggestion"]["from_gpu"] == 0
        assert "defaulted to GPU 0" in imb["message"]
