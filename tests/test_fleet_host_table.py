"""The fleet's host list draws its lines from its own cache (gputui.ui.widgets.host_table): they
must be what DataTable itself draws, and never a host's old figures."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gputui.ui.screens.fleet import HostTable

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


# -- the fleet screen's list through refreshes ------------------------------------------------
class _Swappable:
    """The fleet app over a reader whose next snapshot a test sets."""

    def __init__(self, memory: dict[str, int]) -> None:
        from gputui.core.config import Settings
        from gputui.core.fleet.prom import PromClient
        from gputui.core.fleet.queries import FleetReader
        from gputui.ui.fleet_app import make_fleet_app

        self.snap = self.build(memory)
        outer = self

        class Reader(FleetReader):
            def read(self):
                return outer.snap

        self.app = make_fleet_app(Reader(PromClient("http://127.0.0.1:9")), Settings(interval=600.0))

    @staticmethod
    def build(memory: dict[str, int]):
        """Hosts by name, each with its GPUs' memory used in GiB (two GPUs of 80 GiB)."""
        from gputui.core.fleet.prom import Sample
        from gputui.core.fleet.queries import build_fleet
        from tests.test_fleet_model import NOW, gputui_host, up

        names = sorted(memory)
        samples = []
        for i, name in enumerate(names):
            for x in gputui_host(f"h{i}:1", name):
                if x.labels["__name__"] == "gputui_gpu_memory_used_bytes":
                    x = Sample(x.labels, memory[name] * 1024**3)
                samples.append(x)
        return build_fleet("http://p", NOW, [up(f"h{i}:1") for i in range(len(names))], [], samples, [], [])

    async def show(self, pilot, memory: dict[str, int]) -> None:
        """Refresh with these figures and wait until the screen has them."""
        self.snap = self.build(memory)
        self.app.refresh_now()
        await until(pilot, lambda: self.app.snapshot is self.snap, "the refresh")
        await pilot.pause()
        await pilot.pause()


async def until(pilot, predicate, what: str, tries: int = 400) -> None:
    for _ in range(tries):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"{what} did not happen")


def _row_text(table: HostTable, name: str) -> str:
    """The line the host list draws for host ``name``, as the terminal shows it."""
    lines = [table.render_line(y).text for y in range(table.size.height)]
    return next(line for line in lines if line.strip().startswith(name))


async def test_a_host_hidden_by_the_filter_while_it_changed_comes_back_with_its_new_figures():
    fleet = _Swappable({"node-a": 10, "node-b": 10, "node-c": 10})
    async with fleet.app.run_test(size=(120, 20)) as pilot:
        table = fleet.app.screen.query_one("#fleet-hosts", HostTable)
        await until(pilot, lambda: table.row_count == 3, "three hosts")
        await pilot.press("down")  # the cursor on node-b: node-a is drawn as a plain row
        await pilot.pause()
        assert "20.0/160.0 GiB" in _row_text(table, "node-a")
        await pilot.press("slash", *"node-b", "enter")
        await until(pilot, lambda: table.row_count == 1, "the filter")
        await pilot.pause()
        drawn = fleet.app.screen.query_one("#fleet-summary").render_line(0).text
        assert "filter 'node-b': 1 shown" in drawn, drawn  # the summary line says so (drawn, not laid out again)
        await fleet.show(pilot, {"node-a": 30, "node-b": 10, "node-c": 10})  # node-a changes, hidden
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == 3, "the filter cleared")
        await pilot.pause()
        assert "60.0/160.0 GiB" in _row_text(table, "node-a"), _row_text(table, "node-a")


async def test_a_refresh_builds_the_changed_hosts_line_only_and_a_key_the_two_the_cursor_crosses():
    """The cache's keys are no wider than what a line draws: Textual asks for every line of the list
    at each frame, and a line built again is a row drawn again (a guard: a key that took in the
    table's count of changes, as DataTable's do, builds every visible line after each refresh)."""
    fleet = _Swappable({f"node-{i:02d}": 10 for i in range(30)})
    async with fleet.app.run_test(size=(120, 24)) as pilot:
        table = fleet.app.screen.query_one("#fleet-hosts", HostTable)
        await until(pilot, lambda: table.row_count == 30, "thirty hosts")
        await pilot.pause()
        built: list[int] = []
        draw = table._draw

        def counted(row, *args):
            built.append(row)
            return draw(row, *args)

        table._draw = counted  # type: ignore[method-assign]
        await fleet.show(pilot, {**{f"node-{i:02d}": 10 for i in range(30)}, "node-05": 30})
        assert "60.0/160.0 GiB" in _row_text(table, "node-05")
        assert built == [5]  # the row of node-05
        built.clear()
        await pilot.press("down")
        await pilot.pause()
        assert sorted(built) == [0, 1]  # the row the cursor left, the row it entered


async def test_scrolling_through_many_hosts_keeps_a_bounded_number_of_lines():
    from gputui.ui.widgets.host_table import LINES_KEPT

    class _Hosts(App):
        def compose(self) -> ComposeResult:
            yield HostTable(cursor_type="row", zebra_stripes=True)

    app = _Hosts()
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.query_one(HostTable)
        table.add_column("Host")
        for n in range(1500):
            table.add_row(Text(f"host-{n:04d}"), key=str(n))
        table.focus()
        await pilot.pause()
        for _ in range(1500 // 30):
            await pilot.press("pagedown")
        await pilot.pause()
        assert table.cursor_row == 1499
        assert len(table._lines) <= LINES_KEPT + table.size.height
        assert "host-1499" in "".join(table.render_line(y).text for y in range(table.size.height))


async def test_a_frame_that_reuses_the_last_frames_lines_draws_what_a_fresh_frame_draws():
    """Textual asks for every line at each frame; lines of rows a key did not touch come from the last
    frame. Whatever moved (cursor, mouse, a cell, the order, the scroll), the frame is the one drawn from
    scratch."""
    from textual.geometry import Region

    class _Hosts(App):
        def compose(self) -> ComposeResult:
            yield HostTable(cursor_type="row", zebra_stripes=True)

    app = _Hosts()
    async with app.run_test(size=(90, 24)) as pilot:
        table = app.query_one(HostTable)
        for heading in ("Host", "State", "GPUs", "Memory", "Hottest", "Imbalance", "Stale"):
            table.add_column(heading)
        for n in range(60):
            table.add_row(*_cells(n), key=str(n))
        table.focus()
        await pilot.pause()
        everything = Region(0, 0, table.size.width, table.size.height)

        def frame() -> list[str]:
            return [line.text + repr([s.style for s in line]) for line in table.render_lines(everything)]

        def fresh() -> list[str]:
            table._shown = None
            return frame()

        steps = [
            lambda: table.move_cursor(row=5),
            lambda: table.update_cell("7", table.ordered_columns[3].key, Text("99.0/640.0 GiB")),
            lambda: setattr(table, "hover_coordinate", table.hover_coordinate._replace(row=9)),
            lambda: table._set_hover_cursor(True),
            lambda: table.move_cursor(row=30),
            lambda: table.sort(table.ordered_columns[3].key, key=lambda cell: cell.plain, reverse=True),
            lambda: table.remove_row("12"),
        ]
        frame()
        for step in steps:
            step()
            await pilot.pause()
            assert frame() == fresh()


async def test_a_refresh_that_moves_a_host_in_the_order_shows_the_new_order():
    """A refresh that changes a few hosts updates their rows in place only while none of them moves in
    the sort order: sorted by memory, a host whose memory grows goes to the top."""
    memory = {f"node-{i:02d}": 10 + i for i in range(12)}
    fleet = _Swappable(memory)
    async with fleet.app.run_test(size=(120, 24)) as pilot:
        table = fleet.app.screen.query_one("#fleet-hosts", HostTable)
        await until(pilot, lambda: table.row_count == 12, "twelve hosts")
        await pilot.press("s", "s", "s")  # host, state, GPUs, memory: the fullest first
        await until(pilot, lambda: table.get_row_at(0)[0].plain == "node-11", "the sort by memory")
        await fleet.show(pilot, {**memory, "node-03": 70})
        assert [table.get_row_at(i)[0].plain for i in range(3)] == ["node-03", "node-11", "node-10"]
        await fleet.show(pilot, {**memory, "node-03": 70, "node-07": 71})  # one more, the others as they were
        assert [table.get_row_at(i)[0].plain for i in range(3)] == ["node-07", "node-03", "node-11"]
