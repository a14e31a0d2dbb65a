"""The reading path of the plausibility rule (what every GPU source hands the poller through):
a working card's reading is kept as the very same object, and each checked field out of range alone
— below, above or NaN — and each process figure out of range is N/A with a warning naming it.
``plausible_reading`` tests a card with straight-line code generated from LIMITS, and a card's
process entries in its own pass: these hold that code to the rule field by field."""

from __future__ import annotations

import math

import pytest

from gputui.core.model import GpuReading, RawProcess
from gputui.core.plausible import LIMITS, plausible_reading
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB
from tests.test_poll_rows import _GOOD

_PROCS = (RawProcess(pid=101, type="compute", gpu_memory=GIB, sm_utilization=40),
          RawProcess(pid=102, type="compute", gpu_memory=2 * GIB, sm_utilization=0))


def _reading(gpu=_GOOD, procs=_PROCS) -> GpuReading:
    return GpuReading("550", "12.4", (gpu,), {gpu.index: procs})


def test_a_working_cards_reading_is_handed_on_as_it_came():
    reading = _reading()
    assert plausible_reading(reading) is reading
    lost = _reading(replace(_GOOD, lost=True, temperature=10**9))  # a lost card's figures are not judged
    assert plausible_reading(lost) is lost


@pytest.mark.parametrize("name", sorted(LIMITS))
@pytest.mark.parametrize("how", ["below", "above", "nan"])
def test_each_checked_field_out_of_range_alone_is_na_in_the_reading_with_a_warning(name, how):
    low, high, label = LIMITS[name]
    value = {"below": low - 1, "above": high + 1, "nan": math.nan}[how]
    fixed = plausible_reading(_reading(replace(_GOOD, **{name: value})), {})
    assert getattr(fixed.gpus[0], name) is None
    assert len(fixed.errors) == 1 and label in fixed.errors[0]
    assert replace(fixed.gpus[0], **{name: getattr(_GOOD, name)}) == _GOOD
    assert fixed.processes[0] == _PROCS


@pytest.mark.parametrize(("field", "value"), [("memory_used", 81 * GIB), ("memory_reserved", 81 * GIB),
                                              ("memory_used", math.nan)])
def test_memory_beyond_the_total_is_na_in_the_reading(field, value):
    fixed = plausible_reading(_reading(replace(_GOOD, **{field: value})))
    assert getattr(fixed.gpus[0], field) is None and len(fixed.errors) == 1


@pytest.mark.parametrize(("field", "value", "named"), [
    ("gpu_memory", 81 * GIB, "GPU memory of PID 102"), ("gpu_memory", -1, "GPU memory of PID 102"),
    ("sm_utilization", 101, "SM utilization of PID 102"), ("sm_utilization", -1, "SM utilization of PID 102")])
def test_a_process_figure_out_of_range_is_na_in_the_reading(field, value, named):
    fixed = plausible_reading(_reading(procs=(_PROCS[0], replace(_PROCS[1], **{field: value}))))
    assert fixed.processes[0][0] == _PROCS[0] and getattr(fixed.processes[0][1], field) is None
    assert len(fixed.errors) == 1 and named in fixed.errors[0]
