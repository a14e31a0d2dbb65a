"""The fleet screen and the host screen through Textual's Pilot, reading a real Prometheus."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Static

from gputui.core.config import Settings
from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import FleetReader
from gputui.ui.fleet_app import make_fleet_app
from tests.fleet_exposition import GIB, Card, Host, Proc, StaticTarget, dcgm_text, gputui_text
from tests.fleet_scenarios import HOSTS

EVIL = Host("evil\x1b]0;pwned\x07", [Card(0, "GPU-e", 0.5, 2 * GIB, name="[bold]H100[/]",
                                         procs=[Proc(66, "mallory\x1b[2J", "x\u202eexe", GIB, "[red]c[/red]")])])


@pytest.fixture
def prom(prometheus_factory):
    targets = [StaticTarget(gputui_text(h)) for h in (*HOSTS, EVIL)] + [StaticTarget(dcgm_text())]
    try:
        p = prometheus_factory([t.address for t in targets])
        p.wait_for("gputui_host_info", lambda r: len(r) == 4)
        p.wait_for("up == 1", lambda r: len(r) == len(targets))  # the dcgm page too: scraped on its own
        yield p
    finally:
        for t in targets:
            t.stop()


async def until(pilot, predicate, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"{what} did not happen within {timeout} s"
        await pilot.pause(0.05)


def rows(table: DataTable) -> list[list[str]]:
    return [[str(getattr(c, "plain", c)) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_fleet_screen_filter_sort_host_screen_and_commands(prom):
    app = make_fleet_app(FleetReader(PromClient(prom.url)), Settings(interval=1.0))
    async with app.run_test(size=(170, 45)) as pilot:
        table = app.screen.query_one("#fleet-hosts", DataTable)
        await until(pilot, lambda: table.row_count == 5, "five hosts")
        names = [r[0] for r in rows(table)]
        assert names[0] == "dcgm-node-01 (dcgm)" and "gpu-node-02" in names
        # outside text is cleaned: the hostile hostname shows its escapes, markup stays text
        assert "evil^[]0;pwned^G ⚠" in names  # flagged: no command can carry that name

        await pilot.press("slash", *"alice", "enter")
        await until(pilot, lambda: table.row_count == 1, "the filter")
        assert rows(table)[0][0] == "gpu-node-01"
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == 5, "the filter cleared")

        await pilot.press("s", "s", "s", "s")  # host -> state -> gpus -> memory -> hottest
        await until(pilot, lambda: rows(table)[0][0] == "gpu-node-01", "sorted by hottest GPU")
        assert "Hottest ▲" in table.render_line(0).text  # the mark is drawn, not cut off by the column width

        await pilot.press("enter")  # gpu-node-01, the hottest
        await until(pilot, lambda: app.screen.query("#host-procs"), "the host screen")
        procs = app.screen.query_one("#host-procs", DataTable)
        await until(pilot, lambda: procs.row_count == 1, "gpu-node-01's process")
        assert rows(procs)[0][:5] == ["0", "4242", "alice", "python3", "train-llm"]
        await pilot.press("1")
        await until(pilot, lambda: procs.row_count == 0, "GPU 1 only")
        await pilot.press("0")
        await until(pilot, lambda: procs.row_count == 1, "GPU 0 only")
        await pilot.press("m")
        await until(pilot, lambda: getattr(app.screen, "command", None) is not None, "the migrate command")
        assert app.screen.command == "ssh -- gpu-node-01 'gputui migrate train-llm --to 1'"
        await pilot.press("escape")
        await pilot.press("k")
        await until(pilot, lambda: getattr(app.screen, "command", None) == "ssh -t -- gpu-node-01 'gputui kill 4242'",
                    "the kill command")
        await pilot.press("escape", "escape")
        await until(pilot, lambda: app.screen.query("#fleet-hosts"), "back on the fleet")

        # gpu-node-02: bob's jupyter runs outside a container, so m explains instead of a command
        app.screen.needle = "gpu-node-02"
        app.screen._redraw()
        await until(pilot, lambda: table.row_count == 1, "gpu-node-02 alone")
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.query("#host-procs")
                    and app.screen.query_one("#host-procs", DataTable).row_count == 1, "bob's process")
        await pilot.press("m")
        await until(pilot, lambda: hasattr(app.screen, "command"), "the explanation")
        assert app.screen.command is None and "outside a container" in app.screen.explanation

        # Prometheus goes away: the last good data stays, a banner says so, refreshing goes on
        await pilot.press("escape", "escape")
        prom.stop()
        await until(pilot, lambda: app.status.error is not None, "the failure")
        banner = app.screen.query_one("#fleet-banner", Static)
        assert banner.has_class("-shown") and "Cannot reach Prometheus" in str(banner.render())
        assert table.row_count == 1  # still gpu-node-02, as last seen
        tried = app.status.refreshes
        await until(pilot, lambda: app.status.refreshes > tried, "a retry")
