"""A line as data: ``(text, style name)`` spans, built to an exact cell width.

The pure half of the Line-API widgets (see :mod:`card_view`): what a line shows, comparable by
value, with no Textual or Rich style in it (only Rich's cell widths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from rich.cells import cell_len, set_cell_size

from gputui.core.safe_text import clean

#: Eighth-blocks, index = level 0..8. Level 0 is drawn as the lowest bar in the
#: "empty" style so the track stays visible and a 0 % GPU still shows a line.
BARS = " ▁▂▃▄▅▆▇█"
#: Code of a missing sample (N/A): drawn blank.
MISSING = -1

Span = tuple[str, str]
Line = tuple[Span, ...]

class Spans:
    """Accumulates ``(text, style name)`` spans; :meth:`line` gives them at an exact cell width."""

    __slots__ = ("spans", "width")

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.width = 0

    def add(self, text: str, style: str = "") -> Spans:
        text = clean(text)  # outside text never reaches the terminal raw
        if text:
            self.spans.append((text, style))
            self.width += cell_len(text)
        return self

    def add_fit(self, text: str, width: int, style: str = "", right: bool = False) -> Spans:
        """Add ``text`` cut (with "…") or padded to exactly ``width`` cells (CJK-safe)."""
        if width <= 0:
            return self
        text = clean(text)
        if cell_len(text) > width:
            text = set_cell_size(text, width - 1) + "…" if width > 1 else set_cell_size(text, width)
        elif right:
            text = " " * (width - cell_len(text)) + text
        else:
            text = set_cell_size(text, width)
        self.spans.append((text, style))
        self.width += width
        return self

    def extend(self, spans: Sequence[Span], width: int) -> Spans:
        self.spans.extend(spans)
        self.width += width
        return self

    def pad_to(self, width: int, style: str = "") -> Spans:
        if width > self.width:
            self.add(" " * (width - self.width), style)
        return self

    def cut(self, width: int) -> Spans:
        """The first ``width`` cells (or fewer spans when shorter)."""
        out = Spans()
        for text, style in self.spans:
            room = width - out.width
            if room <= 0:
                break
            if cell_len(text) > room:
                text = set_cell_size(text, room)
            out.spans.append((text, style))
            out.width += cell_len(text)
        return out

    def line(self, width: int, style: str = "") -> Line:
        """Exactly ``width`` cells: cut, or padded with ``style``."""
        if self.width > width:
            return tuple(self.cut(width).pad_to(width, style).spans)
        return tuple(self.pad_to(width, style).spans)


def text(line: Line) -> str:
    """A line as plain text (tests, debugging)."""
    return "".join(t for t, _ in line)


S = TypeVar("S")


def spark_runs(codes: Sequence[int], width: int, empty: S, low: S, mid: S, high: S) -> list[tuple[str, S]]:
    """:func:`sparkline` as runs of ``(bars, style)``, whatever a style is (a Rich style, a name)."""
    if width <= 0:
        return []
    tiers = (low, mid, high)
    vals = codes[-width:]
    out: list[tuple[str, S]] = []
    run_text: list[str] = [BARS[1]] * (width - len(vals))
    run_style: S = empty
    for code in vals:
        if code <= 0:
            ch, style = (" " if code == MISSING else BARS[1]), empty
        else:
            ch, style = BARS[code // 3], tiers[code % 3]
        if style is not run_style:
            if run_text:
                out.append(("".join(run_text), run_style))
                run_text = []
            run_style = style
        run_text.append(ch)
    if run_text:
        out.append(("".join(run_text), run_style))
    return out
