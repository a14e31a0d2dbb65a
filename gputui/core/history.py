"""Ring buffers of recent snapshots' numbers, read by the judges and the graphs.

History is written by one thread only (the poller's), once per poll, and read as
immutable tuples: ``series()`` copies, so a reader never sees a buffer change
under it.
"""

from __future__ import annotations

import math
from collections import deque, namedtuple
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from gputui.core.model import Process, Snapshot
from gputui.core.record import record

#: Kept by default: at 1 s polls, a little over 10 minutes of history.
DEFAULT_CAPACITY = 720


@record
class GpuSample:
    t: float
    utilization: int | None
    memory_used: int | None
    memory_total: int | None
    temperature: int | None
    power_draw: float | None
    lost: bool
    n_processes: int


if TYPE_CHECKING:
    class ProcessSample(NamedTuple):
        t: float
        gpu_memory: int | None
        sm_utilization: int | None
        cpu_percent: float | None
else:
    # typing.NamedTuple would compile each (string) annotation at import: ~1 ms of a one-shot's start
    ProcessSample = namedtuple("ProcessSample", ("t", "gpu_memory", "sm_utilization", "cpu_percent"))
    ProcessSample.__doc__ = """One poll's figures of one process. A named tuple, not a record: a poll makes one per
    GPU process (thousands on a big machine), and a tuple is built several times faster."""


#: A process's identity: (GPU index, PID, start time). PIDs get reused; the
#: start time tells a new process from an old one with the same number.
ProcessKey = tuple[int, int, float | None]


class History:
    """Per-GPU, per-process and per-container samples over a bounded window."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._gpus: dict[int, deque[GpuSample]] = {}
        self._procs: dict[ProcessKey, deque[ProcessSample]] = {}
        #: container id -> deque of (t, {gpu index: gpu memory})
        self._containers: dict[str, deque[tuple[float, dict[int, int]]]] = {}
        self._times: deque[float] = deque(maxlen=capacity)
        #: container id -> the most GPU memory its processes held at once (survives trimming)
        self._peaks: dict[str, int] = {}
        #: first time each process key was seen (survives the ring's trimming)
        self._first_seen: dict[ProcessKey, float] = {}
        #: polls recorded, and the number of the last one whose time did not follow its predecessor's
        self._adds = 0
        self._disorder_at: int | None = None
        #: whether some add() took in one identity twice on one GPU (two rows: two samples in one poll)
        self._doubled = False
        #: see shorter_than(): twice the span of the poll times recorded while every sample held is one of
        #: them, one per poll, in time order, and no ring can be full; else infinity (set by add())
        self._reach = 0.0
        #: values the judges derive from the history as it stands (see ``memo``); a new dict each add()
        self._memo: dict[Hashable, object] = {}
        #: state the judges keep in step with the history from poll to poll (see ``kept``)
        self._kept: dict[Hashable, object] = {}
        #: the same per process identity, forgotten with the process (see ``process_kept``)
        self._proc_kept: dict[ProcessKey, dict[str, object]] = {}
        #: process identities forgotten so far (see ``departures``)
        self._departures = 0
        #: GPU index -> the processes tuple the last add() took from that GPU, and what it found for it:
        #: per process its ring, and the sample it took in (its figures), the identities, the GPU memory
        #: per container, and the identities in row order. While a GPU hands in the very same tuple (the
        #: poller's steady state), its processes are the same rows with the same rings, and a poll appends
        #: one sample per row without a lookup; while it hands in new rows of the same identities in the
        #: same order (figures moving), each row's ring is the one at its place. Every entry names only
        #: rings of identities the last add() saw, so none can name a ring the history no longer holds.
        self._rows: dict[int, tuple[tuple[Process, ...], list[deque[ProcessSample]], list[ProcessSample],
                                    frozenset[ProcessKey], dict[str, int], tuple[ProcessKey, ...]]] = {}
        #: the GPU indices of the last add(), in order: when they and every GPU's rows are the same again,
        #: the rings held are exactly those the last add() left (nobody came or left)
        self._last_indices: tuple[int, ...] = ()

    # -- writing -----------------------------------------------------------
    def add(self, snap: Snapshot, container_ids: Iterable[str] = ()) -> None:
        """Record one poll. ``container_ids`` adds containers that have no process
        (so an idle grant has a history); containers in ``snap.containers`` and
        those owning processes are recorded anyway."""
        t = snap.time.timestamp()
        if self._times and t <= self._times[-1]:  # the wall clock stepped back (or stood still)
            self._disorder_at = self._adds
        self._adds += 1
        self._memo = {}
        self._times.append(t)
        # One pass over the processes, with the per-process work kept to a ring lookup and an append
        # (this runs for every GPU process on every poll): a new ring and a first-seen time only for
        # a process seen for the first time, and the sweep for departed ones only when some left.
        seen: set[ProcessKey] | None = None  # built only when some GPU's processes changed
        kept_rows = self._rows
        new_tuple = tuple.__new__
        procs, capacity = self._procs, self.capacity
        usage: dict[str, dict[int, int]] = {cid: {} for cid in container_ids}
        for c in snap.containers:
            usage.setdefault(c.id, {})
        indices = []
        steady: list[frozenset[ProcessKey]] = []  # the keys of the GPUs that handed in their kept rows
        for g in snap.gpus:
            index = g.index
            indices.append(index)
            ring = self._gpus.get(index)
            if ring is None:
                ring = self._gpus[index] = deque(maxlen=capacity)
            rows = g.processes
            ring.append(GpuSample(t, g.utilization_gpu, g.memory_used, g.memory_total, g.temperature,
                                  g.power_draw, g.lost, len(rows)))
            kept = kept_rows.get(index)
            if kept is not None and kept[0] is rows:
                # ProcessSample(...) without its Python __new__, with the figures of the last sample
                for ring_of, (_, memory, sm, cpu) in zip(kept[1], kept[2], strict=True):
                    ring_of.append(new_tuple(ProcessSample, (t, memory, sm, cpu)))
                for cid, memory in kept[4].items():
                    per_gpu = usage.setdefault(cid, {})
                    per_gpu[index] = per_gpu.get(index, 0) + memory
                steady.append(kept[3])
                continue
            rings: list[deque[ProcessSample]] = []
            taken: list[ProcessSample] = []
            memory_by_container: dict[str, int] = {}
            done = 0  # rows taken in at the place the last add() found their identity
            if kept is not None and len(kept[5]) == len(rows):
                for p, key, samples in zip(rows, kept[5], kept[1], strict=True):
                    if p.pid != key[1] or p.create_time != key[2] or p.gpu_index != key[0]:
                        break
                    memory = p.gpu_memory
                    sample = new_tuple(ProcessSample, (t, memory, p.sm_utilization, p.cpu_percent))
                    samples.append(sample)
                    taken.append(sample)
                    done += 1
                    if p.container is not None:
                        cid = p.container.id
                        per_gpu = usage.setdefault(cid, {})
                        per_gpu[index] = per_gpu.get(index, 0) + (memory or 0)
                        memory_by_container[cid] = memory_by_container.get(cid, 0) + (memory or 0)
                if done == len(rows):  # the same identities: the same keys and rings, nobody came or left
                    kept_rows[index] = (rows, kept[1], taken, kept[3], memory_by_container, kept[5])
                    steady.append(kept[3])
                    continue
                rings = kept[1][:done]
            if seen is None:
                seen = set()
            order_keys = list(kept[5][:done]) if kept is not None and done else []
            for p in rows[done:] if done else rows:
                key = (p.gpu_index, p.pid, p.create_time)
                order_keys.append(key)
                found = procs.get(key)
                if found is None:
                    found = procs[key] = deque(maxlen=capacity)
                    self._first_seen.setdefault(key, t)
                memory = p.gpu_memory
                sample = new_tuple(ProcessSample, (t, memory, p.sm_utilization, p.cpu_percent))
                found.append(sample)
                rings.append(found)
                taken.append(sample)
                if p.container is not None:
                    cid = p.container.id
                    per_gpu = usage.setdefault(cid, {})
                    per_gpu[index] = per_gpu.get(index, 0) + (memory or 0)
                    memory_by_container[cid] = memory_by_container.get(cid, 0) + (memory or 0)
            keys = frozenset(order_keys)
            if len(keys) != len(order_keys):
                self._doubled = True
            seen |= keys
            kept_rows[index] = (rows, rings, taken, keys, memory_by_container, tuple(order_keys))
        order = tuple(indices)
        if seen is not None or order != self._last_indices:  # else: the last add()'s rows, rings and sweep
            every: set[ProcessKey] = set() if seen is None else seen
            for same in steady:
                every |= same
            seen = every
            if len(seen) != len(procs):  # every key seen is in procs: equal sizes mean nobody left
                for key in [k for k in procs if k not in seen]:
                    del procs[key]
                    self._departures += 1
                    self._first_seen.pop(key, None)
                    self._proc_kept.pop(key, None)
            # Every ring a kept entry of this add names was seen; a GPU absent from it keeps none.
            for index in [i for i in kept_rows if i not in order]:
                del kept_rows[index]
        self._last_indices = order
        live = set(usage)
        for cid, per_gpu in usage.items():
            self._containers.setdefault(cid, deque(maxlen=self.capacity)).append((t, per_gpu))
            total = sum(per_gpu.values())
            if total > self._peaks.get(cid, -1):
                self._peaks[cid] = total
        for cid in [k for k in self._containers if k not in live]:
            del self._containers[cid]
            self._peaks.pop(cid, None)
        times = self._times
        n = len(times)
        self._reach = (2 * (times[-1] - times[0] if n > 1 else 0.0)
                      if n < self.capacity and not self._doubled and self.ordered else math.inf)

    # -- reading -----------------------------------------------------------
    @property
    def span(self) -> float:
        """Seconds between the oldest and newest sample."""
        return self._times[-1] - self._times[0] if len(self._times) > 1 else 0.0

    @property
    def now(self) -> float | None:
        return self._times[-1] if self._times else None

    def gpu(self, index: int, window: float | None = None) -> tuple[GpuSample, ...]:
        return self._window(self._gpus.get(index, ()), window)

    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(sorted(self._gpus))

    def process(self, key: ProcessKey, window: float | None = None) -> tuple[ProcessSample, ...]:
        return self._window(self._procs.get(key, ()), window)

    def first_seen(self, key: ProcessKey) -> float | None:
        return self._first_seen.get(key)

    def container(self, cid: str, window: float | None = None) -> tuple[tuple[float, dict[int, int]], ...]:
        return _tail(self._containers.get(cid, ()), window, lambda s: s[0])

    def container_peak_memory(self, cid: str) -> int:
        """Largest total GPU memory the container's processes held at once while watched."""
        return self._peaks.get(cid, 0)

    @property
    def ordered(self) -> bool:
        """True when every sample still held was recorded after the one before it in time: no
        clock step back within the last ``capacity`` polls, so each ring is in strict time order."""
        return self._disorder_at is None or self._adds - self._disorder_at > self.capacity

    @property
    def departures(self) -> int:
        """How many process identities the history has forgotten since it began: one who keeps state per
        identity beside it need look for identities gone only when this moved."""
        return self._departures

    def shorter_than(self, seconds: float) -> bool:
        """True when no process ring can yet cover a window of ``seconds`` with one sampling step of
        slack (``observed + step >= seconds``) nor be full: every sample a ring holds was taken at one of
        the poll times recorded, one per poll (no identity taken in twice in one poll), so while those
        times are in time order (:attr:`ordered`) and span less than half ``seconds``, any two samples'
        times differ by less than that, and while fewer polls than ``capacity`` are recorded no ring is
        full."""
        return self._reach < seconds

    @property
    def memo(self) -> dict[Hashable, object]:
        """A dict for values computed from the history as it stands, emptied by every :meth:`add`:
        two judges of one poll that need the same windowed figures compute them once. Keys name
        their owner (``("gpu_loads", ...)``); for the poller's thread, like the rings."""
        return self._memo

    @property
    def kept(self) -> dict[Hashable, object]:
        """A dict for state that judges keep in step with this history across polls (running
        windows); keys name their owner. Unlike :attr:`memo`, ``add()`` leaves it alone."""
        return self._kept

    def process_kept(self, key: ProcessKey) -> dict[str, object]:
        """Like :attr:`kept`, for one process identity: forgotten when the process leaves the history
        (an empty throwaway dict for a process the history does not hold)."""
        if key not in self._procs:
            return {}
        kept = self._proc_kept.get(key)
        if kept is None:
            kept = self._proc_kept[key] = {}
        return kept

    def process_ring(self, key: ProcessKey) -> Sequence[ProcessSample]:
        """The process's live ring, oldest first, without a copy: for judges that run on the poller's
        thread right after :meth:`add`, and never kept past the poll (the next ``add`` changes it)."""
        return self._procs.get(key, ())

    @property
    def gpu_rings(self) -> Mapping[int, Sequence[GpuSample]]:
        """Every GPU's live ring by index (same terms as :meth:`gpu_ring`; not to be changed)."""
        return self._gpus

    def gpu_ring(self, index: int) -> Sequence[GpuSample]:
        """The GPU's live ring, oldest first, without a copy (same terms as :meth:`process_ring`)."""
        return self._gpus.get(index, ())

    def _window(self, items: Sequence[_TimedT], window: float | None) -> tuple[_TimedT, ...]:
        """``_tail`` by sample time, without a call per sample (the judges ask many times a poll)."""
        if window is None or not items:
            return tuple(items)
        cutoff = items[-1].t - window
        out: list[_TimedT] = []
        for s in reversed(items):
            if s.t < cutoff:
                break
            out.append(s)
        out.reverse()
        return tuple(out)


class _Timed(Protocol):
    @property
    def t(self) -> float: ...


_TimedT = TypeVar("_TimedT", bound=_Timed)
_T = TypeVar("_T")


def _tail(items: Sequence[_T], window: float | None, when: Callable[[_T], float]) -> tuple[_T, ...]:
    """The samples of the last ``window`` seconds, oldest first. Samples are in time
    order, so this walks back from the newest and stops at the cutoff: a 60 s window
    of a 720-sample ring costs 60 steps, not 720 (judges ask many times a poll)."""
    if window is None or not items:
        return tuple(items)
    cutoff = when(items[-1]) - window
    out: list[_T] = []
    for s in reversed(items):
        if when(s) < cutoff:
            break
        out.append(s)
    out.reverse()
    return tuple(out)
