"""The body of a GPU card in MIG mode: its MIG devices instead of load graphs.

A card in MIG mode reports no utilization (real drivers answer NOT_SUPPORTED),
so its three body lines list its instances — ``6:0 3g.40gb ▕██░░░▏ 5% 2.0/39.2 GiB
carol · 1 proc`` — one per line, or two per line when there are more than three
(an A100 can have seven). Lines a card does not need for instances say why there is
no load graph and show temperature and power.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gputui.core.mig import MIG_LOAD_NOTE, instance_owner, mig_label
from gputui.core.model import Gpu, MigDevice
from gputui.core.safe_text import clean
from gputui.ui import format as fmt
from gputui.ui.widgets.spans import Spans

BODY_LINES = 3


def _slots(g: Gpu) -> list[list[MigDevice]]:
    """The instances drawn on each body line."""
    devs = list(g.mig_devices)
    if len(devs) <= BODY_LINES:
        return [[d] for d in devs]
    return [devs[i:i + 2] for i in range(0, min(len(devs), 2 * BODY_LINES), 2)]


def _bar(line: Spans, percent: float | None, width: int) -> None:
    if width <= 0:
        return
    filled = 0 if percent is None else max(0, min(width, round(width * percent / 100)))
    level = "high" if (percent or 0) >= 90 else "mid" if (percent or 0) >= 70 else "low"
    line.add("█" * filled, level).add("░" * (width - filled), "empty")


def _instance(line: Spans, g: Gpu, d: MigDevice, width: int, full: bool) -> None:
    start = line.width
    line.add(f" {mig_label(g.index, d.index)} ", "title")
    line.add_fit(clean(d.profile or fmt.NA), 8, "label")
    bar = 8 if full else 4
    line.add(" ")
    _bar(line, d.memory_percent, bar)
    line.add(fmt.percent(d.memory_percent, 4), "value" if d.memory_percent is not None else "dim")
    if full:
        line.add(" ")
        line.add_fit(fmt.size_pair(d.memory_used, d.memory_total), 13, "value", right=True)
    rest = width - (line.width - start)
    if rest > 2:
        owner = clean(instance_owner(g, d))
        line.add_fit(" " + owner, rest, "dim" if owner == "idle" else "users")


def body_line(g: Gpu, n: int, width: int) -> Spans:
    """Body line ``n`` (1-3) of a MIG card, ``width`` cells inside the borders, as the
    ``(text, style name)`` spans of :mod:`card_view`."""
    slots = _slots(g)
    line = Spans()
    if n - 1 < len(slots):
        pair = slots[n - 1]
        if len(pair) == 1:
            _instance(line, g, pair[0], width, True)
        else:
            half = width // 2
            _instance(line, g, pair[0], half, False)
            line.pad_to(half)
            _instance(line, g, pair[1], width - half, False)
        if n == BODY_LINES and len(g.mig_devices) > 2 * BODY_LINES:
            more = f" +{len(g.mig_devices) - 2 * BODY_LINES} "
            line = line.cut(width - len(more)).add(more, "dim")
        return line
    if not g.mig_devices and n == 1:
        return line.add(" MIG on, no MIG devices: CUDA sees nothing here", "warning")
    if not g.mig_devices and n == 2:
        return line.add(f" create some: nvidia-smi mig -i {g.index} -cgi … -C", "dim")
    line.add(" MIG ", "label")
    line.add_fit(MIG_LOAD_NOTE, max(0, width - 5 - 17), "dim")
    line.add(" ")
    line.add_fit(fmt.temperature(g.temperature), 5, "value", right=True)
    line.add(" ")
    line.add_fit(fmt.power_pair(g.power_draw, g.power_limit), 9, "value", right=True)
    return line


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
