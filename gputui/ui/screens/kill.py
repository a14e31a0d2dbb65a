"""The kill dialog: exactly what will be signalled, a y/N confirmation, then the kill in a thread worker.

Opened with ``k`` on the highlighted process, or with a list of processes (the
stale ones in view). It drives the same flow as ``gputui kill``
(:class:`gputui.actions.kill.flow.KillFlow`: one timeout, one set of refusals and
sentences): the targets are the (pid, start time) pairs of the snapshot the user
is looking at, every guard runs, refusals are shown with their one sentence, and
a container's main process is stopped through Docker, with the reason. Planning (it reads /proc and asks Docker) and
the kill (it waits for processes to exit) run in thread workers; the result is
a notification and a fresh poll, and the dialog closes.

Keys: ``y`` kill, ``t`` / ``i`` / ``x`` choose SIGTERM / SIGINT / SIGKILL, ``e``
escalate to SIGKILL after the timeout, ``n`` or ``escape`` cancel. On a process of a
Slurm job, ``j`` cancels the whole job through ``scancel`` instead (``kill --job``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widgets import Static
from textual.worker import get_current_worker

from gputui.actions.kill import KillError, KillPlan, KillReport, confirmation_lines
from gputui.actions.kill.flow import TIMEOUT, KillFlow
from gputui.core.model import Process, Snapshot
from gputui.ui.base import GpuModal
from gputui.ui.safe import markup, plain, text


class KillScreen(GpuModal["KillReport | None"]):
    """Confirm and run a kill. Dismisses with the report (None when cancelled)."""

    DEFAULT_CSS = """
    KillScreen {
        align: center middle;
        background: $background 60%;
    }
    KillScreen > #kill-dialog {
        width: 110;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: thick $error;
        background: $surface;
        padding: 0 1;
    }
    KillScreen #kill-title { text-style: bold; color: $error; }
    KillScreen #kill-plan-box { height: auto; max-height: 20; margin: 1 0; }
    KillScreen #kill-options { color: $foreground 90%; }
    KillScreen #kill-progress { height: auto; color: $warning; }
    KillScreen #kill-hint { color: $foreground 60%; margin-top: 1; }
    """

    BINDINGS = [
        Binding("y", "confirm", "Kill", id="kill-confirm"),
        Binding("t", "signal('TERM')", "SIGTERM", id="kill-term"),
        Binding("i", "signal('INT')", "SIGINT", id="kill-int"),
        Binding("x", "signal('KILL')", "SIGKILL", id="kill-kill"),
        Binding("e", "toggle_escalate", "Escalate", id="kill-escalate"),
        Binding("j", "cancel_job", "Cancel job", id="kill-job"),
        Binding("escape", "cancel", "Cancel", id="kill-cancel"),
        Binding("n", "cancel", "Cancel", show=False, id="kill-no"),
    ]

    class PlanReady(Message, bubble=False):
        def __init__(self, plan: KillPlan, generation: int) -> None:
            super().__init__()
            self.plan = plan
            self.generation = generation

    class Progress(Message, bubble=False):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Finished(Message, bubble=False):
        def __init__(self, report: KillReport | None, error: str | None = None) -> None:
            super().__init__()
            self.report = report
            self.error = error

    class JobDone(Message, bubble=False):
        def __init__(self, ok: bool, text: str) -> None:
            super().__init__()
            self.ok = ok
            self.text = text

    def __init__(self, snapshot: Snapshot | None, process: Process | None = None, force: bool = False, *,
                 processes: Sequence[Process] | None = None, timeout: float = TIMEOUT) -> None:
        super().__init__()
        self.snapshot = snapshot
        chosen = list(processes) if processes is not None else ([process] if process is not None else [])
        #: PIDs in the order shown (a process on several GPUs appears once)
        self.pids: list[int] = list(dict.fromkeys(p.pid for p in chosen))
        #: the Slurm job of a single chosen process: ``j`` cancels it through Slurm
        self.job = chosen[0].job if len(self.pids) == 1 else None
        self.signal = "KILL" if force else "TERM"
        self.escalate = False
        self.timeout = timeout
        #: "planning", "ready", "running", "done"
        self.state = "planning"
        self.plan: KillPlan | None = None
        self.report: KillReport | None = None
        self._generation = 0
        self._refusals_recorded = False
        #: Created by the first plan worker (a real backend may connect to Docker).
        self._flow: KillFlow | None = None

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Vertical(id="kill-dialog"):
            yield Static(self._title(), id="kill-title")
            with VerticalScroll(id="kill-plan-box"):
                yield Static("Checking the processes…", id="kill-plan")
            yield Static("", id="kill-options")
            yield Static("", id="kill-progress")
            job = f" · j cancel job {self.job.id} (scancel)" if self.job is not None else ""
            yield Static(text(f"y kill · t/i/x SIGTERM/SIGINT/SIGKILL · e escalate{job} · n/escape cancel"),
                         id="kill-hint")

    def _title(self) -> str:
        if len(self.pids) == 1:
            return f"Kill PID {self.pids[0]}"
        return f"Kill {len(self.pids)} processes"

    def on_mount(self) -> None:
        self._show_options()
        if not self.pids:
            self.query_one("#kill-plan", Static).update("Nothing to kill: no process is selected.")
            self.state = "done"
            return
        self._replan()

    # -- planning ---------------------------------------------------------------------------
    def _replan(self) -> None:
        self._generation += 1
        self.state = "planning"
        self.refresh_bindings()
        self._plan_worker(self._generation, self.signal, self.escalate)

    @work(thread=True, exclusive=True, exit_on_error=False, group="kill-plan", description="check kill targets")
    def _plan_worker(self, generation: int, signal: str, escalate: bool) -> None:
        worker = get_current_worker()
        plan = self._ensure_flow().plan(signal=signal, escalate=escalate)
        if not worker.is_cancelled:
            self.post_message(self.PlanReady(plan, generation))

    def _ensure_flow(self) -> KillFlow:
        if self._flow is None:
            app = self.gpu_app
            snapshot = self.snapshot or app.snapshot
            assert snapshot is not None, "the dialog opens from a process of a shown snapshot"
            self._flow = KillFlow(app.machine, snapshot, self.pids, read_only=bool(app.settings.read_only),
                                  docker_timeout=app.settings.docker_timeout, signal=self.signal,
                                  timeout=self.timeout, escalate=self.escalate)
        return self._flow

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        if message.generation != self._generation or self.state in ("running", "done"):
            return
        self.plan = message.plan
        self.state = "ready"
        lines = confirmation_lines(message.plan)
        if message.plan.targets:
            lines.append("")
            lines.append("Press y to kill, n or escape to cancel.")
        else:
            lines.append("")
            lines.append("Nothing can be killed.")
            self._record_refusals(message.plan)
        # commands, users, container names: each line through the one rule, never parsed as markup
        self.query_one("#kill-plan", Static).update(Text("\n".join(plain(ln) for ln in lines)))
        self._show_options()
        self.refresh_bindings()

    def _record_refusals(self, plan: KillPlan) -> None:
        """Every target refused: the refusals go to the audit log, as ``gputui kill`` records them (once
        per dialog, however often the plan is redone). An app worker: the dialog may close first."""
        if self._refusals_recorded or not plan.refusals or self._flow is None:
            return
        self._refusals_recorded = True
        self.app.run_worker(partial(self._flow.refuse, plan), thread=True, exit_on_error=False,
                            group="kill-audit", description="record refused kills")

    def _show_options(self) -> None:
        esc = "on: SIGKILL whatever is left after" if self.escalate else "off (e to turn on)"
        options = f"Signal: SIG{self.signal}   wait {self.timeout:g} s   escalate: {esc}"
        self.query_one("#kill-options", Static).update(options)

    # -- actions ---------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "confirm":
            return True if self.state == "ready" and self.plan is not None and self.plan.targets else None
        if action in ("signal", "toggle_escalate"):
            return True if self.state in ("planning", "ready") and self.pids else None
        if action == "cancel":
            return True if self.state != "running" else None
        if action == "cancel_job":
            ok = self.job is not None and self.state == "ready" and self.gpu_app.machine.slurm is not None
            return True if ok else None
        return True

    def action_cancel_job(self) -> None:
        if self.job is None or self.state != "ready":
            return
        self.state = "running"
        self.refresh_bindings()
        self.query_one("#kill-progress", Static).update(text(f"Cancelling job {self.job.id} through Slurm…"))
        self._job_worker(self.job.id, self.signal)

    @work(thread=True, exclusive=True, exit_on_error=False, group="kill-run", description="cancel a Slurm job")
    def _job_worker(self, job_id: str, signal: str) -> None:
        from gputui.actions.kill.job import execute_job_kill, plan_job_kill, refuse_job_kill

        app = self.gpu_app
        snapshot = self.snapshot or app.snapshot
        source = app.machine.slurm
        assert snapshot is not None and source is not None
        try:
            plan = plan_job_kill(snapshot, job_id, signal=signal, read_only=bool(app.settings.read_only))
            if not plan.ok:
                refuse_job_kill(plan)
                self.post_message(self.JobDone(False, plan.refusal or "The job cannot be cancelled."))
                return
            result = execute_job_kill(plan, source, progress=lambda t: self.post_message(self.Progress(t)))
        except Exception as exc:  # never a traceback in the dashboard: one sentence
            self.post_message(self.JobDone(False, f"The job was not cancelled: {exc}."))
            return
        self.post_message(self.JobDone(result.ok, result.message))

    @on(JobDone)
    def _job_done(self, message: JobDone) -> None:
        self.state = "done"
        self.app.notify(markup(message.text), title="Cancel job", severity="information" if message.ok else "error",
                        timeout=5)
        self.gpu_app.request_poll()
        self.dismiss(None)

    def action_signal(self, name: str) -> None:
        if self.signal != name:
            self.signal = name
            self._show_options()
            self._replan()

    def action_toggle_escalate(self) -> None:
        self.escalate = not self.escalate
        self._show_options()
        self._replan()

    def action_cancel(self) -> None:
        if self.state == "running":
            return
        if self.state == "ready" and self.plan is not None and self.plan.targets and self._flow is not None:
            # The user saw the refusals and declined the rest: both go to the audit log.
            # An app worker, not the dialog's: the dialog closes now and its workers with it.
            self.app.run_worker(partial(self._flow.decline, self.plan), thread=True, exit_on_error=False,
                                group="kill-audit", description="record a declined kill")
        self.dismiss(self.report)

    def action_confirm(self) -> None:
        if self.state != "ready" or self.plan is None or not self.plan.targets:
            return
        self.state = "running"
        self.refresh_bindings()
        self.query_one("#kill-progress", Static).update("Killing…")
        self._kill_worker(self.plan)

    @work(thread=True, exclusive=True, exit_on_error=False, group="kill-run", description="kill processes")
    def _kill_worker(self, plan: KillPlan) -> None:
        try:
            report = self._ensure_flow().execute(plan, progress=lambda text: self.post_message(self.Progress(text)))
        except KillError as exc:
            self.post_message(self.Finished(None, str(exc)))
            return
        except Exception as exc:  # never a traceback in the dashboard: one sentence
            self.post_message(self.Finished(None, f"The kill failed: {exc}."))
            return
        self.post_message(self.Finished(report))

    @on(Progress)
    def _progress(self, message: Progress) -> None:
        self.query_one("#kill-progress", Static).update(text(message.text))

    @on(Finished)
    def _finished(self, message: Finished) -> None:
        self.state = "done"
        self.report = message.report
        if message.report is None:
            self.app.notify(markup(message.error or "The kill failed."), title="Kill", severity="error", timeout=5)
        else:
            report = message.report
            severity: SeverityLevel = "information" if report.ok else "warning"
            body = "\n".join(markup(ln) for ln in [report.summary(), *report.lines()])
            self.app.notify(body, title="Kill", severity=severity, timeout=5)
        self.gpu_app.request_poll()
        self.dismiss(self.report)

    def on_unmount(self) -> None:
        flow, self._flow = self._flow, None
        if flow is not None:
            flow.close()
