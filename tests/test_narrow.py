"""Small terminals (issue 28, point 5): what is cut says so with "…", the keys that matter stay,
the detail screen keeps its plots, cards keep both borders; and the detail list's "SM N/A"."""

from __future__ import annotations

import io

import pytest

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.core.record import replace
from gputui.ui.app import make_app
from gputui.ui.widgets.footer import fit
from tests.fixtures.showcase import wait_for_polls


def _lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _demo():
    return make_app(open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH), Settings(), live=False)


def test_the_footer_fits_by_compacting_then_dropping_the_palette_then_middle_keys():
    widths = [6, 8, 6, 9, 12, 8, 9, 6, 6]  # ? Help … k Kill, q Quit
    assert fit(widths, 10, 200) == (False, True, list(range(9)))
    compact, palette, shown = fit(widths, 10, 80)
    assert compact and not palette and shown == list(range(9))
    compact, palette, shown = fit(widths, 10, 50)
    assert shown[0] == 0 and shown[-2:] == [7, 8] and len(shown) < 9  # help, kill and quit stay


@pytest.mark.functional
@pytest.mark.parametrize("width", [80, 60])
async def test_the_footer_keeps_kill_and_quit_and_marks_what_it_left_out(width):
    app = _demo()
    async with app.run_test(size=(width, 24)) as pilot:
        await wait_for_polls(pilot)
        await pilot.pause(0.2)
        footer = _lines(app)[-1]
        assert "k Kill" in footer and "q Quit" in footer and "? Help" in footer
        selection = _lines(app)[-2]  # the highlighted process's container and command: longer than the line
        assert selection.startswith(" PID ") and selection.endswith("…")
        if width == 60:
            assert "…" in footer


@pytest.mark.functional
@pytest.mark.parametrize("size", [(80, 24), (60, 15)])
async def test_the_detail_screen_draws_its_plots_on_a_small_terminal(size):
    app = _demo()
    async with app.run_test(size=size) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("enter")
        await pilot.pause(0.3)
        text = "\n".join(_lines(app))
        assert text.count("┤") >= 4 and text.count("└") >= 2  # axes: the plots are drawn, not just titles
        assert "Utilizat\n" not in text and "Utilizat " not in text  # no title broken mid-word
        assert "Util" in text and "Power" in text


@pytest.mark.functional
async def test_the_detail_list_says_sm_na_not_na_percent():
    app = _demo()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("enter")
        await pilot.pause(0.2)
        screen = app.screen
        gpu = app.snapshot.gpu(screen.gpu_index)
        gpu = replace(gpu, processes=tuple(replace(p, sm_utilization=None) for p in gpu.processes))
        from rich.console import Console

        console = Console(width=200, record=True, file=io.StringIO())
        console.print(screen._fields(gpu, app.snapshot))
        text = console.export_text()
        assert " SM N/A " in text and "N/A%" not in text


@pytest.mark.functional
async def test_cards_keep_their_right_border_at_80_columns():
    app = _demo()
    async with app.run_test(size=(80, 30)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("v")
        await pilot.pause(0.2)
        lines = _lines(app)
        scrollbar = " ▁▂▃▄▅▆▇█▔▕▏▐"  # the panel's scrollbar may stand in the column beyond the cards
        tops = [ln for ln in lines if ln.startswith("╭─")]
        assert tops and all(ln.rstrip(scrollbar).endswith("╮") for ln in tops), tops
        assert all(ln.rstrip(scrollbar).endswith("╯") for ln in lines if ln.startswith("╰"))


@pytest.mark.functional
async def test_the_containers_legend_fits_or_says_it_was_cut():
    app = _demo()
    async with app.run_test(size=(80, 30)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("c")
        await pilot.pause(0.3)
        legend = next(ln for ln in _lines(app) if ln.startswith(" GPUs "))
        assert legend.rstrip().endswith("other")
    app = _demo()
    async with app.run_test(size=(50, 30)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("c")
        await pilot.pause(0.3)
        legend = next(ln for ln in _lines(app) if ln.startswith(" GPUs "))
        assert legend.rstrip().endswith("…")
