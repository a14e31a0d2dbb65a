"""gputui on a real single-node Slurm (tests/fixtures/slurm.py) with the fake NVIDIA driver.

Two test users each run an ``sbatch --gres=gpu:1`` job sleeping; the fake driver reports
those jobs' real PIDs on the GPUs Slurm gave them, job 1's also on the other GPU (outside
its GRES), and a process of no job. Every face is asserted as a user reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import FakeNvml, fake_uuid, gpu, process, scenario
from tests.fixtures.slurm import SlurmCluster

pytestmark = pytest.mark.functional


class Jobs:
    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.a = cluster.submit("gtsl1", name="train", time_limit="120")
        self.b = cluster.submit("gtsl2", name="eval", time_limit=None)
        self.pid_a = cluster.sleep_pid(self.a)
        self.pid_b = cluster.sleep_pid(self.b)
        self.gpu_a = cluster.gres_index(self.a)
        self.gpu_b = cluster.gres_index(self.b)
        assert {self.gpu_a, self.gpu_b} == {0, 1}
        self.outsider = subprocess.Popen(["sleep", "3600"])

    def close(self) -> None:
        self.outsider.kill()
        self.outsider.wait()


@pytest.fixture(scope="module")
def jobs(slurm_cluster: SlurmCluster) -> Iterator[Jobs]:
    j = Jobs(slurm_cluster)
    try:
        yield j
    finally:
        j.close()
        slurm_cluster.cancel_all()


def _machine(fake: FakeNvml, jobs: Jobs) -> None:
    """GPU of job a: its sleep; GPU of job b: b's sleep, a's sleep again (outside a's GRES), a process of no job."""
    procs: dict[int, list[dict[str, Any]]] = {jobs.gpu_a: [process(jobs.pid_a)],
                                              jobs.gpu_b: [process(jobs.pid_b), process(jobs.pid_a),
                                                           process(jobs.outsider.pid)]}
    fake.write(scenario([gpu(i, processes=procs[i]) for i in (0, 1)]))


def _run(fake: FakeNvml, cluster: SlurmCluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return fake.run_gputui(*args, timeout=timeout, env_extra={"SLURM_CONF": str(cluster.conf)})


def _snapshot(fake: FakeNvml, cluster: SlurmCluster) -> dict[str, Any]:
    res = _run(fake, cluster, "snapshot", "--json", "--no-docker")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _proc(doc: dict[str, Any], gpu_index: int, pid: int) -> dict[str, Any]:
    g = next(g for g in doc["gpus"] if g["index"] == gpu_index)
    return next(p for p in g["processes"] if p["pid"] == pid)


def test_each_gpu_process_carries_its_job_and_each_gpu_its_allocation(fake_nvml, slurm_cluster, jobs):
    _machine(fake_nvml, jobs)
    doc = _snapshot(fake_nvml, slurm_cluster)

    job_a = _proc(doc, jobs.gpu_a, jobs.pid_a)["job"]
    assert job_a["scheduler"] == "slurm" and job_a["id"] == jobs.a and job_a["step"] == "batch"
    assert (job_a["user"], job_a["name"], job_a["state"]) == ("gtsl1", "train", "RUNNING")
    assert job_a["gpus"] == [jobs.gpu_a]
    assert 0 < job_a["time_left_s"] <= 120 * 60 and job_a["end_time"] is not None
    job_b = _proc(doc, jobs.gpu_b, jobs.pid_b)["job"]
    assert (job_b["id"], job_b["user"], job_b["gpus"]) == (jobs.b, "gtsl2", [jobs.gpu_b])
    assert job_b["end_time"] is None and job_b["time_left_s"] is None  # no time limit
    assert _proc(doc, jobs.gpu_b, jobs.outsider.pid)["job"] is None

    allocated = {g["index"]: g["allocated_to"] for g in doc["gpus"]}
    assert allocated[jobs.gpu_a] == [{"scheduler": "slurm", "job": jobs.a, "user": "gtsl1"}]
    assert allocated[jobs.gpu_b] == [{"scheduler": "slurm", "job": jobs.b, "user": "gtsl2"}]
    assert doc["slurm"]["available"] is True
    listed = {j["id"]: j for j in doc["slurm"]["jobs"]}
    assert listed[jobs.a]["gpus"] == [jobs.gpu_a] and listed[jobs.a]["used_gpus"] == [0, 1]

    kinds = {(a["kind"], a["gpu"]) for a in doc["alerts"]}
    assert ("outside_allocation", jobs.gpu_b) in kinds
    assert ("no_job", jobs.gpu_b) in kinds
    outside = next(a for a in doc["alerts"] if a["kind"] == "outside_allocation")
    assert f"job {jobs.a}" in outside["message"] and str(jobs.pid_a) in outside["message"]


def test_once_shows_the_job_where_the_container_column_is(fake_nvml, slurm_cluster, jobs):
    _machine(fake_nvml, jobs)
    res = _run(fake_nvml, slurm_cluster, "--once", "--no-docker")
    assert res.returncode == 0, res.stderr
    rows = {line.split()[1]: line for line in res.stdout.splitlines()
            if line.split()[:1] and line.split()[0].isdigit() and len(line.split()) > 1 and line.split()[1].isdigit()}
    row_a = rows[str(jobs.pid_a)]
    assert f"job {jobs.a} · gtsl1 · 1h5" in row_a  # 120 min limit, a minute or so gone
    assert "left" in row_a
    assert f"job {jobs.b} · gtsl2" in rows[str(jobs.pid_b)]
    assert "outside its allocation" in res.stdout and "outside any Slurm job" in res.stdout
    # the jobs are listed like containers: grant (GRES) against use
    assert f"  job {jobs.a}  gtsl1  train  RUNNING  GPUs {jobs.gpu_a} / 0,1  1h5" in res.stdout
    assert f"  job {jobs.b}  gtsl2  eval  RUNNING  GPUs {jobs.gpu_b} / {jobs.gpu_b}\n" in res.stdout


def test_an_allocated_gpu_with_no_process_and_no_load_is_allocated_idle(fake_nvml, slurm_cluster, jobs, isolated_xdg):
    config = isolated_xdg / "config" / "gputui" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[containers]\nidle_grant_window = 1\n")
    fake_nvml.write(scenario([gpu(0), gpu(1), gpu(2)]))  # the jobs run sleep: nothing on their GPUs
    res = _run(fake_nvml, slurm_cluster, "snapshot", "--json", "--no-docker", "--observe", "3", timeout=120)
    assert res.returncode == 0, res.stderr
    idle = {a["gpu"]: a["message"] for a in json.loads(res.stdout)["alerts"] if a["kind"] == "allocated_idle"}
    assert set(idle) == {jobs.gpu_a, jobs.gpu_b}  # GPU 2 is no job's: never "allocated idle"
    assert f"allocated to job {jobs.a} (gtsl1)" in idle[jobs.gpu_a]


def test_pick_never_offers_a_gpu_slurm_allocated(fake_nvml, slurm_cluster, jobs):
    """GPUs 0 and 1 are the jobs' (idle: no process at all), GPU 2 is no job's."""
    fake_nvml.write(scenario([gpu(0), gpu(1), gpu(2, utilization_gpu=60)]))
    res = _run(fake_nvml, slurm_cluster, "pick", "--no-docker", "--sample", "0")
    assert (res.returncode, res.stdout.strip()) == (0, "2"), res.stderr  # the busiest, but the only free one
    res = _run(fake_nvml, slurm_cluster, "pick", "--no-docker", "--sample", "0", "--count", "2")
    assert res.returncode == 1 and res.stdout == ""
    sentence = res.stderr.strip()
    assert sentence.startswith("gputui: Slurm owns these GPUs") and sentence.count(". ") == 0
    assert f"job {jobs.a} (gtsl1)" in sentence and f"job {jobs.b} (gtsl2)" in sentence
    assert "--include-allocated" in sentence
    res = _run(fake_nvml, slurm_cluster, "pick", "--no-docker", "--sample", "0", "--include-allocated")
    assert res.returncode == 0 and res.stdout.strip() in ("0", "1")


def test_kill_pid_of_a_job_names_the_job_in_its_plan(fake_nvml, slurm_cluster, jobs):
    _machine(fake_nvml, jobs)
    res = _run(fake_nvml, slurm_cluster, "kill", str(jobs.pid_b))  # no terminal, no --yes: plan only
    assert f"in Slurm job {jobs.b} (gtsl2, eval): the job keeps its GPUs" in res.stdout, res.stdout + res.stderr
    assert f"gputui kill --job {jobs.b}" in res.stdout
    assert slurm_cluster.sleep_pid(jobs.b) == jobs.pid_b  # nothing was signalled


def test_kill_job_cancels_through_slurm_and_is_audited(fake_nvml, slurm_cluster, jobs, isolated_xdg):
    victim = slurm_cluster.submit("gtsl1", name="victim")
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    # another user's job: refused for a non-root caller, in one sentence (the caller is gtsl2 by name)
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    res = _run(fake_nvml, slurm_cluster, "kill", "--job", "999999", "--yes")
    assert res.returncode == 1 and res.stderr.strip() == "gputui: Slurm lists no running job 999999 on this node."
    res = fake_nvml.run_gputui("kill", "--job", victim, "--yes", "--signal", "TERM", env_extra=env, timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"Cancel Slurm job {victim} with scancel" in res.stdout
    assert f"Job {victim} (gtsl1) is CANCELLED" in res.stdout
    assert slurm_cluster.job_state(victim) == "CANCELLED"
    log = [json.loads(line) for line in (isolated_xdg / "state" / "gputui" / "audit.jsonl").read_text().splitlines()]
    done = [r for r in log if r["action"] == "kill-job" and r["result"] == "ok"]
    assert done and done[-1]["job"] == victim and done[-1]["job_user"] == "gtsl1" and done[-1]["state"] == "CANCELLED"
    # --signal KILL reaches every process of the job (scancel --full), and the job ends
    second = slurm_cluster.submit("gtsl2", name="victim2")
    res = fake_nvml.run_gputui("kill", "--job", second, "--yes", "--signal", "KILL", env_extra=env, timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "scancel --full --signal=KILL" in res.stdout
    assert slurm_cluster.job_state(second) not in ("RUNNING", "PENDING", None)


def test_exporter_exports_jobs_per_allocated_gpu_and_a_job_label_on_process_series(fake_nvml, slurm_cluster, jobs,
                                                                                   exporters):  # noqa: F811
    _machine(fake_nvml, jobs)
    exp = start_exporter(exporters, fake_nvml, "--no-docker", env_extra={"SLURM_CONF": str(slurm_cluster.conf)})
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        text = exp.metrics()
        if "gputui_slurm_job_info{" in text and 'source="slurm"} 1.0' in text:
            break
        time.sleep(0.5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    info = {(s.labels["slurm_job"], s.labels["gpu"]): s for s in families["gputui_slurm_job_info"].samples}
    a = info[(jobs.a, str(jobs.gpu_a))]
    assert a.value == 1 and a.labels["user"] == "gtsl1" and a.labels["name"] == "train"
    assert a.labels["uuid"] == fake_uuid(jobs.gpu_a)
    assert (jobs.b, str(jobs.gpu_b)) in info and len(info) == 2
    ends = {s.labels["slurm_job"]: s.value for s in families["gputui_slurm_job_end_timestamp_seconds"].samples}
    assert set(ends) == {jobs.a}  # job b has no time limit
    procs = {(s.labels["pid"], s.labels["gpu"]): s.labels["slurm_job"]
             for s in families["gputui_process_gpu_memory_bytes"].samples}
    assert procs[(str(jobs.pid_a), str(jobs.gpu_a))] == jobs.a
    assert procs[(str(jobs.outsider.pid), str(jobs.gpu_b))] == ""
    # the job is not a label of the GPU series; the findings are alerts
    assert all("slurm_job" not in s.labels for s in families["gputui_gpu_memory_used_bytes"].samples)
    alerts = {s.labels["kind"] for s in families["gputui_alert_active"].samples}
    assert {"outside_allocation", "no_job"} <= alerts


def test_doctor_reports_slurm(fake_nvml, slurm_cluster, jobs):
    fake_nvml.write(scenario([gpu(0), gpu(1), gpu(2)]))
    res = _run(fake_nvml, slurm_cluster, "doctor", "--no-docker", "--json", timeout=90)
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["slurm-daemons"]["status"] == "pass" and f"node {slurm_cluster.node}" in \
        checks["slurm-daemons"]["message"]
    # this container has no delegated cgroups: the test Slurm runs proctrack/linuxproc and task/none
    assert checks["slurm-cgroup"]["status"] == "warn" and "proctrack/linuxproc" in checks["slurm-cgroup"]["message"]
    assert checks["slurm-constrain-devices"]["status"] == "warn"
    assert checks["slurm-gres"]["status"] == "pass", checks["slurm-gres"]
    # an NVML that lists two GPUs: gres.conf's third device is not there
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    res = _run(fake_nvml, slurm_cluster, "doctor", "--no-docker", "--json", timeout=90)
    gres = {c["name"]: c for c in json.loads(res.stdout)["checks"]}["slurm-gres"]
    assert gres["status"] == "fail" and "minors 2, which NVML does not list" in gres["message"]
    assert res.returncode == 1


def test_without_slurm_no_squeue_is_run_and_nothing_changes(fake_nvml, tmp_path):
    """No slurm.conf: gputui never starts squeue (a stand-in on PATH records any call)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "called"
    for name in ("squeue", "scontrol"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho $0 >> {marker}\nexit 1\n")
        script.chmod(0o755)
    fake_nvml.write(scenario([gpu(0, processes=[process(os.getpid())])]))
    env = {"SLURM_CONF": str(tmp_path / "no-slurm.conf"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = fake_nvml.run_gputui("snapshot", "--json", "--no-docker", env_extra=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["slurm"] is None
    assert doc["gpus"][0]["allocated_to"] == [] and doc["gpus"][0]["processes"][0]["job"] is None
    assert not marker.exists()


def test_a_slurm_conf_without_a_running_slurmd_is_not_slurm(fake_nvml, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"SlurmdPidFile={tmp_path}/slurmd.pid\n")
    (tmp_path / "slurmd.pid").write_text(f"{os.getpid()}\n")  # a living PID that is not slurmd
    fake_nvml.write(scenario([gpu(0)]))
    res = fake_nvml.run_gputui("snapshot", "--json", "--no-docker", env_extra={"SLURM_CONF": str(conf)})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["slurm"] is None


def test_zy_a_hung_slurmctld_never_holds_up_a_reading(fake_nvml, slurm_cluster, jobs):
    """slurmctld stopped with SIGSTOP: squeue hangs; gputui answers anyway, Slurm shown unavailable."""
    _machine(fake_nvml, jobs)
    slurm_cluster.pause_controller(True)
    try:
        started = time.monotonic()
        res = _run(fake_nvml, slurm_cluster, "snapshot", "--json", "--no-docker", timeout=120)
        took = time.monotonic() - started
    finally:
        slurm_cluster.pause_controller(False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["slurm"]["available"] is False
    assert _proc(doc, jobs.gpu_a, jobs.pid_a)["job"]["id"] == jobs.a  # slurmd (listpids) still answers
    assert took < 60  # bounded by the first-reading wait, not by slurmctld


def test_zz_a_stopped_slurmctld_changes_data_not_availability(fake_nvml, slurm_cluster, jobs):
    """Runs last in this file: it stops the controller (and starts it again)."""
    _machine(fake_nvml, jobs)
    slurm_cluster.stop_controller()
    try:
        res = _run(fake_nvml, slurm_cluster, "snapshot", "--json", "--no-docker", timeout=90)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["slurm"]["available"] is False and "slurmctld" in doc["slurm"]["error"]
        # slurmd still says which PID is in which job; the job's facts are unknown
        job = _proc(doc, jobs.gpu_a, jobs.pid_a)["job"]
        assert job["id"] == jobs.a and job["user"] is None
        once = _run(fake_nvml, slurm_cluster, "--once", "--no-docker", timeout=90)
        assert once.returncode == 0 and "Slurm unavailable" in once.stdout
    finally:
        slurm_cluster.start_controller()
    assert Path(slurm_cluster.conf).exists()
