"""The GPU detail screen: four time plots over the kept history and every field of the GPU.

Opened with Enter on a GPU card or a process row (or a click on a selected card).
It is not always on screen, so it uses stock widgets; plots are rebuilt only when
a new sample arrived or the plot was resized.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, ScrollableContainer, VerticalScroll
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from gputui.core import units
from gputui.core.history import GpuSample
from gputui.core.mig import MIG_LOAD_NOTE
from gputui.core.model import Gpu, Snapshot, describe_fields
from gputui.core.sources.history_store import GpuMinute
from gputui.ui import format as fmt
from gputui.ui import keys
from gputui.ui.base import GpuScreen
from gputui.ui.plots import plot_text
from gputui.ui.safe import markup, plain
from gputui.ui.widgets.footer import FitFooter
from gputui.ui.widgets.mig_card import add_mig_rows, mig_mode_text
from gputui.ui.widgets.status import PollStatus, StatusLine

GIB = 1024**3
DAY = 86400.0


class PlotView(Widget):
    """One plotext plot of one GPU quantity, sized to the widget."""

    COMPONENT_CLASSES = {"plot-view--series", "plot-view--axis", "plot-view--label"}
    DEFAULT_CSS = """
    PlotView {
        height: 1fr;
        width: 1fr;
        & > .plot-view--axis { color: $foreground 35%; }
        & > .plot-view--label { color: $foreground 70%; }
    }
    PlotView.-util > .plot-view--series { color: $success; }
    PlotView.-memory > .plot-view--series { color: $accent; }
    PlotView.-temperature > .plot-view--series { color: $warning; }
    PlotView.-power > .plot-view--series { color: $primary; }
    """

    def __init__(self, kind: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes=f"-{kind}")
        self.kind = kind
        self.title = kind
        self.titles: tuple[str, ...] = (kind,)
        self.times: tuple[float, ...] = ()
        self.values: tuple[float | None, ...] = ()
        self.ylim = (0.0, 100.0)
        self.now: float | None = None
        self.tz = None
        #: seconds the x axis spans (None: from the first sample to now)
        self.window: float | None = None
        self._cache: tuple[tuple, Text] | None = None

    def show(self, title: str | tuple[str, ...], times: Sequence[float], values: Sequence[float | None],
             ylim: tuple[float, float], now: float, tz, window: float | None = None) -> None:
        """``title``: one, or several from the longest to the shortest (the first that fits is drawn);
        ``window``: the seconds the x axis spans (None: the live history's)."""
        self.titles = (title,) if isinstance(title, str) else title
        title = self.titles[0]
        self.title, self.times, self.values, self.ylim, self.now, self.tz, self.window = (
            title, tuple(times), tuple(values), ylim, now, tz, window)
        self.refresh()

    def render(self) -> Text:
        room = self.size.width - 2
        self.title = next((t for t in self.titles if len(t) <= room), self.titles[-1])
        key = (self.size, self.title, self.ylim, self.now, self.window, len(self.times),
               self.values[-1:] if self.values else ())
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        text = plot_text(
            self.times, self.values, self.size.width, self.size.height, self.title, self.ylim,
            self.get_component_rich_style("plot-view--series", partial=True),
            self.get_component_rich_style("plot-view--axis", partial=True),
            self.get_component_rich_style("plot-view--label", partial=True),
            now=self.now, window=self.window, tz=self.tz,
        )
        self._cache = (key, text)
        return text

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache = None


def _fmt_field(name: str, value, gpu: Gpu, settings) -> str:
    if name == "mig_mode":
        return mig_mode_text(gpu)
    if value is None:
        if name in ("utilization_gpu", "utilization_memory") and gpu.mig_enabled:
            return f"{fmt.NA} ({MIG_LOAD_NOTE})"
        return fmt.NA
    if name in ("memory_used", "memory_total"):
        return f"{value / GIB:.2f} GiB ({value:,} B)"
    if name == "temperature":
        return f"{value} °C (warning {settings.temp_warning}, critical {settings.temp_critical})"
    if name in ("power_draw", "power_limit"):
        return f"{value:.1f} W"
    if name.startswith("clock_"):
        return f"{value} MHz"
    if name in ("utilization_gpu", "utilization_memory", "fan_speed"):
        return f"{value} %"
    if name == "allocated_to":  # Slurm jobs holding this GPU
        return ", ".join(f"Slurm job {a.job} ({a.user or '?'})" for a in value) if value else "none"
    if name == "throttle_reasons":
        return ", ".join(value) if value else "none"
    if name == "pstate":
        return f"P{value}"
    if name == "memory_reserved":
        return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 2**20:.0f} MiB"
    if name == "memory_temperature":
        return f"{value} °C"
    if name == "total_energy_consumption":  # mJ since the driver loaded
        return f"{value / 3.6e9:,.1f} kWh since the driver loaded"
    if name in ("encoder_utilization", "decoder_utilization"):
        return f"{value} %"
    if name == "xid_last":
        return "none" if value == 0 else f"XID {value}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


#: Row names of the fields whose own names are too long for the field column (the dcgm parity readings).
_LABELS = {"memory_temperature": "memory temp", "total_energy_consumption": "energy",
           "pcie_replay_counter": "PCIe replays", "encoder_utilization": "encoder",
           "decoder_utilization": "decoder", "remapped_rows_correctable": "remapped rows",
           "remapped_rows_uncorrectable": "remapped unc. rows", "remapped_rows_failure": "row remap failed",
           "xid_last": "last XID"}

#: Gpu fields shown only when the driver reports them (dcgm parity readings, absent on most cards).
_SHOWN_WHEN_READ = frozenset({
    "memory_reserved", "memory_temperature", "total_energy_consumption", "pcie_replay_counter",
    "encoder_utilization", "decoder_utilization", "remapped_rows_correctable", "remapped_rows_uncorrectable",
    "remapped_rows_failure", "xid_last"})

#: Columns from which the fields stand beside the plots (60 for the fields, two plots of 20 or more).
WIDE = 110
#: Lines a plot needs to draw its axes (below, it shows its title only).
MIN_PLOT_HEIGHT = 6


def read_day_minutes(gpu: int, now: float) -> tuple[list[GpuMinute], str | None]:
    """One GPU's per-minute figures of the 24 hours before ``now`` from the history database, or
    the sentence saying why there are none (called on a worker thread)."""
    from gputui.core.sources.history_store import HistoryError, default_db_path, gpu_minutes, open_reader

    path = default_db_path()
    try:
        conn = open_reader(path, timeout=2.0)
    except HistoryError as exc:
        return [], str(exc)
    try:
        minutes = gpu_minutes(conn, gpu, now - 86400, now)
    except Exception as exc:  # a damaged file: a sentence, never a crash
        return [], f"The history database {path} cannot be read ({exc})."
    finally:
        conn.close()
    if not minutes:
        return [], f"The history database {path} has nothing of GPU {gpu} in the last 24 hours."
    return minutes, None


class GpuDetailScreen(GpuScreen[None]):
    """Plots and every field of one GPU; ←/→ walk through the GPUs; h the last 24 hours of the
    history database, w who held the GPU then."""

    BINDINGS = keys.DETAIL

    class DayLoaded(Message):
        def __init__(self, gpu: int, minutes: list[GpuMinute], problem: str | None) -> None:
            super().__init__()
            self.gpu, self.minutes, self.problem = gpu, minutes, problem

    def __init__(self, gpu_index: int) -> None:
        super().__init__()
        self.gpu_index = gpu_index
        #: showing the last 24 h from the history database instead of the live window
        self.day = False
        self._day_minutes: dict[int, list[GpuMinute]] = {}

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Static(id="detail-title")
        with ScrollableContainer(id="detail-body"):
            with Grid(id="plots"):
                yield PlotView("util", id="plot-util")
                yield PlotView("memory", id="plot-memory")
                yield PlotView("temperature", id="plot-temperature")
                yield PlotView("power", id="plot-power")
            with VerticalScroll(id="fields-scroll"):
                yield Static(id="fields")
        yield FitFooter()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size)

    def _fit(self, size: Size) -> None:
        """Below :data:`WIDE` columns the fields go under the plots (beside them the four plots got
        a few columns each and showed their titles only), the plots as tall as the height spares;
        the body scrolls to the fields."""
        narrow = size.width < WIDE
        self.set_class(narrow, "-narrow")
        # the one that scrolls takes the keys (↑/↓, page): the body when narrow, the fields beside the plots
        body, fields = self.query_one("#detail-body"), self.query_one("#fields-scroll")
        body.can_focus, fields.can_focus = narrow, not narrow
        if self.focused in (body, fields) and not self.focused.can_focus:
            (body if narrow else fields).focus()
        plots = self.query_one("#plots")
        if narrow:
            room = max(0, size.height - 3)  # status line, title, footer
            plots.styles.height = 1 + max(2 * MIN_PLOT_HEIGHT, min(2 * 9, room - 7))  # 1: the grid's top padding
        else:
            plots.styles.height = "1fr"

    def on_mount(self) -> None:
        self._fit(self.app.size)
        app = self.gpu_app
        self.update_poll_status(app.poll_status)
        if app.snapshot is not None:
            self.update_snapshot(app.snapshot)

    def update_poll_status(self, status: PollStatus) -> None:
        self.query_one(StatusLine).show(self.gpu_app.snapshot, status)

    def action_step(self, step: int) -> None:
        snap: Snapshot | None = self.gpu_app.snapshot
        if snap is None or not snap.gpus:
            return
        indices = [g.index for g in snap.gpus]
        pos = indices.index(self.gpu_index) if self.gpu_index in indices else 0
        self.gpu_index = indices[(pos + step) % len(indices)]
        self.update_snapshot(snap)

    def palette_commands(self) -> Iterable[SystemCommand]:
        """This screen's keys, offered in the command palette too."""
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            if binding.id in ("detail-back-q",):
                continue
            key = binding.key_display or binding.key
            yield SystemCommand(binding.description, f"key: {key}",
                                lambda a=binding.action: self.call_later(self.run_action, a))

    def action_history_day(self) -> None:
        self.day = not self.day
        if self.day:
            self._day_minutes.pop(self.gpu_index, None)
            self._load_day(self.gpu_index, self._now())
        if self.gpu_app.snapshot is not None:
            self.update_snapshot(self.gpu_app.snapshot)

    def action_who(self) -> None:
        from gputui.ui.screens.who import WhoScreen

        self.app.push_screen(WhoScreen(self.gpu_index, now=self._now()))

    def _now(self) -> float:
        snap = self.gpu_app.snapshot
        return snap.time.timestamp() if snap is not None else time.time()

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail-day", description="read 24 h of history")
    def _load_day(self, gpu: int, now: float) -> None:
        minutes, problem = read_day_minutes(gpu, now)
        self.post_message(self.DayLoaded(gpu, minutes, problem))

    @on(DayLoaded)
    def _day_loaded(self, message: DayLoaded) -> None:
        if message.problem is not None:
            self.day = False
            self.notify(message.problem, title="No history", severity="warning")
        else:
            self._day_minutes[message.gpu] = message.minutes
        if self.gpu_app.snapshot is not None:
            self.update_snapshot(self.gpu_app.snapshot)

    def action_help(self) -> None:
        from gputui.ui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    def update_snapshot(self, snapshot: Snapshot) -> None:
        app = self.gpu_app
        self.query_one(StatusLine).show(snapshot, app.poll_status)
        gpu = snapshot.gpu(self.gpu_index)
        title = self.query_one("#detail-title", Static)
        if gpu is None:
            title.update(Text(f" GPU {self.gpu_index} is not in the latest poll.", style="bold"))
            return
        head = Text(no_wrap=True, overflow="ellipsis")  # cut with "…" on a narrow terminal
        head.append(f" GPU {gpu.index} ", style="bold reverse")
        head.append(f"  {plain(gpu.name)}", style="bold")  # NVML strings: the one rule, as everywhere
        head.append(f"   {plain(gpu.uuid)}", style="dim")
        if gpu.pci_bus_id:
            head.append(f"   bus {plain(gpu.pci_bus_id)}", style="dim")
        if gpu.lost:
            head.append("   LOST: NVML no longer answers for this GPU", style="bold red")
        title.update(head)
        if self.day:
            if gpu.index not in self._day_minutes:
                self._load_day(gpu.index, self._now())  # ←/→ onto another GPU
            self._update_day_plots(gpu, self._day_minutes.get(gpu.index), snapshot)
        else:
            samples: tuple[GpuSample, ...] = app.gpu_history.get(gpu.index, ())
            self._update_plots(gpu, samples, snapshot)
        self.query_one("#fields", Static).update(self._fields(gpu, snapshot))

    def _update_plots(self, gpu: Gpu, samples: tuple[GpuSample, ...], snapshot: Snapshot) -> None:
        settings = self.gpu_app.settings
        times = [s.t for s in samples]
        now = snapshot.time.timestamp()
        tz = snapshot.time.tzinfo
        span = (times[-1] - times[0]) if len(times) > 1 else 0
        minutes = f"last {fmt.duration(span)}" if span >= 60 else f"last {span:.0f} s" if span else "collecting"

        def cur(value, unit: str) -> str:
            return fmt.NA if value is None else f"{value:.0f}{unit}"

        util = [None if s.lost else s.utilization for s in samples]
        note = MIG_LOAD_NOTE if gpu.mig_enabled else minutes
        util_now = cur(gpu.utilization_gpu, " %")
        self.query_one("#plot-util", PlotView).show(
            (f"Utilization {util_now} · {note}", f"Util {util_now} · {note}", f"Util {util_now}"),
            times, util, (0, 100), now, tz)
        total = gpu.memory_total or max((s.memory_total or 0 for s in samples), default=0) or GIB
        mem = [None if s.lost or s.memory_used is None else s.memory_used / GIB for s in samples]
        used = None if gpu.memory_used is None else gpu.memory_used / GIB
        shown = fmt.NA if used is None else f"{used:.1f}"
        self.query_one("#plot-memory", PlotView).show(
            (f"Memory {shown} of {total / GIB:.0f} GiB", f"Mem {shown}/{total / GIB:.0f} GiB"), times, mem,
            (0, total / GIB), now, tz)
        temps = [None if s.lost else s.temperature for s in samples]
        top = 10 * math.ceil(max([settings.temp_critical + 10] + [t + 5 for t in temps if t is not None]) / 10)
        limits = f"(warn {settings.temp_warning}, crit {settings.temp_critical})"
        self.query_one("#plot-temperature", PlotView).show(
            (f"Temperature {cur(gpu.temperature, ' °C')} {limits}", f"Temp {cur(gpu.temperature, ' °C')} {limits}",
             f"Temp {cur(gpu.temperature, ' °C')}"), times, temps, (20, top), now, tz)
        power = [None if s.lost else s.power_draw for s in samples]
        limit = gpu.power_limit or max([p for p in power if p is not None] + [100.0])
        self.query_one("#plot-power", PlotView).show(
            (f"Power {cur(gpu.power_draw, ' W')} of {limit:.0f} W", f"Power {cur(gpu.power_draw, '')}/{limit:.0f} W"),
            times, power, (0, 50 * math.ceil(limit / 50)), now, tz)

    def _update_day_plots(self, gpu: Gpu, minutes: list[GpuMinute] | None, snapshot: Snapshot) -> None:
        """The last 24 hours from the history database: each minute's mean (h again: live)."""
        settings = self.gpu_app.settings
        now = snapshot.time.timestamp()
        tz = snapshot.time.tzinfo
        rows = minutes or []
        note = "last 24 h (history, minute means)" if minutes is not None else "last 24 h: reading the history…"
        times = [m.minute * 60.0 + 30.0 for m in rows]
        self.query_one("#plot-util", PlotView).show(f"Utilization · {note}", times, [m.util[1] for m in rows],
                                                    (0, 100), now, tz, DAY)
        total = gpu.memory_total or max((m.memory[2] or 0 for m in rows), default=0) or GIB
        mem = [None if m.memory[1] is None else m.memory[1] / GIB for m in rows]
        self.query_one("#plot-memory", PlotView).show(f"Memory of {total / GIB:.0f} GiB · {note}", times, mem,
                                                      (0, total / GIB), now, tz, DAY)
        temps = [m.temperature[1] for m in rows]
        top = 10 * math.ceil(max([settings.temp_critical + 10] + [t + 5 for t in temps if t is not None]) / 10)
        self.query_one("#plot-temperature", PlotView).show(f"Temperature · {note}", times, temps, (20, top), now, tz,
                                                          DAY)
        power = [m.power[1] for m in rows]
        limit = gpu.power_limit or max([p for p in power if p is not None] + [100.0])
        self.query_one("#plot-power", PlotView).show(f"Power of {limit:.0f} W · {note}", times, power,
                                                     (0, 50 * math.ceil(limit / 50)), now, tz, DAY)

    def _fields(self, gpu: Gpu, snapshot: Snapshot) -> Table:
        settings = self.gpu_app.settings
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim", no_wrap=True)
        table.add_column()
        for name, value in describe_fields(gpu):
            if name in ("processes", "mig_devices") or (name == "allocated_to" and snapshot.slurm is None):
                continue  # off Slurm nothing is allocated: no row for it
            if value is None and name in _SHOWN_WHEN_READ:
                continue  # readings many drivers lack (and the demo has none of): a row only where NVML gives one
            table.add_row(_LABELS.get(name, name.replace("_", " ")), markup(_fmt_field(name, value, gpu, settings)))
        table.add_row("free memory", markup(_fmt_field("memory_used", gpu.memory_free, gpu, settings)))
        add_mig_rows(table, gpu)
        alerts = [a for a in snapshot.alerts if a.gpu == gpu.index]
        table.add_row("", "")
        table.add_row(Text("alerts", style="bold"), Text(str(len(alerts)) if alerts else "none"))
        for a in alerts:
            since = a.since.strftime("%H:%M:%S") if isinstance(a.since, datetime) else ""
            table.add_row(Text(a.severity, style="bold red" if a.severity == "critical" else "bold yellow"),
                          markup(f"{a.message} (since {since})"))
        table.add_row("", "")
        table.add_row(Text("processes", style="bold"), Text(str(len(gpu.processes))))
        for p in sorted(gpu.processes, key=lambda p: -(p.gpu_memory or 0)):
            who = f"{p.user or '?'}"
            where = f" [{p.job.label}]" if p.job is not None else f" [{p.container.label}]" if p.container else ""
            sm = units.fmt_percent(p.sm_utilization)  # "N/A" stands alone, never "N/A%"
            table.add_row(f"{p.pid}", markup(f"{who} {fmt.size(p.gpu_memory)} SM {sm}{where} {p.command or ''}"))
        return table
