"""Pilot tests of the dashboard: what a user sees and does, on the demo server.

The app is the real one (make_app), on the real poller and judges; the demo's
clock is a manual clock the tests move, so every value is known.
"""

from __future__ import annotations

import html
import re
import threading
import time

import pytest

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH, DemoMachine
from gputui.core.machine import Machine, open_machine
from gputui.core.model import Gpu, GpuReading
from gputui.core.record import replace
from gputui.core.sources import SourceUnavailable
from gputui.ui.app import GpuTuiApp, make_app
from gputui.ui.screens.containers import ContainersScreen
from gputui.ui.screens.dashboard import DashboardScreen
from gputui.ui.screens.detail import GpuDetailScreen
from gputui.ui.screens.help import HelpScreen, help_sections
from gputui.ui.widgets.banner import SuggestionBanner
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessHeader, ProcessTable
from gputui.ui.widgets.status import SelectionBar, StatusLine
from tests.fixtures.showcase import ManualClock, wait_for_polls


def demo_app(settings: Settings | None = None, live: bool = False, n_gpus: int | None = None,
             warm: int = 0) -> tuple[GpuTuiApp, ManualClock]:
    clock = ManualClock(FROZEN_EPOCH - warm)
    machine = open_machine(demo=True, demo_clock=clock)
    if n_gpus is not None:
        machine.demo.n_gpus = n_gpus  # type: ignore[union-attr]
    app = make_app(machine, settings or Settings(), clock=clock, live=live)
    for _ in range(warm):
        app.poller.poll()
        clock.now += 1
    return app, clock


def table(app: GpuTuiApp) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


def panel(app: GpuTuiApp) -> GpuPanel:
    return app.screen.query_one(GpuPanel)


def lines(widget, count: int | None = None) -> list[str]:
    """What a Line-API widget shows, as plain text."""
    return [widget.render_line(y).text for y in range(count if count is not None else widget.size.height)]


def visible_text(app: GpuTuiApp) -> str:
    """Everything on screen as text (from the same SVG export a screenshot uses)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg.replace("&#160;", " ")))


def status_text(app: GpuTuiApp) -> str:
    return app.screen.query_one(StatusLine).render_line(0).text


async def repoll(pilot, clock: ManualClock | None = None, advance: float = 1.0) -> None:
    app = pilot.app
    if clock is not None:
        clock.now += advance
    done = app.polls_done
    app.request_poll()
    await wait_for_polls(pilot, done + 1)


# -- first picture ------------------------------------------------------------------


async def test_first_poll_shows_every_gpu_and_process():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        assert isinstance(app.screen, DashboardScreen)
        status = status_text(app)
        assert "gpu-node-07" in status and "550.127.05" in status and "CUDA 12.4" in status
        assert "every 1s" in status
        shown = "\n".join(lines(panel(app)))
        for i in range(8):
            assert f" {i}  A100-SXM4-80GB" in shown
        assert "64.6/80.0 GiB" in shown  # GPU 0's memory, used/total
        assert "N/A" in shown  # SXM boards have no fan
        rows = table(app).rows
        assert len(rows) == 12  # GPU 5's MIG devices hold three of them
        assert {p.pid for p in rows} >= {4101, 4201, 5120, 5388, 4601}
        # the table has the focus so k / m act on its row
        assert app.focused is table(app)


async def test_eight_gpus_fit_120x40_as_cards_and_80x24_falls_back_to_rows():
    app, _ = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        p = panel(app)
        assert p.mode == "cards"
        assert p.size.height == p.virtual_size.height == 20  # all eight cards, no scrolling
        assert table(app).size.height >= 8
    app, _ = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_polls(pilot)
        p = panel(app)
        assert p.mode == "compact"
        assert p.size.height == 8
        text = lines(p)
        g0 = app.snapshot.gpu(0)
        assert text[0].startswith(" 0 ")
        assert f"{g0.utilization_gpu}%" in text[0] and f"{g0.temperature}°C" in text[0]
        assert table(app).size.height >= 5


async def test_sixteen_gpus_scroll_on_a_small_terminal():
    app, _ = demo_app(n_gpus=16)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_polls(pilot)
        p = panel(app)
        assert p.mode == "compact"
        assert p.virtual_size.height == 16 > p.size.height
        p.focus()
        for _ in range(15):
            await pilot.press("down")
        assert p.selected == 15
        assert p.scroll_offset.y > 0
        assert lines(p)[-1].startswith("15 ")


async def test_sparklines_use_a_fixed_scale():
    """A GPU steady at ~86 % draws high bars; an idle one draws the floor, not full-height noise."""
    app, _ = demo_app(warm=60)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        text = lines(panel(app))
        util_gpu0 = text[1][:70]
        util_gpu7 = next(line for line in text[15:20] if "UTIL" in line[70:])[70:]
        assert "▇" in util_gpu0 or "█" in util_gpu0
        assert not any(ch in util_gpu7 for ch in "▃▄▅▆▇█")


# -- keys ------------------------------------------------------------------------------


async def test_digit_shows_only_that_gpu_and_a_shows_all():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("0")
        assert {p.gpu_index for p in table(app).rows} == {0}
        assert len(table(app).rows) == 4
        assert panel(app).filtered == 0
        header = app.screen.query_one(ProcessHeader).render_line(0).text
        assert "4 of 12" in header and "GPU 0 only" in header
        await pilot.press("4")
        assert [p.pid for p in table(app).rows] == [4601]
        await pilot.press("a")
        assert len(table(app).rows) == 12
        assert panel(app).filtered is None
        await pilot.press("7")  # GPU 7 has nobody
        assert table(app).rows == []
        assert "Nobody is on GPU 7" in table(app).render_line(0).text
        await pilot.press("7")  # the same digit again: all GPUs
        assert len(table(app).rows) == 12


async def test_digit_for_a_missing_gpu_says_so():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("9")
        assert len(table(app).rows) == 12
        assert any("There is no GPU 9" in n.message for n in app._notifications)


async def test_sort_by_any_column_from_the_keyboard():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        t = table(app)
        assert t.sort_column == "gpu"
        await pilot.press("s")  # next column: PID
        assert t.sort_column == "pid"
        pids = [p.pid for p in t.rows]
        assert pids == sorted(pids)
        await pilot.press("r")
        assert [p.pid for p in t.rows] == sorted(pids, reverse=True)
        await pilot.press("s", "s")  # USER, then GPU MEM (largest first)
        assert t.sort_column == "gpu_memory"
        mems = [p.gpu_memory for p in t.rows]
        assert mems == sorted(mems, reverse=True)
        assert t.rows[0].pid == 4601  # the 77.5 GiB cache warmer
        header = app.screen.query_one(ProcessHeader).render_line(0).text
        assert "GPU MEM▼" in header
        await pilot.press("S")  # back to USER
        assert t.sort_column == "user"
        # every column can be reached
        seen = set()
        for _ in range(12):
            await pilot.press("s")
            seen.add(t.sort_column)
        assert seen == {"gpu", "pid", "user", "gpu_memory", "sm", "cpu", "host_memory", "uptime", "container",
                        "command"}


async def test_typing_a_filter_narrows_the_table_and_escape_clears_it():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("slash")
        assert app.focused is app.screen.query_one("#filter")
        await pilot.press("b", "o", "b")
        assert {p.user for p in table(app).rows} == {"bob"}
        await pilot.press("enter")
        assert app.focused is table(app)
        assert table(app).text_filter == "bob"
        await pilot.press("escape")
        assert table(app).text_filter == ""
        await pilot.press("slash", *"vllm")  # matches a container name / command too
        assert [p.pid for p in table(app).rows] == [4601]
        await pilot.press("escape")
        assert table(app).text_filter == ""
        assert len(table(app).rows) == 12
        assert not app.screen.query_one("#filter").display


async def test_filter_matches_container_names():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("slash", *"jupyter", "enter")
        assert [p.pid for p in table(app).rows] == [4501]


# -- the cursor survives refreshes ------------------------------------------------------


async def test_cursor_stays_on_its_process_through_refreshes_and_resorts():
    app, clock = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        t = table(app)
        t.set_sort("sm", descending=True)  # a column that changes every poll
        assert t.select_key((0, 5120))
        for step in range(1, 12):
            await repoll(pilot, clock, advance=7.0)
            assert t.cursor_key == (0, 5120), f"cursor moved off its process after poll {step}"
            assert t.cursor_process is not None and t.cursor_process.pid == 5120
        assert app.screen.query_one(SelectionBar).render_line(0).text.strip().startswith("PID 5120")


async def test_cursor_and_scroll_survive_a_refresh_on_a_small_terminal():
    app, clock = demo_app()
    async with app.run_test(size=(80, 20)) as pilot:
        await wait_for_polls(pilot)
        t = table(app)
        await pilot.press("end")
        assert t.cursor_key == t.rows[-1].key
        scroll = t.scroll_offset.y
        assert scroll > 0  # ten rows do not fit at 80x20
        key = t.cursor_key
        await pilot.press("up")
        key = t.cursor_key
        for _ in range(3):
            await repoll(pilot, clock)
            assert t.cursor_key == key
            assert t.scroll_offset.y == scroll


@pytest.mark.parametrize("width", [80, 200])
async def test_each_cell_is_drawn_where_a_changed_cell_is_refreshed(width):
    """Under churn the table refreshes only the columns that changed (issue 29): the place it
    refreshes for each cell (column_spans) must be where the row draws that cell, at any width."""
    from gputui.ui.widgets.process_table import _INDEX, COLUMNS, column_spans

    app, _ = demo_app()
    async with app.run_test(size=(width, 40)) as pilot:
        await wait_for_polls(pilot)
        t = table(app)
        spans = column_spans(t.size.width)
        for y, p in enumerate(t.rows[: t.size.height]):
            row = t.render_line(y).text
            cells = t._cells[p.key]
            for c in COLUMNS:
                span = spans[_INDEX[c.id]]
                if span is None or c.id == "command":
                    continue
                cell, width = cells[_INDEX[c.id]].strip(), span[1] - span[0]
                fitted = cell if len(cell) <= width else cell[: width - 1] + "…"  # a long cell is cut, visibly
                assert row[span[0]:span[1]].strip() == fitted, (c.id, row)
            command = spans[_INDEX["command"]]
            assert command is not None and row[command[0]:].strip().startswith((cells[-1] + " ").strip() or "")
            assert (cells[_INDEX["command"]].split(" ")[0][:8] in row[command[0]:command[1]])


async def test_cursor_keeps_its_row_when_its_process_exits():
    app, clock = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        t = table(app)
        assert t.select_key((0, 5120))
        row = t.rows.index(t.cursor_process)
        app.machine.demo.kill_process(5120)
        await repoll(pilot, clock)
        assert all(p.pid != 5120 for p in t.rows)
        assert t.rows.index(t.cursor_process) == row
        assert t.cursor_key == t.rows[row].key


# -- detail, help, palette, mouse, quit -----------------------------------------------


async def test_enter_opens_the_detail_screen_of_the_rows_gpu():
    app, clock = demo_app(warm=30)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        table(app).select_key((4, 4601))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen) and screen.gpu_index == 4
        await pilot.pause()
        title = str(screen.query_one("#detail-title").render())
        assert "GPU 4" in title and "A100-SXM4-80GB" in title
        text = visible_text(app)
        for name in ("uuid", "pci bus id", "memory used", "power limit", "clock sm max", "throttle reasons",
                     "persistence mode", "fan speed", "pstate"):
            assert name in text
        util_plot = screen.query_one("#plot-util").render().plain
        assert "Utilization" in util_plot and "100" in util_plot
        # The demo is frozen at 20:26:40 UTC and the plot spans the last minute: the time axis
        # carries the two half-minute marks in it as clock labels.
        assert util_plot.rstrip("\n").split("\n")[-1].split() == ["20:26:00", "20:26:30"]
        assert any(0x2800 <= ord(ch) <= 0x28FF for ch in util_plot)  # data drawn
        assert {"Next GPU", "Previous GPU", "Back"} <= {c.title for c in app.get_system_commands(screen)}
        # the detail follows new polls
        await repoll(pilot, clock)
        await pilot.press("right")
        assert screen.gpu_index == 5
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_help_lists_every_binding():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        described = {what for _, rows in help_sections(app) for _, what in rows}
        for binding in DashboardScreen.BINDINGS:
            if binding.action.startswith("only_gpu("):
                continue
            assert binding.description in described, binding
        for binding in (ProcessTable.BINDINGS + GpuPanel.BINDINGS + GpuDetailScreen.BINDINGS
                        + SuggestionBanner.BINDINGS + ContainersScreen.BINDINGS):
            assert binding.description in described, binding
        rows = dict(help_sections(app))
        # K is "all stale in view", the banner's m and Enter, and m in the containers view.
        assert ("K", "Kill every stale process in view") in rows["Dashboard"]
        assert ("m / ⏎", "Migrate as suggested") in rows["Imbalance banner (tab to focus)"]
        assert ("m", "Migrate") in rows["Containers (c)"]
        shown = visible_text(app)
        assert "Kill every stale process" in shown and "Migrate as suggested" in shown  # on screen, not scrolled away
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_command_palette_offers_the_same_actions():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for expected in ("Help", "Filter", "Sort", "Reverse sort order", "Only GPU 0's processes", "Details",
                         "Containers", "Alerts", "Migrate", "Kill", "Pause / resume"):
            assert expected in titles
        assert "Only GPU 9's processes" not in titles  # the demo has eight GPUs
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Only GPU 3's processes")
        command.callback()
        await pilot.pause()
        await pilot.pause()
        assert {p.gpu_index for p in table(app).rows} == {3}


async def test_mouse_selects_cards_and_rows():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        p = panel(app)
        # second column, second row of cards: GPU 3
        await pilot.click(GpuPanel, offset=(p._card_width + 10, 7))
        assert p.selected == 3 and app.focused is p
        await pilot.click(GpuPanel, offset=(p._card_width + 10, 7))  # again: its details
        assert isinstance(app.screen, GpuDetailScreen) and app.screen.gpu_index == 3
        await pilot.press("escape")
        t = table(app)
        await pilot.click(ProcessTable, offset=(10, 3))
        assert t.cursor_key == t.rows[3].key and app.focused is t


async def test_arrow_keys_and_enter_on_the_gpu_panel():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("tab")
        assert app.focused is panel(app) or app.focused is table(app)
        panel(app).focus()
        await pilot.press("right", "down")
        assert panel(app).selected == 3
        await pilot.press("enter")
        assert isinstance(app.screen, GpuDetailScreen) and app.screen.gpu_index == 3


async def test_q_quits_cleanly_with_status_0():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


# -- actions that need a row, plug-in screens, read-only ---------------------------------


async def test_kill_is_disabled_without_a_row_and_migrate_falls_back_to_the_suggestion():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        screen = app.screen
        assert screen.check_action("kill", ()) is True
        assert screen.check_action("kill_stale", ()) is True  # the demo's orphan on GPU 0
        assert screen.check_action("migrate", ()) is True
        await pilot.press("7")  # nobody on GPU 7: no row, no stale process in view
        assert screen.check_action("kill", ()) is None
        assert screen.check_action("kill_stale", ()) is True  # K stays live: it says "No stale process in view."
        assert screen.active_bindings["k"].enabled is False  # greyed in the footer
        # The imbalance judge names a container to move: m still has something to open.
        assert screen.check_action("migrate", ()) is True
        before = len(app.screen_stack)
        await pilot.press("k", "K")
        assert len(app.screen_stack) == before


class QuietGpus:
    """Two evenly loaded GPUs and no process: nothing to highlight, nothing suggested."""

    def read(self) -> GpuReading:
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", name="Quiet GPU",
                         utilization_gpu=30, memory_used=10 * 1024**3, memory_total=80 * 1024**3, temperature=40)
                     for i in range(2))
        return GpuReading("550", "12.4", gpus, {})

    def facts(self, pids):
        return {}

    def close(self) -> None:
        pass


async def test_migrate_is_disabled_with_neither_a_row_nor_a_suggestion():
    quiet = QuietGpus()
    app = make_app(Machine(gpu=quiet, processes=quiet, containers=None), Settings(),
                   clock=lambda: FROZEN_EPOCH, live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        screen = app.screen
        assert app.snapshot.imbalance.suggestion is None and table(app).cursor_process is None
        for action in ("migrate", "kill"):
            assert screen.check_action(action, ()) is None, action
        assert screen.active_bindings["m"].enabled is False
        await pilot.press("m", "k", "K")
        assert isinstance(app.screen, DashboardScreen)
        await pilot.pause(0.1)
        assert [n.message for n in app._notifications] == ["No stale process in view."]


async def test_read_only_disables_kill_and_migrate_everywhere():
    app, _ = demo_app(settings=Settings(read_only=True))
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await wait_for_polls(pilot)
        screen = app.screen
        assert table(app).cursor_process is not None and screen.stale_in_view()
        for action in ("kill", "kill_stale", "migrate"):
            assert screen.check_action(action, ()) is None, action
        # The footer shows them greyed, the status line says why, and the keys open nothing.
        active = screen.active_bindings
        assert active["k"].enabled is False and active["m"].enabled is False and active["K"].enabled is False
        footer = next(line for line in visible_text(app).splitlines() if "? Help" in line)
        assert "k Kill" in footer and "m Migrate" in footer  # still listed, greyed
        assert "read-only: kill and migrate off" in status_text(app)
        await pilot.press("k", "K", "m")
        assert isinstance(app.screen, DashboardScreen)
        # not in the command palette either
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert not titles & {"Kill", "Migrate", "Kill every stale process in view"}
        # the banner's m
        banner = screen.query_one(SuggestionBanner)
        banner.focus()
        await pilot.pause()
        assert banner.check_action("migrate_suggestion", ()) is None
        assert "read-only: migrate is off" in " ".join(banner.render_line(y).text.strip()
                                                        for y in range(banner.size.height))
        await pilot.press("m")
        assert isinstance(app.screen, DashboardScreen)
        # the containers view's m
        table(app).focus()
        await pilot.press("c")
        assert isinstance(app.screen, ContainersScreen)
        await pilot.pause()
        assert app.screen.selected_id is not None
        assert app.screen.check_action("migrate", ()) is None
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, ContainersScreen)


async def test_theme_comes_from_the_settings():
    app, _ = demo_app(settings=Settings(theme="nord"))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for_polls(pilot)
        assert app.theme == "nord"


# -- polling: errors, recovery, overlap, slowness -------------------------------------------


class FlakyGpus:
    """The demo's GPUs, failing on demand like an NVML that lost the driver."""

    def __init__(self, sim: DemoMachine, delay: float = 0.0) -> None:
        self.sim = sim
        #: True: the driver fails (one sentence); "bug": gputui itself raises
        self.fail: bool | str = False
        self.delay = delay
        self.lost: set[int] = set()
        self.active = 0
        self.most_active = 0
        self.reads = 0
        self._lock = threading.Lock()

    def read(self) -> GpuReading:
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.reads += 1
        try:
            if self.delay:
                time.sleep(self.delay)
            if self.fail == "bug":
                raise KeyError("a bug in gputui")
            if self.fail:
                raise SourceUnavailable("NVML_ERROR_UNKNOWN from nvmlDeviceGetUtilizationRates")
            reading = self.sim.read()
            gpus = tuple(
                replace(g, lost=True, utilization_gpu=None, memory_used=None, temperature=None, power_draw=None)
                if g.index in self.lost else g
                for g in reading.gpus
            )
            return replace(reading, gpus=gpus)
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        pass


def flaky_app(delay: float = 0.0, interval: float = 1.0, live: bool = False) -> tuple[GpuTuiApp, FlakyGpus]:
    sim = DemoMachine(clock=lambda: FROZEN_EPOCH)
    gpus = FlakyGpus(sim, delay)
    machine = Machine(gpu=gpus, processes=sim, containers=None)
    app = make_app(machine, Settings(interval=interval), clock=lambda: FROZEN_EPOCH, live=live)
    return app, gpus


async def test_a_failing_poll_shows_in_the_status_line_and_clears_on_recovery():
    app, gpus = flaky_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        assert "Could not read" not in status_text(app)
        gpus.fail = True
        await repoll(pilot)
        text = status_text(app)
        assert "Could not read the GPUs: NVML_ERROR_UNKNOWN" in text
        # the last good picture stays on screen meanwhile
        assert len(table(app).rows) == 12
        gpus.fail = False
        await repoll(pilot)
        assert "Could not read" not in status_text(app)
        assert "⚠" not in status_text(app)


async def test_a_bug_in_a_poll_says_so_and_logs_its_traceback_not_a_driver_fault(isolated_xdg):
    app, gpus = flaky_app()
    log = isolated_xdg / "state" / "gputui" / "gputui.log"
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        gpus.fail = "bug"
        await repoll(pilot)
        await repoll(pilot)
        text = status_text(app)
        assert "gputui hit a bug; details in" in text and "Could not read the GPUs" not in text
        assert app.poll_status.error == f"gputui hit a bug; details in {log}."
    logged = log.read_text()
    assert "Traceback" in logged and "KeyError: 'a bug in gputui'" in logged
    assert logged.count("Traceback") == 1  # once, not once per poll
    assert log.stat().st_mode & 0o777 == 0o600


async def test_a_lost_gpu_is_shown_as_lost():
    app, gpus = flaky_app()
    gpus.lost = {2}
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        text = "\n".join(lines(panel(app)))
        assert "LOST" in text
        assert "NVML no longer answers for this GPU" in text


async def test_polls_never_overlap_and_the_ui_stays_responsive_while_one_is_slow():
    app, gpus = flaky_app(delay=0.3, interval=0.25, live=True)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        # a poll takes longer than the interval: polls stretch, they never run two at once
        await wait_for_polls(pilot, app.polls_done + 4, timeout=10)
        assert gpus.most_active == 1
        assert gpus.reads <= app.polls_done + 1
        # a key pressed while a slow poll runs is handled at once, not after the poll
        gpus.delay = 2.0
        app.request_poll()
        while not gpus.active:
            await pilot.pause(0.01)
        started = time.monotonic()
        await pilot.press("0")
        assert time.monotonic() - started < 1.0
        assert gpus.active == 1, "the poll should still be running"
        assert {p.gpu_index for p in table(app).rows} == {0}
        app.request_poll()  # asking while one runs queues one more, never a second thread
        app.request_poll()
        gpus.delay = 0.0
        await wait_for_polls(pilot, app.polls_done + 2, timeout=10)
        assert gpus.most_active == 1


async def test_a_hung_poll_is_reported_as_slow():
    app, gpus = flaky_app(delay=0.0, interval=0.25, live=False)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        gpus.delay = 4.5  # well past the 2 s "slow" mark, so a busy machine cannot skip the warning
        app.request_poll()
        deadline = time.monotonic() + 7
        while "Waiting for the GPU driver" not in status_text(app):
            assert time.monotonic() < deadline, status_text(app)
            await pilot.pause(0.1)
        gpus.delay = 0.0
        await wait_for_polls(pilot, 2, timeout=15)
        assert "Waiting for the GPU driver" not in status_text(app)


async def test_pause_stops_polling_until_resumed():
    app, clock = demo_app(live=True, settings=Settings(interval=0.25))
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot, 2)
        await pilot.press("p")
        assert "PAUSED" in status_text(app)
        # A poll already running may finish; after it, no next poll is armed while paused.
        deadline = time.monotonic() + 10
        while app.poll_in_flight:
            assert time.monotonic() < deadline, "the poll in flight never finished"
            await pilot.pause(0.05)
        await pilot.pause()
        assert not app.next_poll_armed and not app.poll_in_flight
        await pilot.press("p")
        await wait_for_polls(pilot, app.polls_done + 2)
        assert "PAUSED" not in status_text(app)


async def test_alert_badge_on_the_card_of_the_alerting_gpu():
    app, _ = demo_app(warm=5)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        snap = app.snapshot
        alerting = {a.gpu for a in snap.alerts if a.gpu is not None}
        # The demo server is built to raise per-GPU alerts (GPU 0 overloaded, GPU 4 full): without one
        # this test would check nothing, so their absence is a failure.
        assert alerting, "the demo raised no per-GPU alert"
        text = lines(panel(app))
        p = panel(app)
        for view in p.views:
            slot = p._slot[view.gpu.index]
            row, col = divmod(slot, p._cols)
            top = text[row * 5][col * (p._card_width + 1):(col + 1) * (p._card_width + 1)]
            assert ("⚠" in top) == (view.gpu.index in alerting), top


# -- starting from the command line ---------------------------------------------------------


def _ctx(*argv: str):
    from gputui.cli import build_parser, load_context

    return load_context(build_parser().parse_args(list(argv)))


def test_an_unknown_theme_stops_the_dashboard_with_one_sentence():
    from gputui.context import UsageError
    from gputui.ui.app import run_app

    with pytest.raises(UsageError, match=r"There is no theme 'no-such-theme'; choose one of: .*nord"):
        run_app(_ctx("--demo", "--no-docker", "--theme", "no-such-theme"))


def test_the_theme_can_come_from_the_config_file(isolated_xdg):
    config = isolated_xdg / "config" / "gputui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('theme = "gruvbox"\ninterval = 2.5\n')
    ctx = _ctx("--demo", "--no-docker")
    assert ctx.settings.theme == "gruvbox" and ctx.settings.interval == 2.5
    assert _ctx("--demo", "--no-docker", "--interval", "0.5").settings.interval == 0.5  # flags win


def test_gpu_flag_for_a_missing_gpu_stops_the_dashboard():
    from gputui.context import UsageError
    from gputui.ui.app import run_app

    with pytest.raises(UsageError, match="There is no GPU '9'"):
        run_app(_ctx("--demo", "--no-docker", "--gpu", "9"))


async def test_gpu_flag_shows_only_those_gpus():
    ctx = _ctx("--demo", "--no-docker", "--gpu", "2,5")
    machine = ctx.open_machine()
    app = make_app(machine, ctx.settings, gpu_filter=ctx.gpu_filter(machine.gpu.read().gpus), live=False)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        assert [v.gpu.index for v in panel(app).views] == [2, 5]
        assert {p.gpu_index for p in table(app).rows} == {2, 5}


# -- interrupted migrations ------------------------------------------------------------------


async def test_an_interrupted_migration_journal_is_reported_at_start_until_recovered(isolated_xdg, monkeypatch):
    import gputui.ui.app as app_module
    from gputui.actions.journal import Journal, pending_journals

    # What a gputui killed between two migration steps leaves: a journal nobody holds.
    journal = Journal.create("migrate", "trainer", {"summary": "trainer: GPU 0 -> GPU 2"})
    journal.update(step="rename")
    journal.release()
    assert journal.path.is_relative_to(isolated_xdg)  # the test's own system-wide journal directory
    monkeypatch.setattr(app_module, "JOURNAL_RECHECK", 0.2)
    app, _ = flaky_app()
    async with app.run_test(size=(160, 44), notifications=True) as pilot:
        await wait_for_polls(pilot)
        deadline = time.monotonic() + 5
        while not app.poll_status.journals and time.monotonic() < deadline:
            await pilot.pause(0.05)
        sentence = app.poll_status.journals[0]
        assert sentence.startswith("An interrupted migrate was found: trainer: GPU 0 -> GPU 2")
        assert "last completed step: rename" in sentence and "gputui migrate --recover" in sentence
        assert "⚠ An interrupted migrate was found: trainer" in status_text(app)
        notes = [n for n in app._notifications if n.title == "Interrupted migration"]
        assert [n.message for n in notes] == [sentence]
        # Later checks do not notify again, and once --recover has dealt with it the warning goes.
        await pilot.pause(0.5)
        assert len([n for n in app._notifications if n.title == "Interrupted migration"]) == 1
        Journal.take(pending_journals()[0]).finish()
        deadline = time.monotonic() + 5
        while app.poll_status.journals and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.poll_status.journals == ()
        assert "interrupted" not in status_text(app)


async def test_the_demo_does_not_report_the_real_machines_journals(isolated_xdg):
    from gputui.actions.journal import Journal

    Journal.create("migrate", "trainer", {"summary": "trainer: GPU 0 -> GPU 2"}).release()
    app, _ = demo_app()
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await wait_for_polls(pilot)
        await pilot.pause(0.3)
        assert app.poll_status.journals == ()
        assert not any("interrupted" in n.message for n in app._notifications)
