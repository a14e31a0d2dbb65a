"""dcgm-exporter parity: the NVML field values batch, XID events and the DCGM_* series.

Real nvidia-ml-py over the fake driver (which implements ``nvmlDeviceGetFieldValues`` and
NVML events), the real ``gputui exporter``, ``promtool`` and a real Prometheus running the
PromQL of NVIDIA's released dcgm-exporter Grafana dashboard (tests/data/dcgm_dashboard_panels.json
keeps only its panel titles and expressions).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import REPO_ROOT, FakeNvml, GiB, MiB, fake_uuid, gpu, mig_device, scenario
from tests.fixtures.prometheus import promtool

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"

#: polls NvmlSource in a fresh interpreter (the fake must be on LD_LIBRARY_PATH from the start) and
#: prints the GPUs' new fields and the NVML calls of the last poll alone
_POLL = r"""
import ctypes, json, sys
from gputui.core.sources.nvml import NvmlSource
lib = ctypes.CDLL(sys.argv[1])
src = NvmlSource()
src.open()
for _ in range(int(sys.argv[2]) - 1):
    src.read()
lib.fakeNvmlResetCalls()
reading = src.read()
lib.fakeNvmlDumpCalls()
fields = ("power_draw", "power_limit", "ecc_errors", "memory_reserved", "memory_temperature",
          "total_energy_consumption", "pcie_replay_counter", "encoder_utilization", "decoder_utilization",
          "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_failure", "xid_last")
print(json.dumps([{f: getattr(g, f) for f in fields} for g in reading.gpus]))
src.close()
"""


def _poll(fake: FakeNvml, polls: int = 3) -> tuple[list[dict[str, Any]], dict[str, int]]:
    env = fake.env()
    env["PYTHONPATH"] = str(REPO_ROOT)
    res = subprocess.run([sys.executable, "-c", _POLL, str(fake.lib_path), str(polls)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    counts = fake.calls()  # dumped right after the last poll (the close adds nvmlShutdown only)
    return json.loads(res.stdout), counts


_TWO_GPUS = [
    gpu(0, memory_temperature=57, total_energy_consumption=987_654_321, pcie_replay_counter=12,
        encoder_utilization=21, decoder_utilization=34, remapped_rows_correctable=3, remapped_rows_uncorrectable=1,
        remapped_rows_failure=1, power_draw=250.5, memory_reserved=600 * MiB),
    gpu(1, unsupported=["memory_temperature", "pcie_replay_counter", "encoder_utilization", "events"],
        unsupported_field_ids=[185]),
]


def test_one_field_values_call_per_gpu_per_poll_reads_power_and_the_dcgm_fields(fake_nvml_factory):
    fake: FakeNvml = fake_nvml_factory()
    fake.write(scenario(_TWO_GPUS))
    gpus, calls = _poll(fake)
    g0, g1 = gpus
    assert g0 == {"power_draw": 250.5, "power_limit": 400.0, "ecc_errors": 0, "memory_reserved": 600 * MiB,
                  "memory_temperature": 57, "total_energy_consumption": 987_654_321, "pcie_replay_counter": 12,
                  "encoder_utilization": 21, "decoder_utilization": 34, "remapped_rows_correctable": 3,
                  "remapped_rows_uncorrectable": 1, "remapped_rows_failure": True, "xid_last": 0}
    # GPU 1: what it does not support is N/A; the power id its driver lacks came from the single getter
    assert g1["memory_temperature"] is None and g1["pcie_replay_counter"] is None
    assert g1["encoder_utilization"] is None and g1["power_draw"] == 62.5
    assert g1["xid_last"] is None  # no XID events on this GPU: N/A, not "no error"
    # one batch per GPU per poll; power only through the getter of the GPU whose batch refused it
    assert calls["nvmlDeviceGetFieldValues"] == 2
    assert calls.get("nvmlDeviceGetPowerUsage") == 1
    for single in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieReplayCounter",
                   "nvmlDeviceGetRemappedRows", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEccErrors"):
        assert single not in calls, (single, calls)


def test_without_field_values_the_single_getters_answer(fake_nvml_factory):
    fake: FakeNvml = fake_nvml_factory(without=("nvmlDeviceGetFieldValues",))
    fake.write(scenario(_TWO_GPUS))
    (g0, g1), calls = _poll(fake, polls=1)
    assert "nvmlDeviceGetFieldValues" not in calls
    assert calls["nvmlDeviceGetPowerUsage"] == 2
    assert g0["total_energy_consumption"] == 987_654_321 and g0["pcie_replay_counter"] == 12
    assert g0["remapped_rows_correctable"] == 3 and g0["remapped_rows_failure"] is True
    assert g0["power_draw"] == 250.5 and g0["power_limit"] == 400.0
    assert g0["memory_temperature"] is None  # NVML has no getter for it: N/A without the batch
    assert g1["pcie_replay_counter"] is None


def _families(text: str) -> dict[str, list[Any]]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _one(samples: list[Any], **labels: str) -> Any:
    hits = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (labels, samples)
    return hits[0]


def test_dcgm_series_values_units_labels_and_absent_when_not_supported(fake_nvml_factory, exporters):  # noqa: F811
    fake: FakeNvml = fake_nvml_factory()
    migs = [mig_device(1, 0, "3g.40gb", memory_used=5 * GiB), mig_device(2, 0, "2g.20gb", memory_used=1 * GiB)]
    s = scenario(_TWO_GPUS + [gpu(2, mig_mode=True, mig_devices=migs)])
    fake.write(s)
    e = start_exporter(exporters, fake, "--no-docker", "--dcgm-names", "--hostname", "node-d", "--interval", "0.5")
    text = e.metrics()
    fam = _families(text)
    uuid0 = fake_uuid(0)
    expect = {  # name -> GPU 0's value in dcgm-exporter's unit
        "DCGM_FI_DEV_MEM_COPY_UTIL": 0, "DCGM_FI_DEV_MEMORY_TEMP": 57,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 987_654_321, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 12,
        "DCGM_FI_DEV_ENC_UTIL": 21, "DCGM_FI_DEV_DEC_UTIL": 34, "DCGM_FI_DEV_FB_RESERVED": 600,
        "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 3, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
        "DCGM_FI_DEV_POWER_USAGE": 250.5,
    }
    for name, value in expect.items():
        sample = _one(fam[name], gpu="0")
        assert sample.value == value, (name, sample)
        assert sample.labels["UUID"] == uuid0 and sample.labels["pci_bus_id"] == "00000000:07:00.0"
        assert sample.labels["Hostname"] == "node-d" and sample.labels["device"] == "nvidia0"
        assert sample.labels["modelName"] == "NVIDIA A100-SXM4-80GB" and sample.labels["GPU_I_ID"] == ""
    # not supported by GPU 1: no series at all, never 0
    for name in ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ENC_UTIL",
                 "DCGM_FI_DEV_XID_ERRORS"):
        assert not [x for x in fam[name] if x.labels["gpu"] == "1"], name
    assert _one(fam["DCGM_FI_DEV_DEC_UTIL"], gpu="1").value == 0
    # MIG: one FB series per GPU instance, labelled as dcgm-exporter labels them
    used = {x.labels["GPU_I_ID"]: (x.labels["GPU_I_PROFILE"], x.value) for x in fam["DCGM_FI_DEV_FB_USED"]
            if x.labels["gpu"] == "2" and x.labels["GPU_I_ID"]}
    assert used == {"1": ("3g.40gb", 5 * 1024), "2": ("2g.20gb", 1024)}
    free = _one(fam["DCGM_FI_DEV_FB_FREE"], gpu="2", GPU_I_ID="2")
    assert free.value == 19968 - 1024
    # an XID error after the exporter started: the last one is reported
    s["gpus"][0]["xid_events"] = [48, 79]
    fake.write(s)
    deadline = time.monotonic() + 30
    while _one(_families(e.metrics())["DCGM_FI_DEV_XID_ERRORS"], gpu="0").value != 79:
        assert time.monotonic() < deadline, "the XID never reached /metrics"
        time.sleep(0.3)
    assert _one(_families(e.metrics())["DCGM_FI_DEV_XID_ERRORS"], gpu="0").labels["err_code"] == "79"
    # promtool: nothing but dcgm's own camelCase names (as before)
    check = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    problems = set((check.stdout + check.stderr).splitlines())
    # (dcgm-exporter's own names: camelCase labels, and "COUNTER" in PCIE_REPLAY_COUNTER's name)
    odd = [p for p in problems if not (p.startswith("DCGM_FI_DEV_") and "camelCase" in p)
           and p != "DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'"]
    assert problems and not odd, odd


def test_released_dcgm_dashboard_panels_get_data_with_either_host_label(fake_nvml_factory, exporters,  # noqa: F811
                                                                        prometheus_factory):
    spec = json.loads((DATA / "dcgm_dashboard_panels.json").read_text())
    fake: FakeNvml = fake_nvml_factory()
    fake.write(scenario([gpu(0, utilization_gpu=80, memory_used=20 * GiB), gpu(1)]))
    released = start_exporter(exporters, fake, "--no-docker", "--dcgm-names", "--hostname", "node-r")
    main = start_exporter(exporters, fake, "--no-docker", "--dcgm-names", "--hostname", "node-m",
                          "--dcgm-hostname-label", "hostname")
    prom = prometheus_factory([released.address, main.address])
    prom.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == 4)
    with_data: dict[str, list[str]] = {}
    for exporter in (released, main):
        # the dashboard's variables: one instance (the exporter), every GPU it lists
        instances = [r["metric"]["instance"] for r in prom.query("DCGM_FI_DEV_GPU_TEMP")]
        assert exporter.address in instances
        titles = []
        for panel in spec["panels"]:
            expr = panel["expr"].replace("$instance", exporter.address).replace("$gpu", ".*")
            if prom.query(expr):
                titles.append(panel["title"])
        with_data[exporter.address] = titles
    print({"panels": len(spec["panels"]), "with_data": {k: len(v) for k, v in with_data.items()}})
    missing = {p["title"] for p in spec["panels"]} - set(with_data[released.address])
    assert missing == {"Tensor Core Utilization"}  # DCGM_FI_PROF_*: profiling needs DCGM (README)
    assert with_data[main.address] == with_data[released.address]
    # each spelling of the host label, as the dashboards built on it select hosts
    assert {r["metric"]["Hostname"] for r in prom.query('DCGM_FI_DEV_GPU_UTIL{Hostname!=""}')} == {"node-r"}
    assert {r["metric"]["hostname"] for r in prom.query('DCGM_FI_DEV_GPU_UTIL{hostname!=""}')} == {"node-m"}
    # and every default counter NVML can give has data (per GPU, with pci_bus_id)
    for name in ("MEM_COPY_UTIL", "MEMORY_TEMP", "TOTAL_ENERGY_CONSUMPTION", "XID_ERRORS", "PCIE_REPLAY_COUNTER",
                 "ENC_UTIL", "DEC_UTIL", "FB_RESERVED", "UNCORRECTABLE_REMAPPED_ROWS", "CORRECTABLE_REMAPPED_ROWS",
                 "ROW_REMAP_FAILURE"):
        result = prom.query(f'DCGM_FI_DEV_{name}{{pci_bus_id=~"0000.*"}}')
        assert len(result) == 4, (name, result)
    # the units a dashboard reads: MiB, mJ, %
    assert _value(prom, f'DCGM_FI_DEV_FB_RESERVED{{instance="{released.address}",gpu="0"}}') == 512
    assert _value(prom, f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{instance="{released.address}",gpu="0"}}') \
        == 3_600_000_000


def _value(prom: Any, expr: str) -> float:
    result = prom.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])
