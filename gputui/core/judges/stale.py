"""Stale GPU processes: holders of GPU memory that nobody is using any more.

Kinds, each with one sentence (shown in the UI and in JSON as ``stale``):

* ``ghost`` — NVML lists the PID but no such process is visible here (a process
  that ``hidepid`` merely hides from this user exists and is not a ghost). If the
  process source saw it belong to another PID namespace (``invisible_reason ==
  "other-namespace"``) that is the likely cause; otherwise a leaked driver context
  is, once NVML has gone on listing the PID for a few seconds (a PID seen only
  once may just have exited between NVML's list and the process read).
* ``zombie`` — defunct (exited, not reaped by its parent) or stuck in
  uninterruptible sleep (``D`` state).
* ``orphan`` — its parent died and it was re-parented to init or a subreaper:
  typically a dataloader worker that outlived its killed trainer.
* ``exited-container`` — its container is exiting, exited, paused or dead.
* ``idle-holder`` — holds at least ``idle_holder_memory`` (1 GiB) of GPU memory
  with 0% SM and at most ``idle_cpu`` (1%) CPU in **every** sample across
  ``idle_window`` (10 min).

**The observation must cover the idle window.** ``idle-holder`` is only claimed
when gputui has watched the process for the whole ``idle_window`` (within one
sampling step); a shorter observation flags nothing, because a training job
pausing 5 s to write a checkpoint looks exactly like an abandoned notebook for
those 5 s — and ``K`` in the dashboard offers to kill every stale process in
view, so a stale finding must mean what it says. The message states the span
actually observed. A one-shot ``snapshot --json`` therefore never reports idle
holders unless ``--window`` is at least ``idle_window`` (e.g. ``--window 600``);
tests set a short ``idle_window`` in the config file. If the history buffer
holds less than ``idle_window`` (a window longer than the history keeps), the
full buffer counts as covering it, and the message says how long that was.

Nothing here kills anything: findings are facts for a person to act on.
"""

from __future__ import annotations

from bisect import bisect_left

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.text import duration, gib
from gputui.core.model import Container, ContainerRecord, Finding, Process

#: Container states in which a container's processes are leftovers or frozen.
GONE_STATES = {
    "exiting": "is exiting",
    "exited": "has exited",
    "dead": "is dead",
    "paused": "is paused (its processes are frozen and keep their GPU memory)",
    "removing": "is being removed",
}

#: How long NVML must keep listing an invisible PID before a leaked context is the likely cause.
GHOST_SETTLE = 3.0


def idle_finding(p: Process, history: History, settings: Settings) -> Finding | None:
    """``idle-holder`` when every sample across ``idle_window`` shows the process idle with memory held."""
    threshold = settings.idle_holder_memory
    if p.gpu_memory is None or p.gpu_memory < threshold:
        return None
    # Cheap exits on the newest reading before any window is read (this runs for every process, every poll).
    if (p.sm_utilization is not None and p.sm_utilization > 0) or (
            p.cpu_percent is not None and p.cpu_percent > settings.idle_cpu):
        return None
    samples = history.process((p.gpu_index, p.pid, p.create_time))
    if not samples:
        return None
    now = samples[-1].t
    first = bisect_left(samples, now - settings.idle_window, key=lambda s: s.t)
    observed = now - samples[first].t
    # One sampling step of slack: the window's edge falls between two polls.
    if first > 0:
        step = samples[first].t - samples[first - 1].t
    else:
        step = samples[-1].t - samples[-2].t if len(samples) > 1 else 0.0
    covered = observed + step >= settings.idle_window or len(samples) >= history.capacity
    if not covered:
        return None
    gpu_util: dict[float, int | None] | None = None
    peak_cpu: float | None = None
    for i in range(len(samples) - 1, first - 1, -1):
        s = samples[i]
        if s.gpu_memory is None or s.gpu_memory < threshold:
            return None
        sm = s.sm_utilization
        if sm is None:
            # No per-process figure: an idle GPU means every process on it is idle.
            if gpu_util is None:
                gpu_util = {g.t: g.utilization for g in history.gpu(p.gpu_index, settings.idle_window)}
            sm = gpu_util.get(s.t)
        if sm is None or sm > 0:
            return None
        cpu = s.cpu_percent
        if cpu is None:
            continue  # the first read of a process has no CPU figure yet
        if cpu > settings.idle_cpu:
            return None
        if peak_cpu is None or cpu > peak_cpu:
            peak_cpu = cpu
    if peak_cpu is None:
        return None  # never saw its CPU: cannot vouch that it is idle
    cpu_text = "0% CPU" if peak_cpu == 0 else f"at most {peak_cpu:.1f}% CPU"
    return Finding("idle-holder", f"Holds {gib(p.gpu_memory)} of GPU memory with 0% SM and {cpu_text} "
                                  f"throughout the {duration(observed)} observed.")


def ghost_finding(p: Process, history: History) -> Finding | None:
    if p.visible or p.invisible_reason == "hidden":
        # "hidden": /proc is mounted with hidepid and the process is another user's; it exists.
        return None
    if p.invisible_reason == "other-namespace":
        return Finding("ghost", f"NVML lists PID {p.pid} but this PID namespace has no such process: it most likely "
                                f"runs in another container's PID namespace (run gputui with --pid=host to see it).")
    key = (p.gpu_index, p.pid, p.create_time)
    first = history.first_seen(key)
    listed = (history.now - first) if first is not None and history.now is not None else 0.0
    if listed >= GHOST_SETTLE:
        return Finding("ghost", f"NVML has listed PID {p.pid} for {duration(listed)} but no such process exists: a "
                                f"leaked driver context is the likely cause, and only ending its owner or resetting "
                                f"the GPU frees its memory.")
    return Finding("ghost", f"NVML lists PID {p.pid} but it is not visible from here: no such PID exists in this "
                            f"PID namespace, so it just exited, runs in another PID namespace, or left a leaked "
                            f"driver context behind (if it stays listed, the leak is the likely cause).")


def zombie_finding(p: Process) -> Finding | None:
    if p.status == "zombie":
        parent = f" (PID {p.ppid})" if p.ppid else ""
        return Finding("zombie", f"Defunct: it has exited but its parent{parent} has not reaped it, and the driver "
                                 f"still holds its GPU memory.")
    if p.status == "disk-sleep":
        return Finding("zombie", "Stuck in uninterruptible sleep (D state), waiting on I/O or the driver; no signal "
                                 "takes effect until that call returns.")
    return None


def orphan_finding(p: Process) -> Finding | None:
    if not p.orphaned:
        return None
    to = "init (PID 1)" if p.ppid in (None, 1) else f"PID {p.ppid}, a subreaper"
    return Finding("orphan", f"Its parent died and it was re-parented to {to}: likely a leftover worker of a job "
                             f"that was killed.")


def container_finding(p: Process, containers_by_id: dict[str, Container],
                      records: dict[str, ContainerRecord]) -> Finding | None:
    if p.container is None:
        return None
    record = records.get(p.container.id)
    container = containers_by_id.get(p.container.id)
    state = record.state if record is not None else container.state if container is not None else None
    if state not in GONE_STATES:
        return None
    name = p.container.label
    return Finding("exited-container", f"Its container {name} {GONE_STATES[state]}, yet this process still holds "
                                       f"{gib(p.gpu_memory)} of GPU memory.")


def judge_stale(process: Process, history: History, settings: Settings,
                containers_by_id: dict[str, Container], records: dict[str, ContainerRecord]) -> tuple[Finding, ...]:
    """Every stale reason that applies to one process (empty when it is fine)."""
    found = [
        ghost_finding(process, history),
        zombie_finding(process),
        orphan_finding(process),
        container_finding(process, containers_by_id, records),
        idle_finding(process, history, settings),
    ]
    return tuple(f for f in found if f is not None)
