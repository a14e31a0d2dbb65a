"""Stale-process kinds on synthetic processes and histories (the real-process checks against the
fake driver are in test_stale_fakenvml.py)."""

from __future__ import annotations

from gputui.core.config import GIB, Settings
from gputui.core.history import History
from gputui.core.judges.stale import judge_stale
from gputui.core.model import ContainerRecord
from gputui.core.record import replace
from tests.fixtures.synthetic import T0, cid, container, gpu, proc, snapshot

S = Settings()


def kinds(findings):
    return [f.kind for f in findings]


def judged(p, history=None, settings=S, containers=(), records=()):
    history = history or History()
    if history.now is None:
        history.add(snapshot(T0, [gpu(p.gpu_index, procs=[p])]))
    return judge_stale(p, history, settings, {c.id: c for c in containers}, {r.id: r for r in records})


def test_a_busy_process_is_fine():
    assert judged(proc(10, 0, 4, sm=60, cpu=90)) == ()


def test_zombie_and_disk_sleep():
    z = judged(proc(11, 0, status="zombie", ppid=10))
    assert kinds(z) == ["zombie"]
    assert "not reaped" in z[0].message and "PID 10" in z[0].message
    d = judged(proc(12, 0, status="disk-sleep"))
    assert kinds(d) == ["zombie"] and "uninterruptible sleep" in d[0].message


def test_orphan_to_init_or_a_subreaper():
    o = judged(proc(13, 0, orphaned=True, ppid=1))
    assert kinds(o) == ["orphan"] and "init (PID 1)" in o[0].message
    sub = judged(proc(14, 0, orphaned=True, ppid=777))
    assert "PID 777, a subreaper" in sub[0].message
    assert judged(proc(15, 0, orphaned=False, ppid=1)) == ()


def test_ghost_says_which_cause_is_likely():
    ns = judged(proc(16, 0, visible=False, invisible_reason="other-namespace", create_time=None))
    assert kinds(ns) == ["ghost"] and "another container's PID namespace" in ns[0].message

    fresh = judged(proc(17, 0, visible=False, invisible_reason="vanished", create_time=None))
    assert kinds(fresh) == ["ghost"] and "just exited" in fresh[0].message

    h = History()
    p = proc(18, 0, visible=False, invisible_reason="vanished", create_time=None)
    for i in range(6):
        h.add(snapshot(T0 + i, [gpu(0, procs=[p])]))
    old = judged(p, h)
    assert "listed PID 18 for 5 s" in old[0].message and "leaked driver context" in old[0].message


def test_exited_paused_and_running_containers():
    for state, words in (("exited", "has exited"), ("paused", "is paused"), ("dead", "is dead"),
                         ("exiting", "is exiting")):
        p = proc(19, 0, 3, container="nb")
        rec = ContainerRecord(id=cid("nb"), name="nb", image=None, state=state)
        f = judged(p, records=[rec])
        assert kinds(f) == ["exited-container"], state
        assert f[0].message == f"Its container nb {words}" + (
            " (its processes are frozen and keep their GPU memory)" if state == "paused" else "") + \
            ", yet this process still holds 3.0 GiB of GPU memory."
    running = ContainerRecord(id=cid("nb"), name="nb", image=None, state="running")
    assert judged(proc(19, 0, 3, container="nb"), records=[running]) == ()
    # Known only as a snapshot container (no record this poll): its state still counts.
    assert kinds(judged(proc(19, 0, 3, container="nb"), containers=[container("nb", (0,), state="exited")])) == [
        "exited-container"]


def _idle_history(p, seconds, dt=10.0, sm=0, cpu=0.0, gpu_util=0, mem_gib=None):
    h = History()
    q = replace(p, sm_utilization=sm, cpu_percent=cpu,
                gpu_memory=p.gpu_memory if mem_gib is None else int(mem_gib * GIB))
    for i in range(int(seconds / dt) + 1):
        h.add(snapshot(T0 + i * dt, [gpu(p.gpu_index, util=gpu_util, procs=[q])]))
    return h, q


def test_idle_holder_needs_the_whole_window_observed():
    p = proc(20, 0, 30, sm=0, cpu=0.0)
    h, q = _idle_history(p, 600)
    f = judged(q, h)
    assert kinds(f) == ["idle-holder"]
    assert f[0].message == "Holds 30.0 GiB of GPU memory with 0% SM and 0% CPU throughout the 10 min observed."
    # Five minutes of the same idleness is not ten.
    h, q = _idle_history(p, 300)
    assert judged(q, h) == ()


def test_idle_holder_respects_memory_sm_and_cpu_limits():
    p = proc(21, 0, 30)
    assert judged(*reversed(_idle_history(p, 600, cpu=0.4))) [0].message.endswith(
        "at most 0.4% CPU throughout the 10 min observed.")
    assert judged(*reversed(_idle_history(p, 600, cpu=5.0))) == ()
    assert judged(*reversed(_idle_history(p, 600, sm=3))) == ()
    assert judged(*reversed(_idle_history(p, 600, mem_gib=0.5))) == ()
    # No per-process SM figure: an idle GPU vouches for it, a busy one does not.
    assert kinds(judged(*reversed(_idle_history(p, 600, sm=None, gpu_util=0)))) == ["idle-holder"]
    assert judged(*reversed(_idle_history(p, 600, sm=None, gpu_util=30))) == ()


def test_one_busy_sample_in_the_window_clears_idle_holder():
    p = proc(22, 0, 8, sm=0, cpu=0.0)
    h = History()
    for i in range(61):
        sm = 40 if i == 30 else 0
        h.add(snapshot(T0 + i * 10, [gpu(0, procs=[replace(p, sm_utilization=sm)])]))
    assert judged(p, h) == ()


def test_short_configured_window_and_threshold():
    s = Settings(idle_window=5.0, idle_holder_memory=2 * GIB)
    p = proc(23, 0, 2, sm=0, cpu=0.0)
    h, q = _idle_history(p, 6, dt=1.0)
    f = judged(q, h, settings=s)
    assert kinds(f) == ["idle-holder"] and "throughout the 5 s observed" in f[0].message


def test_several_reasons_at_once():
    p = proc(24, 0, 5, container="nb", orphaned=True, ppid=1, status="zombie")
    rec = ContainerRecord(id=cid("nb"), name="nb", image=None, state="exited")
    assert kinds(judged(p, records=[rec])) == ["zombie", "orphan", "exited-container"]


def test_poller_attaches_findings_and_json_carries_them(capsys):
    import json

    from gputui.cli import main

    assert main(["snapshot", "--demo", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    procs = {p["pid"]: p for g in doc["gpus"] for p in g["processes"]}
    assert [s["kind"] for s in procs[5388]["stale"]] == ["orphan"]
    assert procs[4101]["stale"] == []
