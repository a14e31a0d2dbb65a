"""The fleet's host list draws its lines from its own cache (gputui.ui.widgets.host_table): they
must be what DataTable itself draws, and never a host's old figures."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gputui.ui.widgets.host_table import HostTable

pytestmark = pytest.mark.functional


def _cells(n: int, mark: str = "") -> tuple[Text, ...]:
    return (Text(f"gpu-node-{n:03d}{mark}"), Text("up", style="green") if n % 3 else Text("down", style="bold red"),
            Text(f"{n % 8}/{8 - n % 8}"), Text(f"{n}.0/640.0 GiB"), Text("86°C", style="red"),
            Text("flagged", style="bold yellow"), Text("-", style="dim"))


class _Both(App):
    CSS = "DataTable { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield HostTable(id="mine", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="stock", cursor_type="row", zebra_stripes=True)


def _lines(table: DataTable, height: int) -> list[list[tuple[str, object]]]:
    """Each line as (character, style) pairs: the same picture whatever the segments' splits."""
    out = []
    for y in range(height):
        out.append([(ch, seg.style) for seg in table.render_line(y) for ch in seg.text])
    return out


async def _pictures(pilot, app, focus: bool) -> tuple[list, list]:
    """Both tables' lines, each drawn while it has the focus (or while neither has it)."""
    mine, stock = app.query_one("#mine", HostTable), app.query_one("#stock", DataTable)
    out = []
    for table in (mine, stock):
        app.set_focus(table if focus else None)
        await pilot.pause()
        out.append(_lines(table, table.size.height))
    return out[0], out[1]


def _same(a: list, b: list, cut: bool) -> None:
    """The same picture, but for the "…" the host list ends a line with while columns are cut off."""
    if cut:
        assert all(line[-1][0] == "…" for line in a)
        a, b = [line[:-1] for line in a], [line[:-1] for line in b]
    assert a == b


@pytest.mark.parametrize("width", [60, 140])
async def test_the_host_list_draws_every_line_as_datatable_draws_it(width):
    app = _Both()
    async with app.run_test(size=(width, 30)) as pilot:
        mine, stock = app.query_one("#mine", HostTable), app.query_one("#stock", DataTable)
        for table in (mine, stock):
            for heading in ("Host ▲", "State", "GPUs", "Memory", "Hottest", "Imbalance", "Stale"):
                table.add_column(heading)
            for n in range(40):
                table.add_row(*_cells(n), key=str(n))
            table.move_cursor(row=3)
        await pilot.pause()
        for focus in (True, False):  # the cursor's focused and blurred colours, the zebra stripes
            a, b = await _pictures(pilot, app, focus)
            assert len(a) > 10
            _same(a, b, cut=mine.scroll_x < mine.max_scroll_x)
        for table in (mine, stock):  # scrolled down and right
            table.move_cursor(row=30)
            table.scroll_to(x=5, y=10, animate=False, force=True)
        await pilot.pause()
        assert mine.scroll_offset == stock.scroll_offset
        for focus in (True, False):
            a, b = await _pictures(pilot, app, focus)
            _same(a, b, cut=mine.scroll_x < mine.max_scroll_x)
