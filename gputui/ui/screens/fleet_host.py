"""One host of the fleet: its GPU cards with load and memory history, and its processes.

Read from the exporter's series (the fleet refresh) plus two range queries for
the sparklines (:meth:`FleetApp.request_history`). Keys 0–9 show one GPU's
processes, `a` all again. Actions stay on the host they concern: `m` and `k`
show the exact ``ssh -- HOST 'gputui migrate …'`` / ``ssh -t -- HOST 'gputui kill …'``
command to run there (`c` copies it), never a silent remote action. The command is
built by :mod:`gputui.core.fleet.remote`: a host or container name from Prometheus
that cannot be put in a command safely gets one sentence why, and no command. `m`
chooses its target GPU by the rule of ``pick --prometheus``
(:func:`gputui.core.fleet.pick.best_other_gpu`). The process table shows at most
:data:`MAX_PROCESS_ROWS` rows, the largest first, then "N more".
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from gputui.actions.migrate.plan import runtime_refusal
from gputui.core.fleet.model import FleetGpu, FleetHost, FleetProcess, FleetSnapshot
from gputui.core.fleet.pick import best_other_gpu
from gputui.core.fleet.queries import HostHistory
from gputui.core.fleet.remote import container_problem, ssh_command, ssh_host
from gputui.core.fleet.summary import detail_query
from gputui.core.mig import mig_label
from gputui.core.safe_text import clean
from gputui.ui import format as fmt
from gputui.ui.fleet_status import fleet_app
from gputui.ui.safe import markup
from gputui.ui.screens.fleet_view import banner, procs, spark, state_cell, update_cell
from gputui.ui.widgets.footer import FitFooter

PROCESS_COLUMNS = (("gpu", "GPU"), ("pid", "PID"), ("user", "User"), ("exe", "Executable"),
                   ("container", "Container"), ("image", "Image"), ("memory", "GPU memory"))
SPARK_WIDTH = 40
#: Process rows the host screen shows (a host may export tens of thousands of process series).
MAX_PROCESS_ROWS = 500
#: The key of the last row when there are more processes than rows.
MORE_ROW = "more"


def card_text(gpu: FleetGpu, history: HostHistory | None, selected: bool,
              jobs: tuple[tuple[str, str, str], ...] = (),
              reservations: tuple[tuple[str, str, str], ...] = ()) -> Text:
    text = Text()
    text.append(f"GPU {gpu.index} ", style="bold reverse" if selected else "bold")
    text.append(clean(gpu.name or "N/A"))
    if gpu.lost:
        text.append("  LOST", style="bold red")
    text.append(f"  load {fmt.percent(gpu.utilization_gpu).strip()}  ")
    text.append(f"memory {fmt.size_pair(gpu.memory_used, gpu.memory_total)}  ")
    text.append(f"{fmt.temperature(gpu.temperature)}  ")
    text.append(procs(len(gpu.processes)) if gpu.processes else "")
    mine = [f"job {j} ({u or 'unknown user'})" for uuid, j, u in jobs if uuid == gpu.uuid]
    if mine:
        text.append("  Slurm " + ", ".join(clean(m) for m in mine), style="bold")
    held = [f"{holder}" + (f" until {until}" if until else "") for uuid, holder, until in reservations
            if uuid == gpu.uuid]
    if held:
        text.append("  reserved for " + ", ".join(clean(h)[:80] for h in held), style="bold")
    if history is not None:
        util = history.util.get(gpu.index, ())
        memory = history.memory.get(gpu.index, ())
        text.append("\n  load   ", style="dim")
        text.append(spark(util, history.start, history.end, SPARK_WIDTH), style="green")
        text.append("\n  memory ", style="dim")
        text.append(spark(memory, history.start, history.end, SPARK_WIDTH), style="cyan")
        text.append(f"   last {(history.end - history.start) / 60:.0f} min, 0–100 %", style="dim")
    return text


def process_cells(gpu: FleetGpu, p: FleetProcess) -> tuple[Text, ...]:
    where = str(gpu.index) if p.mig_device is None else mig_label(gpu.index, p.mig_device)  # "5:1" on MIG
    return (Text(where), Text(str(p.pid)), Text(clean(p.user or "N/A")), Text(clean(p.exe or "N/A")),
            Text(clean(p.owner or "-")), Text(clean(p.image or "-")), Text(fmt.size(p.gpu_memory)))


def migrate_command(host: FleetHost, gpu: FleetGpu, process: FleetProcess) -> tuple[str | None, str]:
    """(command, explanation) for `m` on a remote process; (None, why) when none can be offered."""
    if not process.container:
        return None, (f"PID {process.pid} runs outside a container: gputui migrates containers only. "
                      f"Stop it and start it on another GPU, or kill it with k.")
    if process.runtime and process.runtime != "docker":
        return None, runtime_refusal(clean(process.owner or process.container), process.runtime,
                                     process.pod, process.namespace) or ""
    target_host, why = ssh_host(host)
    if target_host is None:
        return None, why
    bad_name = container_problem(process.container)
    if bad_name is not None:
        return None, (f"No command is offered to move {clean(process.container)[:80]!r}: its name from Prometheus "
                      f"cannot be put in one safely ({bad_name}).")
    target = best_other_gpu(host, gpu.index)
    if target is None:
        return None, f"{clean(host.shown)} has no other GPU to move {clean(process.container)} to."
    cmd = ssh_command(target_host, ["gputui", "migrate", process.container, "--to", str(target.index)])
    return cmd, (f"Run this to move container {clean(process.container)} from GPU {gpu.index} to GPU "
                 f"{target.index}, the least loaded other GPU there. It shows the plan and asks before it acts "
                 f"(add --dry-run to only see the plan).")


def kill_command(host: FleetHost, gpu: FleetGpu, process: FleetProcess) -> tuple[str | None, str]:
    """(command, explanation) for `k` on a remote process; (None, why) when none can be offered."""
    target_host, why = ssh_host(host)
    if target_host is None:
        return None, why
    cmd = ssh_command(target_host, ["gputui", "kill", str(process.pid)], tty=True)
    return cmd, (f"Run this to stop PID {process.pid} ({clean(process.user or 'unknown user')}, "
                 f"{clean(process.exe or 'unknown executable')}, {fmt.size(process.gpu_memory)} on GPU {gpu.index}). "
                 f"gputui on {clean(host.shown)} checks the process again and asks before it signals.")


class CommandScreen(ModalScreen[None]):
    """The exact command to run on the remote host; `c` copies it (OSC 52), Esc closes."""

    DEFAULT_CSS = """
    CommandScreen { align: center middle; }
    #command-box { width: 90%; max-width: 110; height: auto; border: round $accent; padding: 1 2;
                   background: $surface; }
    #command-text { margin: 1 0; padding: 0 1; background: $boost; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "copy", "Copy", id="command-copy"),
        Binding("escape,q,enter", "close", "Close", id="command-close"),
    ]

    def __init__(self, title: str, command: str | None, explanation: str) -> None:
        super().__init__()
        self.title_text = title
        self.command = command
        self.explanation = explanation

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static(Text(self.title_text, style="bold"))
            yield Static(Text(self.explanation))
            if self.command is not None:
                yield Static(Text(self.command), id="command-text")
                yield Static(Text("gputui never acts on a remote host itself. c copies the command, Esc closes.",
                                  style="dim"))
            yield FitFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "copy" and self.command is None:
            return False  # nothing to copy: the key is not offered
        return True

    def action_copy(self) -> None:
        if self.command is not None:
            self.app.copy_to_clipboard(self.command)
            self.notify("Command copied to the clipboard.", timeout=3)

    def action_close(self) -> None:
        self.dismiss(None)


class HostScreen(Screen[None]):
    DEFAULT_CSS = """
    HostScreen { layout: vertical; }
    #host-banner { height: auto; background: $error 30%; padding: 0 1; display: none; }
    #host-banner.-shown { display: block; }
    #host-title { height: auto; padding: 0 1; }
    #host-cards { height: auto; max-height: 60%; padding: 0 1; }
    #host-procs { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Fleet", id="host-back"),
        Binding("a", "show_gpu(-1)", "All GPUs", id="host-all"),
        # short labels: the footer keeps "q Quit" whole at 80 columns (the keys only show the command to run)
        Binding("m", "migrate", "Migrate cmd", id="host-migrate"),
        Binding("k", "kill", "Kill cmd", id="host-kill"),
        Binding("q", "app.quit", "Quit", id="host-quit"),
        *[Binding(str(i), f"show_gpu({i})", f"GPU {i}", show=False, id=f"host-gpu-{i}") for i in range(10)],
    ]

    def __init__(self, key: tuple[str, str]) -> None:
        super().__init__()
        self.key = key
        self.host: FleetHost | None = None
        #: on_mount has run (the process table has its columns)
        self._ready = False
        self.gpu_filter: int | None = None
        self.history: HostHistory | None = None
        self._rows: list[str] = []
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._history_error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="host-banner")
        yield Static(id="host-title")
        yield VerticalScroll(Static(id="host-cards-text"), id="host-cards")
        table: DataTable[Text] = DataTable(id="host-procs", cursor_type="row", zebra_stripes=True)
        yield table
        yield FitFooter()

    def on_mount(self) -> None:
        table = self.query_one("#host-procs", DataTable)
        for key, heading in PROCESS_COLUMNS:
            table.add_column(heading, key=key)
        table.focus()
        self._ready = True
        app = fleet_app(self)
        if app.snapshot is not None:
            self.update_fleet(app.snapshot)
        self.update_fleet_status(app.status)
        app.follow_host(self.key)

    def on_unmount(self) -> None:
        fleet_app(self).follow_host(None)

    # -- data ---------------------------------------------------------------------------
    def update_fleet(self, snap: FleetSnapshot) -> None:
        if not self._ready:  # a refresh that lands before on_mount: on_mount shows app.snapshot
            return
        host = snap.host(self.key)
        if host is None:
            self.query_one("#host-title", Static).update(
                Text(f"{clean(self.key[1])} is no longer in Prometheus's data (no series in the last hour).",
                     style="bold red"))
            return
        if host.summary is not None and self.host is not None and self.host.summary is None:
            return  # the list's figures only (this host's series come with the next refresh): keep its last
        self.host = host
        if host.up and host.gpus:
            fleet_app(self).request_history(host)
        self._show()

    def update_history(self, history: HostHistory | None, error: str | None) -> None:
        if history is not None and history.key != self.key:
            return
        if history is not None:
            self.history = history
        self._history_error = error
        self._show()

    def update_fleet_status(self, status) -> None:
        if not self._ready:
            return
        text = banner(status, fleet_app(self).now())
        widget = self.query_one("#host-banner", Static)
        widget.set_class(text is not None, "-shown")
        if text is not None:
            widget.update(text)

    def _show(self) -> None:
        host = self.host
        if host is None:
            return
        now = fleet_app(self).now()
        title = Text()
        title.append(clean(host.shown), style="bold")
        title.append(f"  {clean(host.instance)} · {clean(host.job)} · source {host.source} · ")
        title.append_text(state_cell(host, now))
        if self.gpu_filter is not None:
            title.append(f" · GPU {self.gpu_filter} only (a: all)", style="yellow")
        if host.imbalance_flagged:
            title.append(" · imbalance flagged", style="bold yellow")
        for a in host.alerts:
            where = f" GPU {a.gpu}" if a.gpu is not None else ""
            title.append(f"\n{clean(a.severity)}: {clean(a.kind)}{where}",
                         style="bold red" if a.severity == "critical" else "yellow")
        for name in host.containers_with_findings:
            kinds = ", ".join(sorted({clean(f.kind) for f in host.findings if f.container == name}))
            title.append(f"\ncontainer {clean(name)}: {kinds}", style="yellow")
        if host.note:
            title.append(f"\n{clean(host.note)}", style="dim")
        for problem in host.problems:
            title.append(f"\n{clean(problem)}", style="yellow")
        for rule, user, gpu_text, container in host.rule_violations[:5]:
            where = f" on GPU {gpu_text}" if gpu_text else ""
            who = " ".join(x for x in (clean(user)[:32], f"({clean(container)[:40]})" if container else "") if x)
            title.append(f"\nHouse rule {clean(rule)[:32]} broken{where}: {who or 'unknown'}", style="bold yellow")
        if len(host.rule_violations) > 5:
            title.append(f"\n{len(host.rule_violations) - 5} more house rules broken", style="yellow")
        if self._history_error:
            title.append(f"\nNo history: {clean(self._history_error)}", style="dim")
        if not host.up:
            title.append("\nThe exporter is not answering: the last values it sent are no longer shown.",
                         style="dim")
        self.query_one("#host-title", Static).update(title)
        gpus = [g for g in host.gpus if self.gpu_filter is None or g.index == self.gpu_filter]
        cards = Text("\n").join(card_text(g, self.history, g.index == self.gpu_filter, host.slurm_jobs,
                                          host.reservations) for g in gpus)
        if host.summary is None:
            empty = Text("No GPUs to show.", style="dim")
        elif detail_query(host.key) is None:
            empty = Text("Its job or instance label cannot be put in a query: its GPUs are not read.", style="yellow")
        else:
            empty = Text("Reading its GPUs from Prometheus…", style="dim")
        self.query_one("#host-cards-text", Static).update(cards if gpus else empty)
        self._fill_table(gpus)

    def _fill_table(self, gpus: list[FleetGpu]) -> None:
        table = self.query_one("#host-procs", DataTable)
        pairs = [(g, p) for g in gpus for p in g.processes]
        more = len(pairs) - (MAX_PROCESS_ROWS - 1)
        if more > 1:
            largest = sorted(pairs, key=lambda gp: (-(gp[1].gpu_memory or 0), gp[0].index, gp[1].pid))
            keep = {id(p) for _, p in largest[:MAX_PROCESS_ROWS - 1]}
            pairs = [(g, p) for g, p in pairs if id(p) in keep]
        rows = [(f"{g.index}:{p.pid}", process_cells(g, p)) for g, p in pairs]
        if more > 1:
            rows.append((MORE_ROW, (Text("…"), Text(""), Text(f"{more} more processes, not listed (the largest "
                                                               f"are)", style="dim"), *(Text(""),) * 4)))
        keys = [k for k, _ in rows]
        before, self._cells = self._cells, dict(rows)
        with self.app.batch_update():
            if keys != self._rows:
                selected = self._selected_key()
                table.clear()
                for k, cells in rows:
                    table.add_row(*cells, key=k)
                if selected in keys:
                    table.move_cursor(row=keys.index(selected), animate=False)
                self._rows = keys
            else:
                for k, cells in rows:
                    for (col, _), value, old in zip(PROCESS_COLUMNS, cells, before.get(k, ()), strict=False):
                        if value != old:
                            update_cell(table, k, col, value)

    def _selected_key(self) -> str | None:
        table = self.query_one("#host-procs", DataTable)
        if table.row_count == 0:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except CellDoesNotExist:  # the cursor is past the rows a refresh just removed
            return None

    def _selected(self) -> tuple[FleetGpu, FleetProcess] | None:
        key, host = self._selected_key(), self.host
        if key is None or host is None or key == MORE_ROW:
            return None
        index, pid = (int(x) for x in key.split(":"))
        for g in host.gpus:
            if g.index == index:
                for p in g.processes:
                    if p.pid == pid:
                        return g, p
        return None

    # -- keys ---------------------------------------------------------------------------
    def action_back(self) -> None:
        self.app.pop_screen()

    def action_show_gpu(self, index: int) -> None:
        host = self.host
        if index >= 0 and host is not None and index not in {g.index for g in host.gpus}:
            # notify parses markup: the host name is escaped
            self.notify(f"{markup(host.shown)} has no GPU {index}.", severity="warning", timeout=3)
            return
        self.gpu_filter = None if index < 0 else index
        self._show()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("migrate", "kill"):
            return True if self._selected() is not None else None
        return True

    def action_migrate(self) -> None:
        picked, host = self._selected(), self.host
        if picked is None or host is None:
            return
        command, why = migrate_command(host, *picked)
        self.app.push_screen(CommandScreen(f"Migrate on {clean(host.shown)}", command, why))

    def action_kill(self) -> None:
        picked, host = self._selected(), self.host
        if picked is None or host is None:
            return
        command, why = kill_command(host, *picked)
        self.app.push_screen(CommandScreen(f"Kill on {clean(host.shown)}", command, why))
