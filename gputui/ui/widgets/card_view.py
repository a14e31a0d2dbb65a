"""What each line of the GPU panel shows, as data: a tuple of ``(text, style name)`` spans.

The panel draws a line by turning its spans into a :class:`Strip`, and caches that strip
by the spans themselves: two polls that would draw the same line give equal spans, so the
old strip is kept (and the line not repainted); anything a line draws — a word, a colour,
a cell of a graph — is in its spans, so no change can be missed by a hand-picked cache key.

Pure: no Textual, no Rich styles (only Rich's cell widths), so every card and row can be
tested as text and style names without running the app.

Style names are the panel's component classes without their ``gpu-panel--`` prefix; ``""``
is the panel's own colours and a ``+reverse`` suffix reverses a style.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.core import units
from gputui.core.judges.suspect import activity
from gputui.core.model import THERMAL_OR_POWER, Gpu
from gputui.core.record import record
from gputui.ui import format as fmt
from gputui.ui.widgets import mig_card
from gputui.ui.widgets.spans import Line, Span, Spans, spark_runs

CARD_HEIGHT = 5


#: Graphs drawn, by (their codes, width): a graph moves once a step, its card line every poll.
_SPARKS: dict[tuple[tuple[int, ...], int], list[Span]] = {}


def spark(codes: Sequence[int], width: int) -> list[Span]:
    """The newest ``width`` samples as fixed-scale bars (see :func:`lines.sparkline`)."""
    key = (tuple(codes[-width:]) if width > 0 else (), width)
    runs = _SPARKS.get(key)
    if runs is None:
        if len(_SPARKS) > 256:
            _SPARKS.clear()
        runs = _SPARKS[key] = spark_runs(codes, width, "empty", "low", "mid", "high")
    return runs


@record
class CardLook:
    """How the panel lays cards out now: what every card of one poll shares."""

    width: int
    #: Cells given to the memory pair and the power pair.
    mem_w: int
    pow_w: int
    temp_warning: float
    temp_critical: float

    @property
    def field(self) -> int:
        """Cells after a card's graph and percentage: the memory pair, or the temperature (5), a
        gap and the power pair on the line above, whichever is wider, so both lines end together."""
        return max(self.mem_w, 7 + self.pow_w)

    @property
    def spark_w(self) -> int:
        return max(4, self.width - 2 - 6 - 1 - 4 - 1 - self.field - 1)


def users(g: Gpu) -> tuple[str, ...]:
    """Who uses the GPU, most memory first."""
    by_user: dict[str, int] = {}
    for p in g.processes:
        name = p.user or "?"
        by_user[name] = by_user.get(name, 0) + (p.gpu_memory or 0)
    return tuple(sorted(by_user, key=lambda u: (-by_user[u], u)))


def badge(g: Gpu, alerts: int, critical: bool) -> Span | None:
    if g.mig_reset_pending and not alerts:
        return " MIG→reset ", "badge-warning"  # MIG mode pending ≠ current: the change waits for a GPU reset
    if not alerts:
        return None
    return (f" ⚠ {alerts} " if alerts > 1 else " ⚠ "), ("badge-critical" if critical else "badge-warning")


def temp_style(temp: int | None, look: CardLook) -> str:
    if temp is None:
        return "dim"
    if temp >= look.temp_critical:
        return "critical"
    if temp >= look.temp_warning:
        return "warning"
    return "value"


def _value_style(value: float | None) -> str:
    return "dim" if value is None else "value"


def procs(n: int) -> str:
    return f"{n} proc{'s' if n != 1 else ''}"


def border_style(g: Gpu, selected: bool, filtered: bool) -> str:
    if g.lost:
        return "border-lost"
    if selected:
        return "border-selected"
    if filtered:
        return "border-filtered"
    return "border"


def card(g: Gpu, util: Sequence[int], mem: Sequence[int], alerts: int, critical: bool, look: CardLook,
         selected: bool, filtered: bool) -> tuple[Line, ...]:
    """The five lines of one card: top border with the title, three body lines, bottom border."""
    border = border_style(g, selected, filtered)
    width = look.width
    bodies = [_body(n, g, util, mem, look) for n in (1, 2, 3)]
    lines = [top_line(g, alerts, critical, width, selected, border)]
    for body in bodies:
        inner = body.line(width - 2) if body.width > width - 2 else tuple(body.pad_to(width - 2).spans)
        lines.append((("│", border), *inner, ("│", border)))
    lines.append((("╰" + "─" * max(0, width - 2) + "╯", border),))
    return tuple(lines)


def _body(n: int, g: Gpu, util: Sequence[int], mem: Sequence[int], look: CardLook) -> Spans:
    if g.lost:
        return Spans().add([
            " ✖ NVML no longer answers for this GPU.",
            " It may have fallen off the bus: check `dmesg` for Xid errors.",
            f" {len(g.processes)} process(es) were on it at the last good read.",
        ][n - 1], "lost" if n == 1 else "dim")
    if g.mig_enabled:  # MIG mode: the body lists the instances (no load graphs exist)
        return mig_card.body_line(g, n, look.width - 2)
    if n == 1:
        return util_line(g, util, look)
    if n == 2:
        return mem_line(g, mem, look)
    return info_line(g)


def top_line(g: Gpu, alerts: int, critical: bool, width: int, selected: bool, border: str) -> Line:
    """╭─ 0  A100-SXM4-80GB ──── alice, bob · 4 procs ─ ⚠ ─╮"""
    top = Spans().add("╭─", border)
    top.add(f" {g.index} ", "title+reverse" if selected else "title")
    top.add(" ", border)
    title = fmt.short_gpu_name(g.name) + (" · MIG" if g.mig_enabled else "")
    right = Spans()
    who = users(g)
    if g.lost:
        right.add(" LOST ", "lost+reverse")
    elif g.processes:
        shown = ", ".join(who[:2]) + (f" +{len(who) - 2}" if len(who) > 2 else "")
        right.add(f" {shown} ", "users")
        right.add(f"· {procs(len(g.processes))} ", "dim")
    else:
        state = activity(g)
        right.add(f" {state} ", "dim" if state == "idle" else "warning")
    mark = badge(g, alerts, critical)
    if mark:
        right.add("─", border).add(*mark)
    right.add("─╮", border)
    room = width - top.width - right.width - 2
    top.add_fit(title, min(len(title), max(0, room)), "title")
    top.add(" ", border)
    top.add("─" * max(0, width - top.width - right.width), border)
    top.extend(right.spans, right.width)
    return top.line(width)


def util_line(g: Gpu, util: Sequence[int], look: CardLook) -> Spans:
    w = look.spark_w
    line = Spans().add(" UTIL ", "label").extend(spark(util, w), w).add(" ")
    line.add(fmt.percent(g.utilization_gpu), _value_style(g.utilization_gpu))
    line.add("  ")
    line.add_fit(fmt.temperature(g.temperature), 5, temp_style(g.temperature, look), right=True)
    line.add(" ")
    line.add_fit(fmt.power_pair(g.power_draw, g.power_limit), look.field - 7, "value", right=True)
    return line


def mem_line(g: Gpu, mem: Sequence[int], look: CardLook) -> Spans:
    w = look.spark_w
    line = Spans().add(" MEM  ", "label").extend(spark(mem, w), w).add(" ")
    line.add(fmt.mem_percent(g.memory_used, g.memory_total), _value_style(g.memory_percent))
    line.add(" ")
    line.add_fit(fmt.size_pair(g.memory_used, g.memory_total), look.field, "value", right=True)
    return line


def info_line(g: Gpu) -> Spans:
    line = Spans()
    line.add(" SM ", "label").add(units.fmt_mhz_pair(g.clock_sm, g.clock_sm_max, sep="/"), "value")
    line.add("  MEM ", "label").add(units.fmt_mhz(g.clock_memory), "value")
    line.add("  FAN ", "label")
    line.add(fmt.NA if g.fan_speed is None else f"{g.fan_speed}%", "dim" if g.fan_speed is None else "value")
    line.add("  ")
    line.add(units.fmt_pstate(g.pstate), "value" if g.pstate is not None else "dim")
    throttled = fmt.throttle_label(g.throttle_reasons)
    if throttled:
        hot = any(r in THERMAL_OR_POWER for r in g.throttle_reasons or ())
        line.add("  ▼ " + throttled, "warning" if hot else "dim")
    return line


def compact(g: Gpu, util: Sequence[int], mem: Sequence[int], alerts: int, critical: bool, look: CardLook,
            selected: bool, filtered: bool) -> Line:
    """One line per GPU: index, (name), util and memory graphs with numbers, temp, power, who.
    A selected row is drawn over ``compact-selected`` (the panel adds it under every span)."""
    width = look.width
    line = Spans()
    idx_style = "lost" if g.lost else "border-filtered" if filtered else "title"
    line.add(f"{g.index:>2} ", idx_style + ("+reverse" if selected else ""))
    if g.lost:
        line.add("LOST  NVML no longer answers for this GPU (fallen off the bus?)", "lost")
        return line.line(width)
    fixed = 3 + 4 + 1 + 5 + 4 + 1 + 5 + 1 + look.mem_w + 6 + look.pow_w + 2
    name = fmt.short_gpu_name(g.name)
    show_name = width - fixed - len(name) - 2 >= 24
    if show_name:
        line.add_fit(name, len(name) + 1, "dim")
    room = width - fixed - (len(name) + 1 if show_name else 0) - 14
    w = max(0, min(40, room // 2))
    if g.mig_enabled:  # no load in MIG mode: how many instances instead of a graph
        line.add_fit(mig_card.compact_load(g), (2 + w if w >= 4 else 4) + 5, "label")
    else:
        if w >= 4:
            line.add("U ", "label").extend(spark(util, w), w)
        else:
            line.add("UTIL", "label")
        line.add(fmt.percent(g.utilization_gpu) + " ", _value_style(g.utilization_gpu))
    if w >= 4:
        line.add(" M ", "label").extend(spark(mem, w), w)
    else:
        line.add(" MEM", "label")
    line.add(fmt.mem_percent(g.memory_used, g.memory_total), _value_style(g.memory_percent))
    line.add(" ")
    line.add_fit(fmt.size_pair(g.memory_used, g.memory_total), look.mem_w, "value", right=True)
    line.add(" ")
    line.add_fit(fmt.temperature(g.temperature), 5, temp_style(g.temperature, look), right=True)
    line.add(" ")
    line.add_fit(fmt.power_pair(g.power_draw, g.power_limit), look.pow_w, "value", right=True)
    mark = badge(g, alerts, critical)
    who = users(g)
    rest = width - line.width - (len(mark[0]) + 1 if mark else 0)
    if rest > 2:
        line.add_fit(" " + (", ".join(who) if who else activity(g)), rest, "users" if who else "dim")
    if mark:
        line.pad_to(width - len(mark[0]))
        line.add(*mark)
    return line.line(width)
