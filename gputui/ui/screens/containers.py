"""The containers view (key ``c``): each container's GPU grant against what it really uses.

One row per container that has a GPU grant or a GPU process: its grant, the GPUs
its processes actually run on, their GPU memory summed, and its findings. The
pane below follows the highlighted row: a strip of every GPU with the
container's used GPUs filled and its granted-but-unused GPUs underlined, the
findings as whole sentences, and the processes on those GPUs with the
container's own rows marked, so "it was given GPU 7 but sits on GPU 0 next to
three others" is visible at a glance. Enter goes back to the dashboard with the
process table filtered to that container; ``m`` opens the migrate dialog for the
highlighted container (greyed in read-only mode).

Highlighting uses reverse/bold/underline/dim rather than colours, so it reads in
every theme and in monochrome terminals. Follows every poll while open and keeps
the highlighted container across polls (by id).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from gputui.core.model import Container, Snapshot
from gputui.ui import format as fmt
from gputui.ui import keys
from gputui.ui.base import GpuScreen
from gputui.ui.safe import markup, plain, text
from gputui.ui.widgets.footer import FitFooter
from gputui.ui.widgets.status import PollStatus, StatusLine

#: How each grant form is named in the table.
VIA = {
    "device_request": "--gpus",
    "nvidia_runtime_env": "nvidia runtime",
    "cdi": "CDI",
    "devices": "device node",
    "kubelet": "nvidia.com/gpu",
    "none": "-",
}
#: The engines whose grants gputui reads, as named when they are down.
ENGINE = {"docker": "Docker", "podman": "podman"}
USED_STYLE = "bold reverse"
GRANTED_STYLE = "bold underline"
OTHER_STYLE = "dim"
FINDING_STYLE = "bold"


def indices(items: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) -> "0-2,5"; () -> "-"."""
    values = sorted(set(items))
    if not values:
        return "-"
    parts: list[str] = []
    start = prev = values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(f"{start}-{prev}" if prev - start >= 2 else
                     ",".join(str(x) for x in range(start, prev + 1)))
        if v is not None:
            start = prev = v
    return ",".join(parts)


def grant_cell(c: Container, n_gpus: int) -> str:
    """What the container was granted, as GPU indices: "all (8)", "2,3", "none", or "unknown"."""
    if not c.grant_known or (c.grant_source == "none" and not c.granted_gpus and c.image is None):
        return "unknown"
    if c.gpus == "all":
        return f"all ({n_gpus})"
    return indices(c.granted_gpus) if c.granted_gpus else "none"


def via_cell(c: Container) -> str:
    if not c.grant_known:
        return c.runtime
    if c.runtime == "podman" and c.grant_source == "nvidia_runtime_env":
        return "NVIDIA hook"
    return VIA.get(c.grant_source, c.grant_source)


#: The strip's legend, roomy then short; cut with "…" where even the short one does not fit.
LEGENDS = (("its processes run here", "granted, unused", "other"), ("used", "granted", "other"))


def gpu_strip(c: Container, snapshot: Snapshot, width: int | None = None) -> Text:
    """Every GPU of the snapshot; the container's used GPUs filled, granted-only underlined, others dim,
    then a legend that fits ``width`` cells (the short one, or cut with "…", on a narrow terminal)."""
    used, granted = set(c.used_gpus), set(c.granted_gpus)
    gpus = Text("GPUs ")
    for g in snapshot.gpus:
        style = USED_STYLE if g.index in used else GRANTED_STYLE if g.index in granted else OTHER_STYLE
        gpus.append(f" {g.index} ", style=style)
        gpus.append(" ")
    out = gpus
    for words in LEGENDS:
        out = gpus.copy()
        out.append("   ")
        for style, word in zip((USED_STYLE, GRANTED_STYLE, OTHER_STYLE), words, strict=True):
            out.append(" n ", style=style)
            out.append(f" {word}" + ("  " if style is not OTHER_STYLE else ""))
        if width is None or out.cell_len <= width:
            return out
    out.truncate(width or 0, overflow="ellipsis")
    return out


def detail(c: Container, snapshot: Snapshot) -> Table:
    """Identity, grant, findings and the processes on its GPUs (its own marked)."""
    out = Table.grid(padding=(0, 1), expand=True)
    out.add_column(no_wrap=True, style="bold")
    out.add_column(ratio=1)
    # names, images, labels and policies are the container owner's text: plain Text, never markup
    out.add_row("Container", Text.assemble((plain(c.name), "bold"), plain(f"  {c.id[:12]}  {c.state}")))
    if c.image:
        out.add_row("Image", markup(c.image))
    if c.compose_project:
        out.add_row("Compose", markup(f"project {c.compose_project}, service {c.compose_service or '-'}"))
    if c.runtime == "kubernetes" and (c.pod or c.pod_uid):
        uid = f"  UID {c.pod_uid}" if c.pod_uid else ""
        out.add_row("Pod", markup(f"{c.namespace}/{c.pod}{uid}" if c.pod else f"UID {c.pod_uid} (name unknown)"))
    elif c.runtime != "docker":
        where = f", namespace {c.namespace}" if c.namespace else ""
        out.add_row("Runtime", markup(f"{c.runtime}{where}"))
    if c.restart_policy:
        out.add_row("Restart", markup(c.restart_policy))
    n = len(snapshot.gpus)
    grant = grant_cell(c, n)
    if grant == "unknown":
        grant_text = (f"unknown: {ENGINE[c.runtime]} is unavailable" if c.runtime in ENGINE else
                      f"unknown: nothing that gputui reads tells the grant of this {c.runtime} container")
    elif grant == "none":
        grant_text = "none"
    else:
        what = (f"all {n} GPUs" if c.gpus == "all" else
                f"GPU{'s' if len(c.granted_gpus) > 1 else ''} {grant}")
        grant_text = f"{what} via {VIA.get(c.grant_source, c.grant_source)}"
    out.add_row("Grant", markup(grant_text))
    out.add_row("CUDA_VISIBLE_DEVICES", markup(c.cuda_visible_devices if c.cuda_visible_devices is not None
                                             else "not set"))
    uses = (f"GPU {indices(c.used_gpus)}, {fmt.size(c.gpu_memory)} in {len(c.pids)} "
            f"process{'es' if len(c.pids) != 1 else ''}" if c.pids else "nothing on any GPU now")
    out.add_row("Uses", uses)
    if c.findings:
        findings = Text()
        for i, f in enumerate(c.findings):
            if i:
                findings.append("\n")
            findings.append(f"{plain(f.kind)}: ", style=FINDING_STYLE)
            findings.append(plain(f.message))
        out.add_row("Findings", findings)
    else:
        out.add_row("Findings", Text("none", style="dim"))
    out.add_row("", "")
    out.add_row("Processes", processes_table(c, snapshot))
    return out


def processes_table(c: Container, snapshot: Snapshot) -> Table | Text:
    """GPU processes on the GPUs the container holds or uses; its own rows marked and bold."""
    gpus = set(c.used_gpus) | set(c.granted_gpus)
    procs = [p for p in snapshot.processes if p.gpu_index in gpus]
    if not procs:
        return Text("no process on its GPUs", style="dim")
    t = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold", expand=True)
    t.add_column("", no_wrap=True)
    t.add_column("GPU", justify="right", no_wrap=True)
    t.add_column("PID", justify="right", no_wrap=True)
    t.add_column("USER", no_wrap=True)
    t.add_column("GPU MEM", justify="right", no_wrap=True)
    t.add_column("CONTAINER", no_wrap=True)
    t.add_column("COMMAND", ratio=1, no_wrap=True, overflow="ellipsis")
    own = set(c.pids)
    for p in sorted(procs, key=lambda p: (p.container is None or p.container.id != c.id, p.gpu_index, p.pid)):
        mine = p.container is not None and p.container.id == c.id and p.pid in own
        style = "bold" if mine else "dim"
        t.add_row("▶" if mine else "", str(p.gpu_index), str(p.pid), markup(p.user or fmt.NA), fmt.size(p.gpu_memory),
                  markup(p.container.label if p.container else "-"), markup(p.command or fmt.NA), style=style)
    return t


#: Table keys of Slurm job rows (container ids are hexadecimal, never this).
JOB_KEY = "slurm:"


def job_detail(job_id: str, snapshot: Snapshot) -> Text:
    """A Slurm job's row, opened: who, how long, GRES against use, its processes."""
    j = next((j for j in snapshot.slurm.jobs if j.id == job_id), None) if snapshot.slurm is not None else None
    if j is None:
        return Text(f"Job {job_id} is no longer listed.", style="dim")
    used = snapshot.slurm.used.get(j.id, ()) if snapshot.slurm is not None else ()
    lines = [f"Slurm {j.label} · {j.name or '-'} · {j.state or '?'}",
             f"granted (GRES): GPUs {indices(j.gpus)}    uses: GPUs {indices(used)}"]
    for p in snapshot.processes:
        if p.job is not None and p.job.id == j.id:
            lines.append(f"  GPU {p.gpu_index}  PID {p.pid}  step {p.job.step or '?'}  {fmt.size(p.gpu_memory)}  "
                         f"{p.command or fmt.NA}")
    return Text("\n".join(plain(ln) for ln in lines))


class ContainersScreen(GpuScreen["str | None"]):
    """Containers with GPUs: grant, use, memory, findings; the highlighted one's GPUs and processes below."""

    DEFAULT_CSS = """
    ContainersScreen {
        layout: vertical;
        background: $background;
    }
    #containers-title {
        height: 1;
        background: $boost;
        color: $foreground;
        padding: 0 1;
    }
    #containers-table {
        height: auto;
        max-height: 45%;
    }
    #container-gpus {
        height: 1;
        padding: 0 1;
        margin-top: 1;
    }
    #container-detail-scroll {
        height: 1fr;
        padding: 0 1;
    }
    """

    BINDINGS = keys.CONTAINERS

    COLUMNS = ("NAME", "STATE", "GRANT", "VIA", "USES", "GPU MEM", "PIDS", "FINDINGS")

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        #: id of the highlighted container, kept across polls
        self.selected_id: str | None = None
        #: the GPU strip last shown (what the highlight looks like), for tests and screenshots
        self.strip: Text | None = None
        self._order: list[str] = []

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Static(id="containers-title")
        table: DataTable = DataTable(id="containers-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="container-gpus")
        with VerticalScroll(id="container-detail-scroll"):
            yield Static(id="container-detail")
        yield FitFooter()

    @property
    def table(self) -> DataTable:
        return self.query_one("#containers-table", DataTable)

    def on_mount(self) -> None:
        for title in self.COLUMNS:
            self.table.add_column(title, key=title)
        app = self.gpu_app
        self.update_poll_status(app.poll_status)
        snapshot = app.snapshot or self.snapshot
        if snapshot is not None:
            self.update_snapshot(snapshot)
        self.table.focus()

    # -- the app's protocol -------------------------------------------------------------
    def update_poll_status(self, status: PollStatus) -> None:
        self.query_one(StatusLine).show(self.gpu_app.snapshot or self.snapshot, status)

    def update_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.query_one(StatusLine).show(snapshot, self.gpu_app.poll_status)
        self._show_title(snapshot)
        self._fill_table(snapshot)
        self._show_selected()

    # -- drawing ------------------------------------------------------------------------
    def _show_title(self, snapshot: Snapshot) -> None:
        title = Text()
        n = len(snapshot.containers)
        flagged = sum(1 for c in snapshot.containers if c.findings)
        title.append("Containers", style="bold")
        title.append(f"  {n} with a GPU grant or a GPU process")
        if flagged:
            title.append(f", {flagged} with findings", style=FINDING_STYLE)
        if not snapshot.docker.available:
            reason = (snapshot.docker.error or "unknown reason").rstrip(".")
            title.append(plain(f"   Docker unavailable: {reason}"), style="bold")
        self.query_one("#containers-title", Static).update(title)

    def _fill_table(self, snapshot: Snapshot) -> None:
        table = self.table
        keep = self.selected_id
        n_gpus = len(snapshot.gpus)
        table.clear()
        self._order = []
        for c in snapshot.containers:
            kinds = Text(", ".join(f.kind for f in c.findings) or "-",
                         style=FINDING_STYLE if c.findings else "dim")
            table.add_row(
                markup(c.name), markup(c.state), grant_cell(c, n_gpus), markup(via_cell(c)), indices(c.used_gpus),
                fmt.size(c.gpu_memory) if c.pids else "-", str(len(c.pids)), kinds, key=c.id,
            )
            self._order.append(c.id)
        for j in snapshot.slurm.jobs if snapshot.slurm is not None else ():
            # a Slurm job is listed like a container: its grant is its GRES, its use the GPUs its processes are on
            procs = [p for p in snapshot.processes if p.job is not None and p.job.id == j.id]
            job_kinds = sorted({a.kind for a in snapshot.alerts if f"job {j.id} " in a.message})
            table.add_row(
                markup(f"job {j.id} ({j.user or '?'})"), markup(j.state or fmt.NA), indices(j.gpus), "slurm GRES",
                indices(snapshot.slurm.used.get(j.id, ())) if snapshot.slurm is not None else "-",
                fmt.size(sum(p.gpu_memory or 0 for p in procs)) if procs else "-", str(len({p.pid for p in procs})),
                Text(", ".join(job_kinds) or "-", style=FINDING_STYLE if job_kinds else "dim"),
                key=f"{JOB_KEY}{j.id}",
            )
            self._order.append(f"{JOB_KEY}{j.id}")
        if not self._order:
            self._set_selected(None)
            return
        row = self._order.index(keep) if keep in self._order else min(table.cursor_row, len(self._order) - 1)
        table.move_cursor(row=max(0, row), animate=False)
        self._set_selected(self._order[max(0, row)])

    def _set_selected(self, container_id: str | None) -> None:
        had = self.selected_id is not None
        self.selected_id = container_id
        if had != (container_id is not None):
            self.refresh_bindings()  # m is greyed while no container is highlighted

    def _show_selected(self) -> None:
        snapshot = self.snapshot
        strip_widget = self.query_one("#container-gpus", Static)
        body = self.query_one("#container-detail", Static)
        if snapshot is None:
            return
        if self.selected_id is not None and self.selected_id.startswith(JOB_KEY):
            self.strip = None
            strip_widget.update("")
            body.update(job_detail(self.selected_id[len(JOB_KEY):], snapshot))
            return
        c = snapshot.container(self.selected_id) if self.selected_id else None
        if c is None:
            self.strip = None
            strip_widget.update("")
            if snapshot.docker.available or snapshot.containers:
                body.update(Text("No container has a GPU grant or a GPU process.", style="dim"))
            else:
                reason = (snapshot.docker.error or "unknown reason").rstrip(".")
                body.update(text(f"Containers unavailable: {reason}.", style="bold"))
            return
        self.strip = gpu_strip(c, snapshot, strip_widget.content_region.width or self.app.size.width - 2)
        strip_widget.update(self.strip)
        body.update(detail(c, snapshot))

    # -- events and actions -----------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        if self.is_mounted:
            self._show_selected()  # the strip's legend fits the new width

    @on(DataTable.RowHighlighted, "#containers-table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if key is not None and key != self.selected_id:
            self._set_selected(key)
            self._show_selected()

    def select(self, name_or_id: str) -> bool:
        """Highlight a container by name or id (the command palette and tests use it)."""
        if self.snapshot is None:
            return False
        c = self.snapshot.container(name_or_id)
        if c is None or c.id not in self._order:
            return False
        self.table.move_cursor(row=self._order.index(c.id), animate=False)
        self._set_selected(c.id)
        self._show_selected()
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "migrate":
            settings = self.gpu_app.settings
            if settings is not None and settings.read_only:
                return None  # greyed: read-only mode turns migration off
            is_job = self.selected_id is not None and self.selected_id.startswith(JOB_KEY)
            return True if self.selected_id is not None and not is_job else None  # Slurm owns a job's placement
        return True

    def action_migrate(self) -> None:
        """The migrate dialog for the highlighted container (its suggested target first, as always)."""
        snapshot = self.snapshot
        c = snapshot.container(self.selected_id) if snapshot is not None and self.selected_id else None
        if c is None:
            return
        from gputui.ui.screens.migrate import MigrateScreen

        self.app.push_screen(MigrateScreen(snapshot, None, container=c))

    def action_show_processes(self) -> None:
        """Back to the dashboard with its process filter set to the highlighted container."""
        if self.selected_id is not None and self.selected_id.startswith(JOB_KEY):
            self.dismiss(f"job {self.selected_id[len(JOB_KEY):]}")  # the process filter matches the job label
            return
        c = self.snapshot.container(self.selected_id) if self.snapshot and self.selected_id else None
        self.dismiss(c.name if c is not None else None)
