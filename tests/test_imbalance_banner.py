"""Pilot tests of the imbalance banner: it shows the judge's message and move, comes and goes
with the hysteresis, and ``m`` on it opens the migrate dialog pre-filled."""

from __future__ import annotations

import time

from gputui.core.config import GIB, Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import Machine, open_machine
from gputui.core.model import Gpu, GpuReading
from gputui.ui.app import make_app
from gputui.ui.widgets.banner import SuggestionBanner
from tests.fixtures.showcase import ManualClock, wait_for_polls


async def wait_for(pilot, condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


def banner_lines(app) -> list[str]:
    b = app.screen.query_one(SuggestionBanner)
    return [b.render_line(y).text for y in range(b.size.height)]


def move_text(app) -> str:
    """The suggested move, from its first line to the end of the banner, joined."""
    lines = banner_lines(app)
    start = next(i for i, line in enumerate(lines) if line.startswith("  → "))
    return " ".join(line.strip() for line in lines[start:])


def demo(settings: Settings | None = None):
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    return make_app(machine, settings or Settings(), live=False)


async def test_demo_banner_shows_the_message_and_the_suggested_move():
    app = demo()
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for_polls(pilot)
        banner = app.screen.query_one(SuggestionBanner)
        lines = banner_lines(app)
        assert banner.display and banner.size.height == len(lines) >= 2
        # The first sample is shorter than the 10 s hold: the verdict says it is provisional.
        assert lines[0].startswith(" IMBALANCED (provisional)  GPU 0 at ")
        assert "piled on GPU 0" in lines[0]
        move = move_text(app)
        assert move.startswith("→ move container bert-finetune from GPU 0 to GPU 1")
        assert "tab here, then m" in move


async def test_m_on_the_banner_opens_migrate_pre_filled():
    from gputui.ui.screens.migrate import MigrateScreen

    app = demo()
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for_polls(pilot)
        # From the process table, shift+tab reaches the banner (it sits right above it).
        await pilot.press("shift+tab")
        banner = app.screen.query_one(SuggestionBanner)
        assert app.focused is banner
        assert "m: migrate as suggested" in move_text(app)
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MigrateScreen))
        dialog = app.screen
        assert dialog.container_name == "bert-finetune"
        assert dialog.target == 1
        await wait_for(pilot, lambda: dialog.plan is not None)
        assert dialog.plan.to_gpu == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))
        # Enter on the banner does the same.
        assert app.focused is banner
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MigrateScreen))
        assert (app.screen.container_name, app.screen.target) == ("bert-finetune", 1)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))


async def test_clicking_the_banner_focuses_it_and_read_only_disables_it():
    from gputui.ui.screens.migrate import MigrateScreen

    app = demo(Settings(read_only=True))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await wait_for_polls(pilot)
        await pilot.click(SuggestionBanner)
        banner = app.screen.query_one(SuggestionBanner)
        assert app.focused is banner
        # Disabled, not merely refused: greyed in the footer, and the banner's own hint says why.
        assert banner.check_action("migrate_suggestion", ()) is None
        assert app.screen.active_bindings["m"].enabled is False
        assert "[read-only: migrate is off]" in move_text(app)
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(app.screen, MigrateScreen)


class Scripted:
    """Two GPUs whose utilization the test sets; no processes."""

    def __init__(self) -> None:
        self.util = (95, 3)

    def read(self) -> GpuReading:
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", name="Scripted GPU",
                         utilization_gpu=u, memory_used=10 * GIB, memory_total=80 * GIB, temperature=40)
                     for i, u in enumerate(self.util))
        return GpuReading("550", "12.4", gpus, {})

    def facts(self, pids):
        return {}

    def close(self) -> None:
        pass


async def test_the_banner_comes_with_the_flag_and_leaves_only_after_the_hysteresis():
    src = Scripted()
    clock = ManualClock(FROZEN_EPOCH)
    settings = Settings(imbalance_window=10.0, imbalance_hold=5.0)
    app = make_app(Machine(gpu=src, processes=src, containers=None), settings, clock=clock, live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        banner = app.screen.query_one(SuggestionBanner)
        assert banner.display
        assert banner_lines(app) == [banner.render_line(0).text]  # one line: no move with no jobs
        assert banner_lines(app)[0].startswith(
            " IMBALANCED (provisional)  GPU 0 at 95% while GPU 1 is at 3% in one sample.")

        async def poll(seconds: int) -> list[bool]:
            shown = []
            for _ in range(seconds):
                clock.now += 1
                done = app.polls_done
                app.request_poll()
                await wait_for_polls(pilot, done + 1)
                shown.append(banner.display)
            return shown

        assert all(await poll(10))
        # Watched for longer than the 5 s hold: no longer provisional.
        assert banner_lines(app)[0].startswith(" IMBALANCED  GPU 0 at 95% while GPU 1 is at ")
        src.util = (20, 15)
        shown = await poll(30)
        gone = shown.index(False)
        # The 10 s mean of GPU 0 needs a few seconds to fall below 70%, then the hold (5 s).
        assert gone >= 5
        assert not any(shown[gone:])


async def test_the_banner_wraps_at_word_boundaries_and_shows_everything_on_focus():
    """Issue 13: the message used to be cut mid-word ("…and defaulted", "the lowest loa") at every width."""
    app = demo()
    async with app.run_test(size=(80, 40)) as pilot:
        await wait_for_polls(pilot)
        banner = app.screen.query_one(SuggestionBanner)
        message, reason = app.snapshot.imbalance.message, app.snapshot.imbalance.suggestion.reason
        lines = banner_lines(app)
        assert banner.size.height == len(lines) > 2
        words = " ".join(line.strip() for line in lines).split()
        # Every word shown is a whole word of the message, the move or the label (none is cut).
        whole = set((message + " " + reason).split()) | {"IMBALANCED", "(provisional)", "→", "move", "container",
                                                        "bert-finetune", "from", "GPU", "0", "to", "6", "[tab",
                                                        "here,", "then", "m:", "migrate]", "…"}
        assert [w for w in words if w not in whole and not w.endswith("…")] == []
        # Focused, the banner shows the judge's whole message and reason.
        await pilot.press("shift+tab")
        assert app.focused is banner
        await pilot.pause()
        text = " ".join(line.strip() for line in banner_lines(app))
        assert " ".join(message.split()) in " ".join(text.split())
        assert " ".join(reason.split()) in " ".join(text.split())
        assert "…" not in text
