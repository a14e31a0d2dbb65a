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
from collections import deque
from collections.abc import Sequence

from gputui.core.config import Settings
from gputui.core.history import History, ProcessKey, ProcessSample
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


def _time(s: ProcessSample) -> float:
    return s.t


def idle_finding(p: Process, history: History, settings: Settings,
                 tracker: IdleTracker | None = None) -> Finding | None:
    """``idle-holder`` when every sample across ``idle_window`` shows the process idle with memory held.

    With a ``tracker`` fed by the same history poll after poll (the poller's), the window is not
    walked again each poll: the tracker knows how many of the newest samples in a row are idle."""
    memory = p.gpu_memory
    if memory is None or memory < settings.idle_holder_memory:
        return None
    # Cheap exits on the newest reading before any window is read (this runs for every process, every poll).
    if (p.sm_utilization is not None and p.sm_utilization > 0) or (
            p.cpu_percent is not None and p.cpu_percent > settings.idle_cpu):
        return None
    if history.shorter_than(settings.idle_window):  # no process watched long enough yet (the test below)
        return None
    key = (p.gpu_index, p.pid, p.create_time)
    samples = history.process_ring(key)
    if not samples:
        return None
    if tracker is not None:
        if history.ordered:
            return tracker.finding(key, samples, memory, history, settings)
        tracker.forget()  # its runs cannot vouch for samples out of time order
    first = _first(samples, settings.idle_window, 0)
    observed = _covered(samples, first, history, settings)
    if observed is None:
        return None
    idle, peak_cpu = _walk(tuple(samples), first, p.gpu_index, history, settings)
    if not idle or peak_cpu is None:
        return None  # a busy sample in the window, or never saw its CPU: cannot vouch that it is idle
    return Finding("idle-holder", _sentence(memory, observed, peak_cpu))


def _first(samples: Sequence[ProcessSample], window: float, hint: int) -> int:
    """The index of the window's first sample: the first at or after ``window`` seconds before the newest.

    A ring that starts inside the window (a process watched for less than the window) starts it at its
    first sample, which is what the search finds. ``hint``: where it was last poll (a full ring shifts
    by one sample as the window does), taken where it is still the first at or after the cutoff."""
    cutoff = samples[-1].t - window
    # the hint first: a ring in time order whose hint holds does not start inside the window, and the
    # ring's oldest sample (cold memory, long unread) is not read
    if 0 < hint < len(samples) and samples[hint].t >= cutoff and samples[hint - 1].t < cutoff:
        return hint
    if samples[0].t >= cutoff:
        return 0
    return bisect_left(samples, cutoff, key=_time)


def _covered(samples: Sequence[ProcessSample], first: int, history: History, settings: Settings) -> float | None:
    """The span observed from the window's ``first`` sample to the newest, when it covers ``idle_window``
    within one sampling step (the window's edge falls between two polls) or the ring is full; else None."""
    observed = samples[-1].t - samples[first].t
    if first > 0:
        step = samples[first].t - samples[first - 1].t
    else:
        step = samples[-1].t - samples[-2].t if len(samples) > 1 else 0.0
    if observed + step >= settings.idle_window or len(samples) >= history.capacity:
        return observed
    return None


def _sentence(memory: int, observed: float, peak_cpu: float) -> str:
    cpu_text = "0% CPU" if peak_cpu == 0 else f"at most {peak_cpu:.1f}% CPU"
    return (f"Holds {gib(memory)} of GPU memory with 0% SM and {cpu_text} throughout the "
            f"{duration(observed)} observed.")


def _idle_sample(s: ProcessSample, settings: Settings, gpu_util: int | None) -> bool:
    """One sample of an idle holder: the memory held, 0% SM (or, with no per-process figure, an
    idle GPU — ``gpu_util``, the GPU's in the same poll: then every process on it is idle), and at
    most ``idle_cpu`` CPU (or no CPU figure yet: the first read of a process has none)."""
    if s.gpu_memory is None or s.gpu_memory < settings.idle_holder_memory:
        return False
    sm = s.sm_utilization if s.sm_utilization is not None else gpu_util
    if sm is None or sm > 0:
        return False
    return s.cpu_percent is None or s.cpu_percent <= settings.idle_cpu


def _walk(samples: Sequence[ProcessSample], first: int, gpu_index: int, history: History,
          settings: Settings) -> tuple[bool, float | None]:
    """(every sample from ``first`` on is idle, the most CPU among them), newest first."""
    gpu_util: _GpuUtilAt | None = None
    peak_cpu: float | None = None
    for i in range(len(samples) - 1, first - 1, -1):
        s = samples[i]
        gpu_sm = None
        if s.sm_utilization is None:
            if gpu_util is None:
                gpu_util = _GpuUtilAt(history, gpu_index, settings.idle_window)
            gpu_sm = gpu_util.at(s.t)
        if not _idle_sample(s, settings, gpu_sm):
            return False, None
        cpu = s.cpu_percent
        if cpu is not None and (peak_cpu is None or cpu > peak_cpu):
            peak_cpu = cpu
    return True, peak_cpu


class _IdleRun:
    """One process identity as the tracker keeps it: the newest samples in a row that are idle (see
    :func:`_idle_sample`), where its window started last poll, and its last finding."""

    __slots__ = ("last", "length", "seq", "peaks", "first", "said")

    def __init__(self, last: ProcessSample, length: int, seq: int, peaks: deque[tuple[int, float]]) -> None:
        #: the newest sample taken into account
        self.last = last
        #: how many samples in a row, ending with ``last``, are idle
        self.length = length
        #: ``last``'s number (the samples before it are numbered one less each)
        self.seq = seq
        #: (number, CPU %) of the run's samples with a CPU figure, CPU strictly decreasing: the first
        #: one at or after a window's first number is the most CPU in that window
        self.peaks = peaks
        #: the index of the window's first sample in the ring at the last judging (see :func:`_first`)
        self.first = 0
        #: the last idle-holder finding, with the figures it was worded from (memory held, span
        #: observed, most CPU): found again with the same figures, it is the same object
        self.said: tuple[int, float, float, Finding] | None = None


class IdleTracker:
    """The idle-holder test of :func:`idle_finding` kept up to date one sample per poll.

    The poller owns one and passes it to :func:`judge_stale` right after each ``History.add``. Per
    process identity it keeps the length of the run of idle samples ending with the newest one, and
    the CPU peaks of that run; a poll then costs a step per process instead of a walk over the whole
    ``idle_window`` (600 samples at 1 s polls) for each process idling with memory held. Where it
    cannot vouch for the samples — a history not fed poll after poll, a wall clock that stepped
    back, samples that do not line up with their GPU's — the window is walked as before, so the
    findings are the same either way. An idle holder found again with the same figures is the same
    ``Finding`` object (the poller then sees its GPU unchanged by identity).
    """

    def __init__(self) -> None:
        self._runs: dict[ProcessKey, _IdleRun] = {}
        self._params: tuple[int, float, float] | None = None
        #: the settings object whose parameters are ``_params`` (settings are immutable records)
        self._settings: Settings | None = None
        #: the history's count of forgotten identities at the last prune (see :meth:`prune`)
        self._departures = -1

    def forget(self) -> None:
        self._runs.clear()

    def finding(self, key: ProcessKey, samples: Sequence[ProcessSample], memory: int, history: History,
                settings: Settings) -> Finding | None:
        """:func:`idle_finding`'s answer for one identity past its cheap exits, in a history in time order."""
        if settings is not self._settings:
            params = (settings.idle_holder_memory, settings.idle_cpu, settings.idle_window)
            if params != self._params:
                self._runs.clear()
                self._params = params
            self._settings = settings
        run = self._runs.get(key)
        first = _first(samples, settings.idle_window, 0 if run is None else run.first)
        if run is not None:
            run.first = first
        observed = _covered(samples, first, history, settings)
        if observed is None:
            return None
        run = self._step(key, run, samples, history, settings)
        if run is None:  # samples that do not line up with their GPU's: walked
            idle, peak_cpu = _walk(tuple(samples), first, key[0], history, settings)
            if not idle or peak_cpu is None:
                return None
            return Finding("idle-holder", _sentence(memory, observed, peak_cpu))
        run.first = first
        need = len(samples) - first
        if run.length < need:
            return None  # a busy sample in the window
        since = run.seq - need + 1
        peaks = run.peaks
        while peaks and peaks[0][0] < since:  # windows only move forward: what left them is done with
            peaks.popleft()
        if not peaks:
            return None  # never saw its CPU: cannot vouch that it is idle
        peak_cpu = peaks[0][1]
        said = run.said
        if said is not None and said[0] == memory and said[1] == observed and said[2] == peak_cpu:
            return said[3]
        message = _sentence(memory, observed, peak_cpu)
        # figures that changed within their wording (a span a rounding apart) keep the same finding
        finding = said[3] if said is not None and said[3].message == message else Finding("idle-holder", message)
        run.said = (memory, observed, peak_cpu, finding)
        return finding

    def prune(self, history: History) -> None:
        """Forget the processes the history no longer holds (looked for only when it forgot some)."""
        if history.departures == self._departures:
            return
        self._departures = history.departures
        for key in [k for k in self._runs if not history.process_ring(k)]:
            del self._runs[key]

    def _step(self, key: ProcessKey, run: _IdleRun | None, samples: Sequence[ProcessSample], history: History,
              settings: Settings) -> _IdleRun | None:
        """The identity's run brought up to the ring's newest sample: one step when the ring gained one
        sample since, else counted back from the newest; None where the samples do not line up."""
        newest = samples[-1]
        n = len(samples)
        if run is not None:
            if run.last is newest:
                return run
            if n >= 2 and samples[-2] is run.last and newest.sm_utilization is not None:
                # one new sample after the run's last, with its own SM figure (no GPU sample needed)
                run.seq += 1
                run.last = newest
                if _idle_sample(newest, settings, None):
                    run.length += 1
                    cpu = newest.cpu_percent
                    if cpu is not None:
                        peaks = run.peaks
                        while peaks and peaks[-1][1] <= cpu:
                            peaks.pop()
                        peaks.append((run.seq, cpu))
                else:
                    run.length = 0
                    run.peaks.clear()
                return run
        gpus = history.gpu_ring(key[0])
        offset = len(gpus) - n  # the GPU's sample of the same poll as samples[i] is gpus[offset + i]
        if offset < 0:
            self._runs.pop(key, None)
            return None
        misaligned = False

        def idle(i: int) -> bool:
            nonlocal misaligned
            s = samples[i]
            gpu_sm = None
            if s.sm_utilization is None:
                g = gpus[offset + i]
                if g.t != s.t:
                    misaligned = True
                    return False
                gpu_sm = g.utilization
            return _idle_sample(s, settings, gpu_sm)

        said = run.said if run is not None else None
        if run is not None and n >= 2 and samples[-2] is run.last:
            run.seq += 1
            run.last = newest
            if idle(n - 1):
                run.length += 1
                if newest.cpu_percent is not None:
                    while run.peaks and run.peaks[-1][1] <= newest.cpu_percent:
                        run.peaks.pop()
                    run.peaks.append((run.seq, newest.cpu_percent))
            else:
                run.length = 0
                run.peaks.clear()
        else:
            start = n
            while start > 0 and idle(start - 1):
                start -= 1
            run = _IdleRun(newest, n - start, n - 1, deque())
            run.said = said
            for i in range(start, n):
                cpu = samples[i].cpu_percent
                if cpu is not None:
                    while run.peaks and run.peaks[-1][1] <= cpu:
                        run.peaks.pop()
                    run.peaks.append((i, cpu))
        if misaligned:
            self._runs.pop(key, None)
            return None
        self._runs[key] = run
        return run


class _GpuUtilAt:
    """The GPU's utilization in its sample taken at a given time, within the GPU's last ``window`` seconds.

    Asked for times newest first (the process's samples, walked back), it walks the GPU's samples back
    alongside them instead of indexing the whole window: a process that is not idle is answered at its
    newest sample, not after 600. Where the samples are not in time order (a wall clock stepped back),
    it falls back to a dict of the window, which answers the same.
    """

    __slots__ = ("_samples", "_cutoff", "_j", "_dict", "_history", "_index", "_window")

    def __init__(self, history: History, index: int, window: float) -> None:
        self._history, self._index, self._window = history, index, window
        self._samples = history.gpu(index)
        self._cutoff = self._samples[-1].t - window if self._samples else 0.0
        self._j = len(self._samples) - 1
        self._dict: dict[float, int | None] | None = None

    def at(self, t: float) -> int | None:
        if self._dict is None:
            samples, j = self._samples, self._j
            while j >= 0 and samples[j].t > t and samples[j].t >= self._cutoff:
                j -= 1
            self._j = j
            if j >= 0 and samples[j].t == t and t >= self._cutoff:
                return samples[j].utilization
            self._dict = {g.t: g.utilization for g in self._history.gpu(self._index, self._window)}
        return self._dict.get(t)


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
                containers_by_id: dict[str, Container], records: dict[str, ContainerRecord],
                idle: IdleTracker | None = None) -> tuple[Finding, ...]:
    """Every stale reason that applies to one process (empty when it is fine). ``idle``: the
    poller's :class:`IdleTracker`, when the history is the one it feeds poll after poll."""
    if (process.visible and not process.orphaned and process.container is None
            and process.status != "zombie" and process.status != "disk-sleep"):
        # Most processes: no ghost, zombie, orphan or container finding can apply (each of those
        # functions answers None for it), only the idle test, whose cheap exits on the newest reading
        # come first here (a computing process: every poll, most candidates)
        sm, cpu = process.sm_utilization, process.cpu_percent
        if (sm is not None and sm > 0) or (cpu is not None and cpu > settings.idle_cpu):
            return ()
        if history.shorter_than(settings.idle_window):  # idle_finding's answer: no ring covers the window yet
            return ()
        idle_holder = idle_finding(process, history, settings, idle)
        return () if idle_holder is None else (idle_holder,)
    found = [
        ghost_finding(process, history),
        zombie_finding(process),
        orphan_finding(process),
        container_finding(process, containers_by_id, records),
        idle_finding(process, history, settings, idle),
    ]
    return tuple(f for f in found if f is not None)
