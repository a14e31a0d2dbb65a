"""gputui against the fake driver: real nvidia-ml-py, real processes, a subprocess per run.

Every test here starts gputui (or the probe child, which holds one NvmlSource
across several polls) with LD_LIBRARY_PATH pointing at the fake
libnvidia-ml.so.1 built from tests/fakenvml/fakenvml.c. Nothing is monkeypatched.
"""

from __future__ import annotations

import ctypes.util
import getpass
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from tests.fakenvml.scenario import FakeNvml, GiB, MiB, fake_uuid, gpu, process, scenario

pytestmark = pytest.mark.integration

#: Every numeric GPU field of the JSON schema and the scenario field that feeds it.
GPU_FIELDS = {
    "utilization_gpu": "utilization",
    "utilization_memory": "utilization",
    "memory_used": "memory",
    "memory_total": "memory",
    "temperature": "temperature",
    "power_draw": "power_draw",
    "power_limit": "power_limit",
    "fan_speed": "fan_speed",
    "clock_sm": "clock_sm",
    "clock_memory": "clock_memory",
    "clock_sm_max": "clock_sm_max",
    "clock_memory_max": "clock_memory_max",
    "pstate": "pstate",
    "ecc_errors": "ecc_errors",
    "persistence_mode": "persistence_mode",
    "pci_bus_id": "pci_bus_id",
}


@pytest.fixture
def sleepers():
    """Real processes to present as GPU processes; killed and reaped afterwards."""
    procs: list[subprocess.Popen] = []

    def spawn(seconds: int = 300) -> subprocess.Popen:
        p = subprocess.Popen(["sleep", str(seconds)])
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        p.kill()
        p.wait()


def absent_pid() -> int:
    """A PID that cannot exist: above the kernel's pid_max."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1000


def by_pid(gpu_json: dict) -> dict[int, dict]:
    return {p["pid"]: p for p in gpu_json["processes"]}


# -- what a user sees in `gputui snapshot --json` -------------------------------------------


def test_snapshot_shows_real_processes_with_owner_command_and_start(fake_nvml: FakeNvml, sleepers) -> None:
    a, b = sleepers(301), sleepers(302)
    ghost = absent_pid()
    fake_nvml.write(scenario([
        gpu(0, utilization_gpu=93, processes=[
            process(a.pid, used_memory=2 * GiB, sm=40),
            process(b.pid, used_memory=512 * MiB, type="graphics"),
            process(ghost, used_memory=3 * GiB, sm=7),
        ]),
        gpu(1, processes=[
            process(a.pid, used_memory=1 * GiB, sm=5),
            process(b.pid, used_memory=256 * MiB, type="compute+graphics"),
        ]),
    ]))
    snap = fake_nvml.snapshot()

    assert [g["index"] for g in snap["gpus"]] == [0, 1]
    assert snap["driver_version"] == "550.54.15" and snap["cuda_driver_version"] == "12.4"
    g0, g1 = by_pid(snap["gpus"][0]), by_pid(snap["gpus"][1])
    assert set(g0) == {a.pid, b.pid, ghost} and set(g1) == {a.pid, b.pid}

    me = getpass.getuser()
    for pid, args in ((a.pid, "sleep 301"), (b.pid, "sleep 302")):
        row = g0[pid]
        assert row["visible"] is True
        assert row["user"] == me
        assert row["command"] == args
        started = datetime.fromisoformat(row["started"]).timestamp()
        assert abs(started - psutil.Process(pid).create_time()) < 1.0
        assert row["host_memory"] == psutil.Process(pid).memory_info().rss
    assert g0[a.pid]["gpu_memory"] == 2 * GiB and g0[a.pid]["sm_utilization"] == 40
    assert g0[a.pid]["type"] == "compute"
    assert g0[b.pid]["type"] == "graphics"
    # NVML answered the utilization query but had no sample for this PID: idle, not unknown.
    assert g0[b.pid]["sm_utilization"] == 0
    assert g1[b.pid]["type"] == "compute+graphics" and g1[b.pid]["gpu_memory"] == 256 * MiB
    assert g1[a.pid]["sm_utilization"] == 5

    # A PID NVML lists but that does not exist is kept and marked, with NVML's numbers.
    row = g0[ghost]
    assert row["visible"] is False
    assert row["gpu_memory"] == 3 * GiB and row["sm_utilization"] == 7
    assert row["user"] is None and row["command"] is None and row["started"] is None


def test_cpu_percent_needs_two_samples(fake_nvml: FakeNvml, sleepers) -> None:
    a = sleepers()
    fake_nvml.write(scenario([gpu(0, processes=[process(a.pid)])]))
    once = by_pid(fake_nvml.snapshot()["gpus"][0])[a.pid]
    assert once["cpu_percent"] is None  # one look cannot give a rate
    observed = by_pid(fake_nvml.snapshot("--window", "0.5")["gpus"][0])[a.pid]
    assert observed["cpu_percent"] == 0.0  # a sleeping process, measured


def test_unsupported_fields_are_null_and_the_rest_stays(fake_nvml: FakeNvml, sleepers) -> None:
    a = sleepers()
    everything = sorted(set(GPU_FIELDS.values()) | {"throttle_reasons", "process_utilization"})
    fake_nvml.write(scenario(
        [
            gpu(0, unsupported=everything, throttle_reasons=["hw_thermal_slowdown"],
                processes=[process(a.pid, sm=60)]),
            gpu(1, temperature=71, power_draw=301.25, fan_speed=55, pstate=2, ecc_errors=3,
                throttle_reasons=["hw_thermal_slowdown"], processes=[process(a.pid, sm=60)]),
        ],
        unsupported=["cuda_driver_version"],
    ))
    snap = fake_nvml.snapshot()
    assert snap["cuda_driver_version"] is None and snap["driver_version"] == "550.54.15"
    g0, g1 = snap["gpus"]
    for key in GPU_FIELDS:
        assert g0[key] is None, key
    assert g0["throttle_reasons"] is None  # not reported: null (N/A), not [] ("none active")
    assert g0["name"] == "NVIDIA A100-SXM4-80GB" and g0["uuid"] == fake_uuid(0) and g0["lost"] is False
    assert by_pid(g0)[a.pid]["sm_utilization"] is None  # utilization query unsupported: unknown, not 0
    assert by_pid(g0)[a.pid]["gpu_memory"] == 1 * GiB

    assert (g1["temperature"], g1["power_draw"], g1["fan_speed"], g1["pstate"], g1["ecc_errors"]) == (
        71, 301.25, 55, 2, 3)
    assert g1["power_limit"] == 400.0 and g1["memory_total"] == 80 * GiB
    assert g1["clock_sm_max"] == 1410 and g1["persistence_mode"] is True
    assert g1["pci_bus_id"] == "00000000:0F:00.0"
    assert g1["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert by_pid(g1)[a.pid]["sm_utilization"] == 60


def test_memory_the_driver_cannot_attribute_is_null(fake_nvml: FakeNvml, sleepers) -> None:
    a = sleepers()
    fake_nvml.write(scenario([gpu(0, processes=[process(a.pid, used_memory=None)])]))
    row = by_pid(fake_nvml.snapshot()["gpus"][0])[a.pid]
    assert row["gpu_memory"] is None and row["visible"] is True


def test_a_lost_gpu_is_flagged_and_the_others_go_on(fake_nvml: FakeNvml, sleepers) -> None:
    a = sleepers()
    fake_nvml.write(scenario([
        gpu(0, utilization_gpu=50, processes=[process(a.pid)]),
        gpu(1, lost=True, processes=[process(a.pid)]),
        gpu(2, utilization_gpu=7),
    ]))
    res = fake_nvml.run_gputui("snapshot", "--json", "--no-docker")
    assert res.returncode == 0, res.stderr
    g0, g1, g2 = json.loads(res.stdout)["gpus"]
    assert g1["lost"] is True and g1["index"] == 1
    assert g1["utilization_gpu"] is None and g1["memory_used"] is None and g1["processes"] == []
    assert (g0["lost"], g0["utilization_gpu"], g2["lost"], g2["utilization_gpu"]) == (False, 50, False, 7)
    assert [p["pid"] for p in g0["processes"]] == [a.pid]


def test_a_gpu_lost_while_running_keeps_its_identity_and_recovers(fake_nvml: FakeNvml) -> None:
    healthy = scenario([gpu(0, utilization_gpu=10), gpu(1, utilization_gpu=20)])
    fake_nvml.write(healthy)
    with fake_nvml.probe() as probe:
        assert probe.ask("open")["devices"] == 2
        before = probe.ask("read")["gpus"][1]
        assert before["lost"] is False and before["utilization_gpu"] == 20

        fake_nvml.write(scenario([gpu(0, utilization_gpu=11), gpu(1, lost=True)]))
        reading = probe.ask("read")
        g0, g1 = reading["gpus"]
        assert g1["lost"] is True
        assert (g1["index"], g1["uuid"], g1["name"], g1["pci_bus_id"]) == (
            1, before["uuid"], before["name"], before["pci_bus_id"])
        assert g1["utilization_gpu"] is None and "1" not in reading["processes"]
        assert g0["lost"] is False and g0["utilization_gpu"] == 11

        fake_nvml.write(scenario([gpu(0), gpu(1, utilization_gpu=33)]))
        g1 = probe.ask("read")["gpus"][1]
        assert g1["lost"] is False and g1["utilization_gpu"] == 33


# -- drivers without the newest functions -----------------------------------------------------

NEW_PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3")
V2_PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2")


@pytest.mark.parametrize(
    ("without", "used"),
    [
        (NEW_PROCESS_CALLS, "nvmlDeviceGetComputeRunningProcesses_v2"),
        (NEW_PROCESS_CALLS + V2_PROCESS_CALLS, "nvmlDeviceGetComputeRunningProcesses"),
    ],
    ids=["v2", "v1"],
)
def test_old_drivers_still_list_processes(fake_nvml_factory, sleepers, without, used) -> None:
    fake = fake_nvml_factory(without=without)
    a, b = sleepers(), sleepers()
    fake.write(scenario([gpu(0, processes=[process(a.pid, used_memory=5 * GiB, sm=30),
                                           process(b.pid, used_memory=None, type="compute+graphics")])]))
    snap = fake.snapshot()
    rows = by_pid(snap["gpus"][0])
    assert rows[a.pid]["gpu_memory"] == 5 * GiB and rows[a.pid]["sm_utilization"] == 30
    assert rows[b.pid]["gpu_memory"] is None and rows[b.pid]["type"] == "compute+graphics"
    assert rows[a.pid]["user"] == getpass.getuser()
    calls = fake.calls()
    assert calls.get(used, 0) >= 1
    assert not any(calls.get(name) for name in without)


def test_a_driver_without_memory_v2_reports_v1_memory(fake_nvml_factory) -> None:
    fake = fake_nvml_factory(without=("nvmlDeviceGetMemoryInfo_v2",))
    fake.write(scenario([gpu(0, memory_used=10 * GiB, memory_reserved=512 * MiB)]))
    g = fake.snapshot()["gpus"][0]
    # v1 counts the driver's reserved memory as used, as nvidia-smi on such drivers does
    assert g["memory_used"] == 10 * GiB + 512 * MiB and g["memory_total"] == 80 * GiB
    assert fake.calls().get("nvmlDeviceGetMemoryInfo", 0) >= 1

    with_v2 = fake_nvml_factory()
    with_v2.write(scenario([gpu(0, memory_used=10 * GiB, memory_reserved=512 * MiB)]))
    assert with_v2.snapshot()["gpus"][0]["memory_used"] == 10 * GiB


def test_older_fallbacks_for_throttle_power_limit_and_cuda_version(fake_nvml_factory) -> None:
    fake = fake_nvml_factory(without=("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetEnforcedPowerLimit",
                                      "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetProcessUtilization"))
    # an old driver: no power-limit field id (190) in nvmlDeviceGetFieldValues either
    fake.write(scenario([gpu(0, throttle_reasons=["sw_power_cap"], power_limit=350.0, unsupported_field_ids=[190],
                             processes=[process(os.getpid(), sm=20)])], cuda_driver_version=11080))
    snap = fake.snapshot()
    g = snap["gpus"][0]
    assert g["throttle_reasons"] == ["sw_power_cap"] and g["power_limit"] == 350.0
    assert snap["cuda_driver_version"] == "11.8"
    assert by_pid(g)[os.getpid()]["sm_utilization"] is None  # no function: unknown
    calls = fake.calls()
    assert calls.get("nvmlDeviceGetCurrentClocksThrottleReasons", 0) >= 1
    assert calls.get("nvmlDeviceGetPowerManagementLimit", 0) >= 1


# -- no usable driver -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "phrase", "args"),
    [
        ("driver_not_loaded", "kernel driver is not loaded", ("snapshot", "--json")),
        ("no_permission", "no permission", ("snapshot", "--json")),
        ("lib_mismatch", "different versions", ("snapshot", "--json")),
        ("unknown", "could not be initialised", ("snapshot", "--json")),
        ("driver_not_loaded", "kernel driver is not loaded", ("--once",)),
        ("lib_mismatch", "different versions", ()),  # not a tty: plain gputui prints once
    ],
    ids=["driver", "permission", "mismatch", "unknown", "once", "plain"],
)
def test_init_failure_is_one_sentence_and_exit_3(fake_nvml: FakeNvml, error, phrase, args) -> None:
    fake_nvml.write(scenario([gpu(0)], init_error=error))
    res = fake_nvml.run_gputui(*args, "--no-docker")
    assert res.returncode == 3
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert phrase in lines[0] and "gputui --demo" in lines[0]
    assert "Traceback" not in res.stderr


def test_no_driver_library_is_one_sentence_and_exit_3(tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml; cannot test its absence")
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--json", "--no-docker"], env=env,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 3
    assert "libnvidia-ml.so.1 was not found" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- cost: what one poll asks the driver --------------------------------------------------------

PER_POLL = (
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetFieldValues", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
)
STATIC = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMinorNumber",
          "nvmlDeviceGetHandleByIndex_v2")
#: (the power limit and ECC errors come with the per-poll field values batch, power draw too)
SLOW = ("nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization")
BATCHED = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEccErrors")


def test_each_thing_is_read_once_per_poll_and_static_facts_once(fake_nvml: FakeNvml) -> None:
    gpus, polls = 3, 5
    fake_nvml.write(scenario([gpu(i, unsupported=["fan_speed"], processes=[process(os.getpid(), sm=1)])
                              for i in range(gpus)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(polls):
            assert "error" not in probe.ask("read")
        probe.ask("calls")
        calls = fake_nvml.calls()
    for name in PER_POLL:
        assert calls.get(name) == polls * gpus, name
    assert calls["nvmlDeviceGetClockInfo"] == 2 * polls * gpus  # SM and memory
    for name in STATIC:
        assert calls.get(name) == gpus, name
    assert calls["nvmlDeviceGetMaxClockInfo"] == 2 * gpus
    for name in SLOW:  # five polls well inside the 5 s cache
        assert calls.get(name) == gpus, name
    assert calls["nvmlDeviceGetFanSpeed"] == gpus  # NOT_SUPPORTED is not asked again
    assert not any(calls.get(name) for name in BATCHED)
    system = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetNVMLVersion",
              "nvmlDeviceGetCount_v2", "nvmlInitWithFlags")
    assert all(calls.get(name) == 1 for name in system)
    steady = sum(calls.get(n, 0) for n in PER_POLL) + calls["nvmlDeviceGetClockInfo"]
    assert steady / (polls * gpus) == 11


@pytest.mark.parametrize("dcgm", [False, True])
def test_the_exporter_asks_nvml_only_for_what_it_exports(fake_nvml: FakeNvml, dcgm: bool) -> None:
    """No exported series carries the P-state, and only --dcgm-names the memory clock: the exporter's
    source does not ask for them (they read as N/A), and asks everything else as before."""
    gpus, polls = 2, 3
    fake_nvml.write(scenario([gpu(i, pstate=2, clock_memory=1593, processes=[process(os.getpid(), sm=1)])
                              for i in range(gpus)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        assert probe.ask("tune dcgm" if dcgm else "tune")["ok"]
        for _ in range(polls):
            g = probe.ask("read")["gpus"][0]
        probe.ask("calls")
        calls = fake_nvml.calls()
    assert g["pstate"] is None and g["clock_memory"] == (1593 if dcgm else None)
    assert g["clock_sm"] is not None and g["temperature"] is not None and g["power_draw"] is not None
    assert calls.get("nvmlDeviceGetPerformanceState", 0) == 0
    assert calls["nvmlDeviceGetClockInfo"] == (2 if dcgm else 1) * polls * gpus
    for name in PER_POLL:
        if name != "nvmlDeviceGetPerformanceState":
            assert calls.get(name) == polls * gpus, name


def test_an_idle_gpu_does_not_ask_for_process_utilization(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0), gpu(1, processes=[process(os.getpid())])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        probe.ask("read")
        probe.ask("read")
        probe.ask("calls")
    assert fake_nvml.calls()["nvmlDeviceGetProcessUtilization"] == 2


def test_one_shot_snapshot_reads_static_facts_once(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    fake_nvml.snapshot()
    calls = fake_nvml.calls()
    assert calls["nvmlShutdown"] == 1
    for name in STATIC:
        assert calls[name] == 4, name


# -- a long-running reader ------------------------------------------------------------------------


def test_values_changed_while_running_are_seen_at_the_next_poll(fake_nvml: FakeNvml, sleepers) -> None:
    a = sleepers()
    fake_nvml.write(scenario([gpu(0, utilization_gpu=5, temperature=40)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        g = probe.ask("read")["gpus"][0]
        assert (g["utilization_gpu"], g["temperature"]) == (5, 40)
        fake_nvml.write(scenario([gpu(0, utilization_gpu=97, temperature=84,
                                      processes=[process(a.pid, used_memory=7 * GiB, sm=88)])]))
        reading = probe.ask("read")
        g = reading["gpus"][0]
        assert (g["utilization_gpu"], g["temperature"]) == (97, 84)
        assert reading["processes"]["0"] == [
            {"pid": a.pid, "type": "compute", "gpu_memory": 7 * GiB, "sm_utilization": 88, "mig_device": None}]


def test_process_lists_read_unchanged_poll_after_poll_still_show_every_change(fake_nvml: FakeNvml, sleepers) -> None:
    """The source keeps what it read from each process list and SM sample list while the driver's
    bytes stay the same: a change in memory, SM, type or membership must still show at once."""
    a, b = sleepers(), sleepers()

    def procs(**changes: object) -> list[dict]:
        first = {"used_memory": 2 * GiB, "sm": 10, "type": "compute", **changes}
        return [process(a.pid, **first), process(b.pid, used_memory=3 * GiB, sm=20)]  # type: ignore[arg-type]

    def rows(reading: dict) -> dict[int, tuple]:
        return {p["pid"]: (p["type"], p["gpu_memory"], p["sm_utilization"]) for p in reading["processes"]["0"]}

    with fake_nvml.probe() as probe:
        probe.ask("open")
        steps = [({}, (a.pid, ("compute", 2 * GiB, 10))),
                 ({}, (a.pid, ("compute", 2 * GiB, 10))),  # the same bytes again
                 ({"used_memory": 5 * GiB}, (a.pid, ("compute", 5 * GiB, 10))),
                 ({"used_memory": 5 * GiB, "sm": 70}, (a.pid, ("compute", 5 * GiB, 70))),
                 ({"used_memory": 5 * GiB, "sm": 70, "type": "compute+graphics"},
                  (a.pid, ("compute+graphics", 5 * GiB, 70))),
                 ({"used_memory": 5 * GiB, "sm": 70, "type": "compute+graphics"},
                  (a.pid, ("compute+graphics", 5 * GiB, 70)))]
        for changes, (pid, expected) in steps:
            fake_nvml.write(scenario([gpu(0, processes=procs(**changes))]))
            got = rows(probe.ask("read"))
            assert got[pid] == expected, changes
            assert got[b.pid] == ("compute", 3 * GiB, 20)
        fake_nvml.write(scenario([gpu(0, processes=procs()[1:])]))
        assert set(rows(probe.ask("read"))) == {b.pid}
        fake_nvml.write(scenario([gpu(0, processes=procs())]))
        assert set(rows(probe.ask("read"))) == {a.pid, b.pid}


def test_an_impossible_value_stays_na_and_warned_poll_after_poll_until_a_real_one_comes(fake_nvml: FakeNvml,
                                                                                        sleepers) -> None:
    """An unchanged reading is not judged again: its verdict (N/A and the warning) must still come
    with every poll, and the first plausible value must show."""
    a = sleepers()
    hostile = scenario([gpu(0, temperature=4294967295, power_draw=50.0, memory_used=10 * GiB,
                            processes=[process(a.pid, used_memory=-104857600, sm=10)]), gpu(1, temperature=41)])
    fake_nvml.write(hostile)
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            reading = probe.ask("read")
            g0 = reading["gpus"][0]
            assert g0["temperature"] is None and g0["power_draw"] == 50.0
            assert reading["processes"]["0"][0]["gpu_memory"] is None
            assert [e for e in reading["errors"] if "impossible values" in e] == [
                f"GPU 0: the driver reported impossible values, shown as N/A: temperature (4294967295), "
                f"GPU memory of PID {a.pid} (18446744073604694016 bytes)."]
            assert reading["gpus"][1]["temperature"] == 41
        fake_nvml.write(scenario([gpu(0, temperature=55, power_draw=50.0, memory_used=10 * GiB,
                                      processes=[process(a.pid, used_memory=GiB, sm=10)]), gpu(1, temperature=41)]))
        reading = probe.ask("read")
        assert reading["gpus"][0]["temperature"] == 55 and reading["processes"]["0"][0]["gpu_memory"] == GiB
        assert not [e for e in reading["errors"] if "impossible values" in e]


def test_a_query_that_keeps_failing_warns_until_it_recovers(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, errors={"temperature": "unknown", "power_draw": "unknown"}), gpu(1)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        first = probe.ask("read")
        assert first["gpus"][0]["temperature"] is None and first["errors"] == []  # one failure is not news
        second = probe.ask("poll")
        assert second["gpus"][0]["temperature"] is None and second["gpus"][1]["temperature"] == 34
        assert len(second["warnings"]) == 1
        warning = second["warnings"][0]
        assert warning.startswith("GPU 0:") and "temperature" in warning and "power draw" in warning
        assert "Unknown Error" in warning
        fake_nvml.write(scenario([gpu(0), gpu(1)]))
        third = probe.ask("poll")
        assert third["gpus"][0]["temperature"] == 34 and third["warnings"] == []


def test_library_info_for_doctor(fake_nvml_factory) -> None:
    fake = fake_nvml_factory(without=NEW_PROCESS_CALLS)
    fake.write(scenario([
        gpu(0, persistence_mode=False, retired_pages_dbe=2, retired_pages_pending=1,
            remapped_rows_uncorrectable=1, remapped_rows_pending=1, processes=[process(os.getpid())]),
        gpu(1, unsupported=["retired_pages", "remapped_rows"]),
    ]))
    with fake.probe() as probe:
        probe.ask("open")
        probe.ask("read")
        info = probe.ask("info")
    assert info["driver_version"] == "550.54.15" and info["nvml_version"] == "12.550.54.15"
    assert info["nvidia_ml_py_version"] and info["library_path"].startswith(str(fake.lib_dir))
    assert info["process_struct"] == "v2"
    assert set(NEW_PROCESS_CALLS) <= set(info["missing_functions"])
    d0, d1 = info["devices"]
    assert d0["persistence_mode"] is False and d0["retired_pages_double_bit"] == 2
    assert d0["retired_pages_pending"] is True and d0["remapped_rows_uncorrectable"] == 1
    assert d0["remapped_rows_pending"] is True and d0["remapped_rows_failure"] is False
    assert d1["retired_pages_double_bit"] is None and d1["remapped_rows_uncorrectable"] is None
    assert d1["persistence_mode"] is True


# -- another PID namespace ------------------------------------------------------------------------


def _can_unshare_pid() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    res = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    return res.returncode == 0


def test_pids_from_another_namespace_are_kept_and_explained(fake_nvml: FakeNvml, sleepers) -> None:
    if not _can_unshare_pid():
        pytest.skip("cannot create a PID namespace here (needs root or user namespaces)")
    a = sleepers()
    fake_nvml.write(scenario([gpu(0, processes=[process(a.pid, used_memory=3 * GiB, sm=12)])]))
    env = fake_nvml.env()
    res = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "gputui", "snapshot", "--json",
         "--no-docker"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    row = by_pid(snap["gpus"][0])[a.pid]
    assert row["visible"] is False and row["gpu_memory"] == 3 * GiB and row["sm_utilization"] == 12
    assert any("--pid=host" in w for w in snap["warnings"])


def test_getters_that_answered_and_then_fail_read_na_and_come_back(fake_nvml: FakeNvml, sleepers) -> None:
    """A per-poll getter that answered is called again as it is (its function and out-parameter kept):
    when it starts failing its old value must not be shown, a refusal for good stops it being asked,
    and a passing failure recovers with the new value."""
    p = sleepers()
    fields = ("utilization", "memory", "temperature", "fan_speed", "clock_sm", "pstate", "throttle_reasons",
              "compute_processes")
    fake_nvml.write(scenario([gpu(0, utilization_gpu=40, temperature=50, fan_speed=30, throttle_reasons=0x4,
                                  processes=[process(p.pid, used_memory=GiB)]), gpu(1)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(2):  # answered twice: the kept calls are in use
            g0 = probe.ask("read")["gpus"][0]
            assert (g0["utilization_gpu"], g0["temperature"], g0["fan_speed"]) == (40, 50, 30)
            assert g0["memory_used"] is not None and g0["pstate"] is not None and g0["throttle_reasons"]
        assert [q["pid"] for q in probe.ask("read")["processes"]["0"]] == [p.pid]
        fake_nvml.write(scenario([gpu(0, utilization_gpu=41, temperature=51, fan_speed=31,
                                      processes=[process(p.pid, used_memory=GiB)],
                                      errors=dict.fromkeys(fields, "unknown")), gpu(1)]))
        failing = probe.ask("read")
        g0 = failing["gpus"][0]
        for key in ("utilization_gpu", "utilization_memory", "memory_used", "memory_total", "temperature",
                    "fan_speed", "clock_sm", "pstate", "throttle_reasons"):
            assert g0[key] is None, key
        assert failing["processes"].get("0", []) == []
        assert failing["gpus"][1]["temperature"] == 34
        warned = probe.ask("poll")["warnings"]
        assert len(warned) == 1 and "temperature" in warned[0] and "memory" in warned[0]
        fake_nvml.write(scenario([gpu(0, utilization_gpu=42, temperature=52, fan_speed=32,
                                      processes=[process(p.pid, used_memory=GiB)]), gpu(1)]))
        back = probe.ask("poll")
        g0 = back["gpus"][0]
        assert (g0["utilization_gpu"], g0["temperature"], g0["fan_speed"]) == (42, 52, 32)
        assert g0["memory_used"] is not None and g0["pstate"] is not None and back["warnings"] == []
        # refused for good (NOT_SUPPORTED) after answering: N/A, and not asked again
        fake_nvml.write(scenario([gpu(0, utilization_gpu=43, errors={"temperature": "not_supported"}), gpu(1)]))
        assert probe.ask("read")["gpus"][0]["temperature"] is None
        fake_nvml.write(scenario([gpu(0, utilization_gpu=44, temperature=60), gpu(1)]))
        g0 = probe.ask("read")["gpus"][0]
        assert g0["temperature"] is None and g0["utilization_gpu"] == 44


def test_a_process_list_that_outgrows_the_kept_buffer_lists_every_process(fake_nvml: FakeNvml) -> None:
    """The process-list and SM-sample calls that answered are made again with their kept buffers: a
    list longer than those buffers must still come back whole (every process, every SM figure), a
    shorter one after it too, and failing samples read N/A until they answer again."""
    base = absent_pid()

    def listed(count: int, **kw) -> dict[int, int | None]:
        fake_nvml.write(scenario([gpu(0, processes=[process(base + i, used_memory=GiB, sm=1 + i % 90)
                                                    for i in range(count)], **kw)]))
        return {p["pid"]: p["sm_utilization"] for p in probe.ask("read")["processes"]["0"]}

    def expected(count: int) -> dict[int, int | None]:
        return {base + i: 1 + i % 90 for i in range(count)}

    with fake_nvml.probe() as probe:
        probe.ask("open")
        assert listed(2) == expected(2)
        assert listed(2) == expected(2)  # the kept calls
        assert listed(100) == expected(100)
        assert listed(100) == expected(100)
        assert listed(3) == expected(3)
        assert listed(3, errors={"process_utilization": "unknown"}) == dict.fromkeys(expected(3), None)
        assert listed(3) == expected(3)
