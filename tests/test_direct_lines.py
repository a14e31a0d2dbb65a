"""The churning widgets (process table, GPU panel) hand their own strips to Textual's compositor (issue 29).

Under full churn every row and card changes every second; Textual's per-widget line pass wrapped
each changed line in a new strip, and the compositor divided every table row at the scrollbar.
These tests hold what that shortcut must keep: rows that stop at the scrollbar, the same strip
for a line that did not change, and Textual's own pass whenever a style needs it.
"""

from __future__ import annotations

from textual.geometry import Region
from textual.theme import Theme

from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessTable
from tests.test_ui_app import demo_app, repoll, visible_text, wait_for_polls


def _lines(widget) -> list:
    return widget.render_lines(Region(0, 0, widget.region.width, widget.region.height))


async def test_table_rows_stop_at_the_scrollbar_and_an_unchanged_row_is_the_same_strip():
    app, clock = demo_app()
    async with app.run_test(size=(80, 20)) as pilot:
        await wait_for_polls(pilot)
        table = app.screen.query_one(ProcessTable)
        assert len(table.rows) > table.size.height  # the table scrolls: a scrollbar takes the last column
        inner = table.scrollable_content_region.width
        assert inner == table.size.width - 1
        first = _lines(table)
        # Each row ends where the scrollbar starts, so the compositor keeps it whole (no division).
        assert {line.cell_length for line in first} == {inner}
        assert [line.divide([inner]) for line in first] == [[line] for line in first]
        again = _lines(table)
        assert all(a is b for a, b in zip(first, again, strict=True))
        # What the user sees is unchanged: every shown row, whole, beside the scrollbar.
        text = visible_text(app)
        for p in table.rows[: table.size.height]:
            assert str(p.pid) in text
        await repoll(pilot, clock)
        assert {line.cell_length for line in _lines(table)} == {inner}


async def test_a_style_the_shortcut_cannot_draw_goes_through_textual():
    """A user's CSS may give the table a border and padding: Textual's own pass draws them."""
    app, _ = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        table = app.screen.query_one(ProcessTable)
        table.styles.border = ("solid", "red")
        table.styles.padding = (0, 1)
        await pilot.pause()
        lines = [line.text for line in _lines(table)]
        assert lines[0].startswith("┌") and lines[0].rstrip().endswith("┐")
        assert lines[1].startswith("│ ") and lines[1].rstrip().endswith("│")
        assert str(table.rows[0].pid) in lines[1]
        panel = app.screen.query_one(GpuPanel)
        panel.styles.padding = (0, 2)
        await pilot.pause()
        assert all(line.text.startswith("  ") for line in _lines(panel))


async def test_the_theme_follows_a_switch_and_a_theme_registered_again():
    app, _ = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        app.register_theme(Theme(name="gt-churn", primary="#112233", dark=True))
        app.theme = "gt-churn"
        await pilot.pause()
        assert app.current_theme.primary == "#112233"
        app.register_theme(Theme(name="gt-churn", primary="#445566", dark=False))
        assert app.current_theme.primary == "#445566"
        assert app.ansi_theme is app.ansi_theme_light
        app.theme = "textual-dark"
        assert app.current_theme.name == "textual-dark"


async def test_rows_and_card_lines_a_poll_replaces_are_freed_without_the_garbage_collector():
    """The compositor caches ``[strip]`` as the division of a line that needs no cut: a cycle. The
    widgets release the strips they stop drawing, so every poll's old rows and card lines go at once
    (under full churn the collector's passes over them were a tenth of the dashboard's CPU)."""
    import gc

    from textual.strip import Strip

    app, clock = demo_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for_polls(pilot)
        await repoll(pilot, clock, advance=5.0)
        table = app.screen.query_one(ProcessTable)
        pids = {str(p.pid) for p in table.rows}
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            panel = app.screen.query_one(GpuPanel)
            before = {id(line) for line in _lines(table) + _lines(panel)}
            before_text = [line.text for line in _lines(table) + _lines(panel)]
            for _ in range(3):
                await repoll(pilot, clock, advance=5.0)
            after = {id(line) for line in _lines(table) + _lines(panel)}
            assert before - after, "the demo's numbers moved: some rows or card lines were drawn anew"
            gc.collect()
            # Rows, card lines, the status line (its host) and the selection bar (a PID).
            marks = [*pids, "UTIL", "╭", app.snapshot.host]
            leaked = [o.text for o in gc.garbage if isinstance(o, Strip) and any(m in o.text for m in marks)]
            assert any("UTIL" in line or any(pid in line for pid in pids) for line in before_text)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert leaked == []
