"""What the judges keep from one poll to the next is keyed on what it was built from.

The imbalance judge keeps its sentence's parts (all but the span observed), its last verdict and the
imbalance alert's contrasts; each is reused only while everything it read is the same. Each test holds
every input still (the same objects poll after poll, as the poller hands them on) and then changes one,
and expects the change to show at that poll."""

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.alerts import AlertJudge
from gputui.core.judges.imbalance import ImbalanceJudge, assess
from gputui.core.judges.placement import gpu_loads
from gputui.core.model import Container
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB, T0, cid, container, gpu, proc, snapshot, uuid

#: a short window: after 5 s the span observed (and so the sentence) stays the same poll after poll
SHORT = replace(Settings(), imbalance_window=5.0)


class _Judged:
    """A history, the imbalance judge and the alert judge, fed one snapshot per second."""

    def __init__(self, settings: Settings = SHORT) -> None:
        self.history = History()
        self.imbalance = ImbalanceJudge(settings)
        self.alerts = AlertJudge(settings)
        self.t = T0

    def poll(self, gpus, containers=()):
        snap = snapshot(self.t, gpus, containers)
        self.t += 1.0
        self.history.add(snap)
        imb = self.imbalance.update(self.history, snap)
        alerts = self.alerts.update(self.history, snap, imb)
        return imb, next((a for a in alerts if a.kind == "imbalance"), None)

    def still(self, gpus, containers=(), polls=8):
        for _ in range(polls):
            out = self.poll(gpus, containers)
        return out


def _machine(hot_procs=2, hot=95):
    procs = tuple(proc(101 + i, 0, 4, sm=50) for i in range(hot_procs))
    return [gpu(0, util=hot, procs=procs), *(gpu(i, util=5, used_gib=10) for i in (1, 2, 3))]


def test_the_pile_up_follows_a_new_process_on_the_hot_gpu_under_the_same_conditions():
    judged = _Judged()
    gpus = _machine(2)
    imb, _ = judged.still(gpus)
    assert "2 jobs piled on GPU 0" in imb.message
    more = _machine(3)  # the hot GPU's figures as before: the same conditions, another rows tuple
    imb, _ = judged.poll(more)
    assert "3 jobs piled on GPU 0" in imb.message


def test_the_causes_follow_the_containers_under_the_same_rows_and_conditions():
    judged = _Judged()
    gpus = _machine(2)
    alone = (container("alpha", (0,)),)
    imb, _ = judged.still(gpus, alone)
    assert "granted GPU 0" not in imb.message
    pair = (*alone, container("beta", (0,)))  # now two running containers are granted GPU 0
    imb, _ = judged.poll(gpus, pair)
    assert "alpha and beta are both granted GPU 0" in imb.message


def test_the_causes_follow_the_gpus_uuids_where_containers_grant_by_uuid():
    judged = _Judged()
    by_uuid = tuple(Container(id=cid(name), name=name, image="img", state="running", gpus=(uuid(0),),
                              grant_source="device_request", cuda_visible_devices=None, gpu_memory=0, pids=(),
                              findings=(), runtime="docker", granted_gpus=()) for name in ("alpha", "beta"))
    gpus = _machine(2)
    imb, _ = judged.still(gpus, by_uuid)
    assert "alpha and beta are both granted GPU 0" in imb.message
    # GPUs 0 and 1 trade UUIDs (the same processes and figures): the grants now name GPU 1
    swapped = [replace(gpus[0], uuid=uuid(1)), replace(gpus[1], uuid=uuid(0)), *gpus[2:]]
    imb, _ = judged.poll(swapped, by_uuid)
    assert "granted GPU 0" not in imb.message


def test_the_sentence_and_the_alert_follow_the_hot_gpus_figure():
    judged = _Judged()
    imb, alert = judged.still(_machine(2, hot=95))
    assert "GPU 0 at 95%" in imb.message and "GPU 0 at 95%" in alert.message
    imb, alert = judged.still(_machine(2, hot=85), polls=8)  # a full window at 85%
    assert "GPU 0 at 85%" in imb.message and "GPU 0 at 85%" in alert.message


def test_the_verdict_turns_from_provisional_to_held_under_the_same_sentence():
    judged = _Judged(replace(SHORT, imbalance_hold=12.0))  # the hold outlasts the window
    gpus = _machine(2)
    imb, _ = judged.still(gpus, polls=8)
    assert imb.flagged and imb.provisional
    message = imb.message
    imb, _ = judged.still(gpus, polls=8)
    assert imb.message == message and imb.flagged and not imb.provisional


def test_the_suggestion_follows_the_targets_free_memory_under_the_same_sentence():
    judged = _Judged()
    procs = (proc(101, 0, 30, sm=50), proc(102, 0, 4, sm=50))

    def machine(gpu3_used):
        return [gpu(0, util=95, procs=procs), gpu(1, util=5, used_gib=70), gpu(2, util=5, used_gib=70),
                gpu(3, util=5, used_gib=gpu3_used)]

    imb, _ = judged.still(machine(10), polls=12)  # past the hold: no longer provisional
    assert imb.suggestion is not None and imb.suggestion.to_gpu == 3 and not imb.provisional
    message = imb.message
    imb, _ = judged.still(machine(78), polls=8)  # GPU 3 now has 2 GiB free: no room for either job
    assert imb.message == message
    assert imb.suggestion is not None and imb.suggestion.to_gpu == 1  # the next quietest, 10 GiB free



def _sm_of(history, pid, gpu_index=0, create_time=T0 - 100):
    """The SM figures of one process identity's ring, oldest first."""
    return [s.sm_utilization for s in history.process((gpu_index, pid, create_time))]


def _row(pid, sm, gpu_index=0, create_time=T0 - 100):
    return proc(pid, gpu_index, sm=sm, create_time=create_time)  # both PIDs started in the same second


def test_new_rows_of_the_same_identities_feed_each_identitys_own_ring():
    """The history takes a GPU's new rows in at the places of the last poll's while every row's identity
    (GPU, PID, start time) is the one at its place: each identity changed alone is seen."""
    h = History()
    h.add(snapshot(T0, [gpu(0, procs=[_row(101, 1), _row(102, 2)])]))
    h.add(snapshot(T0 + 1, [gpu(0, procs=[_row(101, 11), _row(102, 12)])]))
    assert (_sm_of(h, 101), _sm_of(h, 102)) == ([1, 11], [2, 12])
    h.add(snapshot(T0 + 2, [gpu(0, procs=[_row(102, 22), _row(101, 21)])]))  # the PIDs trade places
    assert (_sm_of(h, 101), _sm_of(h, 102)) == ([1, 11, 21], [2, 12, 22])
    later = T0 + 99.0  # PID 101 again, started anew: another identity
    h.add(snapshot(T0 + 3, [gpu(0, procs=[_row(102, 32), _row(101, 31, create_time=later)])]))
    assert _sm_of(h, 101, create_time=later) == [31] and _sm_of(h, 101) == []
    h.add(snapshot(T0 + 4, [gpu(0, procs=[_row(102, 42), _row(101, 41, gpu_index=1, create_time=later)])]))
    assert _sm_of(h, 101, gpu_index=1, create_time=later) == [41]  # listed under another GPU index
    assert _sm_of(h, 101, create_time=later) == []
    assert _sm_of(h, 102) == [2, 12, 22, 32, 42]


def _bare(pid, sm):
    return proc(pid, 0, 4, sm=sm)


def _hot_machine(rows):
    return [gpu(0, util=95, procs=rows), *(gpu(i, util=5, used_gib=10) for i in (1, 2, 3))]


def test_a_hot_gpu_where_nobody_computes_gets_a_suggestion_once_new_rows_show_a_job_computing():
    judged = _Judged()
    idle = (_bare(101, 0), _bare(102, 0))
    imb, _ = judged.still(_hot_machine(idle))
    assert imb.flagged and imb.suggestion is None  # nobody computes: moving an idle job lowers nothing
    busy = (_bare(101, 0), _bare(102, 60))  # a new tuple: PID 102 computes
    imb, _ = judged.poll(_hot_machine(busy))
    assert imb.suggestion is not None and imb.suggestion.pid == 102


def test_no_mover_kept_for_one_window_is_not_the_answer_for_a_longer_one():
    judged = _Judged()
    judged.still(_hot_machine((_bare(101, 0), _bare(102, 60))), polls=3)
    idle = (_bare(101, 0), _bare(102, 0))
    imb, _ = judged.still(_hot_machine(idle), polls=8)  # PID 102's busy seconds left the 5 s window
    assert imb.suggestion is None
    snap = snapshot(judged.t - 1, _hot_machine(idle))
    longer = assess(judged.history, snap, replace(SHORT, imbalance_window=60.0))  # they are in a 60 s one
    assert longer.suggestion is not None and longer.suggestion.pid == 102


def test_a_job_whose_sm_reading_went_missing_becomes_a_mover_when_its_zeros_leave_the_window():
    judged = _Judged()
    judged.still(_hot_machine((_bare(101, 0), _bare(102, 0))), polls=8)
    unknown = (_bare(101, 0), _bare(102, None))  # no SM figure any more: nothing says it is idle
    imb, _ = judged.still(_hot_machine(unknown), polls=3)
    assert imb.suggestion is None  # its window still holds 0% readings
    imb, _ = judged.still(_hot_machine(unknown), polls=6)
    assert imb.suggestion is not None and imb.suggestion.pid == 102


def test_no_mover_is_not_kept_over_a_window_whose_figures_can_still_rise():
    judged = _Judged()
    judged.poll(_hot_machine((_bare(101, 0), _bare(102, -20))))  # (figures no source hands in; judged alike)
    judged.poll(_hot_machine((_bare(101, 0), _bare(102, 10))))
    idle = (_bare(101, 0), _bare(102, 0))
    imb, _ = judged.still(_hot_machine(idle), polls=4)
    assert imb.suggestion is None  # a mean of -10/6 %: not computing
    imb, _ = judged.poll(_hot_machine(idle))  # -20 left the window, 10 did not: a mean above 0
    assert imb.suggestion is not None and imb.suggestion.pid == 102


def test_a_container_on_the_hot_gpu_that_starts_running_is_moved_under_the_same_rows():
    judged = _Judged()
    rows = (_bare(101, 0), proc(102, 0, 4, sm=60, container="trainer", visible=False))
    exited = (container("trainer", "all", state="exited"),)
    imb, _ = judged.still(_hot_machine(rows), exited)
    assert imb.suggestion is None
    running = (container("trainer", "all"),)
    imb, _ = judged.poll(_hot_machine(rows), running)
    assert imb.suggestion is not None and imb.suggestion.container == "trainer"


def test_a_still_windows_kept_load_follows_the_gpu_it_is_asked_for():
    """A window whose every figure is one value keeps its load; the GPU asked about is read too (its
    newest free memory, and with no sample in the window its own figures): each changed alone is seen."""
    h = History()
    g = gpu(0, util=40, used_gib=20)
    for t in range(5):
        h.add(snapshot(T0 + t, [g]))
    for changed, seen in ((replace(g, memory_used=30 * GIB), ("free", 50 * GIB)),
                          (replace(g, memory_total=90 * GIB), ("free", 70 * GIB)),
                          (replace(g, uuid="GPU-other"), ("uuid", "GPU-other"))):
        assert gpu_loads(h, (g,), 60.0)[0].free == 60 * GIB  # the kept load, made for g
        assert getattr(gpu_loads(h, (changed,), 60.0)[0], seen[0]) == seen[1]
    lost = gpu(1, lost=True)
    for t in range(5, 10):
        h.add(snapshot(T0 + t, [lost]))
    back = replace(g, index=1)  # answers again, not yet in the history: the snapshot is the sample
    assert gpu_loads(h, (back,), 60.0)[1].util == 40
    assert gpu_loads(h, (replace(back, utilization_gpu=70),), 60.0)[1].util == 70
