"""The migrate dialog: pick a target GPU for a container, see the exact change, confirm, watch each step.

Opened with ``m`` on a process that runs in a container (dashboard), on a
container (containers view), or from the imbalance banner's suggestion. Nothing
here talks to Docker on the event loop: planning (which inspects containers)
and execution run in thread workers that post messages back; the flow is the
same one the CLI drives (:class:`gputui.actions.migrate.flow.MigrateFlow`), so in
``--demo`` the dialog moves the simulated container.

Keys: ↑/↓ choose the target, ``f`` also offers GPUs without room for the
container's observed peak memory, ``y`` migrates, ``escape`` closes (not while
a migration runs: it always ends with a running container, and the dialog
stays until it says which).
"""

from __future__ import annotations

from functools import partial

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from gputui.actions.migrate import (
    STEP_TEXT,
    STEPS,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    MigrationResult,
    MigrationUnavailable,
    Progress,
    TargetOption,
    engine_for,
    observed_peak,
    target_options,
)
from gputui.actions.migrate.flow import RECOVERABLE, MigrateFlow
from gputui.actions.migrate.plan import runtime_refusal
from gputui.core.model import Container, Process, Snapshot
from gputui.core.safe_text import clean
from gputui.core.units import fmt_bytes
from gputui.ui.base import GpuModal
from gputui.ui.safe import markup, plain, text

#: Progress marks per step state.
_MARKS = {"pending": ("·", "dim"), "running": ("…", "bold"), "done": ("✓", "green"), "skipped": ("–", "dim"),
          "failed": ("✗", "bold red"), "undoing": ("↶", "yellow"), "undone": ("↶", "yellow")}


#: Seconds a result toast stays (the result is also in the audit log and the refreshed table).
RESULT_TOAST_S = 5


class MigrateScreen(GpuModal["MigrationResult | None"]):
    """Migrate one container to another GPU. Dismisses with the result (None if cancelled)."""

    DEFAULT_CSS = """
    MigrateScreen {
        align: center middle;
        background: $background 60%;
    }
    MigrateScreen > #migrate-dialog {
        width: 100;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    MigrateScreen #migrate-title { text-style: bold; color: $primary; }
    MigrateScreen #migrate-current { color: $foreground 80%; margin-bottom: 1; }
    MigrateScreen #migrate-targets { height: auto; max-height: 10; margin-bottom: 1; }
    MigrateScreen #migrate-plan-box { height: auto; max-height: 14; }
    MigrateScreen #migrate-progress { height: auto; }
    MigrateScreen #migrate-result { height: auto; text-style: bold; }
    MigrateScreen #migrate-result.-ok { color: $success; }
    MigrateScreen #migrate-result.-failed { color: $error; }
    MigrateScreen #migrate-hint { color: $foreground 60%; margin-top: 1; dock: bottom; height: auto; }
    MigrateScreen.-short #migrate-hint { margin-top: 0; }
    MigrateScreen.-short #migrate-current { margin-bottom: 0; }
    MigrateScreen.-short #migrate-targets { margin-bottom: 0; }
    """

    BINDINGS = [
        Binding("y", "confirm", "Migrate", id="migrate-confirm"),
        Binding("f", "toggle_force", "Allow GPUs without room", id="migrate-force"),
        Binding("escape", "close", "Close", id="migrate-close"),
        Binding("n", "close", "Cancel", show=False, id="migrate-cancel"),
    ]

    class PlanReady(Message, bubble=False):
        def __init__(self, plan: MigrationPlan, key: tuple) -> None:
            super().__init__()
            self.plan = plan
            self.key = key

    class PlanFailed(Message, bubble=False):
        def __init__(self, sentence: str, key: tuple, fatal: bool = False) -> None:
            super().__init__()
            self.sentence = sentence
            self.key = key
            #: the container itself cannot be migrated (not a per-target refusal)
            self.fatal = fatal

    class StepProgress(Message, bubble=False):
        def __init__(self, progress: Progress) -> None:
            super().__init__()
            self.progress = progress

    class Finished(Message, bubble=False):
        def __init__(self, result: MigrationResult) -> None:
            super().__init__()
            self.result = result

    def __init__(self, snapshot: Snapshot | None, process: Process | None = None, *,
                 container: Container | str | None = None, target: int | str | None = None,
                 force: bool = False) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.process = process
        self.force = force
        #: "idle" (choosing), "running", "done"
        self.state = "idle"
        self.plan: MigrationPlan | None = None
        self.result: MigrationResult | None = None
        self.refusal: str | None = None
        self.steps: dict[str, str] = {s: "pending" for s in STEPS}
        self.step_notes: dict[str, str] = {}
        self.options: list[TargetOption] = []
        #: Created by the first plan worker (connecting to Docker blocks).
        self._flow: MigrateFlow | None = None
        self._plan_key: tuple | None = None
        self._peak: int | None = None
        self.container_id, self.container_name, self.problem = self._identify(snapshot, process, container)
        #: the chosen target as ``--to`` takes it: a GPU index, or "5:1" for a MIG device
        self.target: int | str | None = target if target is not None else self._suggested_target(snapshot)

    # -- which container ----------------------------------------------------------------
    @staticmethod
    def _identify(snapshot: Snapshot | None, process: Process | None,
                  container: Container | str | None) -> tuple[str | None, str | None, str | None]:
        """(id, name, problem): problem is one sentence when there is nothing to migrate."""
        if isinstance(container, Container):
            return container.id, container.name, None
        if isinstance(container, str):
            found = snapshot.container(container) if snapshot is not None else None
            return (found.id, found.name, None) if found else (container, container, None)
        if process is not None:
            ref = process.container
            if ref is None:
                return None, None, (f"PID {process.pid} does not run in a container; gputui migrates containers "
                                    f"(restart the job with CUDA_VISIBLE_DEVICES set to move it).")
            why = runtime_refusal(ref.label, ref.runtime, ref.pod, ref.namespace)
            if why is not None:
                return None, None, why
            return ref.id, ref.name or ref.id[:12], None
        sug = snapshot.imbalance.suggestion if snapshot is not None else None
        if sug is not None and sug.container:
            found = snapshot.container(sug.container) if snapshot is not None else None
            return (found.id if found else sug.container), sug.container, None
        return None, None, "Highlight a process that runs in a container to migrate it."

    def _suggested_target(self, snapshot: Snapshot | None) -> int | None:
        sug = snapshot.imbalance.suggestion if snapshot is not None else None
        if sug is not None and sug.container and sug.container in (self.container_name, self.container_id):
            return sug.to_gpu
        return None

    def _container(self) -> Container | None:
        if self.snapshot is None or self.container_id is None:
            return None
        return self.snapshot.container(self.container_id)

    def _current_gpus(self) -> tuple[int, ...]:
        c = self._container()
        if c is None:
            if self.process is not None:
                return (self.process.gpu_index,)
            return ()
        if c.gpus == "all" or len(c.granted_gpus) > 1:
            return c.used_gpus
        return c.granted_gpus or c.used_gpus

    # -- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Vertical(id="migrate-dialog"):
            yield Static(self._title(), id="migrate-title")
            yield Static("", id="migrate-current")
            yield OptionList(id="migrate-targets")
            with VerticalScroll(id="migrate-plan-box"):
                yield Static("", id="migrate-plan")
            yield Static("", id="migrate-progress")
            yield Static("", id="migrate-result")
            yield Static("", id="migrate-hint")

    def _title(self) -> str:
        if self.container_name is None:
            return "Migrate"
        return f"Migrate container {markup(self.container_name)}"

    def on_mount(self) -> None:
        app = self.gpu_app
        if self.snapshot is None:
            self.snapshot = app.snapshot
        if self.problem is not None:
            self._show_plan_text(text(self.problem, style="bold"))
            self.query_one("#migrate-targets").display = False
        elif app.settings is not None and app.settings.read_only:
            self.problem = "gputui is read-only (--read-only or read_only in the config): migration is off."
            self._show_plan_text(text(self.problem, style="bold"))
            self.query_one("#migrate-targets").display = False
        else:
            self._show_current()
            self._fill_targets()
            self._show_plan_text(Text("Reading the container…", style="dim"))
            self._request_plan()
        self.query_one("#migrate-result").display = False
        self._show_progress()
        self._show_hint()
        self.query_one("#migrate-targets").focus()

    def on_resize(self, event: events.Resize) -> None:
        self._fit_height(event.size.height)

    def _fit_height(self, height: int) -> None:
        """Keep the key line on screen: on a short terminal the target list and the plan give up
        lines (they scroll) instead of pushing the hint out of the dialog."""
        short = height < 30
        self.set_class(short, "-short")
        # border 2, title 1, current (up to 3), result/progress 2, hint 1 (+1 margin when not short)
        room = max(4, height - (9 if short else 13))
        targets = max(2, min(10, room // 2))
        self.query_one("#migrate-targets").styles.max_height = targets
        self.query_one("#migrate-plan-box").styles.max_height = max(2, min(14, room - targets))

    # -- the protocol the app calls -------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.problem is None and self.state == "idle":
            self._show_current()
            self._fill_targets()

    # -- showing --------------------------------------------------------------------------
    def _show_current(self) -> None:
        c = self._container()
        parts = []
        if c is not None and c.image:
            parts.append(f"image {c.image}")
        if self.plan is not None:
            parts.append(f"grant: {self.plan.grant_before}")
        elif c is not None:
            parts.append("grant: " + ("all GPUs" if c.gpus == "all" else
                                      ", ".join(f"GPU {i}" for i in c.granted_gpus) or "none"))
        current = self._current_gpus()
        if current:
            parts.append("runs on " + ", ".join(f"GPU {i}" for i in current))
        peak = self._peak if self._peak is not None else observed_peak(self.snapshot, self.container_id or "")
        if peak:
            parts.append(f"peak GPU memory {fmt_bytes(peak)}")
        if c is not None and c.compose_project:
            parts.append(f"compose project {c.compose_project}")
        self.query_one("#migrate-current", Static).update(text(" · ".join(parts)))

    def _option_prompt(self, o: TargetOption) -> Text:
        prompt = Text()
        prompt.append(f"GPU {o.index}" if o.mig is None else f"MIG {o.ref} {clean(o.profile or '')}".rstrip(),
                      style="bold")
        prompt.append(f"  {fmt_bytes(o.memory_free):>9} free")
        prompt.append(f"  load {'N/A' if o.utilization is None else str(o.utilization) + '%':>4}")
        if o.suggested:
            prompt.append("  ★ suggested", style="bold green")
        if o.current:
            prompt.append("  (now)", style="dim")
        if o.refusal and not o.current:
            prompt.append(plain(f"  {self._short_reason(o)}"), style="red")
        return prompt

    def _short_reason(self, o: TargetOption) -> str:
        """The refusal as it fits a list row (the full sentence is shown when it is chosen with f)."""
        if o.refusal is None:
            return ""
        if "is lost" in o.refusal:
            return "lost"
        peak = self._peak or observed_peak(self.snapshot, self.container_id or "")
        if "free but" in o.refusal and peak:
            return f"no room for its {fmt_bytes(peak)} peak (f allows)"
        if "free but" in o.refusal:
            return "no room for its peak (f allows)"
        return o.refusal

    def _fill_targets(self) -> None:
        if self.snapshot is None or self.container_id is None:
            return
        peak = self._peak if self._peak is not None else observed_peak(self.snapshot, self.container_id)
        options = target_options(self.snapshot, self.container_id, peak, force=self.force,
                                 current=self._current_gpus())
        olist = self.query_one("#migrate-targets", OptionList)
        if options == self.options and olist.option_count:
            return
        keep = self.target
        self.options = options
        with self.app.batch_update():
            olist.clear_options()
            olist.add_options([Option(self._option_prompt(o), id=o.ref, disabled=o.refusal is not None)
                               for o in options])
            if keep is None or not any(o.ref == str(keep) and o.refusal is None for o in options):
                first = next((o for o in options if o.refusal is None), None)
                keep = None if first is None else first.index if first.mig is None else first.ref
            if keep is not None:
                olist.highlighted = next(i for i, o in enumerate(options) if o.ref == str(keep))
        self.target = keep

    def _show_plan_text(self, text: Text) -> None:
        self.query_one("#migrate-plan", Static).update(text)

    def _show_plan(self) -> None:
        plan = self.plan
        if plan is None:
            return
        t = Text()
        # grants, labels, env values and warnings quote the container owner's text: one line each, escaped
        t.append(plain(f"{plan.from_label} → {plan.to_label} ({plan.to_uuid})") + "\n", style="bold")
        t.append(plain(f"grant after: {plan.grant_after}") + "\n")
        t.append("Configuration change (everything else is copied as it is):\n")
        for line in plan.diff:
            t.append(plain(f"  {line}") + "\n", style="red" if line.startswith("-") else "green")
        for keep in plan.keeps:
            t.append(plain(f"  keeps {keep}") + "\n", style="dim")
        for line in plan.filesystem_lines() if plan.layer_paths or plan.tmpfs else ():  # only when there is news
            t.append(plain(line) + "\n", style="yellow" if "DISCARDED" in line or "contents lost" in line else "")
        for w in plan.warnings:
            t.append(plain(f"Warning: {w}") + "\n", style="yellow")
        if plan.compose_change:
            t.append("Compose-file change that makes the move stick:\n", style="yellow")
            t.append("".join(plain(ln) + "\n" for ln in plan.compose_change.splitlines()), style="yellow")
        if plan.demo:
            t.append("Demo: this moves the simulated container only.\n", style="dim")
        self._show_plan_text(t)

    def _show_progress(self) -> None:
        widget = self.query_one("#migrate-progress", Static)
        if self.state == "idle":
            widget.display = False
            return
        widget.display = True
        t = Text()
        for n, step in enumerate(STEPS, 1):
            state = self.steps[step]
            mark, style = _MARKS.get(state, ("·", "dim"))
            t.append(f" {mark} ", style=style)
            t.append(plain(f"{n}. {self.step_notes.get(step) or STEP_TEXT[step]}") + "\n",
                     style=style if state in ("failed", "running") else "")
        widget.update(t)

    def _show_hint(self) -> None:
        if self.state == "running":
            hint = "Migrating… the dialog closes once the container runs again."
        elif self.state == "done":
            hint = "escape close"
        elif self.problem is not None:
            hint = "escape close"
        else:
            force = "f hide GPUs without room" if self.force else "f allow GPUs without room"
            ready = "y migrate · " if self.plan is not None else ""
            hint = f"↑/↓ target · {ready}{force} · escape cancel"
        self.query_one("#migrate-hint", Static).update(hint)

    # -- planning ---------------------------------------------------------------------------
    def _request_plan(self) -> None:
        if self.target is None or self.container_id is None:
            self.plan = None
            self._show_plan_text(Text("No GPU can take this container (press f to allow GPUs without room).",
                                      style="bold"))
            self._show_hint()
            return
        key = (self.container_id, self.target, self.force)
        if key == self._plan_key:
            return
        self._plan_key = key
        self.plan = None
        self.refresh_bindings()
        self._plan_worker(key)

    @work(thread=True, exclusive=True, exit_on_error=False, group="migrate-plan", description="plan a migration")
    def _plan_worker(self, key: tuple) -> None:
        worker = get_current_worker()
        container_id, target, force = key
        try:
            flow = self._ensure_flow()
            flow.snapshot = self.snapshot
            peak = self._read_peak(container_id)
            plan = flow.plan(container_id, target, force=force, peak_memory=peak)
        except MigrationRefused as exc:
            fatal = exc.kind not in RECOVERABLE
            if not worker.is_cancelled:
                self.post_message(self.PlanFailed(str(exc), key, fatal=fatal))
            return
        except (MigrationNotFound, MigrationUnavailable) as exc:
            if not worker.is_cancelled:
                self.post_message(self.PlanFailed(str(exc), key, fatal=True))
            return
        except Exception as exc:  # one sentence, never a traceback in the dialog
            if not worker.is_cancelled:
                self.post_message(self.PlanFailed(f"Could not plan the migration: {exc}.", key, fatal=True))
            return
        if not worker.is_cancelled:
            self.post_message(self.PlanReady(plan, key))

    def _ensure_flow(self) -> MigrateFlow:
        """Created in a worker: connecting to Docker blocks."""
        if self._flow is None:
            app = self.gpu_app
            self._flow = MigrateFlow(engine_for(app.machine, app.settings), self.snapshot)
        return self._flow

    def _read_peak(self, container_id: str) -> int | None:
        """The container's peak GPU memory over the kept history (read under the app's poll lock)."""
        return self.gpu_app.read_history(lambda history: observed_peak(self.snapshot, container_id, history))

    def on_migrate_screen_plan_ready(self, message: PlanReady) -> None:
        if message.key != self._plan_key or self.state != "idle":
            return
        self.plan = message.plan
        self.refusal = None
        if message.plan.peak_memory:
            self._peak = message.plan.peak_memory
        self._show_current()
        self._fill_targets()
        self._show_plan()
        self._show_hint()
        self.refresh_bindings()

    def on_migrate_screen_plan_failed(self, message: PlanFailed) -> None:
        if message.key != self._plan_key or self.state != "idle":
            return
        self.plan = None
        self.refusal = message.sentence
        if message.fatal:
            self.problem = message.sentence
            self.query_one("#migrate-targets").display = False
        self._show_plan_text(text(message.sentence, style="bold red"))
        self._show_hint()
        self.refresh_bindings()

    @on(OptionList.OptionHighlighted, "#migrate-targets")
    def _target_highlighted(self, event: OptionList.OptionHighlighted | OptionList.OptionSelected) -> None:
        if self.state != "idle" or event.option.id is None:
            return
        ref = event.option.id
        target: int | str = int(ref) if ref.isdigit() else ref  # "5:1": a MIG device
        if target != self.target:
            self.target = target
            self._request_plan()

    @on(OptionList.OptionSelected, "#migrate-targets")
    def _target_selected(self, event: OptionList.OptionSelected) -> None:
        self._target_highlighted(event)

    # -- actions ----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        app = self.gpu_app
        read_only = bool(app.settings.read_only)
        if action == "confirm":
            return True if (self.state == "idle" and self.plan is not None and self.problem is None
                            and not read_only) else None
        if action == "toggle_force":
            return True if self.state == "idle" and self.problem is None and not read_only else None
        if action == "close":
            return True if self.state != "running" else None
        return True

    def action_toggle_force(self) -> None:
        self.force = not self.force
        self._plan_key = None
        self.options = []
        self._fill_targets()
        self._request_plan()
        self._show_hint()

    def action_close(self) -> None:
        if self.state == "running":
            return
        if self.state == "idle" and self.result is None and self.plan is not None and self._flow is not None:
            # The user saw the plan and said no. An app worker, not the dialog's: the dialog closes now
            # and its workers with it.
            self.app.run_worker(partial(self._flow.decline, self.plan), thread=True, exit_on_error=False,
                                group="migrate-audit", description="record a declined migration")
        self.dismiss(self.result)

    def action_confirm(self) -> None:
        if self.check_action("confirm", ()) is not True or self.plan is None:
            return
        self.state = "running"
        self.query_one("#migrate-targets", OptionList).disabled = True
        self._show_progress()
        self._show_hint()
        self.refresh_bindings()
        self._execute_worker(self.plan)

    @work(thread=True, exclusive=True, exit_on_error=False, group="migrate-run", description="migrate a container")
    def _execute_worker(self, plan: MigrationPlan) -> None:
        flow = self._ensure_flow()
        try:
            result = flow.execute(plan, progress=lambda p: self.post_message(self.StepProgress(p)))
        except Exception as exc:  # the engine returns failures; this is a last resort
            result = MigrationResult(False, "failed", f"Migration of {plan.container_name} failed: {exc}.", plan)
        self.post_message(self.Finished(result))

    def on_migrate_screen_step_progress(self, message: StepProgress) -> None:
        p = message.progress
        if p.step in self.steps:
            self.steps[p.step] = p.state
            if p.state in ("failed", "undoing"):
                self.step_notes[p.step] = p.message
        self._show_progress()

    def on_migrate_screen_finished(self, message: Finished) -> None:
        self.result = message.result
        self.state = "done"
        widget = self.query_one("#migrate-result", Static)
        widget.update(text(message.result.message))
        widget.display = True
        widget.set_class(message.result.ok, "-ok")
        widget.set_class(not message.result.ok, "-failed")
        self._show_progress()
        self._show_hint()
        self.refresh_bindings()
        self.gpu_app.request_poll()
        # The dialog shows the result itself; the toast comes when the dialog closes (a toast over the
        # dialog would cover its border and key line on a small terminal).
        self._toast = (markup(message.result.message), "information" if message.result.ok else "error")

    _toast: tuple[str, SeverityLevel] | None = None

    def on_unmount(self) -> None:
        if self._toast is not None:
            text, severity = self._toast
            self._toast = None
            self.app.notify(text, severity=severity, timeout=RESULT_TOAST_S)
        if self._flow is not None and self.state != "running":
            self._flow.close()
