"""The steady read of a GPU (``gputui/core/sources/nvml_steady.py``) against the fake driver: what its plan
keeps between polls is keyed on what it was made from — every per-poll value (a change of any one is read
at the next poll), the slow values' time (a slow value is read again when due), the fields asked (a field
left unread is no longer asked) — and MIG mode turned on is seen."""

from __future__ import annotations

import time

import pytest

from tests.fakenvml.scenario import FakeNvml, GiB, gpu, mig_device, process, scenario

pytestmark = pytest.mark.integration

#: one scenario field changed at a time after steady polls, and the JSON field that must show it
CHANGES = [
    ("utilization_gpu", 40, 41, "utilization_gpu"),
    ("temperature", 50, 51, "temperature"),
    ("memory_used", 10 * GiB, 11 * GiB, "memory_used"),
    ("clock_sm", 1200, 1300, "clock_sm"),
    ("pstate", 0, 2, "pstate"),
    ("throttle_reasons", 0x4, 0x1, "throttle_reasons"),
    ("power_draw", 200.0, 210.0, "power_draw"),  # the field batch
    ("memory_temperature", 60, 61, "memory_temperature"),  # the field batch, a dcgm reading
]


@pytest.mark.parametrize(("field", "before", "after", "shown"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_value_changed_after_steady_polls_is_read(fake_nvml: FakeNvml, field: str, before: object,
                                                   after: object, shown: str) -> None:
    fake_nvml.write(scenario([gpu(0, **{field: before}), gpu(1)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        first = [probe.ask("read")["gpus"][0][shown] for _ in range(3)]  # the plan is made and used
        assert first[0] == first[1] == first[2]
        fake_nvml.write(scenario([gpu(0, **{field: after}), gpu(1)]))
        changed = probe.ask("read")["gpus"][0][shown]
        assert changed != first[0]
        again = probe.ask("read")["gpus"]
        assert again[0][shown] == changed and again[1]["temperature"] == 34


def test_an_xid_after_steady_polls_is_read(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        assert [probe.ask("read")["gpus"][0]["xid_last"] for _ in range(3)] == [0, 0, 0]
        fake_nvml.write(scenario([gpu(0, xid_events=[79]), gpu(1)]))
        assert probe.ask("read")["gpus"][0]["xid_last"] == 79


def test_slow_values_are_read_again_when_due_after_steady_polls(fake_nvml: FakeNvml) -> None:
    """A steady GPU keeps its persistence mode and encoder utilization only while they are cached: once
    ``slow_ttl`` has passed the new ones show."""
    fake_nvml.write(scenario([gpu(0, persistence_mode=True, encoder_utilization=5), gpu(1)]))
    with fake_nvml.probe(env_extra={"GPUTUI_PROBE_SLOW_TTL": "0.3"}) as probe:
        probe.ask("open")
        for _ in range(3):
            g0 = probe.ask("read")["gpus"][0]
            assert (g0["persistence_mode"], g0["encoder_utilization"]) == (True, 5)
        fake_nvml.write(scenario([gpu(0, persistence_mode=False, encoder_utilization=6), gpu(1)]))
        time.sleep(0.5)  # past the cache (a slower machine only waits longer)
        g0 = probe.ask("read")["gpus"][0]
        assert (g0["persistence_mode"], g0["encoder_utilization"]) == (False, 6)


def test_mig_mode_turned_on_after_steady_polls_brings_its_devices(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, mig_mode=False), gpu(1)]))
    with fake_nvml.probe(env_extra={"GPUTUI_PROBE_SLOW_TTL": "0.3"}) as probe:
        probe.ask("open")
        for _ in range(3):
            assert probe.ask("read")["gpus"][0]["mig_devices"] == []
        fake_nvml.write(scenario([gpu(0, mig_mode=True, mig_devices=[mig_device(1, processes=[process(4242)])]),
                                  gpu(1)]))
        time.sleep(0.5)  # past the cache
        g0 = probe.ask("read")["gpus"][0]
        assert g0["mig_mode"]["current"] is True and len(g0["mig_devices"]) == 1


def test_a_field_left_unread_after_steady_polls_is_no_longer_asked(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, pstate=2), gpu(1)]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert probe.ask("read")["gpus"][0]["pstate"] == 2
        probe.ask("tune")  # the exporter's sources: no P-state
        probe.ask("reset_calls")
        assert [probe.ask("read")["gpus"][0]["pstate"] for _ in range(2)] == [None, None]
        probe.ask("calls")
        calls = fake_nvml.calls()
    assert calls.get("nvmlDeviceGetPerformanceState", 0) == 0 and calls["nvmlDeviceGetTemperature"] == 4


PROCESS_CHANGES = [
    ("used_memory", GiB, 2 * GiB, "gpu_memory"),
    ("sm", 10, 20, "sm_utilization"),
    ("type", "compute", "compute+graphics", "type"),
]


@pytest.mark.parametrize(("field", "before", "after", "shown"), PROCESS_CHANGES, ids=[c[0] for c in PROCESS_CHANGES])
def test_a_process_figure_changed_after_steady_polls_is_read(fake_nvml: FakeNvml, field: str, before: object,
                                                             after: object, shown: str) -> None:
    """A process's entry is handed out again only while its type, memory and SM % are the same."""
    others = [process(4243, used_memory=GiB, sm=5)]
    fake_nvml.write(scenario([gpu(0, processes=[process(4242, **{field: before}), *others])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        first = [probe.ask("read")["processes"]["0"][0][shown] for _ in range(3)]
        assert first[0] == first[1] == first[2]
        fake_nvml.write(scenario([gpu(0, processes=[process(4242, **{field: after}), *others])]))
        procs = probe.ask("read")["processes"]["0"]
        assert procs[0][shown] != first[0] and procs[1]["sm_utilization"] == 5


def test_memory_the_driver_cannot_attribute_reads_na_without_a_warning(fake_nvml: FakeNvml) -> None:
    """NVML's "not available" memory of a listed process is N/A as read, not an impossible figure that
    plausibility has to drop with a warning — at the first read and in steady polls."""
    fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=None), process(4243, used_memory=GiB)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            read = probe.ask("read")
            assert [p["gpu_memory"] for p in read["processes"]["0"]] == [None, GiB] and read["errors"] == []
