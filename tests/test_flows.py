"""One flow per action: the command line and the dialogs say, wait and record the same things."""

from __future__ import annotations

import io
import json

import pytest

from gputui.actions.audit import audit_path
from gputui.actions.kill.flow import TIMEOUT, KillFlow
from gputui.actions.migrate.flow import DECLINED, MigrateFlow
from gputui.cli import build_parser, load_context
from gputui.context import Context
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.ui.app import make_app
from gputui.ui.screens.kill import KillScreen
from gputui.ui.screens.migrate import MigrateScreen


def _records() -> list[dict]:
    path = audit_path(demo=True)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def _until(pilot, condition, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


def test_the_kill_dialog_and_the_cli_wait_the_same_time():
    args = build_parser(["kill", "1"]).parse_args(["kill", "1"])
    assert args.timeout == TIMEOUT == KillScreen(None).timeout


def test_a_declined_kill_records_its_refusals_and_targets_from_the_cli():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    try:
        snap = machine.poller(Settings()).poll()
        pid = snap.gpus[0].processes[0].pid
        flow = KillFlow(machine, snap, [pid, 1], read_only=False)
        asked = []
        run = flow.run(lambda plan: asked.append(plan) or False)
        flow.close()
    finally:
        machine.close()
    assert run.status == "declined" and len(asked) == 1
    reasons = {(r["pid"], r["reason"]) for r in _records()[-2:]}
    assert reasons == {(1, "PID 1 is the system's init process; gputui never signals it."),
                       (pid, f"PID {pid}: the user declined the confirmation.")}


@pytest.mark.functional  # runs the Textual app
async def test_closing_the_migrate_dialog_on_a_plan_records_the_decline():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    app = make_app(machine, Settings(), live=False)
    async with app.run_test(size=(140, 48)) as pilot:
        await _until(pilot, lambda: app.snapshot is not None)
        proc = next(p for p in app.snapshot.processes if p.container and p.container.name == "bert-finetune")
        assert app.screen.table.select_key(proc.key)
        await pilot.press("m")
        await _until(pilot, lambda: isinstance(app.screen, MigrateScreen) and app.screen.plan is not None)
        before = len(_records())
        await pilot.press("escape")
        await _until(pilot, lambda: len(_records()) > before)
    record = _records()[-1]
    assert (record["result"], record["container"], record["reason"], record["demo"]) == \
        ("refused", "bert-finetune", DECLINED, True)


def test_a_declined_migration_from_the_cli_records_the_same_decline():
    args = build_parser(["--demo", "migrate", "bert-finetune", "--to", "6"]).parse_args(
        ["--demo", "migrate", "bert-finetune", "--to", "6"])
    ctx = load_context(args)
    machine = ctx.open_machine(docker=True)
    try:
        snap = machine.poller(ctx.settings, container_wait=2.0).poll()
        from gputui.actions.migrate import engine_for

        flow = MigrateFlow(engine_for(machine, ctx.settings), snap)
        run = flow.run("bert-finetune", 6, lambda plan: False)
        flow.close()
    finally:
        machine.close()
    assert run.status == "declined" and run.plan is not None and run.plan.to_gpu == 6
    record = _records()[-1]
    assert (record["result"], record["container"], record["reason"]) == ("refused", "bert-finetune", DECLINED)


def test_polling_closes_the_machine_when_the_body_fails():
    closed = []
    args = build_parser(["--demo", "snapshot"]).parse_args(["--demo", "snapshot"])
    ctx = Context(args=args, settings=Settings(), stdout=io.StringIO(), stderr=io.StringIO(),
                  demo_clock=lambda: FROZEN_EPOCH)
    try:
        with ctx.polling() as polled:
            setattr(polled.machine, "close", lambda: closed.append(True))  # noqa: B010 - replace one method
            assert polled.snapshot.gpus
            raise RuntimeError("the body failed")
    except RuntimeError:
        pass
    assert closed == [True]
