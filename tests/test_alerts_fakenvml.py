"""Alerts and the imbalance verdict from the installed gputui reading the fake NVIDIA driver."""

from __future__ import annotations

import json

import pytest

from tests.fakenvml.scenario import GiB, gpu, process, scenario

pytestmark = pytest.mark.integration


def test_alert_kinds_from_a_real_read(fake_nvml):
    fake_nvml.write(scenario([
        gpu(0, temperature=92, utilization_gpu=97, processes=[process(999_991, used_memory=8 * GiB, sm=97)]),
        gpu(1, throttle_reasons=["sw_power_cap", "gpu_idle"], utilization_gpu=4),
        gpu(2, memory_used=78 * GiB, utilization_gpu=2),
        gpu(3, lost=True),
    ]))
    doc = fake_nvml.snapshot()
    got = {(a["gpu"], a["kind"]): a for a in doc["alerts"]}
    assert got[(0, "temperature")]["severity"] == "critical"
    assert got[(0, "temperature")]["message"] == "GPU 0 is at 92°C, at or above the 90°C critical threshold."
    assert got[(1, "throttle")]["message"] == "GPU 1 is slowed down by its power cap."
    assert got[(2, "memory-full")]["severity"] == "warning"
    assert got[(3, "lost")]["severity"] == "critical"
    assert got[(0, "imbalance")]["message"].startswith("Unevenly loaded: GPU 0 at 97% while GPUs 1, 2 average 3%")
    assert doc["alerts"][0]["severity"] == "critical"
    imb = doc["imbalance"]
    assert imb["flagged"] and imb["kinds"] == ["utilization", "memory"]
    # One job alone on the hot GPU: nothing to move.
    assert imb["suggestion"] is None


def test_thresholds_from_the_config_file_and_flags(fake_nvml, tmp_path):
    fake_nvml.write(scenario([gpu(0, temperature=70), gpu(1, temperature=50)]))
    assert fake_nvml.snapshot()["alerts"] == []
    cfg = tmp_path / "alerts.toml"
    cfg.write_text("[alerts]\ntemp_warning = 65\ntemp_critical = 80\n")
    doc = fake_nvml.snapshot("--config", str(cfg))
    assert [(a["gpu"], a["kind"], a["severity"]) for a in doc["alerts"]] == [(0, "temperature", "warning")]
    r = fake_nvml.run_gputui("--temp-warning", "45", "snapshot", "--json", "--no-docker", "--config", str(cfg))
    assert r.returncode == 0, r.stderr

    temps = sorted(a["gpu"] for a in json.loads(r.stdout)["alerts"] if a["kind"] == "temperature")
    assert temps == [0, 1]
