"""``gputui exporter`` scraped by a real Prometheus: what an operator's queries return.

Two exporters (the installed gputui, real nvidia-ml-py over two fake drivers, real
processes) are scraped every second by a real ``prometheus``; the assertions go
through Prometheus's own HTTP API, so they check what lands in the TSDB, labels
included. ``promtool check metrics`` lints the exposition. The Docker test runs
real containers in the test dockerd; the hung-daemon test points the exporter at a
socket that accepts and never answers.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import FakeNvml, GiB, fake_uuid, gpu, process, scenario
from tests.fixtures.prometheus import promtool
from tests.test_docker_snapshot import _HungServer

pytestmark = pytest.mark.integration

SECRET_ARG = "s3cr3t-token-4f9a"
SECRET_ENV = "envsecret-77c1"


def _one(result: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(result) == 1, result
    return result[0]


def _val(result: list[dict[str, Any]]) -> float:
    return float(_one(result)["value"][1])


@pytest.fixture
def secret_process():
    """A real process whose arguments and environment carry secrets."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", f"--api-token={SECRET_ARG}"],
        env={"PATH": "/usr/bin:/bin", "API_KEY": SECRET_ENV}, stdin=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def _promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), "check", "metrics"], input=text, check=False, capture_output=True, text=True,
                          timeout=60)


def test_two_exporters_scraped_by_prometheus(fake_nvml_factory, exporters, prometheus_factory,  # noqa: F811
                                             secret_process):
    fake_a: FakeNvml = fake_nvml_factory()
    fake_b: FakeNvml = fake_nvml_factory()
    pid = secret_process.pid
    fake_a.write(scenario([
        gpu(0, memory_used=20 * GiB, utilization_gpu=93, utilization_memory=41, temperature=71, power_draw=312.5,
            power_limit=400, fan_speed=55, clock_sm=1410, throttle_reasons=["sw_power_cap"],
            processes=[process(pid, used_memory=6 * GiB, sm=40)]),
        gpu(1, unsupported=["temperature", "fan_speed"]),
    ], driver_version="550.54.15"))
    fake_b.write(scenario([gpu(0, lost=True), gpu(1, memory_used=3 * GiB)]))
    a = start_exporter(exporters, fake_a, "--no-docker")
    b = start_exporter(exporters, fake_b, "--no-docker", "--dcgm-names", "--hostname", "node-b")
    prom = prometheus_factory([(a.address, {"server": "a"}), (b.address, {"server": "b"})])
    prom.wait_for("up == 1", lambda r: len(r) == 2)
    prom.wait_for('gputui_gpu_info{server="b"}', lambda r: len(r) == 2)

    uuid0 = fake_uuid(0)
    # GPU series: base units, 0-1 ratios, gpu + uuid labels.
    assert _val(prom.query(f'gputui_gpu_memory_used_bytes{{server="a",gpu="0",uuid="{uuid0}"}}')) == 20 * GiB
    assert _val(prom.query('gputui_gpu_utilization_ratio{server="a",gpu="0"}')) == pytest.approx(0.93)
    assert _val(prom.query('gputui_gpu_memory_utilization_ratio{server="a",gpu="0"}')) == pytest.approx(0.41)
    assert _val(prom.query('gputui_gpu_temperature_celsius{server="a",gpu="0"}')) == 71
    assert _val(prom.query('gputui_gpu_power_watts{server="a",gpu="0"}')) == 312.5
    assert _val(prom.query('gputui_gpu_power_limit_watts{server="a",gpu="0"}')) == 400
    assert _val(prom.query('gputui_gpu_fan_ratio{server="a",gpu="0"}')) == pytest.approx(0.55)
    assert _val(prom.query('gputui_gpu_sm_clock_hertz{server="a",gpu="0"}')) == 1410e6
    assert _one(prom.query('gputui_gpu_throttled{server="a",gpu="0"}'))["metric"]["reason"] == "sw_power_cap"
    info = _one(prom.query('gputui_gpu_info{server="a",gpu="0"}'))["metric"]
    assert (info["uuid"], info["name"]) == (uuid0, "NVIDIA A100-SXM4-80GB")
    host = _one(prom.query('gputui_host_info{server="a"}'))["metric"]
    assert host["driver_version"] == "550.54.15" and host["gputui_version"]
    # Not reported by the driver: absent, never 0.
    assert prom.query('gputui_gpu_temperature_celsius{server="a",gpu="1"}') == []
    assert prom.query('gputui_gpu_fan_ratio{server="a",gpu="1"}') == []
    assert prom.query('gputui_gpu_memory_total_bytes{server="a",gpu="1"}') != []

    # The process: named by its executable's base name, labelled by owner; host process = empty container.
    proc = _one(prom.query(f'gputui_process_gpu_memory_bytes{{server="a",pid="{pid}"}}'))
    assert float(proc["value"][1]) == 6 * GiB
    labels = proc["metric"]
    assert labels["exe"] == Path(sys.executable).resolve().name  # the executable itself, not the symlink in argv[0]
    assert labels["user"] == "root" and labels["gpu"] == "0" and labels["uuid"] == uuid0
    # a host process: empty container labels (Prometheus stores an empty label as no label)
    assert all(labels.get(k, "") == "" for k in ("container", "image", "compose_project", "compose_service"))
    assert _val(prom.query(f'gputui_process_sm_utilization_ratio{{server="a",pid="{pid}"}}')) == pytest.approx(0.4)
    assert _val(prom.query('gputui_process_series_dropped{server="a"}')) == 0

    # Server b: a lost GPU is data, not an outage; dcgm names with the hostname given.
    assert _val(prom.query('gputui_gpu_lost{server="b",gpu="0"}')) == 1
    assert _val(prom.query('gputui_gpu_lost{server="b",gpu="1"}')) == 0
    assert _val(prom.query('gputui_source_up{server="b",source="nvml"}')) == 1
    assert prom.query('gputui_source_up{source="docker"}') == []  # --no-docker: no docker source at all
    fb = _one(prom.query('DCGM_FI_DEV_FB_USED{server="b",gpu="1"}'))
    assert float(fb["value"][1]) == 3 * 1024
    assert fb["metric"]["Hostname"] == "node-b" and fb["metric"]["UUID"] == fake_uuid(1)
    assert fb["metric"]["device"] == "nvidia1" and fb["metric"]["modelName"] == "NVIDIA A100-SXM4-80GB"
    assert prom.query('DCGM_FI_DEV_FB_USED{server="a"}') == []  # only with --dcgm-names
    # It keeps polling on its own: the poll histogram grows between scrapes.
    prom.wait_for('gputui_poll_duration_seconds_count{server="a"} >= 3', lambda r: len(r) == 1)

    # The secret in the process's arguments and environment is nowhere in /metrics.
    text_a, text_b = a.metrics(), b.metrics()
    assert f"pid=\"{pid}\"" in text_a
    for text in (text_a, text_b):
        assert SECRET_ARG not in text and SECRET_ENV not in text and "api-token" not in text
    # promtool finds no problem in the exposition; with --dcgm-names only dcgm's own camelCase label names.
    check = _promtool_check(text_a)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr
    problems = {line for line in (_promtool_check(text_b).stdout + _promtool_check(text_b).stderr).splitlines()}
    # (and dcgm-exporter's own name DCGM_FI_DEV_PCIE_REPLAY_COUNTER, which says "counter")
    assert problems and all(p.startswith("DCGM_FI_DEV_") and "camelCase" in p
                            or p == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'"
                            for p in problems), problems


def test_exporter_follows_the_machine_between_polls(fake_nvml, exporters, prometheus_factory):  # noqa: F811
    fake_nvml.write(scenario([gpu(0, memory_used=1 * GiB), gpu(1)]))
    e = start_exporter(exporters, fake_nvml, "--no-docker", "--interval", "0.5")
    prom = prometheus_factory([e.address])
    prom.wait_for('gputui_gpu_memory_used_bytes{gpu="0"}', lambda r: len(r) == 1 and float(r[0]["value"][1]) == GiB)
    fake_nvml.write(scenario([gpu(0, memory_used=5 * GiB), gpu(1, lost=True)]))
    prom.wait_for('gputui_gpu_memory_used_bytes{gpu="0"}', lambda r: float(r[0]["value"][1]) == 5 * GiB)
    prom.wait_for('gputui_gpu_lost{gpu="1"} == 1', lambda r: len(r) == 1)
    assert _val(prom.query("up")) == 1


@pytest.mark.docker
def test_container_processes_carry_their_container(docker_cleanup, fake_nvml, exporters,  # noqa: F811
                                                    prometheus_factory):
    d = docker_cleanup
    compose = {"com.docker.compose.project": "research", "com.docker.compose.service": "trainer"}
    train = d.run("exp-train", gpus="device=1", labels=compose)
    everything = d.run("exp-all", gpus="all")
    train_pid, all_pid = train.attrs["State"]["Pid"], everything.attrs["State"]["Pid"]
    fake_nvml.write(scenario([
        gpu(0, processes=[process(all_pid, used_memory=2 * GiB, sm=10)]),
        gpu(1, processes=[process(train_pid, used_memory=7 * GiB, sm=80)]),
    ]))
    e = start_exporter(exporters, fake_nvml, env_extra={"DOCKER_HOST": d.host})
    prom = prometheus_factory([e.address])
    series = prom.wait_for(f'gputui_process_gpu_memory_bytes{{pid="{train_pid}"}}',
                           lambda r: len(r) == 1 and r[0]["metric"].get("container") == "exp-train")
    labels = series[0]["metric"]
    assert (labels["image"], labels["compose_project"], labels["compose_service"]) == (d.image, "research", "trainer")
    assert (labels["gpu"], labels["uuid"]) == ("1", fake_uuid(1))
    assert _val(prom.query('gputui_source_up{source="docker"}')) == 1
    mem = _one(prom.query('gputui_container_gpu_memory_bytes{container="exp-train"}'))
    assert float(mem["value"][1]) == 7 * GiB and mem["metric"]["compose_service"] == "trainer"
    granted = prom.query('gputui_container_gpu_granted{container="exp-all"}')
    assert sorted((g["metric"]["gpu"], g["metric"]["uuid"]) for g in granted) == [("0", fake_uuid(0)),
                                                                                  ("1", fake_uuid(1))]
    assert {g["metric"]["via"] for g in granted} == {"device_request"}
    assert _one(prom.query('gputui_container_gpu_granted{container="exp-train"}'))["metric"]["gpu"] == "1"
    kinds = {r["metric"]["kind"] for r in prom.query('gputui_container_finding{container="exp-all"}')}
    assert "unpinned" in kinds


def test_metrics_answer_while_the_docker_socket_hangs(tmp_path, fake_nvml, exporters,  # noqa: F811
                                                      prometheus_factory):
    server = _HungServer(str(tmp_path / "hung.sock"))
    try:
        fake_nvml.write(scenario([gpu(0, memory_used=2 * GiB), gpu(1)]))
        e = start_exporter(exporters, fake_nvml, env_extra={"DOCKER_HOST": f"unix://{tmp_path}/hung.sock"})
        prom = prometheus_factory([e.address])
        prom.wait_for('gputui_source_up{source="docker"} == 0', lambda r: len(r) == 1)
        assert server.held, "the exporter never reached the hung socket"
        worst = 0.0
        for _ in range(10):
            start = time.monotonic()
            text = e.metrics(timeout=5)
            worst = max(worst, time.monotonic() - start)
            assert "gputui_gpu_memory_used_bytes" in text
        assert worst < 1.0, f"/metrics took {worst:.2f} s while Docker hung"
        assert _val(prom.query('gputui_gpu_memory_used_bytes{gpu="0"}')) == 2 * GiB
        assert _val(prom.query('gputui_source_up{source="nvml"}')) == 1
    finally:
        server.close()


def test_port_in_use_unbindable_address_and_bad_certificates_exit_2(tmp_path, fake_nvml):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    garbage = tmp_path / "cert.pem"
    garbage.write_text("not a certificate\n")
    try:
        cases = [
            (["--listen", f"127.0.0.1:{port}"], f"127.0.0.1:{port}"),
            (["--listen", "192.0.2.1:9835"], "192.0.2.1:9835"),
            (["--listen", "nowhere"], "ADDR:PORT"),
            (["--certfile", str(tmp_path / "missing.pem"), "--keyfile", str(garbage)], "missing.pem"),
            (["--certfile", str(garbage), "--keyfile", str(garbage)], "cert.pem"),
            (["--certfile", str(garbage)], "--keyfile"),
        ]
        for args, named in cases:
            res = fake_nvml.run_gputui("exporter", *args, timeout=60)
            assert res.returncode == 2, (args, res.stderr)
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and named in lines[0] and "Traceback" not in res.stderr, (args, res.stderr)
    finally:
        taken.close()
