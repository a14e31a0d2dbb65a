"""Where new work should go: windowed load per GPU, reservations, and ``pick``.

Shared by ``gputui pick`` and by the imbalance judge's suggested move, so "the
least loaded GPU" means the same thing in both.

**Load.** A GPU's load is its mean compute utilisation plus its mean memory use
(percent of total) over the window — the two parts of HAMi's placement score.
Utilisation alone would call a card whose memory a cache warmer filled to 97% at
0% compute the best place for a new job; memory alone would ignore a card that
is saturated by a small kernel loop. Ties go to the card with more free memory,
then to the lower index.

**Taken.** A GPU explicitly granted to a running (or restarting, or paused)
container is *taken*: Docker hands that device to the container whenever it
runs, so a job placed there competes with it even if it is idle right now.
``pick`` never proposes a taken GPU and says so when that is why nothing
qualifies. A ``--gpus all`` grant does not reserve every card (that would make
one such container hide the whole machine); the cards it really uses show up in
their load. Lost GPUs are never proposed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence
from itertools import islice

from gputui.core.history import GpuSample, History
from gputui.core.judges.text import gib, gpus_phrase, index_ranges, over, plural
from gputui.core.model import Container, Gpu, Snapshot
from gputui.core.record import record

#: Container states in which Docker holds the container's granted devices.
RESERVING_STATES = frozenset({"running", "restarting", "paused"})


@record
class GpuLoad:
    """One GPU over a window. ``None`` where the driver does not report a value."""

    index: int
    uuid: str
    lost: bool
    #: mean compute utilisation, percent
    util: float | None
    #: mean memory in use, percent of total
    memory: float | None
    #: free bytes in the newest sample
    free: int | None
    #: least free bytes seen in the window (what a newcomer can count on)
    free_min: int | None
    samples: int

    @property
    def score(self) -> float | None:
        """Load for ranking: utilisation + memory percent (lower is better); None if unknown."""
        if self.util is None:
            return None
        return self.util + (self.memory or 0.0)

    def describe(self) -> str:
        """How it reads in a reason: "11% busy, 3% memory used"."""
        parts = [f"{self.util:.0f}% busy" if self.util is not None else "utilization N/A"]
        if self.memory is not None:
            parts.append(f"{self.memory:.0f}% memory used")
        return ", ".join(parts)


def gpu_loads(history: History, gpus: Iterable[Gpu], window: float | None) -> dict[int, GpuLoad]:
    """Windowed load of each GPU in ``gpus`` (their newest state says whether they are lost).

    Computed once per poll for a given tuple of GPUs and window (the imbalance judge and the
    alerts both ask); each caller gets its own dict."""
    gpus = gpus if isinstance(gpus, tuple) else tuple(gpus)
    key = ("gpu_loads", window)
    hit = history.memo.get(key)
    # The same GPU objects (the judges of one poll pass tuples rebuilt from one snapshot's GPUs):
    # compared by identity, so a GPU object that merely took another's id cannot match.
    if isinstance(hit, tuple) and len(hit[0]) == len(gpus) and all(a is b for a, b in zip(hit[0], gpus, strict=True)):
        return dict(hit[1])
    if window is None:
        out = {g.index: _gpu_load(history, g, window) for g in gpus}
    else:
        # Each GPU's running window stepped here, one sample in (the common case, every poll), without
        # the frames of _gpu_load and _running_window, which do the rest (a rebuild, a ring out of order).
        runs, rings, out = _runs(history, window), history.gpu_rings, {}
        for g in gpus:
            index = g.index
            run, ring = runs.get(index), rings.get(index)
            load = run.step_load(ring, window, g) if run is not None and ring else None
            out[index] = load if load is not None else _gpu_load(history, g, window)
    history.memo[key] = (gpus, out)
    return dict(out)


def _runs(history: History, window: float) -> dict[int, _RunningWindow]:
    """The running windows of this length, per GPU index, kept in the history."""
    key = ("gpu_loads.windows", window)
    runs = history.kept.get(key)
    if not isinstance(runs, dict):
        runs = history.kept[key] = {}
    return runs


class _RunningWindow:
    """One GPU's samples of the last ``window`` seconds, kept up to date one sample per poll: the
    figures :func:`_gpu_load` needs, oldest first, so that a poll takes in one sample and drops those
    that left the window instead of reading the whole window again. Kept only while its samples
    follow each other in time and the history is fed poll after poll; otherwise rebuilt.

    One entry per non-lost sample in each of four deques, side by side (``None`` where a sample has no
    such figure), so that a poll appends to and drops from them in one step each."""

    __slots__ = ("last", "seq", "at", "util", "mem", "free", "gaps", "su", "sm", "sf", "load", "util_sum",
                 "free_low", "mem_sum")

    def __init__(self) -> None:
        #: the newest sample taken in, and its number (samples are numbered as they are taken in)
        self.last: GpuSample | None = None
        self.seq = 0
        #: (number, time) of each non-lost sample; beside it, its utilization, memory percent and free bytes
        self.at: deque[tuple[int, float]] = deque()
        self.util: deque[float | None] = deque()
        self.mem: deque[float | None] = deque()
        self.free: deque[int | None] = deque()
        #: how many entries of the three figures (util, mem, free) are None (ints in the window itself, not
        #: lists: fewer objects read each poll)
        self.gaps = 0
        #: per figure (su: util, sm: mem, sf: free), how many of its newest entries in a row equal the newest
        #: (not None): a figure whose every entry is that value is known by that value and the count alone
        self.su = self.sm = self.sf = 0
        #: the last GpuLoad made while every figure was all one value, and what it was made from
        self.load: tuple[tuple[object, ...], GpuLoad] | None = None
        #: the sum of the utilization values, kept as values come and go while every one is a whole number
        #: (then it is exactly what sum() adds up, without reading every sample's value again); None after
        #: any other
        self.util_sum: float | None = 0.0
        #: the memory percentages' sum exactly as sum() adds them up (left to right from 0): kept as values
        #: are taken in, and None once any left the window (then summed again when next asked)
        self.mem_sum: float | None = 0
        #: (number, free) of the free-memory values that can still be the window's least (increasing
        #: left to right): its first is the least without reading every value
        self.free_low: deque[tuple[int, int]] = deque()

    def step(self, ring: Sequence[GpuSample], window: float) -> bool:
        """Brought up to ``ring``'s newest sample (``window`` seconds long) when that is the last one taken
        in, or the next after it and later: True; else False (the caller builds the window again)."""
        newest, last = ring[-1], self.last
        if last is newest:
            return True
        if last is None or len(ring) < 2 or ring[-2] is not last or newest.t <= last.t:
            return False
        self.take(newest)
        # The ring holds the newest len(ring) samples, and every one taken in since the rebuild was one.
        self.expire(newest.t - window, self.seq - len(ring) + 1)
        return True

    def step_load(self, ring: Sequence[GpuSample], window: float, g: Gpu) -> GpuLoad | None:
        """:meth:`step` then :meth:`uniform_load`, where the newest sample is not lost and no figure has gaps
        (every poll, most GPUs) with :func:`_load` written out here over the kept sums. None where
        :meth:`step` is False."""
        s, last = ring[-1], self.last
        if last is not s:
            if last is None or len(ring) < 2 or ring[-2] is not last or s.t <= last.t or s.lost:
                if not self.step(ring, window):
                    return None
                return self.uniform_load(g)
            self.take(s)
            # the ring holds the newest len(ring) samples, and every one taken in since the rebuild was one
            self.expire(s.t - window, self.seq - len(ring) + 1)
        util = self.util
        n = len(util)
        if not n or g.lost or self.gaps:
            return self.uniform_load(g)
        key = None
        if self.su == n and self.sm == n and self.sf == n:
            # uniform_load's kept load: every figure all one value (the same count and values) and the same
            # fields of ``g``
            used, total = g.memory_used, g.memory_total
            key = (n, util[-1], self.mem[-1], self.free[-1], g.index, g.uuid, False, used, total, None)
            kept = self.load
            if kept is not None and kept[0] == key:
                return kept[1]
        # _load's window, with the kept sums of the utilization and memory values and the least free value,
        # so none reads every sample
        utils: deque[float] = util  # type: ignore[assignment]  # no gaps: every entry a float
        util_sum, mem_sum = self.util_sum, self._mem_sum()
        used, total = g.memory_used, g.memory_total  # g.memory_free, without the property's frame
        # (index, uuid, lost, util, memory, free, free_min, samples)
        load = GpuLoad(g.index, g.uuid, False, (util_sum if util_sum is not None else sum(utils)) / n,
                       mem_sum / n,  # type: ignore[operator]  # no gaps, n values: a sum
                       None if total is None or used is None else max(0, total - used), self.free_low[0][1], n)
        if key is not None:
            self.load = (key, load)
        return load

    def take(self, s: GpuSample) -> None:
        self.seq += 1
        self.last = s
        if s.lost:
            return
        self.at.append((self.seq, s.t))
        u = s.utilization
        if u is None:
            self.util.append(None)
            self.gaps += 1
            self.su = 0
        else:
            value = float(u)
            util = self.util
            self.su = self.su + 1 if util and util[-1] == value else 1
            util.append(value)
            if self.util_sum is not None:
                self.util_sum = self.util_sum + value if value.is_integer() and abs(value) < 2**40 else None
        used, total = s.memory_used, s.memory_total
        mem: float | None = None
        free: int | None = None
        if used is not None and total is not None:
            if total:
                mem = 100.0 * used / total
            free = max(0, total - used)
        if mem is None:
            self.gaps += 1
            self.sm = 0
        else:
            self.sm = self.sm + 1 if self.mem and self.mem[-1] == mem else 1
            if self.mem_sum is not None:
                self.mem_sum = self.mem_sum + mem
        self.mem.append(mem)
        if free is None:
            self.gaps += 1
            self.sf = 0
        else:
            self.sf = self.sf + 1 if self.free and self.free[-1] == free else 1
            low = self.free_low
            while low and low[-1][1] >= free:
                low.pop()
            low.append((self.seq, free))
        self.free.append(free)

    def expire(self, cutoff: float, oldest: int) -> None:
        """Drop the samples older than ``cutoff`` or numbered before ``oldest`` (out of the ring)."""
        at = self.at
        if not at or (at[0][1] >= cutoff and at[0][0] >= oldest):
            return
        util, mem, free, gaps = self.util, self.mem, self.free, self.gaps
        self.mem_sum = None  # (a sum less its first values is not what sum() gives)
        while at and (at[0][1] < cutoff or at[0][0] < oldest):
            at.popleft()
            value = util.popleft()
            if value is None:
                gaps -= 1
            elif self.util_sum is not None:
                self.util_sum -= value
            if mem.popleft() is None:
                gaps -= 1
            if free.popleft() is None:
                gaps -= 1
        self.gaps, n = gaps, len(at)
        if self.su > n:
            self.su = n
        if self.sm > n:
            self.sm = n
        if self.sf > n:
            self.sf = n
        low = self.free_low
        while low and (not at or low[0][0] < at[0][0]):  # left the window with its sample
            low.popleft()

    def _mem_sum(self) -> float | None:
        """``sum()`` of the memory values (no gaps), kept from here until one leaves the window."""
        if self.mem_sum is None and self.mem:
            self.mem_sum = sum(self.mem)  # type: ignore[arg-type]
        return self.mem_sum

    def uniform_load(self, g: Gpu) -> GpuLoad:
        """:func:`_load` of this window, reused while every figure is all one value (the same value and
        count as when it was made: the same sequences) and ``g``'s own fields it reads are the same."""
        util, mem, free = self.util, self.mem, self.free
        n = len(util)
        if self.gaps:  # a figure missing from some samples: each read without its gaps
            utils = [v for v in util if v is not None]
            frees = [v for v in free if v is not None]
            return _load(g, utils, [v for v in mem if v is not None], frees, n,
                         self.util_sum, self.free_low[0][1] if frees else None)
        if self.su != n or self.sm != n or self.sf != n:
            # a GPU whose figures move (every poll): the kept sums of the utilization and memory values and
            # the least free value, so none reads every sample
            return _load(g, util, mem, free, n, self.util_sum,  # type: ignore[arg-type]
                         self.free_low[0][1] if n else None, self._mem_sum())
        kept = self.load
        if kept is not None and kept[0][0] != n:  # another count (a window still filling): another load
            kept = None
        key = (n, util[-1] if n else None, mem[-1] if n else None, free[-1] if n else None, g.index, g.uuid,
               g.lost, g.memory_used, g.memory_total,  # (g.memory_free's)
               None if n else g.utilization_gpu)  # _load's stand-in
        if kept is not None and kept[0] == key:
            return kept[1]
        load = _load(g, util, mem, free, n, self.util_sum,  # type: ignore[arg-type]
                     self.free_low[0][1] if n else None, self._mem_sum())
        self.load = (key, load)
        return load


def _running_window(history: History, index: int, window: float) -> _RunningWindow | None:
    """The GPU's running window brought up to its ring's newest sample, or None where the ring's
    window is not in strict time order (a wall clock that stepped back): then it is read as it is."""
    ring = history.gpu_ring(index)
    runs = _runs(history, window)
    if not ring:
        runs.pop(index, None)
        return None
    run = runs.get(index)
    if isinstance(run, _RunningWindow) and run.step(ring, window):
        return run
    run = _RunningWindow()
    newest = ring[-1]
    cutoff = newest.t - window
    start = len(ring)
    for s in reversed(ring):  # the window as History._tail reads it: back to the first older sample
        if s.t < cutoff:
            break
        start -= 1
    previous = None
    for s in islice(ring, start, None):
        if previous is not None and s.t <= previous:
            runs.pop(index, None)
            return None
        previous = s.t
        run.take(s)
    runs[index] = run
    run.expire(cutoff, run.seq - len(ring) + 1)
    return run


def _gpu_load(history: History, g: Gpu, window: float | None) -> GpuLoad:
    run = _running_window(history, g.index, window) if window is not None else None
    if run is not None:
        return run.uniform_load(g)
    ring = history.gpu_ring(g.index)
    if window is not None and ring:
        cutoff = ring[-1].t - window
        newest_first = []
        for s in reversed(ring):  # samples are in time order: stop at the window's edge
            if s.t < cutoff:
                break
            newest_first.append(s)
        newest_first.reverse()
        samples: Iterable[GpuSample] = newest_first
    else:
        samples = ring
    util: list[float] = []
    mem: list[float] = []
    frees: list[int] = []
    n = 0
    for s in samples:
        if s.lost:
            continue
        n += 1
        if s.utilization is not None:
            util.append(float(s.utilization))
        used, total = s.memory_used, s.memory_total
        if used is not None and total is not None:
            if total:
                mem.append(100.0 * used / total)
            frees.append(max(0, total - used))
    return _load(g, util, mem, frees, n)


def _load(g: Gpu, util: Sequence[float], mem: Sequence[float], frees: Sequence[int], n: int,
          util_sum: float | None = None, free_min: int | None = None, mem_sum: float | None = None) -> GpuLoad:
    """The GpuLoad from the window's figures (oldest first) and its number of non-lost samples.
    ``util_sum``, ``free_min``: ``sum(util)`` and ``min(frees)`` where the caller keeps them (a running
    window), so that neither reads every value again."""
    if not n and not g.lost:
        # Not in the history (a caller judging a bare snapshot): the snapshot is the sample.
        util = [float(g.utilization_gpu)] if g.utilization_gpu is not None else []
        mem = [g.memory_percent] if g.memory_percent is not None else []
        frees = [g.memory_free] if g.memory_free is not None else []
        n = 1
        util_sum = free_min = mem_sum = None
    if g.lost:
        return GpuLoad(g.index, g.uuid, True, None, None, None, None, n)
    if not util:
        mean: float | None = None
    else:
        mean = (util_sum if util_sum is not None else sum(util)) / len(util)
    used, total = g.memory_used, g.memory_total  # g.memory_free, without the property's frame
    # (index, uuid, lost, util, memory, free, free_min, samples)
    return GpuLoad(g.index, g.uuid, False, mean,
                   ((mem_sum if mem_sum is not None else sum(mem)) / len(mem)) if mem else None,
                   None if total is None or used is None else max(0, total - used),
                   None if not frees else (min(frees) if free_min is None else free_min), n)


def rank_key(load: GpuLoad) -> tuple[object, ...]:
    """Best first: known load before unknown, lower load, more free memory, lower index."""
    score = load.score
    free = load.free if load.free is not None else -1
    return (score is None, score if score is not None else 0.0, -free, load.index)


def granted_indices(container: Container, uuid_to_index: dict[str, int]) -> tuple[int, ...]:
    """GPUs a container is explicitly granted, as indices (``--gpus all`` grants none in particular)."""
    if container.gpus == "all":
        return ()
    if container.granted_gpus:
        return tuple(container.granted_gpus)
    return tuple(uuid_to_index[u] for u in container.gpus if u in uuid_to_index)


def reservations(snapshot: Snapshot, gpus: Iterable[Gpu] | None = None) -> dict[int, tuple[str, ...]]:
    """GPU index -> names of the running containers explicitly granted that GPU."""
    uuid_to_index = {g.uuid: g.index for g in (gpus if gpus is not None else snapshot.gpus)}
    out: dict[int, list[str]] = {}
    for c in snapshot.containers:
        if c.state not in RESERVING_STATES:
            continue
        for i in granted_indices(c, uuid_to_index):
            out.setdefault(i, []).append(c.name)
    return {i: tuple(names) for i, names in out.items()}


def allocations(gpus: Iterable[Gpu]) -> dict[int, tuple[str, ...]]:
    """GPU index -> the batch jobs (Slurm) it is allocated to, as "job 7 (alice)"."""
    return {g.index: tuple(f"job {a.job} ({a.user or 'unknown user'})" for a in g.allocated_to)
            for g in gpus if g.allocated_to}


@record
class Pick:
    """The answer of :func:`pick`: chosen GPU indices (best first), or why none qualify."""

    chosen: tuple[int, ...]
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def pick(
    loads: dict[int, GpuLoad],
    reserved: dict[int, tuple[str, ...]],
    count: int = 1,
    min_free: int | None = None,
    max_util: float | None = None,
    observed: float = 0.0,
    suspect: dict[int, str] | None = None,
    held: dict[int, str] | None = None,
    prefer: Collection[int] = (),
    allocated: dict[int, tuple[str, ...]] | None = None,
) -> Pick:
    """The best ``count`` GPUs, or one sentence naming the constraint that could not be met.

    Constraints apply in a fixed order — a name of its own (``suspect``: GPU index -> why its UUID
    cannot name it, from :func:`gputui.core.plausible.uuid_problems`), answers (not lost), not taken,
    enough free memory, low enough utilisation — and the first one that leaves fewer than ``count``
    GPUs is the one reported, with the closest miss.
    """
    ranked = sorted(loads.values(), key=rank_key)
    if prefer:  # the picker's own reservations first, each group in rank order
        ranked.sort(key=lambda g: g.index not in prefer)
    if not ranked:
        return Pick((), "There are no GPUs to pick from.")
    asked = f"{count} {'was' if count == 1 else 'were'} asked for"
    if suspect:
        named = [g for g in ranked if g.index not in suspect]
        if len(named) < count:
            why = "; ".join(suspect[i] for i in sorted(suspect) if i in loads)
            return Pick((), f"{why}: such a card is never picked, and {plural(len(named), 'other GPU')} "
                            f"{'is' if len(named) == 1 else 'are'} left; {asked}.")
        ranked = named

    alive = [g for g in ranked if not g.lost]
    if len(alive) < count:
        if not alive:
            return Pick((), "No GPU can be picked: every GPU is lost (fell off the bus or stopped answering).")
        lost = [g.index for g in ranked if g.lost]
        note = f", {gpus_phrase(lost)} {'is' if len(lost) == 1 else 'are'} lost" if lost else ""
        return Pick((), f"Only {plural(len(alive), 'GPU')} can be picked "
                        f"({index_ranges(g.index for g in alive)}{note}); {asked}.")

    allocated = allocated or {}
    unallocated = [g for g in alive if g.index not in allocated]
    if len(unallocated) < count:
        taken = ", ".join(f"GPU {i} to {' and '.join(allocated[i])}" for i in sorted(allocated)
                          if i in {g.index for g in alive})
        whom = "the only GPU considered is" if len(alive) == 1 else f"all {len(alive)} GPUs considered are"
        if unallocated:
            whom = (f"only {plural(len(unallocated), 'GPU')} ({index_ranges(g.index for g in unallocated)}) "
                    f"{'is' if len(unallocated) == 1 else 'are'} free of Slurm jobs and {asked}")
        else:
            whom += " allocated"
        return Pick((), f"Slurm owns these GPUs: {whom} ({taken}); --include-allocated offers them anyway.")
    alive = unallocated

    if held:  # reserved by the house rules for someone else: never offered
        mine = [g for g in alive if g.index not in held]
        if len(mine) < count:
            why = "; ".join(f"GPU {i} is {held[i]}" for i in sorted(held) if i in {g.index for g in alive})
            if not mine:
                return Pick((), f"Every GPU is reserved for someone else ({why}).")
            return Pick((), f"Only {plural(len(mine), 'GPU')} ({index_ranges(g.index for g in mine)}) "
                            f"{'is' if len(mine) == 1 else 'are'} not reserved for someone else ({why}); {asked}.")
        alive = mine

    free_of_grants = [g for g in alive if g.index not in reserved]
    if len(free_of_grants) < count:
        taken = ", ".join(f"GPU {i} to {' and '.join(reserved[i])}" for i in sorted(reserved)
                          if i in {g.index for g in alive})
        if not free_of_grants:
            whom = "The only GPU considered is" if len(alive) == 1 else f"All {len(alive)} GPUs considered are"
            return Pick((), f"{whom} granted to running containers ({taken}).")
        return Pick((), f"Only {plural(len(free_of_grants), 'GPU')} "
                        f"({index_ranges(g.index for g in free_of_grants)}) "
                        f"{'is' if len(free_of_grants) == 1 else 'are'} not granted to a running container "
                        f"({taken}); {asked}.")

    roomy = free_of_grants
    if min_free is not None:
        roomy = [g for g in free_of_grants if g.free_min is not None and g.free_min >= min_free]
        if len(roomy) < count:
            if not roomy:
                return Pick((), _no_room(free_of_grants, alive, reserved, min_free))
            return Pick((), f"Only {plural(len(roomy), 'GPU')} ({index_ranges(g.index for g in roomy)}) "
                            f"{'has' if len(roomy) == 1 else 'have'} {gib(min_free)} free; {asked}.")

    quiet = roomy
    if max_util is not None:
        quiet = [g for g in roomy if g.util is not None and g.util <= max_util]
        if len(quiet) < count:
            scope = f"with {gib(min_free)} free " if min_free is not None else ""
            if not quiet:
                known = [g for g in roomy if g.util is not None]
                if not known:
                    return Pick((), f"No GPU {scope}reports its utilization, so none can be shown to be at or "
                                    f"below {max_util:g}%.")
                least = min(known, key=lambda g: (g.util, g.index))
                return Pick((), f"No GPU {scope}is at or below {max_util:g}% utilization {over(observed)}: "
                                f"the least busy is GPU {least.index} at {least.util:.0f}%.")
            return Pick((), f"Only {plural(len(quiet), 'GPU')} {scope}"
                            f"({index_ranges(g.index for g in quiet)}) {'is' if len(quiet) == 1 else 'are'} "
                            f"at or below {max_util:g}% utilization; {asked}.")
    return Pick(tuple(g.index for g in quiet[:count]))


def _no_room(candidates: list[GpuLoad], alive: list[GpuLoad], reserved: dict[int, tuple[str, ...]],
             min_free: int) -> str:
    known = [g for g in candidates if g.free_min is not None]
    if not known:
        return f"No GPU reports its free memory, so none can be shown to have {gib(min_free)} free."
    best = max(known, key=lambda g: (g.free_min, -g.index))
    sentence = f"No GPU has {gib(min_free)} free: the most free is {gib(best.free_min)} on GPU {best.index}"
    blocked = [g for g in alive if g.index in reserved and g.free_min is not None and g.free_min >= min_free]
    if blocked:
        names = sorted({n for g in blocked for n in reserved[g.index]})
        sentence += (f" ({gpus_phrase(g.index for g in blocked)} {'has' if len(blocked) == 1 else 'have'} room "
                     f"but {'is' if len(blocked) == 1 else 'are'} granted to {' and '.join(names)})")
    return sentence + "."


# -- output formats -------------------------------------------------------------------------

FORMATS = ("index", "uuid", "env", "docker")


def format_pick(indices: Sequence[int], uuids: dict[int, str], fmt: str) -> str:
    """The chosen GPUs as ``index``, ``uuid``, ``env`` or ``docker`` prints them."""
    if fmt == "index":
        return ",".join(str(i) for i in indices)
    if fmt == "env":
        return "CUDA_VISIBLE_DEVICES=" + ",".join(str(i) for i in indices)
    ids = [uuids[i] for i in indices]
    if fmt == "uuid":
        return ",".join(ids)
    if fmt == "docker":
        if len(ids) == 1:
            return f"--gpus device={ids[0]}"
        # The value contains a comma, which docker's CSV parser splits unless the whole
        # device=... item is double-quoted; the single quotes keep the shell from eating them.
        return f"--gpus '\"device={','.join(ids)}\"'"
    raise ValueError(f"unknown format {fmt!r}")
