"""What `gputui --demo` shows of the house rules, Slurm and the dcgm-parity readings."""

from __future__ import annotations

import json

import pytest

from gputui.cli import main

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_demo_snapshot_shows_a_slurm_job_reservations_a_broken_rule_and_dcgm_readings(capsys):
    rc, out, err = run(capsys, "snapshot", "--demo", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    gpus = {g["index"]: g for g in doc["gpus"]}
    # a Slurm job holds GPU 6 through its GRES, and its process says so
    assert gpus[6]["allocated_to"] == [{"scheduler": "slurm", "job": "81734", "user": "carol"}]
    sweep = next(p for p in gpus[6]["processes"] if p["pid"] == 6010)
    assert sweep["job"]["id"] == "81734" and sweep["job"]["time_left_s"] > 0
    assert doc["slurm"]["available"] and [j["id"] for j in doc["slurm"]["jobs"]] == ["81734"]
    assert not any(a["kind"] == "no_job" for a in doc["alerts"])  # the demo's containers run outside Slurm
    # house rules: two reservations, and root's eval-server on bob's reserved GPU 2
    assert {(r["gpu"], r["for"]) for r in doc["reservations"]} == {(7, "@vision"), (2, "bob")}
    assert [(v["rule"], v["gpu"]) for v in doc["rule_violations"]] == [("reserved", 2)]
    # dcgm-exporter's parity readings are never N/A on the simulated A100s (but for the MIG card's
    # encoder and decoder load, which a driver in MIG mode does not report either)
    for g in doc["gpus"]:
        for name in ("memory_reserved", "memory_temperature", "total_energy_consumption", "pcie_replay_counter",
                     "encoder_utilization", "decoder_utilization", "remapped_rows_correctable",
                     "remapped_rows_uncorrectable", "remapped_rows_failure", "xid_last"):
            if g["mig_mode"]["current"] and name in ("encoder_utilization", "decoder_utilization"):
                assert g[name] is None
                continue
            assert g[name] is not None, (g["index"], name)
    # the imbalance suggestion never moves work onto the Slurm job's GPU
    suggestion = doc["imbalance"]["suggestion"]
    assert suggestion is not None and suggestion["to_gpu"] != 6


def test_demo_exporter_serves_every_dcgm_parity_series():
    from gputui.core import metric_names as mn
    from gputui.core.config import Settings
    from gputui.core.demo import FROZEN_EPOCH
    from gputui.core.machine import open_machine
    from gputui.exporter.metrics import ExportOptions, PollStatus, build_families

    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    poller = machine.poller(Settings(), container_wait=2.0)
    try:
        snap = poller.poll()
    finally:
        poller.close()
    families = {f.name: f for f in build_families(PollStatus(snap, True, 0.0), ExportOptions(dcgm_names=True))}
    for metric in mn.DCGM_GPU:
        # every GPU (GPU 5 in MIG mode reports no utilization, as a real driver does)
        assert metric.name in families and len(families[metric.name].samples) >= 7, metric.name
    assert {mn.SLURM_JOB_INFO.name, mn.RESERVATION.name, mn.RULE_VIOLATION.name} <= set(families)


def test_demo_doctor_says_the_demo_has_no_docker_for_a_guard(capsys):
    rc, out, err = run(capsys, "doctor", "--demo", "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    guard, rules = checks["guard"], checks["house-rules"]
    assert guard["status"] == "skip" and guard["message"].startswith("Demo:"), guard
    assert "no authorization plugin" not in guard["message"]
    assert rules["status"] == "pass" and "2 live reservation(s)" in rules["message"], rules


def test_demo_kill_job_cancels_on_the_simulation_and_audits_to_the_demo_log(capsys, _state):
    rc, out, err = run(capsys, "kill", "--demo", "--job", "81734", "--yes")
    assert rc == 0, err
    assert out.startswith("(demo: this acts on the simulated server, no real job is cancelled)")
    assert "Job 81734 (carol) is ended; Slurm can give GPU 6 again." in out
    state = _state / "state" / "gputui"
    assert not (state / "audit.jsonl").exists()
    records = [json.loads(line) for line in (state / "demo-audit.jsonl").read_text().splitlines()]
    assert records[-1]["action"] == "kill-job" and records[-1]["demo"] is True
