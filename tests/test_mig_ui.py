"""The dashboard with a card in MIG mode (the demo's GPU 5): instances on the card, ``6:1`` in the
process table, digit filters, the detail screen's instance list, and the reset-pending badge."""

from __future__ import annotations

import pytest

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH, mig_uuid
from gputui.core.machine import open_machine
from gputui.core.model import MigMode
from gputui.core.record import replace
from gputui.ui.app import make_app
from gputui.ui.screens.detail import GpuDetailScreen
from tests.fixtures.showcase import ManualClock, wait_for_polls
from tests.test_ui_app import demo_app, lines, panel, table, visible_text

pytestmark = pytest.mark.functional  # the Textual app under Pilot, an SVG snapshot


async def test_mig_card_lists_its_instances_with_owners():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        shown = lines(panel(app))
        top = next(i for i, line in enumerate(shown) if "5  A100-SXM4-80GB · MIG" in line)
        left = shown[top].index("╭─ 5")
        right = shown[top].index("╮", left) + 1
        body = [line[left:right] for line in shown[top + 1:top + 4]]
        assert "5:0 3g.40gb" in body[0] and "6.0/39.2 GiB" in body[0] and "inference-api · 1 proc" in body[0]
        assert "5:1 2g.20gb" in body[1] and "bob · 1 proc" in body[1]
        assert "5:2 2g.20gb" in body[2] and "alice · 1 proc" in body[2]
        assert "UTIL" not in "".join(body)  # no made-up load graph for the MIG card


async def test_process_table_names_the_instance_and_digit_keeps_card_and_instances():
    app, _ = demo_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        text = visible_text(app)
        assert any(line.strip().startswith("5:0") and "4701" in line for line in text.splitlines())
        await pilot.press("5")
        rows = table(app).rows
        assert {(p.pid, p.mig_label) for p in rows} == {(4701, "5:0"), (6120, "5:1"), (6230, "5:2")}
        await pilot.press("a", "slash")
        await pilot.press(*"5:2")
        assert [p.pid for p in table(app).rows] == [6230]


async def test_detail_screen_lists_the_instances():
    app, _ = demo_app(warm=10)
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_for_polls(pilot)
        table(app).select_key((5, 4701))
        await pilot.press("enter")
        assert isinstance(app.screen, GpuDetailScreen) and app.screen.gpu_index == 5
        await pilot.pause()
        text = visible_text(app)
        assert "MIG devices" in text and "3g.40gb" in text and "GI 6 CI 0" in text
        assert mig_uuid(5, 1)[:20] in text
        assert "per-instance load is not" in text


async def test_pending_mig_change_shows_a_reset_badge():
    clock = ManualClock(FROZEN_EPOCH)
    machine = open_machine(demo=True, demo_clock=clock)
    demo = machine.demo
    read = demo.read

    def pending_on_gpu7():
        r = read()
        gpus = tuple(replace(g, mig_mode=MigMode(False, True)) if g.index == 7 else g for g in r.gpus)
        return replace(r, gpus=gpus)

    demo.read = pending_on_gpu7  # the source the app polls: GPU 7 waits for a reset to enter MIG mode
    app = make_app(machine, Settings(), clock=clock)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        shown = lines(panel(app))
        row = next(line for line in shown if "╭─ 7 " in line)
        card6, card7 = row[:row.index("╭─ 7 ")], row[row.index("╭─ 7 "):]
        assert "MIG→reset" in card7 and "MIG→reset" not in card6
        assert not any("MIG→reset" in line for line in shown if "╭─ 5 " in line)


def test_mig_card_snapshot_140x44(snap_compare):
    """The frozen demo filtered to its MIG card (key 5): instances on the card, 5:N rows in the table."""
    from tests.test_snapshots import app, then

    assert snap_compare(app(), terminal_size=(140, 44), run_before=then("5"))
