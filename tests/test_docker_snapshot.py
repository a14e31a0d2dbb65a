"""End to end: real containers' host PIDs on fake GPUs, read by the installed gputui.

The containers run in the test dockerd; the fake NVIDIA driver reports their real
host PIDs as GPU processes; ``gputui snapshot --json`` (a subprocess, real
nvidia-ml-py, DOCKER_HOST pointing at the test daemon) must then attribute each
process to its container through /proc/PID/cgroup and judge each grant. The
degradation tests use the same pipeline in-process (the demo as GPU source, the
real DockerSource) so they can stop the daemon, or hang it, between polls.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from gputui.core.config import Settings
from gputui.core.demo import DemoMachine
from gputui.core.poller import Poller
from gputui.core.sources.docker_source import DockerSource
from tests.fakenvml.scenario import GiB, fake_uuid, gpu, process, scenario

pytestmark = [pytest.mark.docker, pytest.mark.integration]


def top_pids(container) -> list[int]:
    """Host PIDs of a container's processes (dockerd's `top` answers in host PIDs)."""
    top = container.top()
    col = top["Titles"].index("PID")
    return [int(row[col]) for row in top["Processes"]]


def test_snapshot_attributes_real_container_pids_and_judges_grants(docker_cleanup, fake_nvml):
    d = docker_cleanup
    compose = {"com.docker.compose.project": "research", "com.docker.compose.service": "trainer"}
    by_index = d.run("e2e-index", gpus="device=1", labels=compose)
    by_uuid = d.run("e2e-uuid", gpus=f"device={fake_uuid(2)}")
    unpinned = d.run("e2e-all", gpus="all")
    legacy = d.run("e2e-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": "3"})
    conflict = d.run("e2e-cvd", gpus="device=2", environment={"CUDA_VISIBLE_DEVICES": "3"})
    misplaced = d.run("e2e-misplaced", gpus="device=3")
    d.run("e2e-fresh", gpus="device=1")  # granted, runs nothing, just started: not judged idle yet
    d.run("e2e-nogpu")  # no grant, no GPU process: not listed
    # A `docker exec` process is a child of the shim, not of the container's init: cgroups still find it.
    by_index.exec_run(["sleep", "3600"], detach=True)
    deadline = time.monotonic() + 10
    while len(top_pids(by_index)) < 2:
        assert time.monotonic() < deadline, "the exec'd process did not appear"
        time.sleep(0.1)
    index_pids = top_pids(by_index)
    main = {c.name: c.attrs["State"]["Pid"] for c in (by_uuid, unpinned, legacy, conflict, misplaced)}
    host_pid = os.getpid()

    fake_nvml.write(scenario([
        gpu(0, processes=[process(main["e2e-all"], 6 * GiB, sm=40), process(main["e2e-misplaced"], 2 * GiB),
                          process(host_pid, 1 * GiB)]),
        gpu(1, processes=[process(index_pids[0], 3 * GiB), process(index_pids[1], 1 * GiB)]),
        gpu(2, processes=[process(main["e2e-uuid"], 5 * GiB), process(main["e2e-cvd"], 4 * GiB)]),
        gpu(3, processes=[process(main["e2e-legacy"], 7 * GiB)]),
    ]))
    res = fake_nvml.run_gputui("snapshot", "--json", env_extra={"DOCKER_HOST": d.host})
    assert res.returncode == 0, res.stderr
    import json

    snap = json.loads(res.stdout)
    assert snap["docker"] == {"available": True, "error": None}

    owner = {p["pid"]: p["container"] for g in snap["gpus"] for p in g["processes"]}
    assert owner[host_pid] is None
    for pid in index_pids:
        assert owner[pid] == {"id": by_index.id, "name": "e2e-index", "image": d.image,
                              "compose_project": "research", "compose_service": "trainer",
                              "runtime": "docker", "pod": None, "namespace": None, "pod_uid": None}
    assert {owner[pid]["name"] for name, pid in main.items()} == set(main)

    containers = {c["name"]: c for c in snap["containers"]}
    assert set(containers) == {"e2e-index", "e2e-uuid", "e2e-all", "e2e-legacy", "e2e-cvd", "e2e-misplaced",
                               "e2e-fresh"}
    findings = {name: [f["kind"] for f in c["findings"]] for name, c in containers.items()}
    assert findings == {
        "e2e-index": [], "e2e-uuid": [], "e2e-legacy": [], "e2e-fresh": [],
        "e2e-all": ["unpinned"], "e2e-cvd": ["env-conflict"], "e2e-misplaced": ["misplaced"],
    }
    idx = containers["e2e-index"]
    assert (idx["gpus"], idx["grant_source"], idx["gpu_memory"], sorted(idx["pids"]), idx["used_gpus"]) == \
        ([fake_uuid(1)], "device_request", 4 * GiB, sorted(index_pids), [1])
    assert containers["e2e-uuid"]["gpus"] == [fake_uuid(2)]
    assert containers["e2e-all"]["gpus"] == "all"
    assert containers["e2e-legacy"]["grant_source"] == "nvidia_runtime_env"
    assert containers["e2e-legacy"]["gpus"] == [fake_uuid(3)]
    assert containers["e2e-cvd"]["cuda_visible_devices"] == "3"
    assert "names device 3" in containers["e2e-cvd"]["findings"][0]["message"]
    assert "runs on GPU 0, outside its grant" in containers["e2e-misplaced"]["findings"][0]["message"]
    assert "landed on GPU 0" in containers["e2e-all"]["findings"][0]["message"]
    assert containers["e2e-fresh"]["pids"] == [] and containers["e2e-fresh"]["gpu_memory"] == 0


def test_snapshot_without_docker_still_reads_the_gpus(fake_nvml, tmp_path):
    fake_nvml.write(scenario([gpu(0, processes=[process(os.getpid(), 2 * GiB)]), gpu(1)]))
    res = fake_nvml.run_gputui("snapshot", "--json", env_extra={"DOCKER_HOST": f"unix://{tmp_path}/gone.sock"})
    assert res.returncode == 0, res.stderr
    import json

    snap = json.loads(res.stdout)
    assert snap["docker"] == {"available": False,
                              "error": f"the Docker daemon is not running (no socket at {tmp_path}/gone.sock "
                                       "(DOCKER_HOST))"}
    assert [g["uuid"] for g in snap["gpus"]] == [fake_uuid(0), fake_uuid(1)]
    assert [p["pid"] for p in snap["gpus"][0]["processes"]] == [os.getpid()]
    assert snap["containers"] == []


def _poll_until(poller: Poller, pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        snap = poller.poll()
        if pred(snap):
            return snap
        assert time.monotonic() < deadline, f"{what}: docker={snap.docker}"
        time.sleep(0.1)


def test_poller_survives_the_daemon_stopping_and_recovers_by_itself(docker_cleanup):
    d = docker_cleanup
    d.run("steady", gpus="device=7")
    demo = DemoMachine()
    poller = Poller(demo, demo, DockerSource(timeout=2, environ=d.env()),
                    settings=Settings(interval=0.25, docker_timeout=2))
    try:
        def has_steady(s):
            return s.docker.available and s.container("steady") is not None

        _poll_until(poller, has_steady, 15, "first inventory")
        d.stop()
        down = _poll_until(poller, lambda s: not s.docker.available, 15, "daemon stop not noticed")
        assert down.docker.error.startswith("the Docker daemon is not running")
        assert len(down.gpus) == 8 and down.container("steady") is None
        d.start()
        d.client.containers.get("steady").start()
        back = _poll_until(poller, has_steady, 20, "no recovery after the daemon came back")
        assert back.container("steady").gpus == (demo.gpu_uuids()[7],)
        assert poller.watcher.source.stats.connects >= 2  # it reconnected by itself
    finally:
        poller.close()


class _HungServer:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.held: list[socket.socket] = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                pass

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        for c in self.held:
            c.close()
        self.sock.close()


def test_a_hung_daemon_never_delays_a_poll(tmp_path):
    server = _HungServer(str(tmp_path / "hung.sock"))
    demo = DemoMachine()
    poller = Poller(demo, demo, DockerSource(timeout=0.5, environ={"DOCKER_HOST": f"unix://{tmp_path}/hung.sock"}),
                    settings=Settings(interval=0.25, docker_timeout=0.5))
    try:
        worst = 0.0
        errors = set()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            start = time.monotonic()
            snap = poller.poll()
            worst = max(worst, time.monotonic() - start)
            assert len(snap.gpus) == 8
            errors.add(snap.docker.error)
            time.sleep(0.05)
        assert worst < 0.5, f"a poll took {worst:.2f} s behind a hung daemon"
        assert not snap.docker.available
        assert errors & {"the Docker daemon is not responding", "the Docker daemon did not answer within 0.5 s"}
        assert server.held, "the source never reached the hung socket"
    finally:
        poller.close()
        server.close()
