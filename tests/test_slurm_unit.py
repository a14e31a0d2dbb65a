"""Slurm parsing and joining, in-process: recorded cgroup paths (v1, v2), squeue JSON, listpids."""

from __future__ import annotations

import json
import time

from gputui.core.config import Settings
from gputui.core.jobs import SlurmJoin, SlurmWatcher
from gputui.core.jobs_model import JobRef, SchedulerJob
from gputui.core.model import Gpu, Process, ProcessFacts
from gputui.core.sources.slurm import (
    SlurmNode,
    SlurmReading,
    expand_hostlist,
    job_from_cgroup,
    parse_gres_detail,
    parse_listpids,
    parse_squeue,
)

# /proc/PID/cgroup texts as Slurm 22.05's cgroup plugins leave them
V1 = """12:devices:/slurm_node07/uid_1001/job_4242/step_batch/task_0
11:memory:/slurm_node07/uid_1001/job_4242/step_batch/task_0
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
"""
V1_PLAIN = "4:freezer:/slurm/uid_1001/job_17/step_0\n"
V2 = "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n"
V2_NODE = "0::/system.slice/node07_slurmstepd.scope/job_77/step_extern/user/task_special\n"
DOCKER = "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"
USER_JOB_NAME = "0::/user.slice/user-1001.slice/session-3.scope/job_99/step_0\n"


def test_job_from_cgroup_reads_v1_v2_and_step_extern():
    assert job_from_cgroup(V1) == ("4242", "batch")
    assert job_from_cgroup(V1_PLAIN) == ("17", "0")
    assert job_from_cgroup(V2) == ("123", "0")
    assert job_from_cgroup(V2_NODE) == ("77", "extern")  # pam_slurm_adopt puts ssh sessions here
    assert job_from_cgroup("0::/system.slice/slurmstepd.scope/job_5\n") == ("5", None)


def test_job_from_cgroup_ignores_paths_slurm_did_not_write():
    assert job_from_cgroup(DOCKER) is None
    assert job_from_cgroup(USER_JOB_NAME) is None  # a "job_99" folder outside Slurm's tree
    assert job_from_cgroup("0::/system.slice/slurmstepd.scope/job_12345678901234567890/step_0\n") is None
    assert job_from_cgroup(None) is None and job_from_cgroup("") is None


def test_gres_detail_forms():
    assert parse_gres_detail(["gpu:1(IDX:1)"]) == (1,)
    assert parse_gres_detail(["gpu:a100:3(IDX:0-1,3)"]) == (0, 1, 3)
    assert parse_gres_detail(["gpu:2(S:0-1)(IDX:2-3),mps:0(IDX:N/A)"]) == (2, 3)
    assert parse_gres_detail(["gpu:1(IDX:0)", "gpu:1(IDX:5)"], position=1) == (5,)
    assert parse_gres_detail(["gpu:1(IDX:99999)"]) == ()  # out of range: flagged by omission, never fatal
    assert parse_gres_detail("gpu:1(IDX:1)") == () and parse_gres_detail([]) == ()


def test_hostlists():
    assert expand_hostlist("node[01-03,7],gpu5") == ["node01", "node02", "node03", "node7", "gpu5"]
    assert len(expand_hostlist("n[0-99999999]")) == 4096


SQUEUE = {
    "meta": {}, "errors": [],
    "jobs": [
        {"job_id": 1, "user_name": "gtsl1", "name": "train", "job_state": "RUNNING",
         "gres_detail": ["gpu:1(IDX:0)"], "end_time": 1796141199, "time_limit": 120, "nodes": "vm"},
        {"job_id": 2, "user_name": "gtsl2", "name": "eval\x1b[31m", "job_state": "RUNNING",
         "gres_detail": ["gpu:1(IDX:1)"], "end_time": 1827669999, "time_limit": None, "nodes": "vm"},
        {"job_id": 3, "user_name": "x", "job_state": "RUNNING", "gres_detail": ["gpu:1(IDX:0)"],
         "nodes": "other"},
        {"job_id": "1; rm -rf /", "nodes": "vm"},
        "junk",
    ],
}


def test_parse_squeue_keeps_this_nodes_jobs_and_checks_every_value():
    jobs = parse_squeue(json.dumps(SQUEUE), "vm")
    assert [j.id for j in jobs] == ["1", "2"]  # 22.05 ignores -w with --json: gputui filters
    assert jobs[0] == SchedulerJob(id="1", user="gtsl1", name="train", state="RUNNING", end_time=1796141199,
                                   gres_indices=(0,))
    assert jobs[1].end_time is None  # no time limit
    assert "\x1b" not in (jobs[1].name or "")


def test_listpids():
    text = "PID      JOBID    STEPID   LOCALID GLOBALID\n9462     2        batch    0       0\n" \
           "9463     2        batch    -       -\n777 3 extern - -\nbad line\n"
    assert parse_listpids(text) == {9462: ("2", "batch"), 9463: ("2", "batch"), 777: ("3", "extern")}


def test_job_label():
    assert JobRef(id="123", user="alice", time_left_s=7080).label == "job 123 · alice · 1h58m left"
    assert JobRef(id="5").label == "job 5"


class _Source:
    def __init__(self, reading: SlurmReading) -> None:
        self.node = SlurmNode(name="vm", conf_path="/nonexistent", slurmd_pid=1)
        self.reading = reading

    def read(self, on_pids=None) -> SlurmReading:  # type: ignore[no-untyped-def]
        if on_pids is not None:
            on_pids(self.reading.pids)
        return self.reading


def _join(reading: SlurmReading, **settings: float) -> SlurmJoin:
    src = _Source(reading)
    watcher = SlurmWatcher(src, period=3600)  # type: ignore[arg-type]
    return SlurmJoin(src, Settings(**settings), watcher=watcher)  # type: ignore[arg-type]


def _gpu(index: int, *procs: Process) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index}", name="A100", minor_number=index, utilization_gpu=0,
               processes=procs)


def test_join_attributes_by_cgroup_first_and_judges_the_findings():
    job = SchedulerJob(id="7", user="alice", name="train", state="RUNNING", end_time=1_000_600, gres_indices=(1,))
    idle = SchedulerJob(id="8", user="bob", state="RUNNING", gres_indices=(2,))
    reading = SlurmReading(True, jobs=(job, idle), pids={10: ("99", "batch"), 11: ("7", "0")})
    join = _join(reading, idle_grant_window=60)
    p_cg = Process(pid=10, gpu_index=1, type="compute", gpu_memory=1, sm_utilization=0)
    p_out = Process(pid=11, gpu_index=0, type="compute", gpu_memory=1, sm_utilization=0)
    p_none = Process(pid=12, gpu_index=0, type="compute", gpu_memory=1, sm_utilization=0, user="eve")
    facts = {10: ProcessFacts(pid=10, visible=True, cgroup=V2.replace("job_123", "job_7"))}
    gpus = (_gpu(0, p_out, p_none), _gpu(1, p_cg), _gpu(2))
    out, status, alerts = join.apply(gpus, facts, now=1_000_000.0, wait=5)
    assert out[1].processes[0].job is not None and out[1].processes[0].job.id == "7"  # cgroup beats listpids
    assert out[1].processes[0].job.time_left_s == 600 and out[1].processes[0].job.gpus == (1,)
    assert out[0].processes[0].job is not None and out[0].processes[0].job.step == "0"
    assert out[0].processes[1].job is None
    assert [a.job for a in out[1].allocated_to] == ["7"] and [a.job for a in out[2].allocated_to] == ["8"]
    assert {(a.kind, a.gpu) for a in alerts} == {("outside_allocation", 0), ("no_job", 0)}
    assert status.available and status.used == {"7": (0, 1)}
    # the allocated, empty, idle GPU 2 becomes a finding once the idle window has passed
    _, _, later = join.apply(gpus, facts, now=1_000_061.0)
    assert ("allocated_idle", 2) in {(a.kind, a.gpu) for a in later}


def test_join_keeps_the_last_jobs_when_slurmctld_stops_answering():
    job = SchedulerJob(id="7", user="alice", state="RUNNING", gres_indices=(0,))
    src = _Source(SlurmReading(True, jobs=(job,)))
    watcher = SlurmWatcher(src, period=3600)  # type: ignore[arg-type]
    join = SlurmJoin(src, Settings(), watcher=watcher)  # type: ignore[arg-type]
    join.apply((_gpu(0),), {}, now=1.0, wait=5)
    src.reading = SlurmReading(False, "slurmctld is not answering: squeue failed.")
    watcher.refresh_now()
    for _ in range(100):
        gpus, status, _ = join.apply((_gpu(0),), {}, now=2.0)
        if not status.available:
            break
        time.sleep(0.02)
    assert not status.available and "slurmctld" in (status.error or "")
    assert [a.job for a in gpus[0].allocated_to] == ["7"]  # pick must still see the allocation
    watcher.stop()


def _snap_with_job(user: str) -> object:
    from datetime import datetime, timezone

    from gputui.core.jobs_model import SlurmStatus
    from gputui.core.model import Snapshot

    job = JobRef(id="7", user=user, name="train", state="RUNNING", gpus=(0,))
    return Snapshot(host="h", time=datetime.now(timezone.utc), driver_version=None, cuda_driver_version=None,
                    gpus=(), slurm=SlurmStatus(node="vm", available=True, jobs=(job,)))


def test_kill_job_refuses_another_users_job_unless_root():
    from gputui.actions.kill.job import plan_job_kill

    snap = _snap_with_job("alice")
    refused = plan_job_kill(snap, "7", uid=1001, user="bob")  # type: ignore[arg-type]
    assert not refused.ok and refused.refusal == "Job 7 belongs to alice; only its owner or root may cancel it."
    assert plan_job_kill(snap, "7", uid=1000, user="alice").ok  # type: ignore[arg-type]
    assert plan_job_kill(snap, "7", uid=0, user="root").ok  # type: ignore[arg-type]
    bad = plan_job_kill(snap, "7;reboot", uid=0, user="root")  # type: ignore[arg-type]
    assert bad.refusal == "'7;reboot' is not a Slurm job id (a number)."


def test_migrate_of_a_container_inside_a_job_is_refused_in_one_sentence():
    import pytest

    from gputui.actions.migrate import MigrationRefused
    from gputui.core.model import ContainerRef
    from gputui.core.record import replace
    from tests.test_migrate_plan import CID, gpus, plan

    job = JobRef(id="42", user="alice", state="RUNNING", gpus=(0,))
    inside = Process(pid=10, gpu_index=0, type="compute", gpu_memory=1, sm_utilization=0,
                     container=ContainerRef(id=CID, name="trainer"), job=job)
    machine = gpus()
    machine = (replace(machine[0], processes=(inside,)), *machine[1:])
    with pytest.raises(MigrationRefused) as exc:
        plan(gpus=machine)
    assert exc.value.kind == "slurm-job"
    assert str(exc.value).endswith("runs inside Slurm job 42: Slurm owns its placement, so gputui does not move it "
                                   "('scontrol requeue 42' if the job is requeueable).")


def test_doctor_slurm_verdicts():
    from gputui.core.doctor.slurm import SlurmFacts, check_slurm

    good = SlurmFacts(node="vm", conf_path="/etc/slurm/slurm.conf", slurmd_pid=5, controller_up=True,
                      proctrack="proctrack/cgroup", task_plugin="task/affinity,task/cgroup", constrain_devices=True,
                      gres_files=("/dev/nvidia0", "/dev/nvidia1"), gres_minors=(0, 1), nvml_minors=((0, 0), (1, 1)))
    assert [c[1] for c in check_slurm(good)] == ["pass"] * 4
    from gputui.core.record import replace

    down = {c[0]: c for c in check_slurm(replace(good, controller_up=False, controller_error="timed out",
                                                 nvml_minors=((0, 0), (1, 1), (2, 2))))}
    assert down["slurm-daemons"][1] == "warn" and "timed out" in down["slurm-daemons"][2]
    assert down["slurm-gres"][1] == "warn" and down["slurm-gres"][2].startswith("GPU 2 is not in gres.conf")
    plain = {c[0]: c for c in check_slurm(replace(good, gres_minors=(0, None)))}
    assert plain["slurm-gres"][1] == "fail" and "not an NVIDIA device node" in plain["slurm-gres"][2]


def test_fleet_pick_skips_gpus_slurm_allocated_on_any_host():
    from gputui.core.fleet.pick import choose
    from gputui.core.fleet.queries import build_fleet
    from tests.test_fleet_model import GIB, NOW, gputui_host, s, up

    a = gputui_host("a:1", "gpu-node-01", gpus=2)
    jobs = [s("gputui_slurm_job_info", 1, instance="a:1", slurm_job="77", user="alice", name="train", gpu="0",
              uuid="GPU-gpu-node-01-0")]
    snap = build_fleet("http://p", NOW, [up("a:1")], [], a, [], jobs)
    host = snap.hosts[0]
    assert host.slurm_jobs == (("GPU-gpu-node-01-0", "77", "alice"),)
    assert host.to_json()["slurm_jobs"] == [{"job": "77", "user": "alice", "gpu": 0, "uuid": "GPU-gpu-node-01-0"}]
    util = {("gpu", "a:1", 0): 0.0, ("gpu", "a:1", 1): 0.9}  # the allocated GPU is the idle one
    used = {k: 10.0 * GIB for k in util}
    assert choose(snap, util, used, used, 1, None, None, 60).chosen == (1,)
    both = choose(snap, util, used, used, 2, None, None, 60)
    assert both.host is None and "job 77 (alice)" in (both.problem or "")
    assert choose(snap, util, used, used, 1, None, None, 60, include_allocated=True).chosen == (0,)


def test_fleet_host_card_names_the_slurm_job():
    from gputui.core.fleet.model import FleetGpu
    from gputui.ui.screens.fleet_host import card_text

    g = FleetGpu(index=0, uuid="GPU-x-0", name="NVIDIA H100")
    assert "Slurm job 77 (alice)" in card_text(g, None, False, (("GPU-x-0", "77", "alice"),)).plain
    assert "Slurm" not in card_text(g, None, False, (("GPU-x-1", "77", "alice"),)).plain
