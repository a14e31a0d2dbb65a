"""The process table's order and filter: pure functions of the processes (no widget state).

Ties are broken by fields that do not change from poll to poll, so rows keep their places (and
their cached strips) while only their numbers move.
"""

from __future__ import annotations

from gputui.core.model import Process


def sort_value(p: Process, column: str, now_ts: float):
    """A comparable value for a column; None sorts last whichever the direction."""
    if column == "gpu":
        return (p.gpu_index, -1 if p.mig_device is None else p.mig_device)
    if column == "pid":
        return p.pid
    if column == "user":
        return (p.user or "").lower() or None
    if column == "gpu_memory":
        return p.gpu_memory
    if column == "sm":
        return p.sm_utilization
    if column == "cpu":
        return p.cpu_percent
    if column == "host_memory":
        return p.host_memory
    if column == "uptime":
        return None if p.started is None else now_ts - p.started.timestamp()
    if column == "container":
        if p.job is not None:
            return f"job {p.job.id}"
        return p.container.label.lower() if p.container else None
    if column == "command":
        return (p.command or "").lower() or None
    raise KeyError(column)


def sort_processes(procs: list[Process], column: str, descending: bool, now_ts: float) -> list[Process]:
    """Stable multi-key order: the column, then GPU, then PID.

    Ties are broken by fields that do not change from poll to poll, so rows do not
    shuffle (and repaint) while only their numbers move."""
    base = sorted(procs, key=lambda p: (p.gpu_index, p.pid))
    if column == "gpu":  # the default order, never missing: one pass
        return sorted(base, key=lambda p: (p.gpu_index, -1 if p.mig_device is None else p.mig_device),
                      reverse=descending)
    keyed = [(sort_value(p, column, now_ts), p) for p in base]  # each value once per poll
    present = [(v, p) for v, p in keyed if v is not None]
    present.sort(key=lambda vp: vp[0], reverse=descending)
    return [p for _, p in present] + [p for v, p in keyed if v is None]


def matches(p: Process, text: str) -> bool:
    """The filter box: case-insensitive substring of user, command, container, image, PID or MIG device (6:1)."""
    if not text:
        return True
    needle = text.lower()
    hay = [str(p.pid), p.user or "", p.command or ""]
    if p.mig_label is not None:
        hay.append(p.mig_label)  # "6:1" shows the processes of MIG device 1 of GPU 6
    if p.container is not None:
        hay += [p.container.label, p.container.image or "", p.container.id[:12]]
    if p.job is not None:
        hay += [p.job.label, p.job.name or ""]
    return any(needle in h.lower() for h in hay)
