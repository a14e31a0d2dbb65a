"""Building blocks for the Line-API widgets: a segment builder and a fixed-scale sparkline.

The always-updating parts of the dashboard (GPU cards, process rows) are drawn
line by line into cached :class:`Strip` objects instead of through stock widgets:
a tick then costs what changed, not what is shown (see the rendering-cost table in
the project notes). These helpers keep that drawing code short.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region
from textual.strip import Strip

from gputui.core.safe_text import clean
from gputui.ui.widgets.spans import MISSING, spark_runs


class LineBuilder:
    """Accumulates styled text and produces a Strip of an exact cell width."""

    __slots__ = ("segments", "width")

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.width = 0

    def add(self, text: str, style: Style | None = None) -> LineBuilder:
        text = clean(text)  # outside text never reaches the terminal raw (costs one scan when plain)
        if text:
            self.segments.append(Segment(text, style))
            self.width += cell_len(text)
        return self

    def add_fit(self, text: str, width: int, style: Style | None = None, right: bool = False) -> LineBuilder:
        """Add ``text`` cut or padded to exactly ``width`` cells (CJK-safe)."""
        if width <= 0:
            return self
        text = clean(text)
        if cell_len(text) > width:
            text = set_cell_size(text, width - 1) + "…" if width > 1 else set_cell_size(text, width)
        elif right:
            text = " " * (width - cell_len(text)) + text
        else:
            text = set_cell_size(text, width)
        self.segments.append(Segment(text, style))
        self.width += width
        return self

    def extend(self, segments: Sequence[Segment], width: int) -> LineBuilder:
        self.segments.extend(segments)
        self.width += width
        return self

    def pad_to(self, width: int, style: Style | None = None) -> LineBuilder:
        if width > self.width:
            self.add(" " * (width - self.width), style)
        return self

    def strip(self, width: int, style: Style | None = None) -> Strip:
        return Strip(self.segments, self.width).adjust_cell_length(width, style)

    def strip_cut(self, width: int, style: Style | None = None) -> Strip:
        """:meth:`strip`, but a line too long ends in a visible "…" instead of stopping short."""
        if self.width <= width or width < 2:
            return self.strip(width, style)
        kept = Strip(self.segments, self.width).crop(0, width - 1)
        last = self.segments[-1].style if self.segments else style
        return Strip([*kept, Segment("…", last)], width)


def level_style(value: float, low: Style, mid: Style, high: Style, thresholds: tuple[float, float] = (50, 80)) -> Style:
    if value >= thresholds[1]:
        return high
    if value >= thresholds[0]:
        return mid
    return low




def level_code(value: float | None, thresholds: tuple[float, float] = (50, 80)) -> int:
    """A sample as the cell the sparkline draws: bar height (0-8) x 3 + colour tier (0-2).

    Samples are turned into codes once, when they arrive; a card's graph is then a
    slice of codes, cheap to compare (is the picture unchanged?) and to draw.
    """
    if value is None:
        return MISSING
    v = 0.0 if value < 0 else 100.0 if value > 100 else float(value)
    level = int(v * 8 / 100 + 0.5)
    if not level:
        return 0
    return level * 3 + (2 if v >= thresholds[1] else 1 if v >= thresholds[0] else 0)


def sparkline(codes: Sequence[int], width: int, empty: Style, low: Style, mid: Style, high: Style) -> list[Segment]:
    """The newest ``width`` samples (as :func:`level_code` codes) as bars on a fixed
    0–100 scale, newest at the right.

    Unlike Textual's ``Sparkline`` (which scales to the data's own min..max), a
    flat 97–99 % line stays a flat full-height line here. Missing values (N/A)
    are blanks; samples not yet collected are the empty track.
    """
    return [Segment(text, style) for text, style in spark_runs(codes, width, empty, low, mid, high)]


class CachedStyles:
    """Mixin for widgets that draw with :func:`component_style` and :func:`base_style`.

    Textual calls ``notify_style_update`` whenever a widget's styles may have
    changed (theme switch, class or pseudo-class change); that is the one moment
    the cached styles are dropped. (Textual's own rich-style cache is cleared on
    every ``refresh()``, which would recompute them on every poll.)
    """

    def notify_style_update(self) -> None:
        super().notify_style_update()  # type: ignore[misc]  # a mixin: the Widget it is mixed into has it
        self.__dict__.pop("_gputui_styles", None)


def _cache(widget) -> dict:
    cache = widget.__dict__.get("_gputui_styles")
    if cache is None:
        cache = widget.__dict__["_gputui_styles"] = {}
    return cache


def base_style(widget) -> Style:
    """The widget's own colours, to paint under everything it draws."""
    cache = _cache(widget)
    style = cache.get("")
    if style is None:
        style = cache[""] = widget.rich_style
    return style


def component_style(widget, name: str) -> Style:
    """A component class as a Rich style to draw over the widget's own background.

    Textual's full component style blends alpha colours (``$foreground 35%``)
    over the background, which we want; but it also carries a background colour
    even where the CSS sets none, which would paint boxes over the widget's own
    background. Keep the background only where the component declares one.
    """
    cache = _cache(widget)
    style = cache.get(name)
    if style is not None:
        return style
    full = widget.get_component_rich_style(name)
    declared = widget.get_component_styles(name).has_rule("background")
    style = cache[name] = Style(
        color=full.color,
        bgcolor=full.bgcolor if declared else None,
        bold=full.bold,
        dim=full.dim,
        italic=full.italic,
        underline=full.underline,
        reverse=full.reverse,
        strike=full.strike,
    )
    return style


def _truecolor(style: Style) -> bool:
    """Whether Textual's ANSI-to-truecolor filter leaves ``style`` as it is."""
    color, bgcolor = style.color, style.bgcolor
    return ((color is None or color.triplet is not None) and (bgcolor is None or bgcolor.triplet is not None)
            and not style.dim)


class SkipIdentityFilter:
    """Mixin for the Line-API widgets redrawn every poll: leave out Textual's ANSI-to-truecolor
    line filter while it would give back what it is given.

    The filter rebuilds every segment of every line a widget draws (a new Segment and a cache
    lookup each), and on a truecolor theme it changes nothing here: every style these widgets
    draw with is the widget's own colours or one of its component classes over them, all RGB.
    It is kept whenever one of those styles has an ANSI or default colour or dim text (an ANSI
    theme, a user's CSS); the answer is found again after every style update (a theme switch).
    """

    COMPONENT_CLASSES: ClassVar[set[str]]
    _gputui_truecolor: bool | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()  # type: ignore[misc]  # a mixin: the Widget it is mixed into has it
        self._gputui_truecolor = None

    def get_line_filters(self) -> Sequence[LineFilter]:
        filters = super().get_line_filters()  # type: ignore[misc]  # a mixin: the Widget it is mixed into has it
        plain = self._gputui_truecolor
        if plain is None:
            widget = self
            styles = [widget.rich_style]  # type: ignore[attr-defined]  # a mixin: the Widget it is mixed into has it
            styles += [widget.get_component_rich_style(name)  # type: ignore[attr-defined]  # a mixin: the Widget it is mixed into has it
                       for name in sorted(self.COMPONENT_CLASSES)]
            plain = self._gputui_truecolor = all(_truecolor(s) for s in styles)
        if plain:
            return [f for f in filters if not isinstance(f, ANSIToTruecolor)]
        return filters


class DirectLines:
    """Mixin for the Line-API widgets redrawn every poll: hand Textual's compositor the strips
    ``render_line`` returns, without Textual's per-widget line pass in between.

    That pass (``StylesCache``) adds borders, padding, outlines, tint, opacity and line filters
    around each line, and wraps every changed line in a new :class:`Strip` (seven caches each,
    and a theme lookup) even when none of them is set. Under full churn it was about a fifth of a
    frame. These widgets set none of them; the check is made on every frame, so a user's CSS that
    adds one, or an ANSI theme that needs the colour filter, is drawn by Textual's own pass. The
    widget's own strips reach the compositor: a line that did not change is the same object as last
    frame, and keeps what the compositor cached for it.
    """

    def _gputui_direct(self) -> bool:
        widget = self
        styles = widget.styles  # type: ignore[attr-defined]  # a mixin: the Widget it is mixed into has it
        return (not widget.BLANK  # type: ignore[attr-defined]
                and not any(styles.gutter)
                and not any(edge for edge, _ in styles.outline)
                and not styles.tint.a
                and styles.text_opacity == 1.0
                and not (styles.has_rule("hatch") and styles.hatch != "none")
                and not widget.get_line_filters()  # type: ignore[attr-defined]
                and widget.opacity == 1.0)  # type: ignore[attr-defined]

    def render_lines(self, crop: Region) -> list[Strip]:
        if not self._gputui_direct():
            return super().render_lines(crop)  # type: ignore[misc]  # a mixin: the Widget it is mixed into has it
        widget = self
        render_line = widget.render_line  # type: ignore[attr-defined]
        lines = [render_line(y) for y in crop.line_range]
        # A line may stop where a scrollbar starts (the compositor then keeps it whole), never sooner.
        need = widget.scrollable_content_region.width  # type: ignore[attr-defined]
        for i, line in enumerate(lines):
            if line.cell_length < need:
                lines[i] = line.adjust_cell_length(need, widget.rich_style)  # type: ignore[attr-defined]
        x1, x2 = crop.column_span
        if x1 or x2 < self.size.width:  # type: ignore[attr-defined]
            lines = [line.crop(x1, x2) for line in lines]
        return lines


def release(strips: Iterable[Strip]) -> None:
    """Strips a widget no longer draws: drop the divisions Textual cached in them.

    The compositor divides every line it draws at the widgets' edges, and a strip that needs no
    cut caches ``[itself]`` as its division: a reference cycle, so the strip, its segments and its
    seven caches were freed only by the garbage collector. Under full churn that was every
    changed row and card line, every second (the collector's passes over them were ~9 % of the
    dashboard's CPU). A released strip is freed as soon as the last reference to it goes; if it is
    drawn again, Textual divides it again.
    """
    for strip in strips:
        strip._divide_cache.clear()
