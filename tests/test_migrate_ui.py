"""The migrate dialog, driven with Textual's Pilot on the demo server: ``m``, the suggested target, ``y``."""

from __future__ import annotations

import json

from gputui.actions.audit import audit_path
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.ui.app import make_app
from gputui.ui.screens.migrate import MigrateScreen


async def wait_for(pilot, condition, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


def dialog_shown(app) -> bool:
    """The migrate dialog is on top and composed (push_screen returns before it is)."""
    return isinstance(app.screen, MigrateScreen) and bool(app.screen.query("#migrate-hint"))


def demo_app(settings: Settings | None = None):
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    return make_app(machine, settings or Settings(), live=False)


def container_gpus(app, name: str) -> list[int]:
    return sorted({p.gpu_index for p in app.snapshot.processes if p.container and p.container.name == name})


async def test_m_on_a_container_process_migrates_it_to_the_suggested_gpu():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert container_gpus(app, "bert-finetune") == [0]
        table = app.screen.table
        proc = next(p for p in app.snapshot.processes if p.container and p.container.name == "bert-finetune")
        assert table.select_key(proc.key)
        await pilot.press("m")
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.plan is not None)
        # The imbalance judge's suggestion is offered first and pre-selected.
        assert dialog.options[0].suggested and dialog.options[0].index == 1
        assert dialog.plan.to_gpu == 1 and dialog.plan.from_all
        shown = str(dialog.query_one("#migrate-plan").render())
        uuid1 = app.snapshot.gpu(1).uuid
        assert f'+ HostConfig.DeviceRequests[0].DeviceIDs = ["{uuid1}"]' in shown
        assert "grant: all GPUs (--gpus all)" in str(dialog.query_one("#migrate-current").render())
        # The GPU it runs on is not a target.
        assert next(o for o in dialog.options if o.index == 0).refusal

        await pilot.press("y")
        await wait_for(pilot, lambda: dialog.state == "done")
        assert dialog.result.ok
        assert all(state == "done" for state in dialog.steps.values())
        assert "moved from all GPUs to GPU 1" in str(dialog.query_one("#migrate-result").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))
        # The dialog asked for a poll: the process table shows the container on its new GPU.
        await wait_for(pilot, lambda: container_gpus(app, "bert-finetune") == [1])
        assert [p.gpu_index for p in app.screen.table.rows
                if p.container and p.container.name == "bert-finetune"] == [1]
    record = json.loads(audit_path(demo=True).read_text().splitlines()[-1])
    assert (record["result"], record["container"], record["to_gpu"], record["demo"]) == \
        ("ok", "bert-finetune", 1, True)


async def test_choosing_another_target_and_gpus_without_room_need_force():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        app.push_screen(MigrateScreen(app.snapshot, container="llama-train"))
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.plan is not None)
        # GPU 4 is nearly full (vllm-cache): it cannot hold llama-train's 34 GiB peak.
        gpu4 = next(o for o in dialog.options if o.index == 4)
        assert gpu4.refusal and "use --force" in gpu4.refusal
        first = dialog.plan.to_gpu
        await pilot.press("down")
        await wait_for(pilot, lambda: dialog.plan is not None and dialog.plan.to_gpu != first)
        assert dialog.plan.to_gpu == dialog.options[1].index
        await pilot.press("f")
        await wait_for(pilot, lambda: dialog.force and dialog.plan is not None)
        assert next(o for o in dialog.options if o.index == 4).refusal is None
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))
        assert container_gpus(app, "llama-train") == [0]  # cancelled: nothing moved


async def test_read_only_disables_the_dialog_and_bare_processes_are_explained():
    app = demo_app(Settings(read_only=True))
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        app.push_screen(MigrateScreen(app.snapshot, container="bert-finetune", target=6))
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        await pilot.pause(0.2)
        assert dialog.check_action("confirm", ()) is None
        assert "read-only" in str(dialog.query_one("#migrate-plan").render())
        await pilot.press("y")
        await pilot.pause(0.2)
        assert dialog.state == "idle" and container_gpus(app, "bert-finetune") == [0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))

        bare = next(p for p in app.snapshot.processes if p.container is None)
        app.push_screen(MigrateScreen(app.snapshot, bare))
        await wait_for(pilot, lambda: dialog_shown(app))
        text = str(app.screen.query_one("#migrate-plan").render())
        assert f"PID {bare.pid} does not run in a container" in text
        assert app.screen.check_action("confirm", ()) is None


async def test_m_without_a_highlighted_process_opens_the_imbalance_suggestion():
    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        sug = app.snapshot.imbalance.suggestion
        assert (sug.container, sug.to_gpu) == ("bert-finetune", 1)
        await pilot.press("7")  # nobody on GPU 7: no process highlighted
        assert app.screen.table.cursor_process is None
        await pilot.press("m")
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        assert (dialog.container_name, dialog.target) == ("bert-finetune", 1)
        await wait_for(pilot, lambda: dialog.plan is not None)
        assert dialog.plan.to_gpu == 1 and dialog.options[0].suggested
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MigrateScreen))


async def test_m_in_the_containers_view_migrates_the_highlighted_container():
    from gputui.ui.screens.containers import ContainersScreen

    app = demo_app()
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ContainersScreen))
        view = app.screen
        await wait_for(pilot, lambda: view.selected_id is not None)
        assert view.select("llama-train")
        assert view.check_action("migrate", ()) is True
        await pilot.press("m")
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        assert dialog.container_name == "llama-train" and dialog.process is None
        await wait_for(pilot, lambda: dialog.plan is not None)
        assert dialog.plan.container_name == "llama-train"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is view)
        # The suggested container gets the judge's target pre-selected here too.
        assert view.select("bert-finetune")
        await pilot.press("m")
        await wait_for(pilot, lambda: dialog_shown(app))
        assert (app.screen.container_name, app.screen.target) == ("bert-finetune", 1)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is view)
        assert container_gpus(app, "llama-train") == [0]  # nothing moved
