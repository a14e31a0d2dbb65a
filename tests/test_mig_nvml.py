"""MIG (A100/H100/H200 partitions) read through real nvidia-ml-py over the fake driver.

The fake's MIG ABI is checked first with nvidia-ml-py's own functions (as any
monitor calls them), then gputui's reading, JSON and ``--once`` on top of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakenvml.scenario import FakeNvml, GiB, fake_mig_uuid, gpu, mig_device, process, scenario

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def mig_machine(pids: tuple[int, int] = (4242, 4343)) -> dict:
    """GPU 0 in MIG mode with three instances (two busy), GPU 1 whole, GPU 2 waiting for a reset."""
    return scenario([
        gpu(0, mig_mode=True, mig_devices=[
            mig_device(1, 0, "3g.40gb", processes=[process(pids[0], 12 * GiB)]),
            mig_device(2, 0, "2g.20gb", processes=[process(pids[1], 3 * GiB)]),
            mig_device(9, 0, "1g.10gb"),
        ]),
        gpu(1, processes=[process(5555, 2 * GiB, sm=40)]),
        gpu(2, mig_mode=(False, True)),
    ])


@pytest.fixture
def sleepers():
    procs: list[subprocess.Popen] = []
    for _ in range(2):
        procs.append(subprocess.Popen(["sleep", "300"]))
    yield tuple(p.pid for p in procs)
    for p in procs:
        p.kill()
        p.wait()


_ABI_SCRIPT = textwrap.dedent("""
    import json, pynvml as nv
    nv.nvmlInit()
    out = {}
    h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    out["mode0"] = nv.nvmlDeviceGetMigMode(h0)
    try:
        nv.nvmlDeviceGetMigMode(h1)
    except nv.NVMLError as e:
        out["mode1"] = e.value
    out["max0"] = nv.nvmlDeviceGetMaxMigDeviceCount(h0)
    out["is_mig0"] = bool(nv.nvmlDeviceIsMigDeviceHandle(h0))
    migs = []
    for i in range(out["max0"]):
        try:
            m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h0, i)
        except nv.NVMLError_NotFound:
            migs.append(None)
            continue
        parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        a = nv.nvmlDeviceGetAttributes_v2(m)
        mem = nv.nvmlDeviceGetMemoryInfo(m)
        procs = nv.nvmlDeviceGetComputeRunningProcesses(m)
        try:
            nv.nvmlDeviceGetUtilizationRates(m)
            util = "answered"
        except nv.NVMLError as e:
            util = e.value
        migs.append({
            "is_mig": bool(nv.nvmlDeviceIsMigDeviceHandle(m)),
            "parent_index": nv.nvmlDeviceGetIndex(parent),
            "uuid": nv.nvmlDeviceGetUUID(m), "name": nv.nvmlDeviceGetName(m),
            "gi": nv.nvmlDeviceGetGpuInstanceId(m), "ci": nv.nvmlDeviceGetComputeInstanceId(m),
            "sm": a.multiprocessorCount, "mem_mb": a.memorySizeMB, "total": mem.total, "used": mem.used,
            "pids": [p.pid for p in procs], "util": util,
            "by_uuid_is_mig": bool(nv.nvmlDeviceIsMigDeviceHandle(
                nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(m)))),
        })
    out["migs"] = migs
    def ids(h):
        return [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
    out["card_procs"], out["whole_procs"] = ids(h0), ids(h1)
    try:
        nv.nvmlDeviceGetUtilizationRates(h0)
        out["util0"] = "answered"
    except nv.NVMLError as e:
        out["util0"] = e.value
    try:
        nv.nvmlDeviceGetGpuInstanceId(h1)
    except nv.NVMLError as e:
        out["gi_whole"] = e.value
    print(json.dumps(out))
""")


def test_fake_answers_mig_as_nvidia_ml_py_calls_it(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(mig_machine())
    env = fake_nvml.env()
    res = subprocess.run([sys.executable, "-c", _ABI_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["mode0"] == [1, 1]
    assert out["mode1"] == 3  # a card that cannot do MIG: NOT_SUPPORTED
    assert out["max0"] == 7 and out["is_mig0"] is False
    assert out["migs"][3:] == [None] * 4  # empty slots: NOT_FOUND
    first = out["migs"][0]
    assert first["is_mig"] and first["parent_index"] == 0 and first["by_uuid_is_mig"]
    assert first["uuid"] == fake_mig_uuid(0, 1, 0) and first["name"].endswith("MIG 3g.40gb")
    assert (first["gi"], first["ci"], first["sm"], first["pids"]) == (1, 0, 42, [4242])
    assert first["mem_mb"] == first["total"] // 2**20 and first["used"] > 12 * GiB
    assert first["util"] == 3
    assert [m["gi"] for m in out["migs"][:3]] == [1, 2, 9]
    assert out["card_procs"] == [[4242, 1, 0], [4343, 2, 0]]
    assert out["whole_procs"] == [[5555, 0xFFFFFFFF, 0xFFFFFFFF]]
    assert out["util0"] == 3  # a card in MIG mode reports no load of its own
    assert out["gi_whole"] == 2


def test_snapshot_json_lists_mig_devices_and_their_processes(fake_nvml: FakeNvml, sleepers) -> None:
    fake_nvml.write(mig_machine(sleepers))
    snap = fake_nvml.snapshot()
    g0, g1, g2 = snap["gpus"]
    assert g0["mig_mode"] == {"current": True, "pending": True}
    assert g0["utilization_gpu"] is None  # N/A, never 0
    devs = g0["mig_devices"]
    assert [(m["index"], m["gpu_instance_id"], m["compute_instance_id"], m["profile"], m["sm_count"])
            for m in devs] == [(0, 1, 0, "3g.40gb", 42), (1, 2, 0, "2g.20gb", 28), (2, 9, 0, "1g.10gb", 14)]
    assert devs[0]["uuid"].startswith("MIG-") and devs[0]["processes"] == [sleepers[0]]
    assert devs[1]["processes"] == [sleepers[1]] and devs[2]["processes"] == []
    assert devs[0]["memory_total"] == 40192 * 2**20 and devs[0]["memory_used"] >= 12 * GiB
    procs = {p["pid"]: p for p in g0["processes"]}
    assert procs[sleepers[0]]["mig_device"] == 0 and procs[sleepers[1]]["mig_device"] == 1
    assert procs[sleepers[0]]["user"]  # attributed like any process
    assert g1["mig_mode"] is None and g1["mig_devices"] == [] and g1["processes"][0]["mig_device"] is None
    assert g1["utilization_gpu"] == 0
    assert g2["mig_mode"] == {"current": False, "pending": True} and g2["mig_devices"] == []


def test_once_shows_instances_under_their_card(fake_nvml: FakeNvml, sleepers) -> None:
    fake_nvml.write(mig_machine(sleepers))
    res = fake_nvml.run_gputui("--once", "--no-docker")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    card = next(i for i, line in enumerate(lines) if line.lstrip().startswith("0  NVIDIA"))
    rows = lines[card + 1:card + 4]
    assert all(r.lstrip().startswith("└") for r in rows)
    assert "0:0 MIG 3g.40gb" in rows[0] and "GI 1 CI 0" in rows[0] and "1 proc" in rows[0]
    assert "0:2 MIG 1g.10gb" in rows[2] and "idle" in rows[2] and fake_mig_uuid(0, 9, 0) in rows[2]
    assert lines[card + 4].lstrip().startswith("1  NVIDIA")
    assert any(line.startswith("0:1") and str(sleepers[1]) in line for line in lines)
    assert "per-instance load is not reported in MIG mode" in res.stdout
    assert "GPU 2: MIG mode turns on at the next GPU reset" in res.stdout
    assert "Traceback" not in res.stderr


def test_mig_enabled_without_instances_says_how_to_create_them(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, mig_mode=True)]))
    res = fake_nvml.run_gputui("--once", "--no-docker")
    assert res.returncode == 0, res.stderr
    assert "no MIG devices exist" in res.stdout and "nvidia-smi mig -i 0 -cgi" in res.stdout


def test_driver_without_mig_functions_is_na(fake_nvml_factory) -> None:
    fake = fake_nvml_factory(without=("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                                      "nvmlDeviceGetMigDeviceHandleByIndex"))
    fake.write(mig_machine())
    snap = fake.snapshot()
    assert snap["gpus"][0]["mig_mode"] is None and snap["gpus"][0]["mig_devices"] == []
    assert snap["warnings"] == []  # a missing function is N/A, not an error


def test_instances_created_while_running_appear_and_a_reset_restores_utilization(fake_nvml: FakeNvml) -> None:
    """A long-running source sees MIG devices created after it started, and after the reset that turns
    MIG off it reads the card's utilization again (it was NOT_SUPPORTED only while MIG was on)."""
    fake_nvml.write(scenario([gpu(0, mig_mode=True)]))
    with fake_nvml.probe(env_extra={"GPUTUI_PROBE_SLOW_TTL": "0"}) as probe:
        assert probe.ask("open")["ok"]
        first = probe.ask("read")["gpus"][0]
        assert first["mig_devices"] == [] and first["utilization_gpu"] is None
        fake_nvml.write(scenario([gpu(0, mig_mode=True, mig_devices=[mig_device(1, 0, "7g.80gb")])]))
        assert [m["profile"] for m in probe.ask("read")["gpus"][0]["mig_devices"]] == ["7g.80gb"]
        fake_nvml.write(scenario([gpu(0, mig_mode=False, utilization_gpu=55)]))
        after = probe.ask("read")["gpus"][0]
        after = probe.ask("read")["gpus"][0]  # the poll after the mode change asks utilization again
        assert after["mig_mode"] == {"current": False, "pending": False}
        assert after["mig_devices"] == [] and after["utilization_gpu"] == 55


def _nvitop() -> str | None:
    exe = os.environ.get("GPUTUI_TEST_NVITOP") or str(REPO / "benchmarks" / ".venv" / "bin" / "nvitop")
    return exe if Path(exe).exists() else shutil.which("nvitop")


def test_nvitop_sees_the_same_instances(fake_nvml: FakeNvml) -> None:
    """The peer tool reads our fake the same way: same MIG devices, no traceback."""
    exe = _nvitop()
    require(exe is not None, "nvitop is not installed (set GPUTUI_TEST_NVITOP or run benchmarks/all.sh once)")
    assert exe is not None
    fake_nvml.write(mig_machine())
    res = subprocess.run([exe, "--once"], env=fake_nvml.env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    for label, profile, gi in (("0:0", "3g.40gb", 1), ("0:1", "2g.20gb", 2), ("0:2", "1g.10gb", 9)):
        assert any(label in line and profile in line and f"GI/CI: {gi}/0" in line
                   for line in res.stdout.splitlines()), res.stdout
