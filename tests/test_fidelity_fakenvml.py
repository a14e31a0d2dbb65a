"""Real-world nvidia-smi cases replayed through the fake driver (issue 13).

Each scenario is a situation seen on production servers that once printed something
misleading: a B200 drawing more than 1000 W, an H100 with ``ERR!`` fields (queries
failing with NVML_ERROR_UNKNOWN, which is not NOT_SUPPORTED), H200s with 141 GB of
memory, a 55-character board name, a card busy with processes this namespace
cannot list. Real nvidia-ml-py reads the fake ``libnvidia-ml.so.1``; the assertions
are about what ``gputui --once`` and ``snapshot --json`` show a person.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.fakenvml.scenario import FakeNvml, GiB, MiB, gpu, process, scenario

pytestmark = pytest.mark.integration

B200 = {"name": "NVIDIA B200", "memory_total": 183359 * MiB, "power_limit": 1000.0}
H200 = {"name": "NVIDIA H200", "memory_total": 143771 * MiB, "power_limit": 700.0}
LONG_NAME = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
assert len(LONG_NAME) == 55


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "300"])
    yield p
    p.kill()
    p.wait()


def once(fake: FakeNvml) -> str:
    res = fake.run_gputui("--once", "--no-docker")
    assert res.returncode == 0, res.stderr
    return res.stdout


def gpu_line(text: str, index: int) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{index:>3}  "))


def test_a_1000_w_board_keeps_its_cap_and_unit(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, **B200, power_draw=192.0), gpu(1, **B200, power_draw=1006.4)]))
    text = once(fake_nvml)
    assert "192 / 1000 W" in gpu_line(text, 0)
    assert "1006 / 1000 W" in gpu_line(text, 1)
    assert "…" not in gpu_line(text, 1)


def test_err_fields_unknown_are_na_and_distinct_from_not_supported(fake_nvml: FakeNvml) -> None:
    """ERR! in nvidia-smi is NVML_ERROR_UNKNOWN: shown as N/A (never 0, never glued to a unit), reported
    as a driver problem; NOT_SUPPORTED is a plain N/A with no warning."""
    fake_nvml.write(scenario([
        gpu(0, name="NVIDIA H100 80GB HBM3", power_limit=700.0,
            errors={"power_draw": "unknown", "fan_speed": "unknown", "pstate": "unknown",
                    "throttle_reasons": "unknown"}),
        gpu(1, name="NVIDIA H100 80GB HBM3", power_limit=700.0,
            unsupported=["power_limit", "fan_speed", "pstate", "throttle_reasons", "clock_sm", "clock_sm_max"]),
    ]))
    doc = fake_nvml.snapshot("--observe", "1")
    g0, g1 = doc["gpus"]
    for g in (g0, g1):
        assert g["fan_speed"] is None and g["pstate"] is None
        # "not reported" is null, not [] ("none active"), as the README promises for N/A
        assert g["throttle_reasons"] is None
    assert g0["power_draw"] is None and g0["power_limit"] == 700.0
    assert g1["power_limit"] is None and g1["power_draw"] == 62.5
    # The UNKNOWN failures are a problem worth a warning; NOT_SUPPORTED is not.
    warnings = " ".join(doc.get("warnings", []))
    assert "GPU 0" in warnings and "GPU 1" not in warnings
    text = once(fake_nvml)
    line0, line1 = gpu_line(text, 0), gpu_line(text, 1)
    assert "N/A / 700 W" in line0 and "62 W / N/A" in line1
    for bad in ("N/AW", "PN/A", "N/A W", "N/A/N/A"):
        assert bad not in text, bad
    assert line0.rstrip().endswith("N/A")  # throttle reasons not reported: N/A, not "-"


def test_h200_141_gb_cards_small_and_nearly_full(fake_nvml: FakeNvml, sleeper) -> None:
    fake_nvml.write(scenario([
        gpu(0, **H200, memory_used=50 * MiB),
        gpu(1, **H200, memory_used=143770 * MiB, processes=[process(sleeper.pid, used_memory=143700 * MiB)]),
        gpu(2, **H200, memory_used=32426 * MiB),
    ]))
    text = once(fake_nvml)
    assert "50 MiB / 140.4 GiB" in gpu_line(text, 0)
    # 1 MiB free is not full: never "140.4 / 140.4 GiB 100%"
    line1 = gpu_line(text, 1)
    assert "143770 / 143771 MiB" in line1 and " 99%" in line1 and "100%" not in line1
    assert "31.7 / 140.4 GiB" in gpu_line(text, 2)
    # One unit rule in both tables: the process's 140.3 GiB is written like the GPU's memory.
    proc = next(line for line in text.splitlines() if f"{sleeper.pid}" in line and line.startswith("  1"))
    assert "140.3 GiB" in proc


def test_a_55_character_name_is_cut_visibly_and_kept_whole_in_json(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, name=LONG_NAME)]))
    doc = fake_nvml.snapshot()
    assert doc["gpus"][0]["name"] == LONG_NAME
    line = gpu_line(once(fake_nvml), 0)
    assert "NVIDIA RTX PRO 6000 Bla…" in line


def test_a_card_at_100_percent_with_no_process_and_no_memory_is_suspect_not_imbalance(fake_nvml: FakeNvml) -> None:
    """The ERR! cards: 100% load, no process, ~0 memory. It looks broken, not busy: an alert that points at
    doctor, and no "unevenly loaded" verdict built on it."""
    fake_nvml.write(scenario([gpu(0, utilization_gpu=100), gpu(1), gpu(2), gpu(3)]))
    doc = fake_nvml.snapshot()
    assert doc["imbalance"]["flagged"] is False
    suspect = [a for a in doc["alerts"] if a["kind"] == "suspect"]
    assert [a["gpu"] for a in suspect] == [0]
    assert "gputui doctor" in suspect[0]["message"]


def test_busy_with_invisible_processes_is_still_judged(fake_nvml: FakeNvml) -> None:
    """Processes invisible from a container: 95% and 60 GiB with no process listed is real work."""
    fake_nvml.write(scenario([gpu(0, utilization_gpu=95, memory_used=60 * GiB, power_draw=495.0), gpu(1)]))
    doc = fake_nvml.snapshot()
    assert not [a for a in doc["alerts"] if a["kind"] == "suspect"]
    assert doc["imbalance"]["flagged"] is True
    assert doc["imbalance"]["provisional"] is True  # one sample: shorter than the 10 s hold

