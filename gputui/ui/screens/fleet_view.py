"""How the fleet reads on screen: one host as a row of short cells, sort keys, the banner.

Pure functions over the fleet model (no widgets), shared by the fleet screen, the
host screen and the tests. Every label from Prometheus goes through
:func:`gputui.core.safe_text.clean` here, and cells are :class:`rich.text.Text`,
never markup, so a label cannot style or escape the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from rich.text import Text
from textual.widgets import DataTable

from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.safe_text import clean
from gputui.core.units import fmt_duration, truncate
from gputui.ui import format as fmt

#: (column key, heading) of the host table, in order.
COLUMNS = (
    ("host", "Host"), ("state", "State"), ("gpus", "GPUs busy/idle"), ("memory", "GPU memory"),
    ("hottest", "Hottest"), ("imbalance", "Imbalance"), ("stale", "Stale memory"), ("alerts", "Alerts"),
    ("findings", "Containers with findings"),
)

SPARK = " ▁▂▃▄▅▆▇█"
#: The widest a host name is drawn in the host list (a label may be 253 bytes long).
HOST_WIDTH = 48


def update_cell(table: DataTable[Text], row: str, column: str, value: Text) -> None:
    """``DataTable.update_cell`` that widens a column when a value needs it, and otherwise does not
    re-measure: asking it to (``update_width=True``) re-measures the whole column whenever a value
    got narrower, which at a few hundred rows was most of a refresh's cost."""
    widen = value.cell_len > table.columns[column].content_width  # type: ignore[index]  # ColumnKey hashes as its str
    table.update_cell(row, column, value, update_width=widen)


def ago(when: datetime | float | None, now: float) -> str:
    if when is None:
        return "never"
    ts = when.timestamp() if isinstance(when, datetime) else when
    return f"{fmt_duration(now - ts)} ago"


def clock(when: datetime | float, now: float) -> str:
    """A local time that does not change while it is shown: '14:02:07', or '2026-11-30 14:02' on another day."""
    ts = when.timestamp() if isinstance(when, datetime) else when
    local = datetime.fromtimestamp(ts)
    if local.date() == datetime.fromtimestamp(now).date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")


def state_cell(host: FleetHost, now: float) -> Text:
    if host.up:
        return Text("up", style="green")
    if host.last_seen is None:
        return Text("down", style="bold red")
    return Text(f"down since {clock(host.last_seen, now)}", style="bold red")


_CELLS: dict[tuple, tuple[Text, ...]] = {}


def host_cells(host: FleetHost, now: float) -> tuple[Text, ...]:
    """The row of one host (cached on what it shows: most rows are unchanged between refreshes)."""
    key = (host.shown, bool(host.problems), host.source, host.up, None if host.up else host.last_seen,
           host.gpu_count, host.busy_gpus,
           host.lost_gpus, host.memory_used, host.memory_total, host.hottest, host.imbalance_flagged,
           host.stale_gpu_memory, host.stale_processes, host.alerts, host.containers_with_findings,
           datetime.fromtimestamp(now).date())
    cells = _CELLS.get(key)
    if cells is None:
        if len(_CELLS) > 4096:
            _CELLS.clear()
        cells = _CELLS[key] = _host_cells(host, now)
    return cells


def _host_cells(host: FleetHost, now: float) -> tuple[Text, ...]:
    """The row of one host: what the user reads, N/A where Prometheus does not say."""
    name = Text(truncate(clean(host.shown), HOST_WIDTH))
    if host.problems:
        name.append(" ⚠", style="bold yellow")  # the host screen says what
    if host.source == "dcgm":
        name.append(" (dcgm)", style="dim")
    if not host.up:
        na = Text("")
        return (name, state_cell(host, now), na, na, na, na, na, na, na)
    total = host.gpu_count
    busy, lost = host.busy_gpus, host.lost_gpus
    gpus = Text(f"{busy}/{total - busy - lost}" if total else "no GPUs", style="yellow" if not total else "")
    if lost:  # neither busy nor idle
        gpus.append(f" +{lost} lost", style="bold red")
    memory = Text(fmt.size_pair(host.memory_used, host.memory_total))
    hot = host.hottest
    hottest = Text(fmt.temperature(hot), style="red" if hot is not None and hot >= 85 else "")
    if host.imbalance_flagged is None:
        imbalance = Text(fmt.NA, style="dim")
    else:
        imbalance = Text("flagged", style="bold yellow") if host.imbalance_flagged else Text("no")
    if host.stale_gpu_memory is not None:
        stale = Text(fmt.size(host.stale_gpu_memory) if host.stale_gpu_memory else "0",
                     style="yellow" if host.stale_gpu_memory else "")
    elif host.stale_processes:
        stale = Text(procs(host.stale_processes), style="yellow")
    else:
        stale = Text(fmt.NA, style="dim")
    alerts = Text(", ".join(clean(a.kind) + (f"@{a.gpu}" if a.gpu is not None else "") for a in host.alerts) or
                  ("-" if host.source == "gputui" else fmt.NA),
                  style="bold red" if any(a.severity == "critical" for a in host.alerts) else
                  ("yellow" if host.alerts else "dim"))
    names = host.containers_with_findings
    findings = Text(", ".join(clean(n) for n in names) if names else ("-" if host.source == "gputui" else fmt.NA),
                    style="yellow" if names else "dim")
    return (name, state_cell(host, now), gpus, memory, hottest, imbalance, stale, alerts, findings)


def _num(value: float | None) -> tuple[int, float]:
    return (value is None, -(value or 0.0))


SORT_KEYS: dict[str, Callable[[FleetHost], object]] = {
    "host": lambda h: (h.shown.lower(), h.instance),
    # down hosts first, the longest down first; up hosts in name order (their last scrape moves every
    # refresh: sorting on it reshuffled the list under the cursor)
    "state": lambda h: (h.up, 0.0 if h.up or not h.last_seen else h.last_seen.timestamp()),
    "gpus": lambda h: (not h.up, -h.busy_gpus, -h.gpu_count),
    "memory": lambda h: _num(h.memory_used / h.memory_total if h.memory_used is not None and h.memory_total else None),
    "hottest": lambda h: _num(h.hottest),
    "imbalance": lambda h: (h.imbalance_flagged is not True, h.imbalance_flagged is None),
    "stale": lambda h: _num(h.stale_gpu_memory),
    "alerts": lambda h: (-sum(2 if a.severity == "critical" else 1 for a in h.alerts),),
    "findings": lambda h: (-len(h.containers_with_findings),),
}


def sort_key(column: str) -> Callable[[FleetHost], tuple]:
    """The sort of ``column``, ties broken by host name and instance so the order is stable."""
    key = SORT_KEYS[column]
    return lambda h: (key(h), h.shown.lower(), h.instance)


def procs(n: int) -> str:
    """ "1 proc", "4 procs"."""
    return f"{n} proc{'s' if n != 1 else ''}"


def matches(host: FleetHost, needle: str) -> bool:
    """The `/` filter: host, instance, source, GPU names, users, executables, containers, alerts, findings."""
    if not needle:
        return True
    words = [host.host, host.instance, host.source, "up" if host.up else "down"]
    for g in host.gpus:
        words.append(g.name or "")
        for p in g.processes:
            words.extend((p.user or "", p.exe or "", p.container or "", p.image or "", str(p.pid)))
    if host.summary is not None:
        words.extend(host.summary.words)
    words.extend(a.kind for a in host.alerts)
    words.extend(f"{f.container} {f.kind}" for f in host.findings)
    haystack = "\n".join(words).lower()
    return all(part in haystack for part in needle.lower().split())


def summary(snap: FleetSnapshot | None, shown: int, needle: str) -> Text:
    if snap is None:
        return Text("Reading the fleet from Prometheus…", style="dim")
    up = sum(1 for h in snap.hosts if h.up)
    gpus = sum(h.gpu_count for h in snap.hosts)
    busy = sum(h.busy_gpus for h in snap.hosts)
    lost = sum(h.lost_gpus for h in snap.hosts)
    text = Text()
    text.append(f"{len(snap.hosts)} hosts", style="bold")
    text.append(f" · {up} up")
    down = len(snap.hosts) - up
    if down:
        text.append(f" · {down} down", style="bold red")
    text.append(f" · {busy}/{gpus - lost} GPUs busy")
    if lost:
        text.append(f" · {lost} lost", style="bold red")
    text.append(f" · {clean(snap.prometheus)}")
    if needle:
        text.append(f" · filter {clean(needle)!r}: {shown} shown", style="yellow")
    return text


def banner(status, now: float | None = None) -> Text | None:
    """One line when Prometheus is slow or failing (None when all is well)."""
    now = time.time() if now is None else now
    if status.error is None and status.slow_for is None:
        return None
    data = ("showing the data of " + clock(status.last_ok, now)) if status.last_ok else "no data yet"
    if status.error is not None:
        return Text(f"{clean(status.error)} {data[0].upper()}{data[1:]}; retrying every {status.interval:g} s.",
                    style="bold")
    return Text(f"Prometheus has not answered for {status.slow_for:.0f} s; {data}.", style="bold")


def spark(points: tuple[tuple[float, float], ...], start: float, end: float, width: int) -> str:
    """Percent values on a fixed 0–100 scale, one character per time bucket (blank: no data)."""
    if width <= 0:
        return ""
    buckets: list[list[float]] = [[] for _ in range(width)]
    span = max(end - start, 1e-9)
    for t, v in points:
        i = int((t - start) / span * width)
        if 0 <= i < width:
            buckets[i].append(v)
        elif i == width:
            buckets[-1].append(v)
    out = []
    for b in buckets:
        if not b:
            out.append(" ")
            continue
        v = max(b)
        out.append(SPARK[min(8, max(1, round(v / 100 * 8)))] if v > 0 else SPARK[1] if v == 0 else " ")
    return "".join(out)
