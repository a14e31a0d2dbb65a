"""The main screen: status line, GPU panel, imbalance banner, process table, footer.

Keys are declared in ``BINDINGS`` (each with an id, so users can remap them and
the help screen and command palette list them); ``check_action`` greys out the
ones that do not apply: kill without a highlighted process, ``K`` without a
stale process in view, migrate with neither a highlighted process nor an
imbalance suggestion that names a container, and kill and migrate altogether in
read-only mode (the footer then shows them greyed, and the status line says why).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.widgets import Input

from gputui.core.model import Process, Snapshot
from gputui.ui import keys
from gputui.ui.base import GpuScreen
from gputui.ui.widgets.banner import SuggestionBanner
from gputui.ui.widgets.footer import FitFooter
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import COLUMNS, ProcessHeader, ProcessTable
from gputui.ui.widgets.rules_banner import RulesBanner
from gputui.ui.widgets.status import ImbalanceBanner, PollStatus, SelectionBar, StatusLine

#: Lines taken by the one-line bars around the panel and the table (status,
#: table header, selection bar, footer).
FIXED_LINES = 4


class DashboardScreen(GpuScreen[None]):
    """Everything at a glance; the table has the focus so k/m act on its row."""

    AUTO_FOCUS = "#procs"

    BINDINGS = keys.DASHBOARD

    def __init__(self) -> None:
        super().__init__()
        #: What the enabled state of kill / K / migrate depends on, to refresh the footer only on change.
        self._action_state: tuple | None = None
        self._gpu_count = -1
        self.snapshot_flagged = False
        self._banner_lines = 0

    def compose(self) -> ComposeResult:
        header = ProcessHeader(id="proc-header")
        yield StatusLine(id="status")
        yield GpuPanel(id="gpus")
        yield SuggestionBanner(id="imbalance")
        yield RulesBanner(id="rules")
        yield header
        yield ProcessTable(header, id="procs")
        yield SelectionBar(id="selection")
        yield Input(placeholder="filter by user, command, container or PID — Enter keeps it, Escape clears",
                    id="filter")
        yield FitFooter()

    # -- typed lookups ------------------------------------------------------------
    @property
    def table(self) -> ProcessTable:
        return self.query_one("#procs", ProcessTable)

    @property
    def panel(self) -> GpuPanel:
        return self.query_one("#gpus", GpuPanel)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#filter", Input)

    def on_mount(self) -> None:
        app = self.gpu_app
        self.query_one(SuggestionBanner).read_only = bool(app.settings.read_only)
        self.update_poll_status(app.poll_status)
        if app.snapshot is not None:
            self.update_snapshot(app.snapshot)

    def on_resize(self) -> None:
        self._fit_panel()

    def _fit_panel(self) -> None:
        """Give the GPU panel what the screen can spare while the table keeps a useful height."""
        height = self.size.height
        banner = self.query_one(ImbalanceBanner).lines_needed(self.size.width) + self.query_one(RulesBanner).lines
        filter_lines = 1 if self.filter_input.display else 0
        room = height - FIXED_LINES - banner - filter_lines
        min_rows = max(5, room // 3)
        self.panel.set_available_height(max(1, room - min_rows))

    # -- the protocol ---------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> None:
        app = self.gpu_app
        self.panel.update(snapshot, app.gpu_history, app.settings)
        banner = self.query_one(ImbalanceBanner)
        banner.show(snapshot.imbalance)
        if self.query_one(RulesBanner).show(snapshot.rule_violations):
            self._fit_panel()
        self.table.update(snapshot)
        # In the same frame as the table (the CursorMoved message would come a frame later).
        self.query_one(SelectionBar).show(self.table.cursor_process)
        self.query_one(StatusLine).show(snapshot, app.poll_status)
        flagged, lines = snapshot.imbalance.flagged, banner.lines_needed(self.size.width)
        if (flagged, lines) != (self.snapshot_flagged, self._banner_lines):
            self.snapshot_flagged, self._banner_lines = flagged, lines
            self._fit_panel()
        if len(snapshot.gpus) != self._gpu_count:
            self._gpu_count = len(snapshot.gpus)
            self._fit_panel()
            self.refresh_bindings()
        self._sync_bindings()

    def update_poll_status(self, status: PollStatus) -> None:
        self.query_one(StatusLine).show(self.gpu_app.snapshot, status)

    # -- events -----------------------------------------------------------------------
    @on(ProcessTable.CursorMoved)
    def _cursor_moved(self, event: ProcessTable.CursorMoved) -> None:
        self.query_one(SelectionBar).show(event.process)
        self._sync_bindings()

    def _sync_bindings(self) -> None:
        """Refresh the footer (and palette) only when what enables kill / K / migrate changed."""
        state = (self.table.cursor_process is not None, bool(self.stale_in_view()),
                 self._suggested_container() is not None)
        if state != self._action_state:
            self._action_state = state
            self.refresh_bindings()

    def stale_in_view(self) -> list[Process]:
        """The stale processes the table shows now (its GPU and text filters apply), in table order."""
        return [p for p in self.table.rows if p.stale]

    def _suggested_container(self) -> str | None:
        """The container the imbalance judge proposes to move, if it names one."""
        snap = self.gpu_app.snapshot
        if snap is None or not snap.imbalance.flagged or snap.imbalance.suggestion is None:
            return None
        return snap.imbalance.suggestion.container

    @on(SuggestionBanner.Refit)
    def _banner_refit(self) -> None:
        self._fit_panel()

    @on(SuggestionBanner.MigrateRequested)
    def _migrate_suggestion(self, event: SuggestionBanner.MigrateRequested) -> None:
        from gputui.ui.screens.migrate import MigrateScreen

        self.app.push_screen(MigrateScreen(self.gpu_app.snapshot, container=event.container, target=event.target))

    @on(GpuPanel.Opened)
    def _card_opened(self, event: GpuPanel.Opened) -> None:
        self._open_detail(event.gpu_index)

    @on(ProcessTable.Opened)
    def _row_opened(self, event: ProcessTable.Opened) -> None:
        self._open_detail(event.process.gpu_index)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.table.set_text_filter(event.value.strip())
        self._sync_bindings()
        self.refresh_bindings()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self._hide_filter()
        self.table.focus()

    # -- actions ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        if action in ("kill", "kill_stale", "migrate") and self.gpu_app.settings.read_only:
            return None  # greyed: read-only mode turns every kill and migration off
        if action == "kill":
            return True if self.table.cursor_process is not None else None
        # kill_stale stays enabled with no stale process in view: K then says so (a toast)
        if action == "migrate":
            has_target = self.table.cursor_process is not None or self._suggested_container() is not None
            return True if has_target else None
        if action == "details":
            snap = self.gpu_app.snapshot
            return True if snap is not None and snap.gpus else None
        if action == "clear_filters":
            t = self.table
            return bool(t.gpu_only is not None or t.text_filter or self.filter_input.display)
        return True

    def action_help(self) -> None:
        from gputui.ui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    def action_filter(self) -> None:
        field = self.filter_input
        if not field.display:
            field.display = True
            self._fit_panel()
        field.focus()

    def _hide_filter(self) -> None:
        field = self.filter_input
        if field.display:
            field.display = False
            self._fit_panel()

    def action_clear_filters(self) -> None:
        field = self.filter_input
        field.value = ""
        self._hide_filter()
        self.table.set_text_filter("")
        self.action_all_gpus()
        self.table.focus()

    def action_sort(self, step: int) -> None:
        column = self.table.cycle_sort(step)
        title = next(c.title for c in COLUMNS if c.id == column)
        self.notify(f"Sorted by {title}.", timeout=1.5)

    def action_reverse_sort(self) -> None:
        self.table.reverse_sort()

    def action_only_gpu(self, index: int) -> None:
        snap = self.gpu_app.snapshot
        if snap is not None and snap.gpu(index) is None:
            present = ", ".join(str(g.index) for g in snap.gpus) or "none"
            self.notify(f"There is no GPU {index} here (GPUs: {present}).", severity="warning")
            return
        if self.table.gpu_only == index:  # the same digit again shows every GPU
            self.action_all_gpus()
            return
        self.table.set_gpu_only(index)
        self.panel.set_filtered(index)
        self._sync_bindings()
        self.refresh_bindings()

    def action_all_gpus(self) -> None:
        self.table.set_gpu_only(None)
        self.panel.set_filtered(None)
        self._sync_bindings()
        self.refresh_bindings()

    def action_details(self) -> None:
        focused = self.focused
        gpu: int | None = None
        if isinstance(focused, GpuPanel):
            gpu = focused.selected
        elif self.table.cursor_process is not None:
            gpu = self.table.cursor_process.gpu_index
        if gpu is None:
            gpu = self.panel.selected
        if gpu is not None:
            self._open_detail(gpu)

    def _open_detail(self, gpu_index: int) -> None:
        from gputui.ui.screens.detail import GpuDetailScreen

        self.app.push_screen(GpuDetailScreen(gpu_index))

    def action_cycle_view(self) -> None:
        choice = self.panel.cycle_mode()
        shown = "cards" if self.panel.mode == "cards" else "one line per GPU"
        how = " (auto: follows the terminal's size)" if choice == "auto" else ""
        self.notify(f"GPU panel: {shown}{how}; v switches.", timeout=1.5)

    def action_pause(self) -> None:
        app = self.gpu_app
        app.set_paused(not app.poll_status.paused)

    def action_quit(self) -> None:
        self.app.exit(0)

    def _read_only(self, what: str) -> bool:
        if self.gpu_app.settings.read_only:
            self.notify(f"gputui is read-only (--read-only or read_only in the config): {what} is off.",
                        severity="warning")
            return True
        return False

    def action_containers(self) -> None:
        from gputui.ui.screens.containers import ContainersScreen

        self.app.push_screen(ContainersScreen(self.gpu_app.snapshot), self._filter_to_container)

    def _filter_to_container(self, name: str | None) -> None:
        """The containers view closed with Enter: its container's processes, in the table."""
        if not name:
            return
        self.action_filter()
        self.filter_input.value = name
        self.table.set_text_filter(name)
        self.table.focus()

    def action_alerts(self) -> None:
        from gputui.ui.screens.alerts import AlertsScreen

        self.app.push_screen(AlertsScreen(self.gpu_app.snapshot))

    def action_migrate(self) -> None:
        """The highlighted process's container; with no row, the imbalance judge's suggested move."""
        if self._read_only("migrate"):
            return
        from gputui.ui.screens.migrate import MigrateScreen

        snapshot = self.gpu_app.snapshot
        process = self.table.cursor_process
        if process is not None:
            self.app.push_screen(MigrateScreen(snapshot, process))
            return
        container = self._suggested_container()
        suggestion = snapshot.imbalance.suggestion if snapshot is not None else None
        if container is None or suggestion is None:
            self.notify("Highlight a process that runs in a container to migrate it.", severity="information")
            return
        # MigrateScreen pre-selects the suggested target for the suggested container.
        self.app.push_screen(MigrateScreen(snapshot, None, container=container, target=suggestion.to_gpu))

    def action_kill(self) -> None:
        process: Process | None = self.table.cursor_process
        if process is None or self._read_only("kill"):
            return
        from gputui.ui.screens.kill import KillScreen

        self.app.push_screen(KillScreen(self.gpu_app.snapshot, process))

    def action_kill_stale(self) -> None:
        """Every stale process the table shows, in one confirmation (each still checked by the kill plan)."""
        if self._read_only("kill"):
            return
        stale = self.stale_in_view()
        if not stale:
            self.notify("No stale process in view.", severity="information")
            return
        from gputui.ui.screens.kill import KillScreen

        self.app.push_screen(KillScreen(self.gpu_app.snapshot, processes=stale))

    # -- command palette ----------------------------------------------------------------------
    def palette_commands(self) -> Iterable[SystemCommand]:
        """The screen's key actions, offered in the command palette as well."""
        snap = self.gpu_app.snapshot
        gpus = {g.index for g in snap.gpus} if snap is not None else set()
        skip = {"clear_filters", "quit"}
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            action = binding.action
            name = action.split("(")[0]
            if name in skip:
                continue
            if name == "only_gpu" and int(action[9:-1]) not in gpus:
                continue
            if self.check_action(name, ()) is not True or (name == "kill_stale" and not self.stale_in_view()):
                continue
            key = binding.key_display or binding.key
            yield SystemCommand(binding.description, f"key: {key}",
                                lambda a=action: self.call_later(self.run_action, a))
