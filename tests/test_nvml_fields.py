"""FieldBatch: the per-poll NVML field values in one call, and what it does with refused ids (in-process)."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.core.sources.nvml_fields import FIELDS, FieldBatch, Lost

NOT_SUPPORTED, UNKNOWN, FUNCTION_NOT_FOUND, GPU_IS_LOST = 3, 999, 13, 15


class _Driver:
    """Plays nvmlDeviceGetFieldValues: records the ids asked, answers per id."""

    def __init__(self, answers: dict[int, int], ret: int = 0) -> None:
        self.answers = answers  # field id -> return code (0: success, value = the id)
        self.ret = ret
        self.asked: list[list[int]] = []
        self.doubles: set[int] = set()  # ids answered as doubles (value = the id + 0.5)

    def __call__(self, handle: Any, count: Any, buf: Any) -> int:
        ids = [buf[i].fieldId for i in range(count.value)]
        self.asked.append(ids)
        if self.ret:
            return self.ret
        for i, fid in enumerate(ids):
            code = self.answers.get(fid, 0)
            buf[i].nvmlReturn = code
            if fid in self.doubles:
                buf[i].valueType = 0
                buf[i].value.dVal = fid + 0.5
            else:
                buf[i].valueType = 1
                buf[i].value.uiVal = fid
        return 0


def test_a_refused_id_leaves_the_batch_and_a_failing_one_is_asked_again() -> None:
    driver = _Driver({FIELDS["power_draw"]: NOT_SUPPORTED, FIELDS["memory_temperature"]: UNKNOWN})
    batch = FieldBatch()
    first = batch.read(driver, None)
    assert "power_draw" not in first and first["pcie_replay_counter"] == FIELDS["pcie_replay_counter"]
    assert batch.errors == {"memory_temperature": UNKNOWN}
    second = batch.read(driver, None)
    assert FIELDS["power_draw"] in driver.asked[0] and FIELDS["power_draw"] not in driver.asked[1]
    assert FIELDS["memory_temperature"] in driver.asked[1]  # may answer next time
    assert "power_draw" not in batch.names and "memory_temperature" in batch.names
    assert second.keys() == first.keys()


def test_steady_answers_still_show_a_failing_entry_and_a_value_of_another_type() -> None:
    """Once every entry answered, answers of the same types are read in one unpack: an entry that
    fails later, or answers with another value type, is still seen in the very poll it happens."""
    driver = _Driver({})
    batch = FieldBatch()
    every = {name: fid for name, fid in FIELDS.items()}
    assert batch.read(driver, None) == every and batch.read(driver, None) == every
    driver.answers = {FIELDS["memory_temperature"]: UNKNOWN}
    failing = batch.read(driver, None)
    assert "memory_temperature" not in failing and batch.errors == {"memory_temperature": UNKNOWN}
    driver.answers = {}
    driver.doubles = {FIELDS["power_draw"]}
    typed = batch.read(driver, None)
    assert typed["power_draw"] == FIELDS["power_draw"] + 0.5 and batch.errors == {}
    assert batch.read(driver, None) == typed  # steady again, with the new type
    driver.doubles = set()
    assert batch.read(driver, None) == every


def test_a_driver_without_the_call_is_not_asked_again() -> None:
    driver = _Driver({}, ret=FUNCTION_NOT_FOUND)
    batch = FieldBatch()
    assert batch.read(driver, None) == {} and batch.off
    assert batch.read(driver, None) == {} and len(driver.asked) == 1
    assert FieldBatch().read(None, None) == {}  # no such function at all


def test_a_transient_failure_of_the_call_fails_every_field_this_poll_only() -> None:
    driver = _Driver({}, ret=UNKNOWN)
    batch = FieldBatch()
    assert batch.read(driver, None) == {} and not batch.off
    assert set(batch.errors) == set(FIELDS)
    driver.ret = 0
    assert set(batch.read(driver, None)) == set(FIELDS) and batch.errors == {}


def test_a_lost_gpu_raises() -> None:
    with pytest.raises(Lost):
        FieldBatch().read(_Driver({}, ret=GPU_IS_LOST), None)
    with pytest.raises(Lost):
        FieldBatch().read(_Driver({FIELDS["ecc_errors"]: GPU_IS_LOST}), None)


def test_the_new_readings_go_through_the_plausibility_rules() -> None:
    from gputui.core.model import Gpu
    from gputui.core.plausible import plausible_gpu

    wrapped = 4294967295  # a 32-bit counter read as -1
    g = Gpu(index=0, uuid="GPU-x", name="A100", memory_total=80 << 30, memory_reserved=81 << 30,
            memory_temperature=wrapped, total_energy_consumption=2**64 - 1, pcie_replay_counter=12,
            encoder_utilization=250, decoder_utilization=3, remapped_rows_correctable=wrapped,
            remapped_rows_uncorrectable=1, xid_last=wrapped)
    fixed, dropped = plausible_gpu(g)
    assert (fixed.memory_reserved, fixed.memory_temperature, fixed.total_energy_consumption,
            fixed.encoder_utilization, fixed.remapped_rows_correctable, fixed.xid_last) == (None,) * 6
    assert (fixed.pcie_replay_counter, fixed.decoder_utilization, fixed.remapped_rows_uncorrectable) == (12, 3, 1)
    assert len(dropped) == 6 and any("memory temperature" in d for d in dropped)
    assert any("memory reserved" in d for d in dropped)
