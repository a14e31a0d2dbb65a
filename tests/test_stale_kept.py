"""An idle holder judged poll after poll: while its GPU is the same object and its findings are the same,
the poller hands out the judged GPU (and its rows) it built last poll, so what downstream keeps by identity
holds; the stale judge takes the window's first sample at the place it was last poll while it is still the
first at or after the window's start. Each test changes one of those inputs under the others held still
and expects the idle holder's sentence, or the card's figures, to follow."""

from __future__ import annotations

import pytest

from gputui.core.config import Settings
from gputui.core.model import GpuReading
from gputui.core.record import replace
from tests.fixtures.synthetic import GIB
from tests.test_poll_still import _poller, _StillReading

pytestmark = pytest.mark.unit


def _idle(window: float) -> tuple[_StillReading, object]:
    src = _StillReading()
    poller = _poller(src, Settings(idle_window=window, idle_holder_memory=GIB // 8))
    return src, poller


def _messages(snap) -> dict[int, list[str]]:
    return {p.pid: [f.message for f in p.stale] for p in snap.gpus[0].processes}


def test_an_idle_holder_kept_poll_after_poll_is_the_same_gpu_object():
    src, poller = _idle(2.0)
    for _ in range(5):
        snap = poller.poll()
    assert all("2 s observed" in m[0] for m in _messages(snap).values())
    assert poller.poll().gpus[0] is snap.gpus[0]  # nothing moved: the very same judged GPU and rows


def test_a_longer_idle_window_under_the_very_same_gpu_is_worded_with_its_span():
    src, poller = _idle(2.0)
    for _ in range(8):
        before = poller.poll()
    assert all("2 s observed" in m[0] for m in _messages(before).values())
    poller.settings = replace(poller.settings, idle_window=5.0)
    after = poller.poll()
    assert after.gpus[0] is not before.gpus[0]
    assert all("5 s observed" in m[0] for m in _messages(after).values()), _messages(after)
    poller.settings = replace(poller.settings, idle_window=3.0)
    assert all("3 s observed" in m[0] for m in _messages(poller.poll()).values())


def test_a_card_whose_figures_move_under_a_kept_idle_holder_shows_them():
    src, poller = _idle(2.0)
    for _ in range(5):
        snap = poller.poll()
    assert snap.gpus[0].temperature == 40
    gpu = replace(src.reading.gpus[0], temperature=71)
    src.reading = GpuReading(src.reading.driver_version, src.reading.cuda_driver_version, (gpu,),
                             src.reading.processes)
    after = poller.poll()
    assert after.gpus[0].temperature == 71
    assert [len(p.stale) for p in after.gpus[0].processes] == [1, 1]  # and the idle holders stay found
