"""The GPU panel: one Line-API widget drawing every GPU, as cards or as compact rows.

Why one widget and not a card widget per GPU: every GPU changes every tick (its
graphs shift), and a stock widget per card re-measures and re-renders whole
regions. Here each card is drawn into a few cached :class:`Strip` objects, keyed by
exactly what they show (their spans); a tick refreshes only the lines whose spans changed.

Layout: cards (five lines each, as many columns as fit) when they fit the height
the screen can spare; otherwise one line per GPU ("compact"); the panel scrolls
when even that does not fit (16 GPUs on a small terminal). ``v`` switches to
the other layout on every press (back to "auto" when auto would pick it).

What each line shows is :mod:`card_view`'s pure ``(text, style name)`` spans; the panel keeps
the strip of each distinct line (cached by its spans), the selection and the scroll geometry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.core.config import Settings
from gputui.core.history import GpuSample
from gputui.core.model import Gpu, Snapshot
from gputui.core.record import record
from gputui.ui import format as fmt
from gputui.ui import keys
from gputui.ui.widgets import card_view
from gputui.ui.widgets.card_view import CARD_HEIGHT
from gputui.ui.widgets.lines import DirectLines, LineBuilder, SkipIdentityFilter, component_style, level_code, release

Mode = Literal["cards", "compact"]
ModeChoice = Literal["auto", "cards", "compact"]

#: Most cells the power pair ("1006/1000 W") and the memory pair ("1023 MiB/141.0 GiB") can take. The
#: panel gives each the width its widest GPU needs (at least the minimum), so no value is ever cut and
#: every card and row aligns.
POWER_W = 11
MEM_W = 18
MIN_POWER_W = 9
MIN_MEM_W = 13
MIN_CARD_WIDTH = 54
GAP = 1
#: Samples kept per GPU for the sparklines (more than any card is wide).
SPARK_SAMPLES = 256
#: Styled spans kept (see ``GpuPanel._segments``) before that cache starts over.
SEGMENT_CACHE_SIZE = 4096
#: Samples a graph moves by at once (see :class:`SeriesCodes`).
GRAPH_STEP = 5


@record
class GpuView:
    """What one card shows: the GPU plus its recent load as sparkline codes."""

    gpu: Gpu
    #: :func:`level_code` of the last samples of utilization and memory use, oldest first.
    util: tuple[int, ...]
    mem: tuple[int, ...]
    alerts: int = 0
    critical: bool = False


def _mem_percent(s: GpuSample) -> float | None:
    if s.lost or s.memory_used is None or not s.memory_total:
        return None
    return 100.0 * s.memory_used / s.memory_total


class SeriesCodes:
    """Sparkline codes per GPU, extended by the new samples of each poll only.

    The history of a GPU is up to 720 samples; converting all of them on every
    poll would cost more than drawing the cards. Codes are appended for samples
    newer than the last one seen and the oldest are dropped.

    The graphs move in steps of ``step`` samples: a graph is redrawn when ``step`` new samples
    have come, all of them at once (the numbers beside it show every poll). Every sample is
    still drawn, in the order it came, at most ``step - 1`` polls late; but a graph whose every
    bar moves each second (a load that changes every sample) is rewritten once a step, not
    once a second: on a busy server that was most of the dashboard's bytes to the terminal. A
    graph's first drawing shows every sample it has.
    """

    def __init__(self, keep: int = SPARK_SAMPLES, step: int = GRAPH_STEP) -> None:
        self.keep, self.step = keep, max(1, step)
        #: GPU index -> (time of the newest coded sample, util codes, memory codes, samples not drawn yet)
        self._codes: dict[int, tuple[float, list[int], list[int], int]] = {}

    def update(self, index: int, samples: Sequence[GpuSample]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The codes to draw, oldest first: up to the last finished step."""
        entry = self._codes.get(index)
        if not samples:
            self._codes.pop(index, None)
            return (), ()
        if entry is not None and samples[-1].t < entry[0]:
            entry = None  # the history went back in time: start over
        last_t, util, mem, waiting = entry if entry is not None else (float("-inf"), [], [], 0)
        new: list[GpuSample] = []
        for s in reversed(samples):
            if s.t <= last_t or len(new) >= self.keep:
                break
            new.append(s)
        for s in reversed(new):
            util.append(level_code(None if s.lost else s.utilization))
            mem.append(level_code(_mem_percent(s)))
        if len(util) > self.keep:
            del util[: len(util) - self.keep]
            del mem[: len(mem) - self.keep]
        # The first drawing shows every sample; after it, the samples of an unfinished step wait.
        waiting = 0 if entry is None else (waiting + len(new)) % self.step
        self._codes[index] = (samples[-1].t, util, mem, waiting)
        if waiting:
            return tuple(util[:-waiting]), tuple(mem[:-waiting])
        return tuple(util), tuple(mem)


def gpu_views(snapshot: Snapshot, history: Mapping[int, Sequence[GpuSample]],
              codes: SeriesCodes | None = None) -> tuple[GpuView, ...]:
    """Join a snapshot with its recent history into what the panel draws."""
    codes = codes or SeriesCodes()
    counts: dict[int, list[bool]] = {}
    for alert in snapshot.alerts:
        if alert.gpu is not None:
            counts.setdefault(alert.gpu, []).append(alert.severity == "critical")
    views = []
    for g in snapshot.gpus:
        util, mem = codes.update(g.index, history.get(g.index, ()))
        if not util:  # no history (yet): at least the current value
            util, mem = (level_code(g.utilization_gpu),), (level_code(g.memory_percent),)
        flags = counts.get(g.index, [])
        views.append(GpuView(g, util, mem, len(flags), any(flags)))
    return tuple(views)


class GpuPanel(DirectLines, SkipIdentityFilter, ScrollView, can_focus=True):
    """All GPUs of the snapshot, drawn line by line."""

    COMPONENT_CLASSES = {
        "gpu-panel--border",
        "gpu-panel--border-selected",
        "gpu-panel--border-filtered",
        "gpu-panel--border-lost",
        "gpu-panel--title",
        "gpu-panel--label",
        "gpu-panel--value",
        "gpu-panel--dim",
        "gpu-panel--empty",
        "gpu-panel--low",
        "gpu-panel--mid",
        "gpu-panel--high",
        "gpu-panel--warning",
        "gpu-panel--critical",
        "gpu-panel--lost",
        "gpu-panel--badge-warning",
        "gpu-panel--badge-critical",
        "gpu-panel--users",
        "gpu-panel--compact-selected",
    }

    DEFAULT_CSS = """
    GpuPanel {
        height: auto;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
        & > .gpu-panel--border { color: $foreground 35%; }
        & > .gpu-panel--border-selected { color: $accent; text-style: bold; }
        & > .gpu-panel--border-filtered { color: $primary; text-style: bold; }
        & > .gpu-panel--border-lost { color: $error; }
        & > .gpu-panel--title { color: $foreground; text-style: bold; }
        & > .gpu-panel--label { color: $foreground 55%; }
        & > .gpu-panel--value { color: $foreground; }
        & > .gpu-panel--dim { color: $foreground 45%; }
        & > .gpu-panel--empty { color: $foreground 18%; }
        & > .gpu-panel--low { color: $success; }
        & > .gpu-panel--mid { color: $warning; }
        & > .gpu-panel--high { color: $error; }
        & > .gpu-panel--warning { color: $warning; text-style: bold; }
        & > .gpu-panel--critical { color: $error; text-style: bold reverse; }
        & > .gpu-panel--lost { color: $error; text-style: bold; }
        & > .gpu-panel--badge-warning { color: $background; background: $warning; text-style: bold; }
        & > .gpu-panel--badge-critical { color: $background; background: $error; text-style: bold; }
        & > .gpu-panel--users { color: $text-accent; }
        & > .gpu-panel--compact-selected { background: $foreground 8%; }
    }
    """

    BINDINGS = keys.GPU_PANEL

    class Selected(Message):
        """A GPU card was selected (click or arrow keys)."""

        def __init__(self, gpu_index: int) -> None:
            super().__init__()
            self.gpu_index = gpu_index

    class Opened(Message):
        """The user asked for a GPU's detail screen (click on the selected card)."""

        def __init__(self, gpu_index: int) -> None:
            super().__init__()
            self.gpu_index = gpu_index

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.settings = Settings()
        self.views: tuple[GpuView, ...] = ()
        #: GPU index under the panel's cursor (the card Enter opens).
        self.selected: int | None = None
        #: GPU index the process table is filtered to, drawn with a distinct border.
        self.filtered: int | None = None
        self.mode_choice: ModeChoice = "auto"
        self.mode: Mode = "cards"
        self._available_height = 1000
        self._cols = 1
        self._card_width = 0
        self._lines: list[Strip] = []
        #: (style under the line, the line's spans) -> its strip, for the lines drawn last time and now.
        self._strips: dict[tuple[str, card_view.Line], Strip] = {}
        self._last_strips: dict[tuple[str, card_view.Line], Strip] = {}
        #: (under, text, style name) -> its Segment and cell width: a changed line mostly repeats spans
        #: (labels, units, graph bars), so only its new spans are styled, measured and made anew.
        self._segments: dict[tuple[str, str, str], tuple[Segment, int]] = {}
        self._codes = SeriesCodes()
        #: (first slot of a card row, line) -> (the card strips it was joined from, the joined line)
        self._joined: dict[tuple[int, int], tuple[tuple[Strip, ...], Strip]] = {}
        self._styles: dict[str, Style] = {}
        #: Cells given to the memory pair and the power pair (see MEM_W, POWER_W).
        self._mem_w, self._pow_w = MIN_MEM_W, MIN_POWER_W
        #: Position of each GPU index in ``views``.
        self._slot: dict[int, int] = {}

    # -- styles ---------------------------------------------------------------
    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = component_style(self, f"gpu-panel--{name}")
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # Called while the widget is being registered too, before its component
        # styles exist: only drop caches here; lines are rebuilt when drawn.
        self._styles.clear()
        self._strips.clear()
        self._last_strips.clear()
        self._segments.clear()
        self._joined.clear()
        self._stale = True
        self.refresh()

    _stale = True

    def on_focus(self) -> None:
        self._rebuild(force=True)

    def on_blur(self) -> None:
        self._rebuild(force=True)

    # -- data -----------------------------------------------------------------
    def update(self, snapshot: Snapshot, history: Mapping[int, Sequence[GpuSample]], settings: Settings) -> None:
        """Show a new poll. Rebuilds only cards whose visible content changed."""
        self.settings = settings
        views = gpu_views(snapshot, history, self._codes)
        count_changed = len(views) != len(self.views)
        self.views = views
        self._slot = {v.gpu.index: i for i, v in enumerate(views)}
        if self.selected not in self._slot:
            self.selected = views[0].gpu.index if views else None
        live = [v.gpu for v in views if not v.gpu.lost]
        widths = (max([MIN_MEM_W] + [len(fmt.size_pair(g.memory_used, g.memory_total)) for g in live]),
                  max([MIN_POWER_W] + [len(fmt.power_pair(g.power_draw, g.power_limit)) for g in live]))
        if widths != (self._mem_w, self._pow_w):
            self._mem_w, self._pow_w = widths
            count_changed = True  # every card and row is laid out anew
        if count_changed:
            self._relayout()
        else:
            self._rebuild()

    def set_filtered(self, gpu_index: int | None) -> None:
        if gpu_index != self.filtered:
            self.filtered = gpu_index
            self._rebuild()

    def set_available_height(self, height: int) -> None:
        """The screen tells the panel how many lines it may take; the panel picks its layout."""
        if height != self._available_height:
            self._available_height = max(1, height)
            self._relayout()

    def _auto_mode(self) -> Mode:
        """What "auto" shows now: cards when every card fits the height the screen spares."""
        n = len(self.views)
        cols, _ = self._geometry(self.size.width or (self.app.size.width if self.is_attached else 80))
        return "cards" if (math.ceil(n / cols) * CARD_HEIGHT if n else 1) <= self._available_height else "compact"

    def cycle_mode(self) -> ModeChoice:
        """Switch to the other layout, so every press changes what is on screen. When "auto" would
        show that other layout, go back to auto (it follows later resizes); otherwise force it."""
        other: Mode = "compact" if self.mode == "cards" else "cards"
        self.mode_choice = "auto" if self._auto_mode() == other else other
        self._relayout()
        return self.mode_choice

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._card_width_basis:
            self._relayout()

    _card_width_basis = -1

    # -- layout ---------------------------------------------------------------
    def _geometry(self, width: int) -> tuple[int, int]:
        """(columns, card width) for card mode at this width."""
        n = max(1, len(self.views))
        cols = max(1, min(n, (width + GAP) // (MIN_CARD_WIDTH + GAP)))
        # Balance the grid: 8 GPUs in 3 columns leave a ragged row; prefer 2 x 4.
        rows = math.ceil(n / cols)
        cols = math.ceil(n / rows)
        return cols, max(20, (width - GAP * (cols - 1)) // cols)

    def _relayout(self) -> None:
        width = self.size.width or (self.app.size.width if self.is_attached else 80)
        self._card_width_basis = width
        n = len(self.views)
        cols, card_width = self._geometry(width)
        card_lines = math.ceil(n / cols) * CARD_HEIGHT if n else 1
        if self.mode_choice == "cards" or (self.mode_choice == "auto" and card_lines <= self._available_height):
            mode: Mode = "cards"
            total = card_lines
        else:
            mode = "compact"
            total = max(1, n)
        height = max(1, min(total, self._available_height))
        self._draw_width = width
        if total > height:  # the panel scrolls: its scrollbar takes the last column(s), so draw narrower
            self._draw_width = width = max(1, width - self.styles.scrollbar_size_vertical)
            cols, card_width = self._geometry(width)
        self.mode, self._cols, self._card_width = mode, cols, card_width
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        self.virtual_size = Size(width, total)
        self._joined.clear()
        self._rebuild(force=True)

    # -- drawing --------------------------------------------------------------
    def _compute_lines(self, width: int) -> list[Strip]:
        # Strips drawn this time; those of last time are reused when a line draws the same.
        self._last_strips, self._strips = self._strips, {}
        if not self.views:
            waiting = LineBuilder().add("  waiting for the first poll…", self._style("dim")).strip(width)
            return [waiting.apply_style(self.rich_style)]
        if self.mode == "cards":
            return self._card_lines(width)
        return [self._compact_line(v, width) for v in self.views]

    def _rebuild(self, force: bool = False) -> None:
        """Recompute the lines now and refresh only those that changed."""
        if not self.is_mounted or self._stale:
            self._stale = True
            self.refresh()
            return
        old = self._lines
        lines = self._set_lines()
        if force or len(old) != len(lines):
            self.refresh()
            return
        top = int(self.scroll_offset.y)
        width = self._width()
        regions = [Region(0, y - top, width, 1)
                   for y, (a, b) in enumerate(zip(old, lines, strict=True)) if a is not b]
        if regions:
            self.refresh(*regions)  # one call: each looks up the widget's size and screen

    def _set_lines(self) -> list[Strip]:
        """Draw the lines now; the strips no longer drawn are released (see :func:`lines.release`)."""
        old = self._lines
        self._lines = lines = self._compute_lines(self._width())
        kept = {id(line) for line in lines}
        release(line for line in old if id(line) not in kept)
        return lines

    def _base(self) -> Style:
        """The widget's own colours (cached: computing them walks the DOM)."""
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def _look(self, width: int) -> card_view.CardLook:
        return card_view.CardLook(width, self._mem_w, self._pow_w, self.settings.temp_warning,
                                  self.settings.temp_critical)

    def _strip(self, line: card_view.Line, under: str = "") -> Strip:
        """The strip of a line's spans, cached by the spans: a line that draws the same as last
        poll is the same strip object (so the panel does not repaint it)."""
        key = (under, line)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._last_strips.get(key)
            if strip is None:
                segments = self._segments
                if len(segments) > SEGMENT_CACHE_SIZE:
                    segments.clear()
                parts = []
                width = 0
                for text, name in line:
                    known = segments.get((under, text, name))
                    if known is None:
                        base = self._base() + self._style(under) if under else self._base()
                        known = segments[(under, text, name)] = (
                            Segment(text, base + self._named(name) if name else base), cell_len(text))
                    parts.append(known[0])
                    width += known[1]
                strip = Strip(parts, width)
            self._strips[key] = strip
        return strip

    def _named(self, name: str) -> Style:
        """A style name of :mod:`card_view` ("title", "title+reverse") as a Rich style."""
        style = self._styles.get(name)
        if style is None:
            component, _, modifier = name.partition("+")
            style = self._style(component)
            if modifier == "reverse":
                style += Style(reverse=True)
            self._styles[name] = style
        return style

    def _card_lines(self, width: int) -> list[Strip]:
        cols, cw = self._cols, self._card_width
        out: list[Strip] = []
        base = self._base()
        gap = Strip.blank(GAP, base)
        joined_cache = self._joined
        look = self._look(cw)
        for row_start in range(0, len(self.views), cols):
            cards = [self._card(v, look) for v in self.views[row_start:row_start + cols]]
            for line in range(CARD_HEIGHT):
                parts = tuple(card[line] for card in cards)
                cached = joined_cache.get((row_start, line))
                # Same card strips (by identity) as last time: the same joined line, so
                # the panel does not repaint it.
                if cached is not None and len(cached[0]) == len(parts) and all(
                        a is b for a, b in zip(cached[0], parts, strict=True)) and cached[1].cell_length == width:
                    out.append(cached[1])
                    continue
                if len(parts) == 1:
                    joined = parts[0].adjust_cell_length(width, base)
                else:  # what Strip.join would give (no card is empty), without its per-strip scans
                    segments = list(parts[0])
                    for part in parts[1:]:
                        segments.extend(gap)
                        segments.extend(part)
                    joined = Strip(segments, sum(p.cell_length for p in parts) + GAP * (len(parts) - 1))
                    joined = joined.adjust_cell_length(width, base)
                joined_cache[(row_start, line)] = (parts, joined)
                out.append(joined)
        return out

    def _card(self, view: GpuView, look: card_view.CardLook) -> list[Strip]:
        """The five lines of one card: :func:`card_view.card`, each strip cached by what it draws."""
        g = view.gpu
        selected = g.index == self.selected and self.has_focus
        lines = card_view.card(g, view.util, view.mem, view.alerts, view.critical, look, selected,
                               g.index == self.filtered)
        return [self._strip(line) for line in lines]

    def _compact_line(self, view: GpuView, width: int) -> Strip:
        """One line per GPU (:func:`card_view.compact`)."""
        g = view.gpu
        selected = g.index == self.selected and self.has_focus
        line = card_view.compact(g, view.util, view.mem, view.alerts, view.critical, self._look(width), selected,
                                 g.index == self.filtered)
        return self._strip(line, "compact-selected" if selected else "")

    def _width(self) -> int:
        return self._draw_width if self._draw_width > 0 else (self.size.width or 80)

    #: The width lines are drawn at: the panel's, less a scrollbar when the panel scrolls.
    _draw_width = -1

    #: (width, scroll row) while Textual draws a batch of lines (see ``render_lines``), else None.
    _frame: tuple[int, int] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        # One lookup of the width and the scroll row for all the lines of a frame.
        self._frame = (self.size.width, int(self.scroll_offset.y))
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        if self._stale:
            self._stale = False
            self._set_lines()
        width, top = self._frame or (self.size.width, int(self.scroll_offset.y))
        index = y + top
        if 0 <= index < len(self._lines):
            return self._lines[index].crop(0, width)
        return Strip.blank(width)

    # -- interaction ----------------------------------------------------------
    def gpu_at(self, x: int, y: int) -> int | None:
        """The GPU index drawn at a point of the panel (content coordinates)."""
        y += int(self.scroll_offset.y)
        if self.mode == "compact":
            slot = y
        else:
            col = x // (self._card_width + GAP)
            if col >= self._cols or x - col * (self._card_width + GAP) >= self._card_width:
                return None
            slot = (y // CARD_HEIGHT) * self._cols + col
        if 0 <= slot < len(self.views):
            return self.views[slot].gpu.index
        return None

    def select(self, gpu_index: int) -> None:
        if gpu_index in self._slot and gpu_index != self.selected:
            self.selected = gpu_index
            self._rebuild()
            self._scroll_to_selected()
            self.post_message(self.Selected(gpu_index))

    def _scroll_to_selected(self) -> None:
        slot = self._slot.get(self.selected) if self.selected is not None else None
        if slot is None:
            return
        if self.mode == "compact":
            region = Region(0, slot, 1, 1)
        else:
            region = Region(0, (slot // self._cols) * CARD_HEIGHT, 1, CARD_HEIGHT)
        self.scroll_to_region(region, animate=False)

    def action_move(self, dx: int, dy: int) -> None:
        if not self.views:
            return
        slot = self._slot.get(self.selected, 0) if self.selected is not None else 0
        cols = self._cols if self.mode == "cards" else 1
        if self.mode == "compact":
            slot += dx + dy
        else:
            slot += dx + dy * cols
        slot = max(0, min(len(self.views) - 1, slot))
        self.select(self.views[slot].gpu.index)

    def on_click(self, event: events.Click) -> None:
        gpu = self.gpu_at(event.x, event.y)
        if gpu is None:
            return
        event.stop()
        if gpu == self.selected and self.has_focus:
            self.post_message(self.Opened(gpu))
        else:
            self.focus()
            self.select(gpu)
            self._rebuild(force=True)
