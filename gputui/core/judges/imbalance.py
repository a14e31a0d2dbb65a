"""The imbalance judge: is the work spread badly across the GPUs, why, and what one move would help.

The field's headline symptom is GPU 0 at 90-95% while the other cards idle at
10-20%, or one card's memory full while the others are nearly empty — usually
because containers started with ``--gpus all`` let CUDA default to device 0, or
because several containers were granted the same card.

Everything here is a pure function of a :class:`History` and a :class:`Snapshot`
except :class:`ImbalanceJudge`, a thin wrapper that keeps one
:class:`~gputui.core.judges.hysteresis.Latch` per kind.

**Conditions** (each over the window, ``settings.imbalance_window``, 60 s by
default, judged on windowed means so a single spike barely moves them):

* ``utilization`` — one GPU averages at least ``util_high`` (80%) while another
  averages at most ``util_low`` (20%), or the busiest and the idlest differ by
  more than ``util_spread`` (60 points);
* ``memory`` — one GPU's memory averages at least ``memory_high`` (90%) used
  while another's averages at most ``memory_low`` (20%).

**Hysteresis.** A kind is raised when its condition has held for
``imbalance_hold`` seconds (10 s) and cleared when the condition, re-checked with
every threshold ``imbalance_margin`` points (10) more lenient, has failed for
``imbalance_hold`` seconds. While the observation is shorter than the hold —
a one-shot ``snapshot --json`` has a single sample — the verdict is what the
whole observation shows.

**Suggestion.** One move off the hot GPU: a container if one can be moved, else
a bare process. A mover must be a running Docker container (gputui recreates
Docker containers; Kubernetes pods belong to their scheduler) whose processes all
sit on the hot GPU (a multi-GPU job cannot move to one card), that is not stale
(a stale holder should be killed, not moved) and, for a utilisation imbalance,
that computes (moving an idle job lowers nothing). Among those, a container with
no GPU pinned comes first — pinning it removes the cause — then the most
recently started one, which loses the least work when it is recreated. The
target is the GPU with the lowest windowed load (see
:mod:`~gputui.core.judges.placement`) whose free memory holds the mover's
observed peak and that no other running container is granted. With a single job
on the hot GPU there is no suggestion: moving it would only move the hot spot.

**MIG.** A card in MIG mode is not a whole GPU: it reports no utilization and its
memory is split between instances, so it is neither compared nor proposed as a
target here (its instances are judged by memory by ``pick --mig`` and the MIG
checks of ``doctor``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from operator import is_

from gputui.core.config import Settings
from gputui.core.history import History, ProcessKey, ProcessSample
from gputui.core.judges.conditions import (
    Condition,
    Conditions,
    memory_condition,
    strict_and_relaxed,
    utilization_condition,
)
from gputui.core.judges.hysteresis import Latch, advance, effective_hold
from gputui.core.judges.mig_placement import whole_gpus
from gputui.core.judges.placement import GpuLoad, allocations, gpu_loads, granted_indices, rank_key, reservations
from gputui.core.judges.suspect import suspect_indices
from gputui.core.judges.text import duration, gib, gpus_phrase, join_and, over, plural
from gputui.core.model import Container, Gpu, Imbalance, Process, Snapshot, Suggestion
from gputui.core.record import record

KINDS = ("utilization", "memory")


# -- wording --------------------------------------------------------------------------------


def contrast(cond: Condition, observed: float) -> str:
    """The hot GPU against the others: "GPU 0 at 95% while GPUs 1-7 average 9% over 60 s"."""
    return f"{contrast_head(cond)} {over(observed)}"


def contrast_head(cond: Condition) -> str:
    """:func:`contrast` without the observation: "GPU 0 at 95% while GPUs 1-7 average 9%"."""
    if cond.kind == "utilization":
        head = f"GPU {cond.hot} at {cond.hot_value:.0f}%"
        if len(cond.others) == 1:
            rest = f"GPU {cond.others[0]} is at {cond.others_mean:.0f}%"
        elif cond.others_mean <= cond.low:
            rest = f"{gpus_phrase(cond.others)} average {cond.others_mean:.0f}%"
        else:
            rest = f"GPU {cond.coldest} is at {cond.coldest_value:.0f}%"
    else:
        head = f"GPU {cond.hot}'s memory is {cond.hot_value:.0f}% used"
        if len(cond.others) == 1:
            rest = f"GPU {cond.others[0]}'s is {cond.others_mean:.0f}%"
        elif cond.others_mean <= cond.low:
            rest = f"{gpus_phrase(cond.others)} average {cond.others_mean:.0f}%"
        else:
            rest = f"GPU {cond.coldest}'s is {cond.coldest_value:.0f}%"
    return f"{head} while {rest}"


def _containers_on(snapshot: Snapshot, gpu: int) -> dict[str, list[Process]]:
    out: dict[str, list[Process]] = {}
    g = snapshot.gpu(gpu)
    for p in g.processes if g else ():
        if p.container is not None:
            out.setdefault(p.container.id, []).append(p)
    return out


def _container(snapshot: Snapshot, cid: str) -> Container | None:
    for c in snapshot.containers:
        if c.id == cid:
            return c
    return None


def _unpinned(c: Container) -> bool:
    return (c.gpus == "all" and not c.cuda_visible_devices) or any(f.kind == "unpinned" for f in c.findings)


_ALL_GRANT = {
    "device_request": "--gpus all",
    "nvidia_runtime_env": "NVIDIA_VISIBLE_DEVICES=all",
    "cdi": "nvidia.com/gpu=all",
    "devices": "every /dev/nvidia* device",
    "kubelet": "every GPU",
    "none": "no GPU grant",
}


def pile_up(snapshot: Snapshot, gpu: int) -> tuple[int, int]:
    """(processes, distinct containers) on one GPU."""
    g = snapshot.gpu(gpu)
    procs = g.processes if g else ()
    return len(procs), len({p.container.id for p in procs if p.container is not None})


def causes(snapshot: Snapshot, gpu: int) -> list[str]:
    """Why work piled onto ``gpu``, where the containers tell: unpinned grants, shared grants."""
    out: list[str] = []
    on_gpu = _containers_on(snapshot, gpu)
    first = min((g.index for g in snapshot.gpus), default=gpu)
    by_grant: dict[str, list[str]] = {}
    for cid in on_gpu:
        c = _container(snapshot, cid)
        if c is not None and _unpinned(c):
            by_grant.setdefault(_ALL_GRANT.get(c.grant_source, "--gpus all"), []).append(c.name)
    for grant, names in by_grant.items():
        verb = "has" if len(names) == 1 else "have"
        if gpu == first:
            # CUDA numbers the devices a process sees from 0; with every GPU visible, device 0 is this one.
            out.append(f"{join_and(names)} {verb} no GPU pinned ({grant}) and defaulted to GPU {gpu}")
        else:
            out.append(f"{join_and(names)} {verb} no GPU pinned ({grant}) and {'runs' if len(names) == 1 else 'run'} "
                       f"on GPU {gpu}")
    uuid_to_index = {g.uuid: g.index for g in snapshot.gpus}
    sharing = [c.name for c in snapshot.containers
               if c.state in ("running", "restarting", "paused") and gpu in granted_indices(c, uuid_to_index)]
    if len(sharing) >= 2:
        out.append(f"{join_and(sharing)} are {'both' if len(sharing) == 2 else 'all'} granted GPU {gpu}")
    return out


def describe(conditions: list[Condition], snapshot: Snapshot, observed: float) -> str:
    """The banner's message: one sentence per kind, with the pile-up and its causes."""
    return _sentences(_described(conditions, snapshot), observed)


def _described(conditions: list[Condition], snapshot: Snapshot) -> list[tuple[str, str]]:
    """Per condition, its sentence in two parts around the observation (:func:`over`): the contrast's
    head, and the pile-up and causes with the full stop."""
    parts: list[tuple[str, str]] = []
    explained: set[int] = set()
    for cond in conditions:
        details: list[str] = []
        if cond.hot not in explained:
            explained.add(cond.hot)
            jobs, containers = pile_up(snapshot, cond.hot)
            if jobs >= 2:
                extra = f" ({plural(containers, 'container')})" if containers else ""
                details.append(f"{jobs} jobs{extra} piled on GPU {cond.hot}")
            details.extend(causes(snapshot, cond.hot))
        parts.append((contrast_head(cond), (": " + "; ".join(details) if details else "") + "."))
    return parts


def _sentences(parts: list[tuple[str, str]], observed: float) -> str:
    seen = over(observed)
    return " ".join([f"{head} {seen}{tail}" for head, tail in parts])


def _kept_description(conditions: list[Condition], snapshot: Snapshot, history: History, observed: float) -> str:
    """:func:`describe`, its parts (all but the observation) kept in the history from poll to poll while
    everything they read is the same: the conditions, each hot GPU's processes (the very tuple: the same
    rows), the containers and, where there are containers, every GPU's index and UUID (their grants name
    GPUs by UUID)."""
    rows = []
    for cond in conditions:
        g = snapshot.gpu(cond.hot)
        rows.append(g.processes if g is not None else None)
    containers = snapshot.containers
    layout = tuple([(g.index, g.uuid) for g in snapshot.gpus]) if containers else None
    kept = history.kept.get("imbalance.describe")
    if (isinstance(kept, tuple) and kept[0] == conditions and kept[2] == containers and kept[3] == layout
            and len(kept[1]) == len(rows) and all(a is b for a, b in zip(kept[1], rows, strict=True))):
        parts: list[tuple[str, str]] = kept[4]
    else:
        parts = _described(conditions, snapshot)
        history.kept["imbalance.describe"] = (list(conditions), rows, containers, layout, parts)
    return _sentences(parts, observed)


# -- the suggestion ---------------------------------------------------------------------------


@record
class _Mover:
    label: str
    container: str | None
    pid: int | None
    peak: int
    unpinned: bool
    started: float | None


class _RunningSm:
    """A process's SM figures of the last window, kept from poll to poll: (number, time, SM %) of the
    samples that have one, oldest first, numbered as taken in, and their sum."""

    __slots__ = ("window", "last", "seq", "values", "total")

    def __init__(self, window: float) -> None:
        self.window = window
        self.last: ProcessSample | None = None
        self.seq = 0
        self.values: deque[tuple[int, float, int]] = deque()
        self.total = 0

    def take(self, s: ProcessSample) -> None:
        self.seq += 1
        self.last = s
        if s.sm_utilization is not None:
            self.values.append((self.seq, s.t, s.sm_utilization))
            self.total += s.sm_utilization


def _running_sm(history: History, key: ProcessKey, ring: Sequence[ProcessSample], window: float) -> _RunningSm:
    """The process's running SM window brought up to its ring's newest sample (the ring is in time
    order: the caller checked ``history.ordered``)."""
    kept = history.process_kept(key)
    run = kept.get("imbalance.sm")
    newest = ring[-1]
    if not isinstance(run, _RunningSm) or run.window != window:
        run = None
    if run is not None and run.last is newest:
        pass
    elif run is not None and run.last is not None and len(ring) >= 2 and ring[-2] is run.last \
            and newest.t > run.last.t:
        run.take(newest)
    else:
        run = _RunningSm(window)
        cutoff = newest.t - window
        start = len(ring)
        while start > 0 and ring[start - 1].t >= cutoff:
            start -= 1
        for s in islice(ring, start, None):
            run.take(s)
        kept["imbalance.sm"] = run
    cutoff = newest.t - window
    oldest = run.seq - len(ring) + 1  # every sample taken in since the rebuild entered the ring
    values = run.values
    while values and (values[0][1] < cutoff or values[0][0] < oldest):
        run.total -= values.popleft()[2]
    return run


def _sm_mean(history: History, p: Process, window: float) -> float | None:
    """The process's mean SM % over the window's samples that have one (its newest reading when
    none has). Kept running from poll to poll while the history's rings are in time order."""
    key = (p.gpu_index, p.pid, p.create_time)
    ring = history.process_ring(key)
    if ring and history.ordered:
        run = _running_sm(history, key, ring, window)
        if run.values:
            return run.total / len(run.values)
    else:
        values = [s.sm_utilization for s in history.process(key, window) if s.sm_utilization is not None]
        if values:
            return sum(values) / len(values)
    return float(p.sm_utilization) if p.sm_utilization is not None else None


def _computes(history: History, procs: list[Process], window: float) -> bool:
    means = [_sm_mean(history, p, window) for p in procs]
    known = [m for m in means if m is not None]
    return not known or sum(known) > 0


class _RunningPeak:
    """The most GPU memory in a process's ring, kept from poll to poll: (number, memory) of the
    samples that can still be the peak (memory strictly decreasing), numbered as taken in."""

    __slots__ = ("last", "seq", "peaks")

    def __init__(self) -> None:
        self.last: ProcessSample | None = None
        self.seq = 0
        self.peaks: deque[tuple[int, int]] = deque()

    def take(self, s: ProcessSample) -> None:
        self.seq += 1
        self.last = s
        if s.gpu_memory is not None:
            while self.peaks and self.peaks[-1][1] <= s.gpu_memory:
                self.peaks.pop()
            self.peaks.append((self.seq, s.gpu_memory))


def _process_peak(history: History, p: Process) -> int:
    """The most GPU memory the process held in the samples the history keeps (its newest reading
    counts even when it has none). Kept running for the processes asked about, poll after poll."""
    key = (p.gpu_index, p.pid, p.create_time)
    ring = history.process_ring(key)
    if not ring:
        return p.gpu_memory or 0
    kept = history.process_kept(key)
    run = kept.get("imbalance.peak")
    if isinstance(run, _RunningPeak) and run.last is ring[-1]:
        pass
    elif isinstance(run, _RunningPeak) and len(ring) >= 2 and ring[-2] is run.last:
        run.take(ring[-1])
    else:
        run = _RunningPeak()
        for s in ring:
            run.take(s)
        kept["imbalance.peak"] = run
    oldest = run.seq - len(ring) + 1  # every sample taken in since the rebuild entered the ring
    while run.peaks and run.peaks[0][0] < oldest:
        run.peaks.popleft()
    if not run.peaks:
        return p.gpu_memory or 0
    return max(run.peaks[0][1], p.gpu_memory or 0)


def movers(cond: Condition, snapshot: Snapshot, history: History, window: float) -> list[_Mover]:
    """Who could leave the hot GPU, best first (containers before bare processes)."""
    containers, bare = _movers(cond, snapshot, history, window)
    return containers + list(bare)


def _movers(cond: Condition, snapshot: Snapshot, history: History,
            window: float) -> tuple[list[_Mover], Iterator[_Mover]]:
    """:func:`movers`: the containers, and the bare processes as they are asked for. A bare process's
    place in the order (its start) is known without its history; whether it computes and its peak are
    read only when it is reached, so a suggestion that the first one fits reads one process's windows,
    not those of every process on the hot GPU."""
    hot = snapshot.gpu(cond.hot)
    if hot is None or len(hot.processes) < 2:
        return [], iter(())
    containers: list[_Mover] = []
    on_hot = _containers_on(snapshot, cond.hot)
    all_procs = snapshot.processes if on_hot else ()
    for cid, procs in on_hot.items():
        c = _container(snapshot, cid)
        if c is None or c.runtime != "docker" or c.state != "running":
            continue
        if any(p.gpu_index != cond.hot for p in all_procs if p.container and p.container.id == cid):
            continue
        if any(p.stale for p in procs):
            continue
        if cond.kind == "utilization" and not _computes(history, procs, window):
            continue
        starts = [p.create_time for p in procs if p.create_time is not None]
        peak = history.container_peak_memory(cid) or sum(p.gpu_memory or 0 for p in procs)
        containers.append(_Mover(c.name, c.name, None, peak, _unpinned(c), min(starts) if starts else None))
    containers.sort(key=lambda m: (not m.unpinned, -(m.started or 0.0)))
    # sorted before the filter below: a stable sort keeps the order a filter-then-sort gives
    order = sorted((p for p in hot.processes if p.container is None and p.visible and not p.stale),
                   key=lambda p: -(p.create_time or 0.0))

    def bare() -> Iterator[_Mover]:
        for p in order:
            if cond.kind == "utilization":  # _computes(history, [p], window), for one process
                mean = _sm_mean(history, p, window)
                if mean is not None and mean <= 0:
                    continue
            yield _Mover(f"PID {p.pid}", None, p.pid, _process_peak(history, p), False, p.create_time)

    return containers, bare()


def suggest(cond: Condition, loads: dict[int, GpuLoad], snapshot: Snapshot, history: History,
            settings: Settings, observed: float) -> Suggestion | None:
    """One concrete move off ``cond.hot``, or None when no move would help or fit."""
    window = settings.imbalance_window
    hot = snapshot.gpu(cond.hot)
    rows = hot.processes if hot is not None else None
    if cond.kind == "utilization" and rows is not None and _still_no_mover(history, rows, window):
        return None
    containers, bare = _movers(cond, snapshot, history, window)
    reserved = reservations(snapshot)
    allocated = allocations(snapshot.gpus)  # Slurm's: nothing may be moved onto a job's GPU
    others = sorted((g for g in loads.values() if g.index != cond.hot and not g.lost), key=rank_key)
    if not others:
        return None
    n_containers = sum(1 for m in containers if m.container)
    now = history.now
    if now is None:
        now = snapshot.time.timestamp()
    moved = False
    for mover in chain(containers, bare):
        moved = True
        fits = [g for g in others
                if g.free is not None and g.free >= mover.peak
                and not set(reserved.get(g.index, ())) - {mover.container} and g.index not in allocated]
        if not fits:
            continue
        target = fits[0]
        reason = (f"GPU {target.index} has {gib(target.free)} free ({mover.label} peaked at {gib(mover.peak)}) "
                  f"and the lowest load ({target.describe()}) {over(observed)}")
        passed_over = _passed_over(others[: others.index(target)], reserved, allocated, mover)
        if passed_over:
            reason += f" among the GPUs that can take it ({passed_over})"
        if mover.container and mover.unpinned:
            why = (f"{mover.label} is the one to move because it has no GPU pinned, so pinning it to "
                   f"GPU {target.index} also removes the cause")
        elif mover.container and n_containers == 1:
            why = f"{mover.label} is the only container on GPU {cond.hot} that can be recreated on another GPU"
        elif mover.container:
            age = f" ({duration(now - mover.started)} ago)" if mover.started is not None else ""
            why = (f"{mover.label} is the one to move because it started most recently{age} and loses the least "
                   f"work when recreated")
        else:
            why = (f"{mover.label} runs outside any container: restart it with "
                   f"CUDA_VISIBLE_DEVICES={target.index}")
        return Suggestion(from_gpu=cond.hot, to_gpu=target.index, reason=f"{reason}; {why}.",
                          container=mover.container, pid=mover.pid)
    if not moved and cond.kind == "utilization" and rows is not None:
        history.kept["imbalance.no_mover"] = [rows, window, False]  # see _still_no_mover
    return None


def _still_no_mover(history: History, rows: tuple[Process, ...], window: float) -> bool:
    """Whether the hot GPU's rows are the very tuple in which the last utilization suggestion found no
    process that computes, and that still holds: none of them in a container, and every one that could
    move reads 0% SM now with no other SM figure in its window. The history then takes in 0% for each
    poll after poll (the same rows), so no window's mean can rise above 0 and nobody can become a mover.
    Checked once for the rows and the window; then one look per poll instead of every process's windows."""
    kept = history.kept.get("imbalance.no_mover")
    if not isinstance(kept, list) or kept[0] is not rows or kept[1] != window:
        return False
    if not kept[2]:
        for p in rows:
            if p.container is not None:
                break
            if p.visible and not p.stale:
                if p.sm_utilization != 0:
                    break
                if any(s.sm_utilization for s in history.process((p.gpu_index, p.pid, p.create_time), window)):
                    break
        else:
            kept[2] = True
    if not kept[2]:
        del history.kept["imbalance.no_mover"]
    return bool(kept[2])


def _passed_over(better: list[GpuLoad], reserved: dict[int, tuple[str, ...]], allocated: dict[int, tuple[str, ...]],
                 mover: _Mover) -> str:
    """Why GPUs with a lower load than the target were not chosen: "GPU 7 is granted to batch-reserve"."""
    notes = []
    for g in better:
        names = [n for n in reserved.get(g.index, ()) if n != mover.container]
        if g.index in allocated:
            notes.append(f"GPU {g.index} is allocated to Slurm {join_and(list(allocated[g.index]))}")
        elif names:
            notes.append(f"GPU {g.index} is granted to {join_and(names)}")
        else:
            notes.append(f"GPU {g.index} has only {gib(g.free)} free")
    if len(notes) > 2:
        notes = notes[:2] + [f"{plural(len(notes) - 2, 'other')} cannot either"]
    return "; ".join(notes)


def judge(conditions: list[Condition], loads: dict[int, GpuLoad], snapshot: Snapshot, history: History,
          settings: Settings, observed: float) -> Imbalance:
    """The Imbalance for these active conditions (utilisation first: it drives the suggestion)."""
    if not conditions:
        return Imbalance()
    if len(conditions) > 1:
        conditions = sorted(conditions, key=lambda c: KINDS.index(c.kind))
    suggestion = None
    for cond in conditions:
        suggestion = suggest(cond, loads, snapshot, history, settings, observed)
        if suggestion is not None:
            break
    provisional = history.span < settings.imbalance_hold
    message = _kept_description(conditions, snapshot, history, observed)
    kinds = tuple([c.kind for c in conditions])
    kept = history.kept.get("imbalance.verdict")
    if (isinstance(kept, Imbalance) and kept.message == message and kept.kinds == kinds
            and kept.provisional == provisional and kept.suggestion == suggestion):
        return kept  # the last poll's verdict again, as the same object
    verdict = Imbalance(flagged=True, provisional=provisional, kinds=kinds, message=message, suggestion=suggestion)
    history.kept["imbalance.verdict"] = verdict
    return verdict


def trusted_loads(history: History, snapshot: Snapshot, settings: Settings) -> dict[int, GpuLoad]:
    """The windowed loads, without GPUs whose reading is suspect (100% busy, no process, no memory):
    a card that looks broken is no evidence of a pile-up (the alerts name it instead). Cards in MIG mode
    are not whole GPUs and are left out too.

    Computed once per poll for one tuple of GPUs and window (the imbalance judge and the imbalance
    alert both ask, with the same snapshot's GPUs); each caller gets its own dict."""
    return dict(_trusted(history, snapshot, settings))


def _trusted(history: History, snapshot: Snapshot, settings: Settings) -> dict[int, GpuLoad]:
    """:func:`trusted_loads`, the memo's own dict (not to be changed)."""
    gpus, window = snapshot.gpus, settings.imbalance_window
    key = ("trusted_loads", window)
    hit = history.memo.get(key)
    if isinstance(hit, tuple) and hit[0] is gpus:  # a tuple of immutable GPUs: the same object, the same loads
        found: dict[int, GpuLoad] = hit[1]
        return found
    # the whole GPUs and the suspect ones, kept from poll to poll while the GPUs are the very same
    # (immutable) objects: all either reads
    kept = history.kept.get("imbalance.trusted")
    if isinstance(kept, tuple) and len(kept[0]) == len(gpus) and all(map(is_, kept[0], gpus)):
        whole: tuple[Gpu, ...] = kept[1]
        bad: frozenset[int] = kept[2]
    else:
        whole, bad = whole_gpus(gpus)[0], suspect_indices(snapshot)
    history.kept["imbalance.trusted"] = (gpus, whole, bad)
    loads = gpu_loads(history, whole, window)
    trusted = {i: g for i, g in loads.items() if i not in bad} if bad else loads
    history.memo[key] = (gpus, trusted)
    return trusted


def judged_conditions(history: History, snapshot: Snapshot,
                      settings: Settings) -> tuple[dict[int, GpuLoad], Conditions, Conditions]:
    """(trusted loads, (utilization, memory) strict conditions, the same ``imbalance_margin`` points more
    lenient) of this poll: computed once per poll for one snapshot's GPUs and one settings object (the
    judge and the imbalance alert both ask; the loads are not to be changed). The conditions are kept
    from poll to poll while every GPU's figures they read (index, lost, utilization, memory: not the
    samples counted, which grow while the window fills) and the settings object (a frozen record) are
    the same."""
    gpus = snapshot.gpus
    hit = history.memo.get("imbalance.judged")
    if isinstance(hit, tuple) and hit[0] is gpus and hit[1] is settings:
        judged: tuple[dict[int, GpuLoad], Conditions, Conditions] = hit[2]
        return judged
    loads = _trusted(history, snapshot, settings)
    items = [(g.index, g.lost, g.util, g.memory) for g in loads.values()]
    kept = history.kept.get("imbalance.judged")
    if isinstance(kept, tuple) and kept[0] is settings and kept[1] == items:
        stricts: Conditions = kept[2]
        relaxeds: Conditions = kept[3]
    else:
        stricts, relaxeds = strict_and_relaxed(loads, settings)
        history.kept["imbalance.judged"] = (settings, items, stricts, relaxeds)
    judged = (loads, stricts, relaxeds)
    history.memo["imbalance.judged"] = (gpus, settings, judged)
    return judged


def observed_span(history: History, settings: Settings) -> float:
    return min(settings.imbalance_window, history.span)


def assess(history: History, snapshot: Snapshot, settings: Settings) -> Imbalance:
    """The windowed verdict without hysteresis (strict thresholds): what this window alone shows."""
    loads = trusted_loads(history, snapshot, settings)
    conds = [c for c in (utilization_condition(loads, settings), memory_condition(loads, settings)) if c]
    return judge(conds, loads, snapshot, history, settings, observed_span(history, settings))


class ImbalanceJudge:
    """:func:`assess` with hysteresis: one latch per kind, fed one poll at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._latches: dict[str, Latch] = {k: Latch() for k in KINDS}
        #: the condition last seen while a kind was active (used while a clear is pending)
        self._last: dict[str, Condition] = {}

    def update(self, history: History, snapshot: Snapshot) -> Imbalance:
        s = self.settings
        now = history.now
        if now is None:
            now = snapshot.time.timestamp()
        hold = effective_hold(s.imbalance_hold, history.span)
        loads, stricts, relaxeds = judged_conditions(history, snapshot, s)
        active: list[Condition] = []
        for kind, strict, relaxed in (("utilization", stricts[0], relaxeds[0]), ("memory", stricts[1], relaxeds[1])):
            latch = advance(self._latches[kind], now, strict is not None, relaxed is not None, hold)
            self._latches[kind] = latch
            if not latch.active:
                self._last.pop(kind, None)
                continue
            current = strict or relaxed or self._last.get(kind)
            if current is not None:
                self._last[kind] = current
                active.append(current)
        return judge(active, loads, snapshot, history, s, observed_span(history, s))

    def since(self, kind: str) -> float | None:
        """When the condition of an active kind began (POSIX time), else None."""
        latch = self._latches.get(kind)
        return latch.since if latch is not None and latch.active else None
