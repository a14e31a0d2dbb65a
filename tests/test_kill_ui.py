"""The kill dialog, driven with Textual's Pilot on the demo server: ``k``, the confirmation, ``y``."""

from __future__ import annotations

import json
import time

from gputui.actions.audit import audit_path
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.core.record import replace
from gputui.ui.app import make_app
from gputui.ui.screens.kill import KillScreen


async def wait_for(pilot, condition, timeout: float = 10.0, what=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for the app {what()}")
        await pilot.pause(0.05)


def demo_app(settings: Settings | None = None):
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    return make_app(machine, settings or Settings(), live=False)


def shown(dialog) -> str:
    return str(dialog.query_one("#kill-plan").render())


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


def audit() -> list[dict]:
    path = audit_path(demo=True)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def test_k_confirms_with_every_fact_then_y_kills_and_reports_the_memory_freed():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        orphan = next(p for p in app.snapshot.processes if p.pid == 5388)
        assert app.screen.table.select_key(orphan.key)
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.state == "ready")
        text = shown(dialog)
        # pid, user, GPU and its memory, command, stale reason
        assert "PID 5388  carol  GPU 0 (3.0 GiB)  python -c from torch.utils.data import DataLoader" in text
        assert "stale (orphan): Its parent died" in text
        assert "Kill 1 process with SIGTERM, wait up to 10 s:" in text
        assert "SIGTERM" in str(dialog.query_one("#kill-options").render())

        await pilot.press("y")
        await wait_for(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert dialog.report is not None and dialog.report.ok
        note = "\n".join(notifications(app))
        assert "Killed 1 process, freed 3.0 GiB." in note
        assert "GPU 0: 3.0 GiB freed" in note
        # the dialog asked for a poll: the process is gone from the table
        await wait_for(pilot, lambda: all(p.pid != 5388 for p in app.snapshot.processes))
        assert all(p.pid != 5388 for p in app.screen.table.rows)
    record = audit()[-1]
    assert (record["result"], record["pid"], record["owner"], record["freed"]) == ("ok", 5388, "carol", 3 * 1024**3)


async def test_a_container_main_process_says_docker_stops_it_and_escape_cancels():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        main = next(p for p in app.snapshot.processes if p.pid == 4101)
        assert app.screen.table.select_key(main.key)
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.state == "ready")
        assert ("container llama-train: this is its main process, so the container is stopped through Docker, "
                "because its restart policy (unless-stopped) would otherwise bring it back.") in shown(dialog)
        # choose SIGKILL and escalation: the plan is redone with them
        await pilot.press("x")
        await wait_for(pilot, lambda: dialog.state == "ready" and dialog.plan.signal == "KILL")
        assert "with SIGKILL" in shown(dialog)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert dialog.report is None
        assert any(p.pid == 4101 for p in app.machine.demo.procs.values())
        # declining is recorded too
        await wait_for(pilot, lambda: any(r["pid"] == 4101 for r in audit()))
    declined = [r for r in audit() if r["pid"] == 4101]
    assert declined[-1]["result"] == "refused" and "declined" in declined[-1]["reason"]


async def test_all_stale_processes_in_one_dialog_with_refusals_shown():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        stale = [p for p in app.snapshot.processes if p.stale]
        assert [p.pid for p in stale] == [5388]
        # K offers every stale process in view; here also PID 1 slipped into the list, to see a refusal
        init = next(p for p in app.snapshot.processes if p.pid == 4701)
        app.push_screen(KillScreen(app.snapshot, processes=[*stale, replace(init, pid=1)]))
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.state == "ready")
        assert str(dialog.query_one("#kill-title").render()) == "Kill 2 processes"
        text = shown(dialog)
        assert "PID 5388" in text and "Refused:" in text and "PID 1 is the system's init process" in text
        await pilot.press("y")
        await wait_for(pilot, lambda: not isinstance(app.screen, KillScreen))
        note = "\n".join(notifications(app))
        assert "Killed 1 process, freed 3.0 GiB, 1 refused." in note


async def test_read_only_dialog_refuses_and_y_does_nothing():
    app = demo_app(Settings(read_only=True))
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        proc = next(p for p in app.snapshot.processes if p.pid == 5388)
        app.push_screen(KillScreen(app.snapshot, proc))
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.state == "ready")
        assert "Kills are disabled: gputui runs read-only" in shown(dialog)
        assert "Nothing can be killed." in shown(dialog)
        await pilot.press("y")
        await pilot.pause(0.2)
        assert isinstance(app.screen, KillScreen) and dialog.state == "ready"
        assert 5388 in app.machine.demo.procs
        # every target refused: audited as `gputui kill` audits it, once however often the plan is redone
        await wait_for(pilot, lambda: any(r["pid"] == 5388 for r in audit()))
        await pilot.press("x")
        await wait_for(pilot, lambda: dialog.state == "ready" and dialog.plan.signal == "KILL")
        await pilot.press("escape")
    records = [r for r in audit() if r["pid"] == 5388]
    assert len(records) == 1 and records[0]["result"] == "refused" and "read-only" in records[0]["reason"]


async def test_K_offers_every_stale_process_in_view_not_the_highlighted_one():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        screen = app.screen
        # The cursor is on a healthy process; K is about the stale ones, with SIGTERM.
        healthy = next(p for p in app.snapshot.processes if p.pid == 4101 and not p.stale)
        assert screen.table.select_key(healthy.key)
        await pilot.press("K")
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        dialog = app.screen
        assert dialog.pids == [p.pid for p in app.snapshot.processes if p.stale] == [5388]
        assert dialog.signal == "TERM"
        await wait_for(pilot, lambda: dialog.state == "ready")
        assert "PID 5388" in shown(dialog) and "PID 4101" not in shown(dialog)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert 4101 in app.machine.demo.procs and 5388 in app.machine.demo.procs

        # "In view": with only GPU 3 shown there is no stale process, so K opens nothing and says so.
        await pilot.press("3")
        assert screen.stale_in_view() == []
        await pilot.press("K")
        await wait_for(pilot, lambda: "No stale process in view." in notifications(app),
                       what=lambda: notifications(app))
        assert not isinstance(app.screen, KillScreen)
        # The text filter counts too: "carol" shows the orphan again.
        await pilot.press("a", "slash", *"carol", "enter")
        assert [p.pid for p in screen.stale_in_view()] == [5388]
        assert screen.check_action("kill_stale", ()) is True
        await pilot.press("K")
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen))
        assert app.screen.pids == [5388]
        await pilot.press("escape")


async def test_K_is_disabled_in_read_only_mode():
    app = demo_app(Settings(read_only=True))
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        screen = app.screen
        assert [p.pid for p in screen.stale_in_view()] == [5388]
        assert screen.check_action("kill_stale", ()) is None
        await pilot.press("K")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, KillScreen)
