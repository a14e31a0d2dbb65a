"""The dashboard on a Slurm job's process: the row names the job, and ``k`` offers the kill and the job cancel."""

from __future__ import annotations

import json

import pytest

from gputui.actions.audit import audit_path
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.jobs_model import JobRef, SchedulerJob, SlurmStatus
from gputui.core.machine import open_machine
from gputui.core.record import replace
from gputui.core.sources.slurm import SlurmNode, SlurmReading
from gputui.ui.app import make_app
from gputui.ui.screens.kill import KillScreen
from gputui.ui.widgets.process_table import process_cells
from tests.test_kill_ui import shown, wait_for

pytestmark = pytest.mark.functional  # the Textual app

JOB = JobRef(id="4242", step="batch", user="carol", name="train", state="RUNNING", time_left_s=7080, gpus=(0,))


class FakeSlurm:
    """scancel recorded; squeue answers the job CANCELLED afterwards."""

    def __init__(self) -> None:
        self.node = SlurmNode(name="vm", conf_path="/nonexistent", slurmd_pid=1)
        self.cancelled: list[tuple[str, str | None]] = []

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        self.cancelled.append((job_id, signal))

    def read(self, on_pids=None) -> SlurmReading:  # type: ignore[no-untyped-def]
        state = "CANCELLED" if self.cancelled else "RUNNING"
        return SlurmReading(True, jobs=(SchedulerJob(id=JOB.id, user="carol", state=state, gres_indices=(0,)),))


def _with_job(snap):
    """The snapshot with PID 5388 in JOB and the job listed."""
    gpus = tuple(replace(g, processes=tuple(replace(p, job=JOB) if p.pid == 5388 else p for p in g.processes))
                 for g in snap.gpus)
    return replace(snap, gpus=gpus, slurm=SlurmStatus(node="vm", available=True, jobs=(JOB,)))


def test_a_job_row_reads_job_user_and_time_left():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    snap = _with_job(machine.poller(Settings()).poll())
    p = next(p for p in snap.processes if p.pid == 5388)
    assert "job 4242 · carol · 1h58m left" in process_cells(p, snap.time)


async def test_k_on_a_jobs_process_offers_the_job_cancel_and_j_cancels_through_slurm():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    fake = FakeSlurm()
    machine.slurm = fake  # type: ignore[assignment]
    app = make_app(machine, Settings(), live=False)
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        snap = _with_job(app.snapshot)
        proc = next(p for p in snap.processes if p.pid == 5388)
        app.push_screen(KillScreen(snap, proc))
        await wait_for(pilot, lambda: isinstance(app.screen, KillScreen) and app.screen.state == "ready")
        dialog = app.screen
        assert "in Slurm job 4242 (carol, train): the job keeps its GPUs" in shown(dialog)
        assert "j cancel job 4242 (scancel)" in str(dialog.query_one("#kill-hint").render())
        await pilot.press("j")
        await wait_for(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert fake.cancelled == [("4242", None)]
        assert any("Job 4242 (carol) is CANCELLED" in n.message for n in app._notifications)
    record = [json.loads(x) for x in audit_path().read_text().splitlines()][-1]
    assert (record["action"], record["result"], record["job"]) == ("kill-job", "ok", "4242")


async def test_the_containers_view_lists_jobs_with_grant_against_use():
    from gputui.ui.screens.containers import ContainersScreen

    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    app = make_app(machine, Settings(), live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        snap = _with_job(app.snapshot)
        screen = ContainersScreen(snap)
        app.push_screen(screen)
        await wait_for(pilot, lambda: isinstance(app.screen, ContainersScreen) and screen.is_mounted)
        await pilot.pause(0.1)
        screen.update_snapshot(snap)
        row = screen.table.get_row("slurm:4242")
        assert [str(c) for c in row[:5]] == ["job 4242 (carol)", "RUNNING", "0", "slurm GRES", "-"]
        screen.table.move_cursor(row=screen.table.get_row_index("slurm:4242"), animate=False)
        await pilot.pause(0.1)
        shown = str(screen.query_one("#container-detail").render())
        assert "Slurm job 4242 · carol · 1h58m left · train · RUNNING" in shown
        assert "PID 5388  step batch" in shown
        assert screen.check_action("migrate", ()) is None  # Slurm owns a job's placement


def test_the_status_line_says_slurm_is_unavailable_like_docker():
    from gputui.ui.widgets.status import PollStatus, snapshot_warnings

    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    snap = machine.poller(Settings()).poll()
    down = replace(snap, slurm=SlurmStatus(node="vm", available=False, error="slurmctld is not responding"))
    assert "Slurm unavailable: slurmctld is not responding" in snapshot_warnings(down, PollStatus(interval=2.0))
    assert not any("Slurm" in w for w in snapshot_warnings(snap, PollStatus(interval=2.0)))
