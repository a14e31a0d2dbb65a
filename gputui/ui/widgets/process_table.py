"""The process table: a Line-API ScrollView of cached row strips, keyed by (GPU, PID).

Why not DataTable: ``DataTable.update_cell`` re-renders whole regions (measured ~10x the cost
of this widget). Here each row is one cached :class:`Strip` keyed by its formatted cells; a tick
rebuilds only rows whose cells changed and refreshes only those lines when the order is unchanged.

The cursor is a key, not a row number: it stays on the same process through
every refresh, re-sort and filter. When its process exits, the cursor stays at
the same row position. The scroll offset is left alone unless the cursor
would leave the view.

Over 600 lines on purpose: the columns, their cached styled cells, the keyed row cache, the
cursor and the filter all read the same row keys every tick; apart, each would need the others'
caches to stay cheap at 1 Hz.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Literal

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from gputui.core.judges.text import invisible_phrase
from gputui.core.model import Process, Snapshot
from gputui.core.record import record
from gputui.ui import format as fmt
from gputui.ui import keys
from gputui.ui.widgets.lines import (
    CachedStyles,
    DirectLines,
    LineBuilder,
    SkipIdentityFilter,
    base_style,
    component_style,
    release,
)
from gputui.ui.widgets.process_order import matches, sort_processes

Key = tuple[int, int]
Align = Literal["left", "right"]


@record
class Column:
    id: str
    title: str
    width: int
    align: Align
    #: Lower numbers are hidden first when the terminal is narrow.
    priority: int
    #: Sort direction a fresh sort on this column starts with (True = largest first).
    descending: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", 4, "right", 10),
    Column("pid", "PID", 7, "right", 10),
    Column("user", "USER", 9, "left", 9),
    Column("gpu_memory", "GPU MEM", 8, "right", 10, True),
    Column("sm", "SM%", 4, "right", 8, True),
    Column("cpu", "CPU%", 5, "right", 6, True),
    Column("host_memory", "HOST MEM", 9, "right", 3, True),
    Column("uptime", "UPTIME", 7, "right", 4, True),
    Column("container", "CONTAINER", 16, "left", 7),
    Column("command", "COMMAND", 0, "left", 11),
)
COLUMN_IDS = tuple(c.id for c in COLUMNS)
_INDEX = {c: i for i, c in enumerate(COLUMN_IDS)}
MIN_COMMAND = 18
#: Styled cells kept (per column and text) before the cache starts over.
CELL_CACHE_SIZE = 4096
#: Cells between the marker and the command: "● " (stale) or "? " (not visible).
MARKER_WIDTH = 2


def process_cells(p: Process, snapshot_time) -> tuple[str, ...]:
    """The formatted cells of a row, in COLUMNS order, plus the marker."""
    if p.visible:
        command = p.command or fmt.NA
    else:
        command = f"({invisible_phrase(p.invisible_reason)})"
    marker = "●" if p.stale else ("?" if not p.visible else "")
    return (
        p.mig_label or str(p.gpu_index),  # a process on a MIG device: "0:1" = GPU 0, MIG device 1
        str(p.pid),
        p.user or "?",
        fmt.size(p.gpu_memory),
        fmt.NA if p.sm_utilization is None else str(p.sm_utilization),
        fmt.cpu(p.cpu_percent),
        fmt.size(p.host_memory),
        fmt.uptime(p.started, snapshot_time),
        p.job.label if p.job is not None else p.container.label if p.container else "-",
        command,
        marker,
    )


@lru_cache(maxsize=16)
def visible_columns(width: int) -> tuple[tuple[Column, ...], int]:
    """Columns that fit ``width``, dropping the least important first, and the command's width."""
    cols = list(COLUMNS)

    def command_width(cs: list[Column]) -> int:
        fixed = sum(c.width + 1 for c in cs if c.id != "command")
        return width - fixed - MARKER_WIDTH - 1

    while command_width(cols) < MIN_COMMAND:
        droppable = [c for c in cols if c.id not in ("command", "gpu", "pid", "gpu_memory")]
        if not droppable:
            break
        cols.remove(min(droppable, key=lambda c: c.priority))
    return tuple(cols), max(4, command_width(cols))


@lru_cache(maxsize=16)
def column_spans(width: int) -> tuple[tuple[int, int] | None, ...]:
    """Where each of :func:`process_cells`' cells is drawn at ``width``: (first, end) column, or None
    for a column the width leaves out; the marker and the command share the command's place."""
    cols, command_w = visible_columns(width)
    spans: list[tuple[int, int] | None] = [None] * (len(COLUMNS) + 1)
    x = 0
    for c in cols:
        if c.id == "command":
            spans[_INDEX[c.id]] = spans[-1] = (x, x + MARKER_WIDTH + command_w)
        else:
            spans[_INDEX[c.id]] = (x, x + c.width)
            x += c.width + 1
    return tuple(spans)


class ProcessHeader(DirectLines, SkipIdentityFilter, CachedStyles, Widget):
    """Column titles with the sort arrow, and a summary of what is shown (its strip kept while they and
    the width are the same, and given to the compositor as it is: see :class:`DirectLines`)."""

    COMPONENT_CLASSES = {"process-header--title", "process-header--sorted", "process-header--summary"}
    DEFAULT_CSS = """
    ProcessHeader {
        height: 1;
        background: $panel;
        & > .process-header--title { color: $foreground 70%; text-style: bold; }
        & > .process-header--sorted { color: $accent; text-style: bold; }
        & > .process-header--summary { color: $foreground 60%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort_column = "gpu"
        self.descending = False
        self.summary = ""
        self._drawn: tuple[tuple, Strip] | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn = None

    def set_state(self, sort_column: str, descending: bool, summary: str) -> None:
        if (sort_column, descending, summary) != (self.sort_column, self.descending, self.summary):
            self.sort_column, self.descending, self.summary = sort_column, descending, summary
            self.refresh()

    def render_line(self, y: int) -> Strip:
        key = (self.size.width, self.sort_column, self.descending, self.summary)
        if self._drawn is None or self._drawn[0] != key:
            if self._drawn is not None:
                release((self._drawn[1],))
            self._drawn = (key, self._draw(key[0]))
        return self._drawn[1]

    def _draw(self, width: int) -> Strip:
        title = component_style(self, "process-header--title")
        sorted_style = component_style(self, "process-header--sorted")
        summary_style = component_style(self, "process-header--summary")
        cols, command_w = visible_columns(width)
        line = LineBuilder()
        for c in cols:
            arrow = ("▼" if self.descending else "▲") if c.id == self.sort_column else ""
            style = sorted_style if arrow else title
            if c.id == "command":
                line.add(" " * MARKER_WIDTH)
                text = c.title + arrow
                room = command_w - len(text) - 2
                line.add(text, style)
                if self.summary and room > 4:
                    line.add(" ")
                    line.add_fit(self.summary, room, summary_style, right=True)
                    line.add(" ")
            else:
                line.add_fit(c.title + arrow, c.width, style, right=c.align == "right")
                line.add(" ")
        return line.strip(width).apply_style(base_style(self))


class ProcessTable(DirectLines, SkipIdentityFilter, ScrollView, can_focus=True):
    """GPU processes, one cached strip per row, cursor keyed by (GPU, PID)."""

    COMPONENT_CLASSES = {
        "process-table--cursor",
        "process-table--cursor-blurred",
        "process-table--dim",
        "process-table--gpu",
        "process-table--container",
        "process-table--stale",
        "process-table--hidden",
        "process-table--program",
        "process-table--user-0",
        "process-table--user-1",
        "process-table--user-2",
        "process-table--user-3",
        "process-table--user-4",
        "process-table--user-5",
        "process-table--empty",
    }
    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
        & > .process-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
        & > .process-table--cursor-blurred { background: $foreground 12%; }
        & > .process-table--dim { color: $foreground 50%; }
        & > .process-table--gpu { color: $text-primary; text-style: bold; }
        & > .process-table--container { color: $text-secondary; }
        & > .process-table--stale { color: $warning; }
        & > .process-table--hidden { color: $foreground 40%; text-style: italic; }
        & > .process-table--program { text-style: bold; }
        & > .process-table--user-0 { color: $text-accent; }
        & > .process-table--user-1 { color: $text-success; }
        & > .process-table--user-2 { color: $text-warning; }
        & > .process-table--user-3 { color: $text-primary; }
        & > .process-table--user-4 { color: $text-secondary; }
        & > .process-table--user-5 { color: $foreground; }
        & > .process-table--empty { color: $foreground 50%; text-style: italic; }
    }
    """

    BINDINGS = keys.PROCESS_TABLE

    class CursorMoved(Message):
        """The highlighted process changed (or its row's content did)."""

        def __init__(self, process: Process | None) -> None:
            super().__init__()
            self.process = process

    class Opened(Message):
        """Double click on a row: open its GPU."""

        def __init__(self, process: Process) -> None:
            super().__init__()
            self.process = process

    def __init__(self, header: ProcessHeader | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.header = header
        self.snapshot: Snapshot | None = None
        #: Every process of the snapshot, by key.
        self._all: dict[Key, Process] = {}
        self._cells: dict[Key, tuple[str, ...]] = {}
        #: Shown rows, in order.
        self.rows: list[Process] = []
        self._row_of: dict[Key, int] = {}
        self.cursor_key: Key | None = None
        self._cursor_row = 0
        self.sort_column = "gpu"
        self.descending = False
        self.gpu_only: int | None = None
        self.text_filter = ""
        self._strips: dict[Key, tuple[tuple, Strip]] = {}
        #: (column, text[, marker, visible, width]) -> (the cell's segments over the widget's colours, its width)
        self._cell_cache: dict[tuple, tuple[list[Segment], int]] = {}
        self._styles: dict[str, Style] = {}
        self._layout_width = -1
        self._reported: tuple | None = None

    # -- styles ---------------------------------------------------------------
    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = component_style(self, f"process-table--{name}")
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self._drop_strips()
        self._cell_cache.clear()
        self.refresh()

    def on_focus(self) -> None:
        self._refresh_row(self._cursor_row)

    def on_blur(self) -> None:
        self._refresh_row(self._cursor_row)

    # -- state ----------------------------------------------------------------
    @property
    def cursor_process(self) -> Process | None:
        if self.cursor_key is None:
            return None
        row = self._row_of.get(self.cursor_key)
        return self.rows[row] if row is not None else None

    @property
    def total(self) -> int:
        return len(self._all)

    def update(self, snapshot: Snapshot) -> None:
        """Show a new poll: diff rows by key, keep the cursor on its process."""
        self.snapshot = snapshot
        new_all: dict[Key, Process] = {}
        changed: dict[Key, tuple[str, ...] | None] = {}  # a changed row's key -> its cells before (None: new)
        for p in snapshot.processes:
            new_all[p.key] = p
            cells = process_cells(p, snapshot.time)
            old = self._cells.get(p.key)
            if old != cells:
                self._cells[p.key] = cells
                changed[p.key] = old
        for gone in set(self._cells) - set(new_all):
            del self._cells[gone]
            dropped = self._strips.pop(gone, None)
            if dropped is not None:
                release((dropped[1],))
        self._all = new_all
        self._reorder(changed)

    def set_sort(self, column: str, descending: bool | None = None) -> None:
        if column not in COLUMN_IDS:
            raise ValueError(f"no column {column!r}")
        if descending is None:
            descending = next(c.descending for c in COLUMNS if c.id == column)
        self.sort_column, self.descending = column, descending
        self._reorder({})

    def cycle_sort(self, step: int = 1) -> str:
        cols, _ = visible_columns(self.size.width or 120)
        ids = [c.id for c in cols]
        i = ids.index(self.sort_column) if self.sort_column in ids else -1
        column = ids[(i + step) % len(ids)]
        self.set_sort(column)
        return column

    def reverse_sort(self) -> None:
        self.descending = not self.descending
        self._reorder({})

    def set_gpu_only(self, gpu: int | None) -> None:
        if gpu != self.gpu_only:
            self.gpu_only = gpu
            self._reorder({})

    def set_text_filter(self, text: str) -> None:
        if text != self.text_filter:
            self.text_filter = text
            self._reorder({})

    def _reorder(self, changed: Mapping[Key, tuple[str, ...] | None]) -> None:
        now_ts = self.snapshot.time.timestamp() if self.snapshot else 0.0
        shown = [
            p for p in self._all.values()
            if (self.gpu_only is None or p.gpu_index == self.gpu_only) and matches(p, self.text_filter)
        ]
        rows = sort_processes(shown, self.sort_column, self.descending, now_ts)
        old_keys = [p.key for p in self.rows]
        new_keys = [p.key for p in rows]
        self.rows = rows
        self._row_of = {k: i for i, k in enumerate(new_keys)}

        # The cursor follows its process; if that process is gone, it keeps its row position.
        old_cursor_row = self._cursor_row
        if self.cursor_key in self._row_of:
            self._cursor_row = self._row_of[self.cursor_key]
        else:
            self._cursor_row = max(0, min(self._cursor_row, len(rows) - 1))
            self.cursor_key = rows[self._cursor_row].key if rows else None

        width = self.size.width
        self.virtual_size = Size(width, len(rows))
        self._update_header()
        if old_keys != new_keys:
            self.refresh()
            if self._cursor_row != old_cursor_row:
                self._keep_cursor_visible()
        else:
            # One refresh for every changed row in view (under churn, every row): a refresh per
            # row looked up the widget's size, offset and screen each time.
            # Only up to the last column that changed: Textual sends a refreshed line from its start,
            # but stops at the region's end, so the output layer reads a few cells of the row, not all.
            top = int(self.scroll_offset.y)
            height, row_of, cells_of = self.size.height, self._row_of, self._cells
            spans = column_spans(width)
            regions = []
            for key, old in changed.items():
                row = row_of.get(key)
                if row is None or not top <= row < top + height:
                    continue
                new = cells_of[key]
                if old is None or len(old) != len(new):
                    regions.append(Region(0, row - top, width, 1))
                    continue
                ends = [span[1] for span, a, b in zip(spans, old, new, strict=True) if a != b and span is not None]
                if ends:
                    regions.append(Region(0, row - top, min(width, max(ends)), 1))
            if regions:
                self.refresh(*regions)
            if not rows:
                self.refresh()
        self._report_cursor()

    def _update_header(self) -> None:
        if self.header is None:
            return
        parts = []
        if len(self.rows) != len(self._all):
            parts.append(f"{len(self.rows)} of {len(self._all)}")
        else:
            parts.append(f"{len(self._all)} process{'es' if len(self._all) != 1 else ''}")
        if self.gpu_only is not None:
            parts.append(f"GPU {self.gpu_only} only")
        if self.text_filter:
            parts.append(f"filter “{self.text_filter}”")
        self.header.set_state(self.sort_column, self.descending, " · ".join(parts))

    def _report_cursor(self) -> None:
        p = self.cursor_process
        token = (p.key, self._cells.get(p.key), p.stale) if p else None
        if token != self._reported:
            self._reported = token
            self.post_message(self.CursorMoved(p))

    # -- cursor ---------------------------------------------------------------
    def _refresh_row(self, row: int) -> None:
        top = int(self.scroll_offset.y)
        if top <= row < top + self.size.height:
            self.refresh(Region(0, row - top, self.size.width, 1))

    def move_cursor_to(self, row: int) -> None:
        if not self.rows:
            return
        row = max(0, min(len(self.rows) - 1, row))
        old = self._cursor_row
        self._cursor_row = row
        self.cursor_key = self.rows[row].key
        self._refresh_row(old)
        self._refresh_row(row)
        self._keep_cursor_visible()
        self._report_cursor()

    def select_key(self, key: Key) -> bool:
        row = self._row_of.get(key)
        if row is None:
            return False
        self.move_cursor_to(row)
        return True

    def _keep_cursor_visible(self) -> None:
        top = int(self.scroll_offset.y)
        height = self.size.height
        if height <= 0:
            return
        if self._cursor_row < top:
            self.scroll_to(y=self._cursor_row, animate=False, immediate=True)
        elif self._cursor_row >= top + height:
            self.scroll_to(y=self._cursor_row - height + 1, animate=False, immediate=True)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor_to(self._cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor_to(self._cursor_row + direction * max(1, self.size.height - 1))

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor_to(len(self.rows) - 1 if row < 0 else row)

    def on_click(self, event: events.Click) -> None:
        row = event.y + int(self.scroll_offset.y)
        if 0 <= row < len(self.rows):
            event.stop()
            self.focus()
            self.move_cursor_to(row)
            if event.chain >= 2:
                self.post_message(self.Opened(self.rows[row]))

    # -- drawing --------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._layout_width:
            self._layout_width = event.size.width
            self._drop_strips()
            self.virtual_size = Size(event.size.width, len(self.rows))
            self.refresh()

    def _drop_strips(self) -> None:
        release(strip for _, strip in self._strips.values())
        self._strips.clear()

    def _user_style(self, user: str) -> Style:
        return self._style(f"user-{zlib.crc32(user.encode()) % 6}")

    def _row_strip(self, p: Process, cursor: bool, width: int, cut: int) -> Strip:
        """A row laid out at ``width``, drawn up to ``cut`` (where a scrollbar starts: see DirectLines)."""
        cells = self._cells[p.key]
        focused = self.has_focus
        signature = (cells, cursor, cursor and focused, width, cut)
        cached = self._strips.get(p.key)
        if cached is not None:
            if cached[0] == signature:
                return cached[1]
            release((cached[1],))
        strip = self._draw_row(p, cells, width, cursor, focused, cut)
        self._strips[p.key] = (signature, strip)
        return strip

    def _base(self) -> Style:
        """The widget's own colours (cached: computing them walks the DOM)."""
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def _cell(self, line: LineBuilder, p: Process, c: Column, text: str, marker: str, command_w: int) -> None:
        """One cell of a row (with the gap after it), as it is drawn in every row."""
        s = self._style
        dim = s("dim")
        if c.id == "command":
            line.add_fit(marker, MARKER_WIDTH, s("stale") if marker == "●" else dim)
            if not p.visible:
                line.add_fit(text, command_w, s("hidden"))
            else:
                program, _, rest = text.partition(" ")
                if len(program) >= command_w:
                    line.add_fit(text, command_w, self._base())
                else:
                    line.add(program, s("program"))
                    line.add_fit((" " + rest) if rest else "", command_w - len(program))
            return
        if c.id == "gpu":
            style = s("gpu")
        elif c.id == "user":
            style = self._user_style(text) if text != "?" else dim
        elif c.id == "container":
            style = s("container") if text != "-" else dim
        elif text == fmt.NA:
            style = dim
        elif c.id in ("host_memory", "uptime"):
            style = dim
        else:
            style = None
        line.add_fit(text, c.width, style, right=c.align == "right")
        line.add(" ")

    def _row_builder(self, p: Process, cells: tuple[str, ...], width: int) -> LineBuilder:
        cols, command_w = visible_columns(width)
        line = LineBuilder()
        for c in cols:
            self._cell(line, p, c, cells[_INDEX[c.id]], cells[-1], command_w)
        return line

    def _plain_row(self, p: Process, cells: tuple[str, ...], width: int, base: Style, cut: int) -> Strip | None:
        """A row without the cursor, from cached cells already over the widget's colours.

        The same segments as building the row and then styling it; but a poll changes a cell
        or two of a row, so each cell is made once per (column, text), not once per row drawn.
        None when the cells do not fit the width (the caller cuts the row then)."""
        cols, command_w = visible_columns(width)
        cache = self._cell_cache
        if len(cache) > CELL_CACHE_SIZE:
            cache.clear()
        # Neighbouring cells of one style (a number, its gap, the next number) are one segment:
        # every later step (Textual's compositor, the output layer) costs per segment.
        texts: list[str] = []
        styles: list[Style] = []
        used = 0
        for c in cols:
            text = cells[_INDEX[c.id]]
            key = (c.id, text, cells[-1], p.visible, command_w) if c.id == "command" else (c.id, text)
            hit = cache.get(key)
            if hit is None:
                line = LineBuilder()
                self._cell(line, p, c, text, cells[-1], command_w)
                hit = cache[key] = ([Segment(t, base + st if st is not None else base) for t, st, _ in line.segments],
                                    line.width)
            for segment in hit[0]:
                if styles and styles[-1] is segment.style:
                    texts[-1] += segment.text
                else:
                    texts.append(segment.text)
                    styles.append(segment.style)  # type: ignore[arg-type]  # always a Style here
            used += hit[1]
        if used > width:
            return None
        if used < cut:
            if styles and styles[-1] is base:
                texts[-1] += " " * (cut - used)
            else:
                texts.append(" " * (cut - used))
                styles.append(base)
        strip = Strip([Segment(t, st) for t, st in zip(texts, styles, strict=True)], max(used, cut))
        return strip if used <= cut else strip.crop(0, cut)

    def _draw_row(self, p: Process, cells: tuple[str, ...], width: int, cursor: bool, focused: bool,
                  cut: int) -> Strip:
        base = self._base()
        if not cursor:
            strip = self._plain_row(p, cells, width, base, cut)
            if strip is not None:
                return strip
        strip = self._row_builder(p, cells, width).strip(width)
        if cut < width:
            strip = strip.crop(0, cut)
        s = self._style
        if cursor and focused:
            # The focused cursor's colours win over the cells' own colours: one solid bar.
            over = s("cursor")
            return Strip([seg._replace(style=base + (seg.style or Style()) + over) for seg in strip], strip.cell_length)
        if cursor:
            return strip.apply_style(base + s("cursor-blurred"))
        return strip.apply_style(base)

    #: (width, scroll row, width left of any scrollbar) while Textual draws a frame's lines, else None.
    _frame: tuple[int, int, int] | None = None

    def _geometry(self) -> tuple[int, int, int]:
        return self.size.width, int(self.scroll_offset.y), min(self.size.width, self.scrollable_content_region.width)

    def render_lines(self, crop: Region) -> list[Strip]:
        # Textual asks for every changed line of a frame in one call: the width and the scroll
        # row are looked up once for all of them (each lookup walks the widget's geometry).
        self._frame = self._geometry()
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        width, top, cut = self._frame or self._geometry()
        row = y + top
        if 0 <= row < len(self.rows):
            return self._row_strip(self.rows[row], row == self._cursor_row, width, cut)
        if row == 0 and not self.rows:
            return self._empty_line(width)
        return Strip.blank(width, self.rich_style)

    def _empty_line(self, width: int) -> Strip:
        if self.snapshot is None:
            text = "  waiting for the first poll…"
        elif (self._all and self.gpu_only is not None
              and not any(p.gpu_index == self.gpu_only for p in self._all.values())):
            text = f"  Nobody is on GPU {self.gpu_only}. Press a to show all GPUs."
        elif self._all:
            text = f"  No process matches “{self.text_filter}”. Press Escape to clear the filter."
        else:
            text = "  No process is using a GPU."
        return LineBuilder().add(text, self.rich_style + self._style("empty")).strip(width, self.rich_style)

