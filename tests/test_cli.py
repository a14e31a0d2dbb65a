"""The CLI as an operator scripts it: exit codes, one-sentence errors, JSON schema, --gpu."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui import __version__

pytestmark = pytest.mark.functional  # the installed gputui in subprocesses


def gputui(*args, env=None, input=None):
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, input=input, timeout=60,
    )


SNAPSHOT_KEYS = {"host", "time", "driver_version", "cuda_driver_version", "gpus"}
GPU_KEYS = {
    "index", "uuid", "name", "pci_bus_id", "utilization_gpu", "utilization_memory", "memory_used", "memory_total",
    "temperature", "power_draw", "power_limit", "fan_speed", "clock_sm", "clock_memory", "pstate",
    "throttle_reasons", "lost", "processes",
}
PROCESS_KEYS = {
    "pid", "type", "gpu_memory", "sm_utilization", "user", "command", "exe", "cpu_percent", "host_memory", "started",
    "visible",
}


def test_version():
    r = gputui("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"gputui {__version__}"


def test_snapshot_json_schema_on_demo():
    r = gputui("snapshot", "--json", "--demo")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert SNAPSHOT_KEYS <= doc.keys()
    assert len(doc["gpus"]) == 8
    for g in doc["gpus"]:
        assert GPU_KEYS <= g.keys()
        for p in g["processes"]:
            assert PROCESS_KEYS <= p.keys()
            assert p["type"] in ("compute", "graphics", "compute+graphics")
    # the story of the seeds: GPU 0 piled up, the rest mostly idle
    util = [g["utilization_gpu"] for g in doc["gpus"]]
    assert util[0] >= 80
    assert sum(u is not None and u <= 25 for u in util[1:]) >= 6
    # GPU 5 is in MIG mode: no load of its own (null, not 0), three MIG devices
    assert util[5] is None and doc["gpus"][5]["mig_mode"] == {"current": True, "pending": True}
    assert [m["profile"] for m in doc["gpus"][5]["mig_devices"]] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    # an SXM board has no fan: N/A is null, not a made-up number
    assert all(g["fan_speed"] is None for g in doc["gpus"])


def test_gpu_filter_restricts_json_and_table():
    doc = json.loads(gputui("snapshot", "--json", "--demo", "--gpu", "0,3").stdout)
    assert [g["index"] for g in doc["gpus"]] == [0, 3]
    doc = json.loads(gputui("snapshot", "--json", "--demo", "--gpu", "2", "--gpu", "5").stdout)
    assert [g["index"] for g in doc["gpus"]] == [2, 5]
    uuid = doc["gpus"][1]["uuid"]
    doc = json.loads(gputui("--demo", "snapshot", "--json", "--gpu", uuid).stdout)
    assert [g["index"] for g in doc["gpus"]] == [5]
    table = gputui("--once", "--demo", "--gpu", "4").stdout
    gpu_rows = [line for line in table.splitlines() if line[:3].strip().isdigit()]
    assert gpu_rows and all(line[:3].strip() == "4" for line in gpu_rows)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--gpu", "9", "--demo", "--once"], "no GPU '9'"),
        (["--gpu", "zero", "--demo", "--once"], "neither a GPU index nor a UUID"),
        (["--frobnicate"], "Unrecognized arguments: --frobnicate"),
        (["--interval", "0.1", "--demo"], "between 0.25 and 3600"),
        (["snapshot", "--window", "soon", "--demo"], "number of seconds"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(args, fragment):
    r = gputui(*args)
    assert r.returncode == 2
    assert fragment in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_once_table_shows_owners_and_containers():
    r = gputui("--once", "--demo")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Driver 550.127.05" in out and "CUDA 12.4" in out
    assert "alice" in out and "bob" in out
    assert "llama-train" in out  # the container behind PID 4101


def test_plain_gputui_without_a_tty_behaves_like_once():
    r = gputui("--demo")  # stdout is a pipe here
    assert r.returncode == 0
    assert "GPU  Name" in r.stdout and "Command" in r.stdout


def test_no_driver_is_one_sentence_exit_3_with_demo_hint(tmp_path):
    # An empty library path: the real nvidia-ml-py finds no libnvidia-ml.so.1 here.
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    for args in (["--once"], ["snapshot", "--json"], []):
        r = gputui(*args, env=env)
        assert r.returncode == 3, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        assert "gputui --demo" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_broken_config_names_file_and_line(tmp_path):
    cfg = tmp_path / "cfg" / "gputui"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text('interval = 1.0\ntheme = "nord"\ninterval_typo = = 3\n')
    r = gputui("--once", "--demo", env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.returncode == 2
    assert str(cfg / "config.toml") in r.stderr and "line 3" in r.stderr


def test_an_interrupted_migration_is_reported_at_the_next_start(tmp_path):
    # root reads journals only from the system journal folder (never a state folder under a home)
    journal = Path(os.environ["GPUTUI_JOURNAL_DIR"]) if os.geteuid() == 0 else tmp_path / "state" / "gputui" / "journal"
    journal.mkdir(parents=True, mode=0o755)
    entry = journal / "migrate-20261129-bert.json"
    entry.write_text(
        json.dumps({"action": "migrate", "summary": "bert-finetune from GPU 0 to GPU 6", "step": "renamed"}))
    entry.chmod(0o600)
    r = gputui("--once", "--demo", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert r.returncode == 0
    assert "An interrupted migrate was found: bert-finetune from GPU 0 to GPU 6" in r.stderr
    assert "gputui migrate --recover" in r.stderr
    r = gputui("snapshot", "--json", "--demo", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    json.loads(r.stdout)  # stdout stays pure JSON; the note goes to stderr
    assert "--recover" in r.stderr
