"""``--slow-link``: graphs in one colour and redrawn every few seconds; numbers still every poll."""

from __future__ import annotations

import time

import pytest

from gputui.core.config import Settings
from gputui.ui.widgets.gpu_panel import GpuPanel
from tests.fixtures.showcase import wait_for_polls
from tests.test_ui_app import demo_app

pytestmark = pytest.mark.functional  # the Textual app under Pilot


async def _poll(app, pilot, clock, seconds: float) -> None:
    clock.now += seconds
    done = app.polls_done
    app.request_poll()
    await wait_for_polls(pilot, done + 1)


async def test_slow_link_draws_each_graph_in_one_colour():
    for slow, same in ((False, False), (True, True)):
        app, _clock = demo_app(Settings(slow_link=slow), warm=5)
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_for_polls(pilot)
            panel = app.screen.query_one(GpuPanel)
            low, mid, high = (panel.get_component_rich_style(f"gpu-panel--{t}") for t in ("low", "mid", "high"))
            assert (low.color == mid.color == high.color) is same


async def test_slow_link_moves_the_graphs_every_n_seconds_and_the_numbers_every_poll():
    app, clock = demo_app(Settings(slow_link=True, slow_link_graphs=5.0), warm=5)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for_polls(pilot)
        graphs, snapshot = app.gpu_history, app.snapshot
        app._graphs_at = time.monotonic()  # the graphs were just taken
        await _poll(app, pilot, clock, 1.0)
        assert app.snapshot is not snapshot and app.gpu_history is graphs
        app._graphs_at = time.monotonic() - 5.0  # five seconds later the graphs move
        await _poll(app, pilot, clock, 1.0)
        assert app.gpu_history is not graphs


async def test_without_slow_link_the_graphs_move_every_poll():
    app, clock = demo_app(Settings(), warm=5)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for_polls(pilot)
        graphs = app.gpu_history
        await _poll(app, pilot, clock, 1.0)
        assert app.gpu_history is not graphs
