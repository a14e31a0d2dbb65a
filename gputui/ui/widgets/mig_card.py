"""The body of a GPU card in MIG mode: its MIG devices instead of load graphs.

A card in MIG mode reports no utilization (real drivers answer NOT_SUPPORTED),
so its three body lines list its instances — ``6:0 3g.40gb ▕██░░░▏ 5% 2.0/39.2 GiB
carol · 1 proc`` — one per line, or two per line when there are more than three
(an A100 can have seven). Lines a card does not need for instances say why there is
no load graph and show temperature and power.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.table import Table
from rich.text import Text

from gputui.core.mig import MIG_LOAD_NOTE, instance_owner, mig_label
from gputui.core.model import Gpu, MigDevice
from gputui.core.safe_text import clean
from gputui.ui import format as fmt
from gputui.ui.widgets.lines import LineBuilder

BODY_LINES = 3


def _slots(g: Gpu) -> list[list[MigDevice]]:
    """The instances drawn on each body line."""
    devs = list(g.mig_devices)
    if len(devs) <= BODY_LINES:
        return [[d] for d in devs]
    return [devs[i:i + 2] for i in range(0, min(len(devs), 2 * BODY_LINES), 2)]


def body_key(g: Gpu, n: int) -> tuple:
    """What body line ``n`` (1-3) shows, for the card cache."""
    slots = _slots(g)
    if n - 1 < len(slots):
        return tuple((d.index, d.profile, d.memory_used, d.memory_total, instance_owner(g, d))
                     for d in slots[n - 1]) + (len(g.mig_devices),)
    return ("note", len(g.mig_devices), g.temperature, fmt.power_pair(g.power_draw, g.power_limit))


def _bar(line: LineBuilder, percent: float | None, width: int, s: Callable[[str], Style]) -> None:
    if width <= 0:
        return
    filled = 0 if percent is None else max(0, min(width, round(width * percent / 100)))
    level = "high" if (percent or 0) >= 90 else "mid" if (percent or 0) >= 70 else "low"
    line.add("█" * filled, s(level)).add("░" * (width - filled), s("empty"))


def _instance(line: LineBuilder, g: Gpu, d: MigDevice, width: int, full: bool, s: Callable[[str], Style]) -> None:
    start = line.width
    line.add(f" {mig_label(g.index, d.index)} ", s("title"))
    line.add_fit(clean(d.profile or fmt.NA), 8, s("label"))
    bar = 8 if full else 4
    line.add(" ")
    _bar(line, d.memory_percent, bar, s)
    line.add(fmt.percent(d.memory_percent, 4), s("value") if d.memory_percent is not None else s("dim"))
    if full:
        line.add(" ")
        line.add_fit(fmt.size_pair(d.memory_used, d.memory_total), 13, s("value"), right=True)
    rest = width - (line.width - start)
    if rest > 2:
        owner = clean(instance_owner(g, d))
        line.add_fit(" " + owner, rest, s("dim") if owner == "idle" else s("users"))


def body_line(g: Gpu, n: int, width: int, s: Callable[[str], Style]) -> LineBuilder:
    """Body line ``n`` (1-3) of a MIG card, ``width`` cells inside the borders."""
    slots = _slots(g)
    line = LineBuilder()
    if n - 1 < len(slots):
        pair = slots[n - 1]
        if len(pair) == 1:
            _instance(line, g, pair[0], width, True, s)
        else:
            half = width // 2
            _instance(line, g, pair[0], half, False, s)
            line.pad_to(half)
            _instance(line, g, pair[1], width - half, False, s)
        if n == BODY_LINES and len(g.mig_devices) > 2 * BODY_LINES:
            more = f" +{len(g.mig_devices) - 2 * BODY_LINES} "
            line = _truncate(line, width - len(more)).add(more, s("dim"))
        return line
    if not g.mig_devices and n == 1:
        return line.add(" MIG on, no MIG devices: CUDA sees nothing here", s("warning"))
    if not g.mig_devices and n == 2:
        return line.add(f" create some: nvidia-smi mig -i {g.index} -cgi … -C", s("dim"))
    line.add(" MIG ", s("label"))
    line.add_fit(MIG_LOAD_NOTE, max(0, width - 5 - 17), s("dim"))
    line.add(" ")
    line.add_fit(fmt.temperature(g.temperature), 5, s("value"), right=True)
    line.add(" ")
    line.add_fit(fmt.power_pair(g.power_draw, g.power_limit), 9, s("value"), right=True)
    return line


def _truncate(line: LineBuilder, width: int) -> LineBuilder:
    out = LineBuilder()
    strip = line.strip(max(0, width))
    out.extend(list(strip), strip.cell_length)
    return out


def compact_load(g: Gpu) -> str:
    """What a compact row shows instead of a utilization figure: the instance count."""
    n = len(g.mig_devices)
    return f"MIG ×{n}"


def mig_mode_text(g: Gpu) -> str:
    """MIG mode in words for the detail screen: "on", "off", "off → on at the next GPU reset", "N/A"."""
    mode = g.mig_mode
    if mode is None:
        return fmt.NA
    now = "on" if mode.current else "off"
    if mode.current == mode.pending:
        return now
    return f"{now} → {'on' if mode.pending else 'off'} at the next GPU reset (pending)"


def add_mig_rows(table: Table, g: Gpu) -> None:
    """The detail screen's list of MIG devices: one row each, with profile, ids, memory, SMs, owner, UUID."""
    if not g.mig_enabled:
        return
    table.add_row("", "")
    table.add_row(Text("MIG devices", style="bold"), Text(str(len(g.mig_devices)) if g.mig_devices else
                                                           "none: CUDA sees no device on this GPU"))
    for d in g.mig_devices:
        ids = f"GI {fmt.NA if d.gpu_instance_id is None else d.gpu_instance_id} " \
              f"CI {fmt.NA if d.compute_instance_id is None else d.compute_instance_id}"
        sms = fmt.NA if d.sm_count is None else f"{d.sm_count} SMs"
        text = Text()
        text.append(clean(d.profile or fmt.NA), style="bold")
        text.append(f"  {ids}  {fmt.size_pair(d.memory_used, d.memory_total)}  {sms}  ")
        text.append(clean(instance_owner(g, d)))
        text.append(f"  {clean(d.uuid)}", style="dim")
        table.add_row(mig_label(g.index, d.index), text)
