"""Plain-text rendering of one Snapshot: the nvidia-smi view plus who owns what.

Used by ``gputui --once``, ``gputui snapshot`` without ``--json`` and whenever
stdout is not a terminal. Plain ASCII-safe columns, no colour: it is read in
logs, pipes and ``watch``.
"""

from __future__ import annotations

from gputui.core.model import Gpu, Process, Snapshot
from gputui.core.units import NA, fmt_duration, fmt_gib, throttle_label


def _cell(value: object, width: int, right: bool = False) -> str:
    text = NA if value is None else str(value)
    if len(text) > width:
        text = text[: max(0, width - 1)] + "…"
    return text.rjust(width) if right else text.ljust(width)


def _gpu_row(g: Gpu) -> str:
    if g.lost:
        return f"{g.index:>3}  {_cell(g.name, 24)}  LOST — the GPU fell off the bus or stopped answering ({g.uuid})"
    mem = f"{fmt_gib(g.memory_used)} / {fmt_gib(g.memory_total)} GiB"
    mem_pct = g.memory_percent
    power = NA
    if g.power_draw is not None:
        power = f"{g.power_draw:.0f} / {g.power_limit:.0f} W" if g.power_limit is not None else f"{g.power_draw:.0f} W"
    throttle = throttle_label(g.throttle_reasons) or "-"
    return "  ".join(
        [
            f"{g.index:>3}",
            _cell(g.name, 24),
            _cell(None if g.utilization_gpu is None else f"{g.utilization_gpu}%", 4, right=True),
            _cell(mem, 17, right=True),
            _cell(None if mem_pct is None else f"{mem_pct:.0f}%", 4, right=True),
            _cell(None if g.temperature is None else f"{g.temperature}C", 4, right=True),
            _cell(power, 11, right=True),
            _cell(None if g.fan_speed is None else f"{g.fan_speed}%", 4, right=True),
            _cell(g.clock_sm, 5, right=True),
            _cell(None if g.pstate is None else f"P{g.pstate}", 3),
            throttle,
        ]
    ).rstrip()


_GPU_HEADER = "  ".join(
    ["GPU", "Name".ljust(24), "Util", "Memory used/total".rjust(17), "Mem%", "Temp", "Power".rjust(11), " Fan",
     "SMclk", "P  ", "Throttle"]
)

_PROC_HEADER = "  ".join(
    ["GPU", "PID".rjust(7), "User".ljust(10), "GPU mem".rjust(9), " SM%", " CPU%", "Uptime".rjust(6),
     "Container".ljust(20), "Command"]
)


def _proc_row(p: Process, now: float) -> str:
    uptime = None if p.started is None else fmt_duration(now - p.started.timestamp())
    mem = None if p.gpu_memory is None else f"{p.gpu_memory / 1024**2:.0f}MiB"
    container = p.container.label if p.container else "-"
    command = p.command if p.visible else f"[not visible here: {p.invisible_reason or 'unknown'}]"
    flags = f"  <{','.join(f.kind for f in p.stale)}>" if p.stale else ""
    return "  ".join(
        [
            f"{p.gpu_index:>3}",
            f"{p.pid:>7}",
            _cell(p.user, 10),
            _cell(mem, 9, right=True),
            _cell(None if p.sm_utilization is None else f"{p.sm_utilization}%", 4, right=True),
            _cell(None if p.cpu_percent is None else f"{p.cpu_percent:.0f}%", 5, right=True),
            _cell(uptime, 6, right=True),
            _cell(container, 20),
            (command or NA) + flags,
        ]
    ).rstrip()


def render_text(snap: Snapshot, now: float | None = None) -> str:
    now = snap.time.timestamp() if now is None else now
    lines = [
        f"{snap.host}  {snap.time.strftime('%Y-%m-%d %H:%M:%S')}  "
        f"Driver {snap.driver_version or NA}  CUDA {snap.cuda_driver_version or NA}",
        "",
        _GPU_HEADER,
    ]
    lines += [_gpu_row(g) for g in snap.gpus]
    procs = [p for g in snap.gpus for p in g.processes]
    lines += ["", _PROC_HEADER]
    if procs:
        lines += [_proc_row(p, now) for p in procs]
    else:
        lines.append("  (no GPU processes)")
    notes = []
    if snap.imbalance.flagged and snap.imbalance.message:
        notes.append(f"IMBALANCE: {snap.imbalance.message}")
        s = snap.imbalance.suggestion
        if s is not None:
            who = s.container or (f"PID {s.pid}" if s.pid else "a job")
            notes.append(f"  suggestion: move {who} from GPU {s.from_gpu} to GPU {s.to_gpu} — {s.reason}")
    for a in snap.alerts:
        where = f"GPU {a.gpu}: " if a.gpu is not None else ""
        notes.append(f"{a.severity.upper()}: {where}{a.message}")
    for c in snap.containers:
        for f in c.findings:
            notes.append(f"container {c.name} [{f.kind}]: {f.message}")
    for p in procs:
        for f in p.stale:
            notes.append(f"PID {p.pid} on GPU {p.gpu_index} [{f.kind}]: {f.message}")
    if not snap.docker.available:
        notes.append(f"containers unavailable: {snap.docker.error or 'unknown reason'}")
    notes += [f"warning: {w}" for w in snap.warnings]
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"
