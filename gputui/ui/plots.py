"""Time plots for the GPU detail screen, drawn with plotext and coloured by the theme.

plotext draws into a global master figure, so plots are built on the UI thread
only, one at a time. We ask plotext for colourless text and colour it ourselves
(data in the series colour, axes muted), so the plots follow the Textual theme
instead of plotext's white canvas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone

from rich.style import Style
from rich.text import Text

#: Tick spacings to choose from, in seconds.
_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def time_ticks(start: float, end: float, width: int, tz=None) -> tuple[list[float], list[str]]:
    """Tick positions (seconds relative to ``end``) and clock labels for an x axis of ``width`` cells."""
    span = max(1.0, end - start)
    most = max(2, width // 11)
    step = next((s for s in _STEPS if span / s <= most), _STEPS[-1])
    first = math.ceil(start / step) * step
    positions, labels = [], []
    t = first
    fmt = "%H:%M" if step >= 60 else "%H:%M:%S"
    while t <= end + 1e-6:
        positions.append(t - end)
        labels.append(datetime.fromtimestamp(t, tz or timezone.utc).astimezone(tz).strftime(fmt))
        t += step
    return positions, labels


def nice_ticks(lo: float, hi: float, most: int = 5) -> tuple[list[float], list[str]]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) between ``lo`` and ``hi``."""
    span = hi - lo
    if span <= 0:
        return [lo], [f"{lo:g}"]
    raw = span / max(1, most - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    values = []
    v = first
    while v <= hi + 1e-9:
        values.append(round(v, 6))
        v += step
    return values, [f"{v:g}" for v in values]


def downsample(points: list[tuple[float, float]], start: float, end: float, bins: int) -> list[tuple[float, float]]:
    """At most ``bins`` points: the highest value of each time bin (peaks stay visible).

    A braille plot has two dots per column, so more points than twice its width
    only cost time (plotext takes ~40 ms for 720 points, ~5 ms for 140).
    """
    if len(points) <= bins or bins <= 0 or end <= start:
        return points
    width = (end - start) / bins
    best: dict[int, tuple[float, float]] = {}
    for t, v in points:
        b = min(bins - 1, max(0, int((t - start) / width)))
        kept = best.get(b)
        if kept is None or v > kept[1]:
            best[b] = (t, v)
    return [best[b] for b in sorted(best)]


def plot_text(
    times: Sequence[float],
    values: Sequence[float | None],
    width: int,
    height: int,
    title: str,
    ylim: tuple[float, float],
    series_style: Style,
    axis_style: Style,
    label_style: Style,
    now: float | None = None,
    window: float | None = None,
    tz=None,
) -> Text:
    """A line plot of ``values`` over ``times`` (POSIX seconds) with clock labels on the x axis."""
    import plotext as plt

    if width < 20 or height < 6:  # no room for axes: the title on one line, cut with "…" (never mid-word wraps)
        return Text(title, style=label_style, no_wrap=True, overflow="ellipsis")
    points = [(t, v) for t, v in zip(times, values, strict=False) if v is not None]
    end = now if now is not None else (times[-1] if times else 0.0)
    span = window if window is not None else (end - times[0] if times else 60.0)
    span = max(60.0, span)
    start = end - span
    fig = plt.figure
    fig.clear()
    fig.plot_size(width, height)
    points = downsample(points, start, end, 2 * width)
    if points:
        xs = [t - end for t, _ in points]
        ys = [min(ylim[1], max(ylim[0], v)) for _, v in points]
        signal = fig.signal(xs, ys, marker="braille")
        if len(points) > 1:
            signal.lines()
        fig.draw(signal)
    fig.ruler(1).lim(ylim[0], ylim[1])
    fig.ruler(1).ticks(*nice_ticks(ylim[0], ylim[1], max(3, min(6, height // 3))))
    fig.ruler(0).lim(-span, 0)
    positions, labels = time_ticks(start, end, width, tz)
    fig.ruler(0).ticks(positions, labels)
    fig.title(title)
    raw = fig.build().string(colorless=True)
    return colorize(raw, series_style, axis_style, label_style)


def colorize(raw: str, series: Style, axis: Style, label: Style) -> Text:
    """Colour plotext's plain text: braille dots are data, box drawing is the frame, the rest labels."""
    text = Text(no_wrap=True, overflow="crop")
    lines = raw.rstrip("\n").split("\n")
    for n, line in enumerate(lines):
        run: list[str] = []
        run_style: Style | None = None
        for ch in line:
            code = ord(ch)
            if 0x2800 <= code <= 0x28FF:
                style = series
            elif 0x2500 <= code <= 0x257F:
                style = axis
            else:
                style = label
            if style is not run_style and run:
                text.append("".join(run), run_style)
                run = []
            run_style = style
            run.append(ch)
        if run:
            text.append("".join(run), run_style)
        if n < len(lines) - 1:
            text.append("\n")
    return text
