"""The GPU panel's lines as data (ui/widgets/card_view.py), and the panel redrawing a line whenever
what it draws changes (issue 28, point 2: a card header that stayed "idle" under load)."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from gputui.core.config import Settings
from gputui.core.judges.suspect import activity
from gputui.core.record import replace
from gputui.ui.widgets import card_view
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.spans import text
from tests.fixtures.synthetic import GIB, T0, gpu, proc, snapshot

LOOK = card_view.CardLook(width=60, mem_w=13, pow_w=9, temp_warning=83, temp_critical=90)


def _card(g, look=LOOK, selected=False):
    return card_view.card(g, (0,), (0,), 0, False, look, selected, False)


def test_an_idle_card_and_a_busy_card_without_process_differ_in_their_header():
    idle = gpu(0, util=0, used_gib=0.0)
    busy = replace(idle, utilization_gpu=60, memory_used=40 * GIB)
    assert activity(idle) == "idle" and activity(busy) != "idle"
    top_idle, top_busy = _card(idle)[0], _card(busy)[0]
    assert " idle " in text(top_idle)
    assert activity(busy) in text(top_busy) and " idle " not in text(top_busy)
    assert (f" {activity(busy)} ", "warning") in top_busy  # drawn as a warning, not dim


def test_every_card_line_is_exactly_the_card_width_with_borders():
    hot = replace(gpu(3, util=99, used_gib=79.5, procs=[proc(10, 3), proc(11, 3)]), temperature=95)
    for g in (gpu(0), hot, gpu(1, lost=True)):
        lines = _card(g)
        assert len(lines) == card_view.CARD_HEIGHT
        for line in lines:
            assert len(text(line)) == LOOK.width
        assert text(lines[1]).startswith("│") and text(lines[1]).endswith("│")
    top, util = _card(hot)[0], _card(hot)[1]
    assert "alice · 2 procs" in text(top)
    assert (" 95°C", "critical") in util  # the temperature takes the critical style past temp_critical
    assert "title+reverse" in {name for _, name in _card(hot, selected=True)[0]}


def test_lines_that_draw_the_same_are_equal_and_any_drawn_change_shows_in_the_spans():
    g = gpu(0, util=30, used_gib=10)
    assert _card(g) == _card(replace(g))
    warm = replace(g, temperature=85)  # past temp_warning: only the style of one span changes
    before, after = _card(g)[1], _card(warm)[1]
    assert before != after and text(before).replace("40°C", "85°C") == text(after)


def test_a_compact_row_says_what_a_card_says():
    idle = gpu(2, util=0, used_gib=0.0)
    busy = replace(idle, utilization_gpu=60, memory_used=40 * GIB)
    look = replace(LOOK, width=120)
    row = text(card_view.compact(busy, (0,), (0,), 0, False, look, False, False))
    assert len(row) == 120 and " busy, no visible" in row and "idle" not in row
    assert "idle" in text(card_view.compact(idle, (0,), (0,), 0, False, look, False, False))


class _PanelApp(App):
    def compose(self) -> ComposeResult:
        yield GpuPanel()


@pytest.mark.functional
async def test_the_panel_redraws_a_card_header_when_only_its_activity_changes():
    """The body shows 60 % load and 40 GiB with no process: the header must leave "idle"."""
    idle = gpu(0, util=0, used_gib=40.0)  # the same memory figure: the panel's layout stays as it is
    busy = replace(idle, utilization_gpu=60)
    app = _PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        panel = app.query_one(GpuPanel)
        panel.update(snapshot(T0, [idle]), {}, Settings())
        await pilot.pause()
        assert " idle " in panel.render_line(0).text
        panel.update(snapshot(T0 + 1, [busy]), {}, Settings())
        await pilot.pause()
        top = panel.render_line(0).text
        assert activity(busy) in top and " idle " not in top


def test_a_graph_whose_every_bar_moves_each_poll_is_redrawn_once_a_step_with_every_sample():
    """Issue 29: under a load that changes every second, a scrolling graph rewrote every bar every
    second (most of the dashboard's bytes to the terminal). Now it moves once every GRAPH_STEP
    polls, by that many samples: every sample is drawn, in order, at most a step late."""
    from gputui.core.history import GpuSample
    from gputui.ui.widgets.gpu_panel import GRAPH_STEP, SeriesCodes
    from gputui.ui.widgets.lines import level_code

    def load(t: int) -> int:
        return (t * 37) % 100

    width = 30
    codes = SeriesCodes()
    history = [GpuSample(float(t), load(t), GIB, 80 * GIB, 50, 100.0, False, 1) for t in range(100)]
    drawn = [text(tuple(card_view.spark(codes.update(0, history)[0], width)))]
    for t in range(100, 100 + 3 * GRAPH_STEP):
        history.append(GpuSample(float(t), load(t), GIB, 80 * GIB, 50, 100.0, False, 1))
        drawn.append(text(tuple(card_view.spark(codes.update(0, history)[0], width))))
    moved = [i + 1 for i, (old, new) in enumerate(zip(drawn, drawn[1:], strict=False)) if old != new]
    assert moved == [GRAPH_STEP, 2 * GRAPH_STEP, 3 * GRAPH_STEP]
    # The first drawing and each moved one end with the newest sample: the graph is the history as it is.
    for i in (0, *moved):
        newest = range(100 + i - width, 100 + i)
        assert drawn[i] == text(tuple(card_view.spark(tuple(level_code(load(t)) for t in newest), width)))
