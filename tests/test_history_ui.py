"""The dashboard reads the history: in the GPU detail view, h plots the last 24 hours from the
database 'gputui record' writes and w lists who held the GPU then (both read off the event loop)."""

from __future__ import annotations

import pytest

from gputui.core.demo import FROZEN_EPOCH
from gputui.core.record import replace
from gputui.core.recorder import Recorder
from gputui.ui.screens.detail import GpuDetailScreen
from gputui.ui.screens.who import WhoScreen
from tests.fixtures.showcase import wait_for_polls
from tests.fixtures.synthetic import gpu, proc, snapshot
from tests.test_ui_app import demo_app, table


def _fill(db, start: float, end: float) -> None:
    """GPU 4 of the history: dora's job, then erin's in a container, a minute apart each 10 s poll."""
    r = Recorder(str(db), 10.0)
    assert r.open(), r.problem
    t = start
    while t <= end:
        first_half = t < (start + end) / 2
        p = replace(proc(777 if first_half else 888, 4, mem_gib=12 if first_half else 30,
                         container=None if first_half else "erin-train", create_time=start),
                    user="dora" if first_half else "erin")
        r.record(snapshot(t, [gpu(4, util=90 if first_half else 10, procs=[p])]))
        t += 10
    r.close()


async def _until(pilot, cond, tries=200):
    for _ in range(tries):
        if cond():
            return True
        await pilot.pause(0.02)
    return False


@pytest.fixture
def history_db(tmp_path, monkeypatch):
    db = tmp_path / "history.db"
    monkeypatch.setenv("GPUTUI_HISTORY_DB", str(db))
    return db


async def test_w_lists_who_held_the_gpu_in_the_last_day(history_db):
    _fill(history_db, FROZEN_EPOCH - 6 * 3600, FROZEN_EPOCH - 3600)
    app, _ = demo_app(warm=5)
    async with app.run_test(size=(160, 44)) as pilot:
        await wait_for_polls(pilot)
        table(app).select_key((4, 4601))
        await pilot.press("enter")
        assert isinstance(app.screen, GpuDetailScreen)
        await pilot.press("w")
        assert isinstance(app.screen, WhoScreen)
        text = app.screen.query_one("#who-text")
        assert await _until(pilot, lambda: "dora" in str(text.render()))
        shown = str(text.render())
        lines = shown.splitlines()
        assert lines[0].split()[:3] == ["GPU", "USER", "CONTAINER/JOB"]
        assert [ln.split()[1] for ln in lines[1:]] == ["dora", "erin"]
        assert "erin-train" in lines[2] and "30.0 GiB" in lines[2]
        await pilot.press("escape")
        assert isinstance(app.screen, GpuDetailScreen)


async def test_h_plots_the_last_day_from_the_history(history_db):
    _fill(history_db, FROZEN_EPOCH - 20 * 3600, FROZEN_EPOCH - 3600)
    app, _ = demo_app(warm=5)
    async with app.run_test(size=(160, 44)) as pilot:
        await wait_for_polls(pilot)
        table(app).select_key((4, 4601))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen)
        await pilot.press("h")
        plot = screen.query_one("#plot-util")
        assert await _until(pilot, lambda: "history, minute means" in plot.render().plain)
        drawn = plot.render().plain
        assert any(0x2800 <= ord(ch) <= 0x28FF for ch in drawn)
        # the x axis spans the day: clock labels hours apart, not the live minute's half-minute marks
        labels = drawn.rstrip("\n").split("\n")[-1].split()
        assert len(labels) >= 2 and labels[0][-2:] == "00" and labels[0][3:5] == "00"
        await pilot.press("h")  # back to live
        assert await _until(pilot, lambda: "history" not in plot.render().plain)


async def test_without_a_database_the_keys_say_so(history_db):
    app, _ = demo_app(warm=5)
    async with app.run_test(size=(160, 44)) as pilot:
        await wait_for_polls(pilot)
        table(app).select_key((4, 4601))
        await pilot.press("enter")
        screen = app.screen
        await pilot.press("h")
        assert await _until(pilot, lambda: not screen.day)
        assert any("There is no history database at" in str(n.message) for n in app._notifications)
        await pilot.press("w")
        text = app.screen.query_one("#who-text")
        assert await _until(pilot, lambda: "start 'gputui record'" in str(text.render()))
