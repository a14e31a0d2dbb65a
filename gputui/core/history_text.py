"""How the history reads as text, the same in ``gputui who`` and the dashboard's "who was on this
GPU": one row per hold — GPU, user, container or job, executable, PID, from, to (or "still
running"), peak memory, mean SM %."""

from __future__ import annotations

from datetime import datetime

from gputui.core.sources.history_store import Holding
from gputui.core.units import fmt_size


def stamp(t: float | None) -> str:
    """A local date and time to the second, or "-"."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    """Columns padded to their widest cell (those in ``right`` right-aligned), a line per row."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)]) + "\n"


def holders_table(items: list[Holding]) -> str:
    multi_host = len({h.host for h in items}) > 1
    stale = any(h.stale for h in items)
    header = ["GPU", "USER", "CONTAINER/JOB", "EXE", "PID", "FROM", "TO", "PEAK MEM", "SM %"]
    if stale:
        header.append("STALE")  # judged stale (orphan, idle holder, ...) at some point of the hold
    if multi_host:
        header.insert(0, "HOST")
    rows = []
    for h in items:
        row = [str(h.gpu), h.user or "?", h.who, h.exe or "?", str(h.pid), stamp(h.first_seen),
               "still running" if h.running else stamp(h.last_seen),
               fmt_size(h.mem_peak) if h.mem_peak is not None else "N/A",
               f"{h.sm_mean:.0f}" if h.sm_mean is not None else "N/A"]
        if stale:
            row.append(h.stale or "")
        if multi_host:
            row.insert(0, h.host)
        rows.append(row)
    right = {4, 7, 8} if not multi_host else {5, 8, 9}
    return table(header, rows, right)
