"""`gputui fleet --json` and `gputui pick --prometheus` against a real Prometheus.

Prometheus (the Debian package, on loopback) scrapes three gputui targets and a
recorded dcgm-exporter page every second; the installed ``gputui`` reads it. One
target is stopped mid-test: its host turns down with its last-seen time, and pick
no longer chooses it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import FLEET_QUERIES, HOST_RANGE_QUERIES, FleetReader
from tests.fleet_exposition import StaticTarget, dcgm_text, gputui_text
from tests.fleet_scenarios import HOSTS

GPUTUI = Path(sys.executable).parent / "gputui"


def gputui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPUTUI), *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def fleet(prometheus_factory):
    targets = [StaticTarget(gputui_text(h)) for h in HOSTS] + [StaticTarget(dcgm_text())]
    try:
        # 2 s: the scrape timeout is the interval, and a 1 s timeout on a loaded machine now and then
        # found a target "down" mid-test
        prom = prometheus_factory([t.address for t in targets], scrape_interval="2s")
        prom.wait_for("up == 1", lambda r: len(r) == 4)
        prom.wait_for("gputui_host_info", lambda r: len(r) == 3)
        yield prom, targets
    finally:
        for t in targets:
            t.stop()


def test_fleet_json_and_pick_follow_the_scenarios_and_a_stopped_exporter(fleet):
    prom, targets = fleet
    res = gputui("fleet", "--prometheus", prom.url, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["prometheus"] == prom.url
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert sorted(hosts) == ["dcgm-node-01", "gpu-node-01", "gpu-node-02", "gpu-node-03"]
    one = hosts["gpu-node-01"]
    assert one["up"] and one["source"] == "gputui" and one["imbalance_flagged"] is True
    assert one["gpus"][0]["utilization_gpu"] == 95 and one["gpus"][0]["temperature"] == 84
    assert one["gpus"][0]["processes"] == [{"pid": 4242, "user": "alice", "exe": "python3",
                                            "gpu_memory": 60 * 1024**3, "container": "train-llm",
                                            "runtime": None, "pod": None, "namespace": None}]
    assert one["alerts"] == [{"gpu": 0, "kind": "temperature", "severity": "warning"}]
    assert hosts["gpu-node-02"]["gpus"][3]["processes"][0]["container"] is None
    dcgm = hosts["dcgm-node-01"]
    assert dcgm["source"] == "dcgm" and dcgm["note"] and all(g["processes"] == [] for g in dcgm["gpus"])
    assert [g["memory_used"] for g in dcgm["gpus"]] == [33496 * 1024**2, 0]
    assert dcgm["imbalance_flagged"] is None
    # `gputui --prometheus URL` is fleet mode; to a pipe it prints the same document
    piped = gputui("--prometheus", prom.url)
    assert piped.returncode == 0 and sorted(h["host"] for h in json.loads(piped.stdout)["hosts"]) == sorted(hosts)

    # pick across the fleet: the idle dcgm GPU for one; two on one host is gpu-node-02
    assert gputui("pick", "--prometheus", prom.url).stdout == "dcgm-node-01 1\n"
    two = gputui("pick", "--prometheus", prom.url, "--count", "2", "--format", "ssh")
    assert two.stdout == "ssh -- gpu-node-02 CUDA_VISIBLE_DEVICES=0,1\n", two.stderr
    docker = gputui("pick", "--prometheus", prom.url, "--count", "2", "--format", "docker")
    assert docker.stdout == ("DOCKER_HOST=ssh://gpu-node-02 docker run --gpus "
                             "'\"device=GPU-2b000000-0000-4000-8000-000000000000,"
                             "GPU-2b000000-0000-4000-8000-000000000001\"'\n")

    # one refresh is a fixed number of queries; the host screen adds a fixed number
    reader = FleetReader(PromClient(prom.url))
    snap = reader.read()
    assert reader.client.queries == len(FLEET_QUERIES) <= 8
    reader.host_history(next(h for h in snap.hosts if h.host == "gpu-node-01"))
    assert reader.client.queries == len(FLEET_QUERIES) + HOST_RANGE_QUERIES
    reader.close()

    # an exporter stops: its host is down with its last-seen time, and pick skips it
    targets[1].stop()
    prom.wait_for(f'up{{instance="{targets[1].address}"}} == 0', bool)
    prom.wait_for("up == 1", lambda r: len(r) == 3)  # the others' latest scrapes answered
    doc = json.loads(gputui("fleet", "--prometheus", prom.url, "--json").stdout)
    two = next(h for h in doc["hosts"] if h["host"] == "gpu-node-02")
    assert two["up"] is False and two["gpus"] == []
    seen = datetime.fromisoformat(two["last_seen"])
    assert seen <= datetime.fromisoformat(doc["time"])
    again = gputui("pick", "--prometheus", prom.url, "--count", "2", "--format", "host-index")
    assert again.stdout == "dcgm-node-01 1,0\n", again.stderr  # the only other host with two free GPUs
    none = gputui("pick", "--prometheus", prom.url, "--count", "2", "--max-util", "50")
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr.startswith("gputui: Nothing fits on any GPU host (3 hosts up, 1 down)")
    assert none.stderr.count("\n") == 1


@pytest.mark.functional  # a process of its own
def test_unreachable_or_not_prometheus_is_one_sentence_and_exit_3(tmp_path):
    from tests.fixtures.prometheus import free_port

    url = f"http://127.0.0.1:{free_port()}"
    for args in (("fleet", "--prometheus", url, "--json"), ("pick", "--prometheus", url)):
        res = gputui(*args)
        assert res.returncode == 3 and res.stdout == ""
        assert res.stderr == f"gputui: Cannot reach Prometheus at {url}: connection refused.\n"
    target = StaticTarget("hello\n")  # answers HTTP, but is not Prometheus
    try:
        res = gputui("fleet", "--prometheus", f"http://{target.address}", "--json")
    finally:
        target.stop()
    assert res.returncode == 3 and "but not as Prometheus does" in res.stderr and res.stderr.count("\n") == 1
    res = gputui("fleet", "--json")
    assert res.returncode == 2 and "--prometheus URL" in res.stderr
    config = tmp_path / "config" / "gputui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'prometheus_url = "{url}"\n')
    res = gputui("fleet", "--json")
    assert res.returncode == 3 and url in res.stderr
