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


# -- the SM samples, asked inside the steady read -----------------------------------------------------------


def _sm_by_pid(probe) -> dict[int, int | None]:
    return {p["pid"]: p["sm_utilization"] for p in probe.ask("read")["processes"]["0"]}


def test_samples_that_outgrow_their_buffer_after_steady_polls_are_read_whole(fake_nvml: FakeNvml) -> None:
    """The kept samples call is made with its kept buffer: once more processes have samples than it holds
    (the process lists' buffers already big enough), the buffer is grown and every SM figure shows."""
    pids = range(5000, 5100)
    fake_nvml.write(scenario([gpu(0, processes=[process(p, sm=7 if p < 5003 else None) for p in pids])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):  # the plan is made and used
            assert _sm_by_pid(probe) == {p: 7 if p < 5003 else 0 for p in pids}
        fake_nvml.write(scenario([gpu(0, processes=[process(p, sm=1 + p % 90) for p in pids])]))
        for _ in range(2):  # grown by the full rules, then kept again
            assert _sm_by_pid(probe) == {p: 1 + p % 90 for p in pids}


def test_a_process_whose_samples_stop_after_steady_polls_reads_idle(fake_nvml: FakeNvml) -> None:
    """Fewer samples than the last poll (the count the driver wrote) leave no old figure behind."""
    fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=10), process(5001, sm=20)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert _sm_by_pid(probe) == {5000: 10, 5001: 20}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=10), process(5001, sm=None)])]))
        assert _sm_by_pid(probe) == {5000: 10, 5001: 0}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=None), process(5001, sm=None)])]))
        assert _sm_by_pid(probe) == {5000: 0, 5001: 0}  # no sample at all (NOT_FOUND): every process idle
        fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=30), process(5001, sm=40)])]))
        assert _sm_by_pid(probe) == {5000: 30, 5001: 40}


def test_more_samples_within_the_kept_buffer_take_one_call(fake_nvml: FakeNvml) -> None:
    """The steady read tells the kept samples call its buffer's whole length at every poll (the driver
    writes back how many it filled): a poll with more samples than the last, still within the buffer, is
    one call, not a refusal and a second call."""
    fake_nvml.write(scenario([gpu(0, processes=[process(5000 + i, sm=10 + i) for i in range(2)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert _sm_by_pid(probe) == {5000: 10, 5001: 11}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000 + i, sm=10 + i) for i in range(2)]
                                      + [process(6000 + i) for i in range(3)])]))
        assert _sm_by_pid(probe) == {5000: 10, 5001: 11, 6000: 0, 6001: 0, 6002: 0}  # the lists grow
        assert _sm_by_pid(probe) == {5000: 10, 5001: 11, 6000: 0, 6001: 0, 6002: 0}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000 + i, sm=10 + i) for i in range(2)]
                                      + [process(6000 + i, sm=50 + i) for i in range(3)])]))
        probe.ask("reset_calls")
        for _ in range(2):
            assert _sm_by_pid(probe) == {5000: 10, 5001: 11, 6000: 50, 6001: 51, 6002: 52}
        probe.ask("calls")
        calls = fake_nvml.calls()
    assert calls["nvmlDeviceGetProcessUtilization"] == 2


def test_failing_samples_after_steady_polls_read_na_then_recover(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=10)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert _sm_by_pid(probe) == {5000: 10}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=10)], errors={"process_utilization": "unknown"})]))
        assert _sm_by_pid(probe) == {5000: None}
        fake_nvml.write(scenario([gpu(0, processes=[process(5000, sm=12)])]))
        assert [_sm_by_pid(probe) for _ in range(3)] == [{5000: 12}] * 3


# -- the slow values, read again inside the steady read when due -------------------------------------------


def test_slow_values_failing_when_due_after_steady_polls_read_na_then_recover(fake_nvml: FakeNvml) -> None:
    """A slow value read again by its C function is what nvidia-ml-py's getter would answer: a new decoder
    figure shows, a failing persistence mode or MIG mode reads N/A (asked again at the next poll), and one
    refused for good stays N/A without being asked again."""
    fake_nvml.write(scenario([gpu(0, mig_mode=False, persistence_mode=True, decoder_utilization=3), gpu(1)]))
    with fake_nvml.probe(env_extra={"GPUTUI_PROBE_SLOW_TTL": "0.3"}) as probe:
        probe.ask("open")
        for _ in range(3):
            g0 = probe.ask("read")["gpus"][0]
            assert (g0["persistence_mode"], g0["decoder_utilization"], g0["mig_mode"]["current"]) == (True, 3, False)
        fake_nvml.write(scenario([gpu(0, mig_mode=False, persistence_mode=True, decoder_utilization=9,
                                      errors={"persistence_mode": "unknown", "mig_mode": "unknown"}), gpu(1)]))
        time.sleep(0.5)  # past the cache (a slower machine only waits longer)
        probe.ask("reset_calls")
        g0 = probe.ask("read")["gpus"][0]
        assert (g0["persistence_mode"], g0["decoder_utilization"], g0["mig_mode"]) == (None, 9, None)
        probe.ask("calls")
        failing = fake_nvml.calls()
        fake_nvml.write(scenario([gpu(0, mig_mode=False, persistence_mode=False, decoder_utilization=9,
                                      errors={"encoder_utilization": "not_supported"}), gpu(1)]))
        for _ in range(2):
            g0 = probe.ask("read")["gpus"][0]
            assert (g0["persistence_mode"], g0["mig_mode"]["current"]) == (False, False)
        time.sleep(0.5)
        for _ in range(3):
            assert probe.ask("read")["gpus"][0]["encoder_utilization"] is None
        probe.ask("reset_calls")
        time.sleep(0.5)
        for _ in range(2):
            assert probe.ask("read")["gpus"][0]["encoder_utilization"] is None
        probe.ask("calls")
        calls = fake_nvml.calls()
    # each GPU's slow values asked once when due, a failing one too
    assert failing["nvmlDeviceGetPersistenceMode"] == 2
    assert failing["nvmlDeviceGetMigMode"] == 1  # (GPU 1 has no MIG mode: refused for good, not asked)
    assert calls["nvmlDeviceGetEncoderUtilization"] == 1  # GPU 1's, once when due
    assert calls["nvmlDeviceGetDecoderUtilization"] == 2


def test_memory_the_driver_stops_attributing_after_steady_polls_reads_na(fake_nvml: FakeNvml) -> None:
    """New bytes in a kept process list of the same length are read again: a process whose memory NVML no
    longer attributes reads N/A (no impossible figure, no warning), the others' new figures show."""
    fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=GiB), process(4243, used_memory=GiB)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert [p["gpu_memory"] for p in probe.ask("read")["processes"]["0"]] == [GiB, GiB]
        fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=None),
                                                    process(4243, used_memory=2 * GiB)])]))
        for _ in range(2):
            read = probe.ask("read")
            assert [p["gpu_memory"] for p in read["processes"]["0"]] == [None, 2 * GiB] and read["errors"] == []
        fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=3 * GiB),
                                                    process(4243, used_memory=2 * GiB)])]))
        assert [p["gpu_memory"] for p in probe.ask("read")["processes"]["0"]] == [3 * GiB, 2 * GiB]


def test_a_process_listed_twice_after_steady_polls_shows_once_with_its_larger_memory(fake_nvml: FakeNvml) -> None:
    """A compute list naming a PID twice (one entry per context) is one process with the larger figure, also
    when it comes after steady polls of a list that named each PID once."""
    fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=GiB), process(4243, used_memory=GiB)])]))
    with fake_nvml.probe() as probe:
        probe.ask("open")
        for _ in range(3):
            assert [(p["pid"], p["gpu_memory"]) for p in probe.ask("read")["processes"]["0"]] == [(4242, GiB),
                                                                                                  (4243, GiB)]
        fake_nvml.write(scenario([gpu(0, processes=[process(4242, used_memory=3 * GiB), process(4243, used_memory=GiB),
                                                    process(4242, used_memory=2 * GiB)])]))
        for _ in range(2):
            assert [(p["pid"], p["gpu_memory"]) for p in probe.ask("read")["processes"]["0"]] == [(4242, 3 * GiB),
                                                                                                  (4243, GiB)]
