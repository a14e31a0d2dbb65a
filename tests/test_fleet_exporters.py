"""The fleet from real ``gputui exporter`` processes: three fake-driver servers and dcgm-exporter text.

Prometheus scrapes three exporters (real nvidia-ml-py over the fake driver, each with
its own scenario and ``--hostname``) and a static target serving recorded
dcgm-exporter text; ``gputui fleet --json`` and ``gputui pick --prometheus`` are
asserted against the scenarios, and one exporter is stopped mid-test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import GiB, fake_uuid, gpu, process, scenario
from tests.fleet_exposition import StaticTarget, dcgm_text

pytestmark = pytest.mark.integration

GPUTUI = Path(sys.executable).parent / "gputui"


def gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPUTUI), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def sleepers():
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_fleet_of_real_exporters(fake_nvml_factory, exporters, prometheus_factory, sleepers):  # noqa: F811
    busy, idle, mixed = fake_nvml_factory(), fake_nvml_factory(), fake_nvml_factory()
    busy.write(scenario([
        gpu(0, utilization_gpu=96, memory_used=70 * GiB, temperature=79,
            processes=[process(sleepers[0].pid, used_memory=60 * GiB, sm=90)]),
        gpu(1, utilization_gpu=91, memory_used=50 * GiB, temperature=77),
    ]))
    idle.write(scenario([gpu(i, utilization_gpu=0, memory_used=1 * GiB) for i in range(4)]))
    mixed.write(scenario([
        gpu(0, utilization_gpu=40, memory_used=20 * GiB, processes=[process(sleepers[1].pid, used_memory=8 * GiB)]),
        gpu(1, lost=True),
    ]))
    a = start_exporter(exporters, busy, "--no-docker", "--hostname", "gpu-node-a", "--interval", "0.5")
    b = start_exporter(exporters, idle, "--no-docker", "--hostname", "gpu-node-b", "--interval", "0.5")
    c = start_exporter(exporters, mixed, "--no-docker", "--hostname", "gpu-node-c", "--interval", "0.5",
                       "--dcgm-names")
    dcgm = StaticTarget(dcgm_text())
    try:
        prom = prometheus_factory([a.address, b.address, c.address, dcgm.address])
        prom.wait_for("gputui_host_info", lambda r: len(r) == 3)
        prom.wait_for("gputui_process_gpu_memory_bytes", lambda r: len(r) == 2)
        prom.wait_for("up == 1", lambda r: len(r) == 4)  # the dcgm page too: targets are scraped independently

        res = gputui("fleet", "--prometheus", prom.url, "--json")
        assert res.returncode == 0, res.stderr
        hosts = {h["host"]: h for h in json.loads(res.stdout)["hosts"]}
        assert sorted(hosts) == ["dcgm-node-01", "gpu-node-a", "gpu-node-b", "gpu-node-c"]
        ga = hosts["gpu-node-a"]
        assert ga["source"] == "gputui" and ga["up"] and [g["utilization_gpu"] for g in ga["gpus"]] == [96, 91]
        assert ga["gpus"][0]["uuid"] == fake_uuid(0) and ga["gpus"][0]["memory_used"] == 70 * GiB
        (p,) = ga["gpus"][0]["processes"]
        assert p["pid"] == sleepers[0].pid and p["exe"] == "sleep" and p["container"] is None
        assert p["gpu_memory"] == 60 * GiB
        assert len(hosts["gpu-node-b"]["gpus"]) == 4
        gc = hosts["gpu-node-c"]  # with --dcgm-names: still one gputui host, its DCGM copies ignored
        assert gc["source"] == "gputui" and len(gc["gpus"]) == 2 and gc["gpus"][1]["lost"] is True
        assert hosts["dcgm-node-01"]["source"] == "dcgm"

        assert gputui("pick", "--prometheus", prom.url, "--count", "4").stdout == "gpu-node-b 0,1,2,3\n"
        assert gputui("pick", "--prometheus", prom.url, "--count", "3", "--format", "ssh").stdout == \
            "ssh -- gpu-node-b CUDA_VISIBLE_DEVICES=0,1,2\n"

        b.stop()  # mid-test: gpu-node-b's exporter goes away
        prom.wait_for(f'up{{instance="{b.address}"}} == 0', bool)
        hosts = {h["host"]: h for h in json.loads(gputui("fleet", "--prometheus", prom.url, "--json").stdout)["hosts"]}
        assert hosts["gpu-node-b"]["up"] is False and hosts["gpu-node-b"]["last_seen"] is not None
        none = gputui("pick", "--prometheus", prom.url, "--count", "4")
        assert none.returncode == 1
        assert none.stderr.startswith("gputui: Nothing fits on any GPU host (3 hosts up, 1 down)")
    finally:
        dcgm.stop()
