"""An idle holder judged poll after poll: while its GPU is the same object and its findings are the same,
the poller hands out the judged GPU (and its rows) it built last poll, so what downstream keeps by identity
holds; the stale judge takes the window's first sample at the place it was last poll while it is still the
first at or after the window's start; an idle holder found again with the same figures is the same
finding. Each test changes one of those inputs under the others held still and expects the idle
holder's sentence, or the card's figures, to follow; and a process gone from the history is gone from
the tracker."""

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


def _set_raw(src: _StillReading, pid: int, **changes) -> None:
    raws = tuple(replace(r, **changes) if r.pid == pid else r for r in src.reading.processes[0])
    src.reading = GpuReading(src.reading.driver_version, src.reading.cuda_driver_version, src.reading.gpus,
                             {0: raws})


def test_an_idle_holder_whose_memory_grows_is_worded_with_what_it_holds_now():
    src, poller = _idle(2.0)
    for _ in range(5):
        poller.poll()
    _set_raw(src, 101, gpu_memory=GIB // 2)
    messages = _messages(poller.poll())
    assert "0.5 GiB" in messages[101][0] and "0.2 GiB" in messages[102][0], messages


def test_the_cpu_peak_leaving_the_window_leaves_the_sentence():
    src, poller = _idle(3.0)
    src.facts_by_pid[101] = replace(src.facts_by_pid[101], cpu_percent=0.5)
    for _ in range(6):
        poller.poll()
    assert "at most 0.5% CPU" in _messages(poller.poll())[101][0]
    src.facts_by_pid[101] = replace(src.facts_by_pid[101], cpu_percent=0.0)
    said = [_messages(poller.poll())[101][0] for _ in range(6)]
    assert "at most 0.5% CPU" in said[0]  # still in the window
    assert "with 0% SM and 0% CPU" in said[-1], said  # left it: the sentence follows, same span and memory


def test_a_process_that_left_is_forgotten_by_the_idle_tracker():
    src, poller = _idle(2.0)
    for _ in range(5):
        poller.poll()
    before = poller.history.departures
    src.reading = GpuReading(src.reading.driver_version, src.reading.cuda_driver_version, src.reading.gpus,
                             {0: src.reading.processes[0][:1]})
    assert [p.pid for p in poller.poll().gpus[0].processes] == [101]
    assert poller.history.departures == before + 1
    assert [key[1] for key in poller._idle._runs] == [101]  # 102's run went with its ring
