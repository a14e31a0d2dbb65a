"""Plain-text rendering of one Snapshot: the nvidia-smi view plus who owns what.

Used by ``gputui --once``, ``gputui snapshot`` without ``--json`` and whenever
stdout is not a terminal. Plain ASCII-safe columns, no colour: it is read in
logs, pipes and ``watch``.
"""

from __future__ import annotations

from gputui.core.judges.text import invisible_phrase
from gputui.core.mig import MIG_LOAD_NOTE, instance_owner, mig_label, mig_notes
from gputui.core.model import Gpu, MigDevice, Process, Snapshot
from gputui.core.safe_text import clean
from gputui.core.units import (
    NA,
    fmt_duration,
    fmt_mhz,
    fmt_percent,
    fmt_power_pair,
    fmt_pstate,
    fmt_size,
    fmt_size_pair,
    throttle_label,
    truncate,
    used_percent,
)


def _cell(value: object, width: int, right: bool = False) -> str:
    text = truncate(NA if value is None else clean(value), width)
    return text.rjust(width) if right else text.ljust(width)


def _gpu_row(g: Gpu) -> str:
    if g.lost:
        return f"{g.index:>3}  {_cell(g.name, 24)}  LOST — the GPU fell off the bus or stopped answering ({g.uuid})"
    mem = fmt_size_pair(g.memory_used, g.memory_total)
    mem_pct = used_percent(g.memory_used, g.memory_total)
    power = fmt_power_pair(g.power_draw, g.power_limit)
    throttle = NA if g.throttle_reasons is None else (throttle_label(g.throttle_reasons) or "-")
    return "  ".join(
        [
            f"{g.index:>3}",
            _cell(g.name, 24),
            _cell(None if g.utilization_gpu is None else f"{g.utilization_gpu}%", 4, right=True),
            _cell(mem, 20, right=True),
            _cell(fmt_percent(mem_pct), 4, right=True),
            _cell(None if g.temperature is None else f"{g.temperature}C", 4, right=True),
            _cell(power, 13, right=True),
            _cell(None if g.fan_speed is None else f"{g.fan_speed}%", 4, right=True),
            _cell(fmt_mhz(g.clock_sm), 8, right=True),
            _cell(fmt_pstate(g.pstate), 3),
            throttle,
        ]
    ).rstrip()


def _mig_row(g: Gpu, m: MigDevice) -> str:
    """One MIG device, indented under its card like nvidia-smi's MIG devices table."""
    mem = fmt_size_pair(m.memory_used, m.memory_total)
    pct = used_percent(m.memory_used, m.memory_total)
    ids = f"GI {NA if m.gpu_instance_id is None else m.gpu_instance_id}" \
          f" CI {NA if m.compute_instance_id is None else m.compute_instance_id}"
    return "  ".join(
        [
            f"{'└':>3}",
            _cell(f"{mig_label(g.index, m.index)} MIG {clean(m.profile or NA)}", 24),
            _cell(ids, 11),
            _cell(mem, 20, right=True),
            _cell(fmt_percent(pct), 4, right=True),
            _cell(None if m.sm_count is None else f"{m.sm_count} SM", 6, right=True),
            clean(instance_owner(g, m)),
            clean(m.uuid),
        ]
    ).rstrip()


def _mig_rows(g: Gpu) -> list[str]:
    return [_mig_row(g, m) for m in g.mig_devices] if g.mig_enabled and not g.lost else []


_GPU_HEADER = "  ".join(
    ["GPU", "Name".ljust(24), "Util", "Memory used / total".rjust(20), "Mem%", "Temp", "Power".rjust(13), " Fan",
     "SM clock", "P  ", "Throttle"]
)

_PROC_HEADER = "  ".join(
    ["GPU", "PID".rjust(7), "User".ljust(10), "GPU mem".rjust(9), " SM%", " CPU%", "Uptime".rjust(6),
     "Container".ljust(20), "Command"]
)


def _proc_row(p: Process, now: float, width: int = 20) -> str:
    uptime = None if p.started is None else fmt_duration(now - p.started.timestamp())
    mem = fmt_size(p.gpu_memory)
    container = p.job.label if p.job is not None else p.container.label if p.container else "-"
    command = p.command if p.visible else f"[{invisible_phrase(p.invisible_reason)}]"
    flags = f"  <{','.join(f.kind for f in p.stale)}>" if p.stale else ""
    return "  ".join(
        [
            f"{p.mig_label or p.gpu_index:>3}",
            f"{p.pid:>7}",
            _cell(p.user, 10),
            _cell(mem, 9, right=True),
            _cell(None if p.sm_utilization is None else f"{p.sm_utilization}%", 4, right=True),
            _cell(None if p.cpu_percent is None else f"{p.cpu_percent:.0f}%", 5, right=True),
            _cell(uptime, 6, right=True),
            _cell(container, width),
            clean(command or NA) + flags,
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
    for g in snap.gpus:
        lines.append(_gpu_row(g))
        lines += _mig_rows(g)
    procs = [p for g in snap.gpus for p in g.processes]
    # a job label ("job 123 · alice · 1h58m left") needs a wider column than a container name
    width = 28 if any(p.job is not None for p in procs) else 20
    header = _PROC_HEADER if width == 20 else \
        _PROC_HEADER.replace("Container".ljust(20), "Job / container".ljust(width))
    lines += ["", header]
    if procs:
        lines += [_proc_row(p, now, width) for p in procs]
    else:
        lines.append("  (no GPU processes)")
    if snap.slurm is not None and snap.slurm.jobs:
        lines += ["", "Slurm jobs on " + snap.slurm.node + ": job, user, name, state, GPUs granted (GRES) / used"]
        for j in snap.slurm.jobs:
            granted = ",".join(map(str, j.gpus)) or "-"
            used = ",".join(map(str, snap.slurm.used.get(j.id, ()))) or "-"
            left = "" if j.time_left_s is None else f"  {fmt_duration(j.time_left_s)} left"
            lines.append(f"  job {j.id}  {j.user or NA}  {j.name or NA}  {j.state or NA}  GPUs {granted} / "
                         f"{used}{left}")
    notes = []
    if snap.imbalance.flagged and snap.imbalance.message:
        label = "IMBALANCE (provisional: observed for less than the hold)" if snap.imbalance.provisional \
            else "IMBALANCE"
        notes.append(f"{label}: {snap.imbalance.message}")
        s = snap.imbalance.suggestion
        if s is not None:
            who = s.container or (f"PID {s.pid}" if s.pid else "a job")
            notes.append(f"  suggestion: move {who} from GPU {s.from_gpu} to GPU {s.to_gpu} — {s.reason}")
    for g in snap.gpus:
        if g.mig_enabled and not g.lost and g.utilization_gpu is None:
            notes.append(f"GPU {g.index}: MIG mode; utilization N/A: {MIG_LOAD_NOTE}.")
        notes += mig_notes(g)
    for a in snap.alerts:
        where = f"GPU {a.gpu}: " if a.gpu is not None else ""
        notes.append(f"{a.severity.upper()}: {where}{a.message}")
    for r in snap.reservations:
        notes.append(f"reserved: GPU {r.gpu} for {r.holder} until {r.until.strftime('%a %Y-%m-%d %H:%M')} "
                     f"(reservation {r.id}){': ' + r.note if r.note else ''}")
    for c in snap.containers:
        for f in c.findings:
            notes.append(f"container {c.name} [{f.kind}]: {f.message}")
    for p in procs:
        for f in p.stale:
            notes.append(f"PID {p.pid} on GPU {p.gpu_index} [{f.kind}]: {f.message}")
    if snap.slurm is not None and not snap.slurm.available:
        notes.append(f"Slurm unavailable: {snap.slurm.error or 'unknown reason'}")
    if not snap.docker.available:
        notes.append(f"containers unavailable: {snap.docker.error or 'unknown reason'}")
    notes += [f"warning: {w}" for w in snap.warnings]
    if notes:
        lines += [""] + notes
    # every line once more through the one rule: messages quote container names, labels, NVML strings
    return "\n".join(clean(line) for line in lines) + "\n"
