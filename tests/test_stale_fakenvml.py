"""Stale detection with real processes spawned here and listed by the fake NVIDIA driver:
the installed gputui (real nvidia-ml-py, real /proc) must name each kind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakenvml.scenario import GiB, gpu, process, scenario

pytestmark = pytest.mark.integration


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]


def _wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def _stale(doc: dict, pid: int) -> list[dict]:
    for g in doc["gpus"]:
        for p in g["processes"]:
            if p["pid"] == pid:
                return p["stale"]
    raise AssertionError(f"PID {pid} is not in the snapshot")


@pytest.fixture
def spawned():
    """Processes started by the test; every one is killed (and reaped where it is ours) at the end."""
    started: list = []
    yield started
    for item in started:
        if isinstance(item, subprocess.Popen):
            if item.poll() is None:
                item.kill()
            item.wait(timeout=5)
        else:
            try:
                os.kill(item, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _one_gpu_with(*procs) -> dict:
    return scenario([gpu(0, processes=list(procs)), gpu(1)])


def test_orphan_whose_parent_exited(fake_nvml, spawned):
    # The parent starts a worker in its own session and exits: the worker is re-parented.
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; p = subprocess.Popen(['sleep', '120']); print(p.pid, flush=True)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(parent.stdout.readline())
    spawned.append(worker)
    parent.wait(timeout=10)
    parent.stdout.close()
    assert _wait_for(lambda: Path(f"/proc/{worker}/stat").exists() and
                     int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1]) != parent.pid)
    fake_nvml.write(_one_gpu_with(process(worker, used_memory=3 * GiB, sm=0)))
    stale = _stale(fake_nvml.snapshot(), worker)
    assert [s["kind"] for s in stale] == ["orphan"]
    assert "re-parented" in stale[0]["message"]


def test_a_child_we_never_reap_is_a_zombie(fake_nvml, spawned):
    child = subprocess.Popen(["true"])
    spawned.append(child)
    assert _wait_for(lambda: _state(child.pid) == "Z"), "the child did not become a zombie"
    fake_nvml.write(_one_gpu_with(process(child.pid, used_memory=2 * GiB, sm=0)))
    stale = _stale(fake_nvml.snapshot(), child.pid)
    assert "zombie" in [s["kind"] for s in stale]
    assert "not reaped" in next(s for s in stale if s["kind"] == "zombie")["message"]


def _free_pid() -> int:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 300, -1):
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free PID")


def test_ghost_pid_single_sample_then_leaked_context(fake_nvml):
    ghost = _free_pid()
    fake_nvml.write(_one_gpu_with(process(ghost, used_memory=5 * GiB, sm=None)))
    once = _stale(fake_nvml.snapshot(), ghost)
    assert [s["kind"] for s in once] == ["ghost"]
    assert "just exited" in once[0]["message"]
    watched = _stale(fake_nvml.snapshot("--window", "3.5"), ghost)
    assert [s["kind"] for s in watched] == ["ghost"]
    assert "leaked driver context is the likely cause" in watched[0]["message"]


def _short_idle_window(seconds: float) -> None:
    cfg = Path(os.environ["XDG_CONFIG_HOME"]) / "gputui" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"[stale]\nidle_window = {seconds}\nidle_memory = \"1G\"\n")


def test_idle_holder_over_a_short_window(fake_nvml, spawned):
    _short_idle_window(2)
    idle = subprocess.Popen(["sleep", "120"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    small = subprocess.Popen(["sleep", "120"])
    spawned.extend([idle, busy, small])
    fake_nvml.write(_one_gpu_with(process(idle.pid, used_memory=6 * GiB, sm=0),
                                  process(busy.pid, used_memory=6 * GiB, sm=0),
                                  process(small.pid, used_memory=256 * 1024**2, sm=0)))
    doc = fake_nvml.snapshot("--window", "3")
    stale = _stale(doc, idle.pid)
    assert [s["kind"] for s in stale] == ["idle-holder"]
    assert stale[0]["message"].startswith("Holds 6.0 GiB of GPU memory with 0% SM")
    assert _stale(doc, busy.pid) == [], "a process busy on the CPU is not idle"
    assert _stale(doc, small.pid) == [], "below idle_memory it holds too little to matter"


def test_idle_holder_is_not_claimed_before_the_window_is_observed(fake_nvml, spawned):
    idle = subprocess.Popen(["sleep", "120"])
    spawned.append(idle)
    fake_nvml.write(_one_gpu_with(process(idle.pid, used_memory=6 * GiB, sm=0)))
    # Default idle_window is 10 minutes: 2 s of idleness proves nothing.
    assert _stale(fake_nvml.snapshot("--window", "2"), idle.pid) == []


def test_a_process_computing_on_the_gpu_is_not_idle(fake_nvml, spawned):
    _short_idle_window(1)
    worker = subprocess.Popen(["sleep", "120"])
    spawned.append(worker)
    fake_nvml.write(_one_gpu_with(process(worker.pid, used_memory=6 * GiB, sm=40)))
    assert _stale(fake_nvml.snapshot("--window", "2"), worker.pid) == []


@pytest.mark.docker
def test_a_paused_containers_process_is_stale(fake_nvml, docker_cleanup):
    d = docker_cleanup
    c = d.run("gputui-stale-paused")
    c.reload()
    pid = c.attrs["State"]["Pid"]
    fake_nvml.write(_one_gpu_with(process(pid, used_memory=4 * GiB, sm=0)))
    running = fake_nvml.run_gputui("snapshot", "--json", env_extra={"DOCKER_HOST": d.host})
    assert running.returncode == 0, running.stderr
    assert _stale(json.loads(running.stdout), pid) == []
    c.pause()
    paused = fake_nvml.run_gputui("snapshot", "--json", env_extra={"DOCKER_HOST": d.host})
    assert paused.returncode == 0, paused.stderr
    stale = _stale(json.loads(paused.stdout), pid)
    finding = next(s for s in stale if s["kind"] == "exited-container")
    assert finding["message"].startswith("Its container gputui-stale-paused is paused")
    c.unpause()
