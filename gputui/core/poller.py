"""One poll: sources -> Snapshot -> History -> judges -> judged Snapshot.

The poller is the single pipeline that the demo, the tests, the CLI and the
dashboard all run. It is synchronous; the UI calls it from a worker thread and
never from the event loop. Container inventory is refreshed by its own thread
(:class:`ContainerWatcher`) so that a hung Docker daemon can never delay a GPU
refresh: a poll takes whatever inventory is newest.
"""

from __future__ import annotations

import functools
import operator
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from itertools import chain
from typing import TYPE_CHECKING

from gputui.core.config import Settings
from gputui.core.containers import build_containers
from gputui.core.history import History
from gputui.core.judges.alerts import AlertJudge
from gputui.core.judges.imbalance import ImbalanceJudge
from gputui.core.judges.rules import RuleJudge
from gputui.core.judges.stale import IdleTracker, judge_stale
from gputui.core.model import (
    Alert,
    Container,
    ContainerInventory,
    ContainerRecord,
    ContainerRef,
    DockerStatus,
    Finding,
    Gpu,
    GpuReading,
    Imbalance,
    Process,
    ProcessFacts,
    RawProcess,
    Snapshot,
)
from gputui.core.record import replace
from gputui.core.sources import ContainerSource, GpuSource, ProcessSource, cgroups
from gputui.core.sources.background import BackgroundReader

if TYPE_CHECKING:
    from gputui.core.jobs import SlurmJoin
    from gputui.core.jobs_model import SlurmStatus
    from gputui.core.sources.house_rules import HouseRulesSource


class ContainerWatcher:
    """Refreshes a ContainerSource's inventory on its own daemon thread.

    ``latest()`` never blocks on Docker: it returns the newest inventory, or one
    saying the daemon is not responding when a refresh has been stuck longer than
    ``timeout``. It recovers by itself when the daemon answers again.
    """

    def __init__(self, source: ContainerSource, period: float = 2.0, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._uuids: tuple[str, ...] = ()
        self._minors: dict[int, str] = {}
        self._lock = threading.Lock()
        self._reader = BackgroundReader(
            self._read, lambda exc: ContainerInventory(False, f"container source failed: {exc}"),
            name="gputui-containers", period=period, timeout=timeout, clock=clock)

    def set_gpus(self, uuids: tuple[str, ...], minors: dict[int, str]) -> None:
        with self._lock:
            changed = uuids != self._uuids
            self._uuids, self._minors = uuids, dict(minors)
        if not self._reader.started:
            self._reader.start()
        elif changed:
            self._reader.refresh_now()

    def refresh_now(self) -> None:
        """Ask for a refresh at once (after an action changed containers)."""
        self._reader.refresh_now()

    def latest(self, wait: float = 0.0) -> ContainerInventory:
        latest, hung = self._reader.newest(wait)
        if hung:
            return ContainerInventory(False, "the Docker daemon is not responding")
        if latest is None:
            return ContainerInventory(False, "waiting for the Docker daemon")
        return latest

    def stop(self) -> None:
        self._reader.stop()

    def _read(self) -> ContainerInventory:
        with self._lock:
            uuids, minors = self._uuids, self._minors
        return self.source.inventory(uuids, minors)


class Poller:
    """Runs the pipeline. Not thread-safe: call ``poll()`` from one thread at a time."""

    def __init__(
        self,
        gpu_source: GpuSource,
        process_source: ProcessSource,
        container_source: ContainerSource | None = None,
        settings: Settings | None = None,
        history: History | None = None,
        clock: Callable[[], float] = time.time,
        host: str | None = None,
        gpu_filter: Callable[[Gpu], bool] | None = None,
        container_wait: float = 0.0,
        house_rules: HouseRulesSource | None = None,
        slurm: SlurmJoin | None = None,
    ) -> None:
        self.gpu_source = gpu_source
        self.process_source = process_source
        self.settings = settings or Settings()
        self.history = history or History()
        self.clock = clock
        self.host = host or os.uname().nodename
        self.gpu_filter = gpu_filter
        self.watcher = (
            ContainerWatcher(container_source, period=max(1.0, self.settings.interval),
                             timeout=self.settings.docker_timeout)
            if container_source is not None
            else None
        )
        #: how long the first poll waits for the first container inventory
        self.container_wait = container_wait
        #: Slurm's jobs joined to each poll, None off a Slurm node (nothing is run then)
        self.slurm = slurm
        self._imbalance = ImbalanceJudge(self.settings)
        self._alerts = AlertJudge(self.settings)
        self._idle = IdleTracker()
        #: the house rules folder (None: no rules are judged)
        self.house_rules = house_rules
        self._rules = RuleJudge()
        self.polls = 0
        #: start time -> aware datetime; a process's start never changes, so convert it once
        self._started_cache: dict[float, datetime] = {}
        #: GPU index -> what the last poll built that GPU's rows from and what it built (see _GpuRows)
        self._gpus: dict[int, _GpuRows] = {}
        #: GPU index -> the judged GPU's processes tuple, the idle threshold, and the positions of the
        #: processes a stale finding could apply to (see _judge_stale)
        self._stale_candidates: dict[int, tuple[tuple[Process, ...], int, tuple[int, ...]]] = {}
        #: GPU index -> the GPU judged last, the findings found for it (by row position), and the judged GPU
        #: built from them: the same GPU with the same findings is that very object again (see _judge_stale)
        self._stale_out: dict[int, tuple[Gpu, tuple[tuple[int, tuple[Finding, ...]], ...], Gpu]] = {}
        #: the container inventory of the last poll and its records by id: while the watcher hands out
        #: the same inventory, a process's container (``attribute``) cannot have changed
        self._inventory: ContainerInventory | None = None
        #: the process tuples of the last reading and their PIDs
        self._pids: tuple[tuple[tuple[RawProcess, ...], ...], set[int]] = ((), set())
        self._records: dict[str, ContainerRecord] = {}
        #: the Docker status of the last snapshot (one object while the inventory says the same)
        self._docker: DockerStatus | None = None
        #: the reading and the facts of the last poll, and the GPUs (with their rows) built from them: while
        #: the source hands in the very same reading, the inventory is the same and the facts are equal,
        #: they are this poll's GPUs (see poll)
        self._reading: GpuReading | None = None
        self._facts: dict[int, ProcessFacts] = {}
        self._all_gpus: tuple[Gpu, ...] = ()
        #: the last poll's warnings (the reading's errors and the namespace warning), and whether any row
        #: of ``_gpus`` is in a container
        self._warnings: tuple[str, ...] = ()
        self._containered = False
        #: the GPUs tuple of the last stale judging, the threshold, and the positions of the GPUs that were
        #: judged (the others' rows no stale finding could apply to)
        self._stale_plan: tuple[tuple[Gpu, ...] | None, int, tuple[int, ...]] = (None, 0, ())
        #: the judged GPUs of the last poll (handed out again while every one of them is the same object)
        self._stale_judged: tuple[Gpu, ...] = ()
        #: the local zone (as astimezone() gives it) and the span of POSIX times it holds for (see _local_stamp)
        self._zone: tuple[tzinfo | None, float, float] = (None, 0.0, 0.0)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.slurm is not None:
            self.slurm.stop()
        try:
            self.gpu_source.close()
        except Exception:
            pass

    def poll(self) -> Snapshot:
        now = self.clock()
        reading = self.gpu_source.read()
        gpus = reading.gpus

        inventory = _CONTAINERS_OFF
        if self.watcher is not None:
            uuids = tuple(g.uuid for g in gpus)
            minors = {g.minor_number: g.uuid for g in gpus if g.minor_number is not None}
            self.watcher.set_gpus(uuids, minors)
            inventory = self.watcher.latest(wait=self.container_wait if self.polls == 0 else 0.0)
        same_inventory = inventory is self._inventory
        if same_inventory:
            records = self._records
        else:
            records = self._records = {r.id: r for r in inventory.containers}
            self._inventory = inventory

        # The PIDs asked about: the last poll's set while the source hands in the very same reading (a
        # still machine: its process tuples too) or the very same process tuples (immutable: the same
        # PIDs), else collected again.
        same_reading = reading is self._reading
        if same_reading:
            pids = self._pids[1]
        else:
            lists = tuple(reading.processes.values())
            last_lists, pids = self._pids
            if len(lists) != len(last_lists) or not all(map(operator.is_, lists, last_lists)):
                pids = set(map(_PID, chain.from_iterable(lists)))
                self._pids = (lists, pids)
        facts = self.process_source.facts(pids) if pids else {}

        same = same_reading and facts == self._facts  # (compared only for the very same reading)
        if same:
            warnings = self._warnings  # the same errors, the same verdict on the same facts
        # every process's PID unseen (most polls: the first fact alone says not, without a generator)
        elif facts and next(iter(facts.values())).invisible_reason == "other-namespace" \
                and all(f.invisible_reason == "other-namespace" for f in facts.values()):
            warnings = self._warnings = (*reading.errors, _NAMESPACE_WARNING)
        else:
            warnings = self._warnings = tuple(reading.errors)

        if same and same_inventory:
            # The very same reading, inventory and (equal) facts as the last poll: every GPU is the one
            # the last poll built (each GPU's test below would find its Gpu, process tuple and facts the
            # same), compared in one dict comparison instead of a list per GPU.
            all_gpus = self._all_gpus
        else:
            built: list[Gpu] = []
            gpus_built: dict[int, _GpuRows] = {}
            facts_get = facts.get
            for g in gpus:
                index = g.index
                last = self._gpus.get(index)
                raws = reading.processes.get(index, ())
                if last is not None and same_inventory and last.raws is raws:
                    # The source's same process tuple: when every PID's facts are the ones (or equal to the
                    # ones) its rows were built from, so are the rows (the steady state of most GPUs: one
                    # list comparison in C instead of a lookup per process).
                    fact_list = list(map(facts_get, last.pids))
                    if fact_list == last.facts:
                        if last.gpu is g:  # nothing changed: what the last poll built, as it is
                            gpus_built[index] = last
                            built.append(last.with_procs)
                            continue
                        with_procs = replace(g, processes=last.procs)
                        gpus_built[index] = _GpuRows(g, raws, last.pids, last.facts, last.refs, last.procs, with_procs,
                                                     last.containered)
                        built.append(with_procs)
                        continue
                    pids_t = last.pids
                else:
                    pids_t = tuple(map(_PID, raws))
                    fact_list = list(map(facts_get, pids_t))
                if last is not None and same_inventory and last.pids == pids_t:
                    # The same PIDs in the same order (their figures moving: the churning state): each row
                    # against the last poll's row at its place, in one pass and no call for an unchanged row.
                    # A row whose facts object is the one it was built from keeps its container (the same
                    # inventory: attribute() would answer the same) and, when only NVML's figures moved, is
                    # the last row with those figures (a copy of its fields: what _process would build).
                    refs = last.refs  # copied at its first change
                    built_rows: list[Process] = []
                    i = 0
                    for raw, fact, praw, pfact, prow in zip(raws, fact_list, last.raws, last.facts, last.procs,
                                                            strict=True):
                        if fact is pfact:
                            if raw is praw or (raw.sm_utilization == praw.sm_utilization
                                               and raw.gpu_memory == praw.gpu_memory and raw.type == praw.type
                                               and raw.mig_device == praw.mig_device):
                                built_rows.append(prow)
                            else:
                                built_rows.append(Process.__record_replace__(  # type: ignore[attr-defined]
                                    prow, {"sm_utilization": raw.sm_utilization, "gpu_memory": raw.gpu_memory,
                                           "type": raw.type, "mig_device": raw.mig_device}))
                        elif pfact != fact or raw is not praw and raw != praw:  # new facts (equal ones: the row)
                            ref = attribute(fact, records, inventory.available) if fact is not None else None
                            if refs is last.refs:
                                refs = list(refs)
                            refs[i] = ref
                            built_rows.append(self._process(index, raw, fact, ref))
                        else:
                            built_rows.append(prow)
                        i += 1
                else:
                    built_rows, refs = self._rows(index, raws, fact_list, last, same_inventory, records,
                                                  inventory.available)
                procs = tuple(built_rows)
                # The source's same Gpu with the same rows (an unchanged GPU): the GPU built last time.
                if last is not None and last.gpu is g and len(last.procs) == len(procs) \
                        and all(map(operator.is_, last.procs, procs)):
                    procs = last.procs
                    with_procs = last.with_procs
                else:
                    with_procs = Gpu.__record_replace__(g, {"processes": procs})  # type: ignore[attr-defined]
                containered = last.containered if last is not None and procs is last.procs else any(refs)
                gpus_built[index] = _GpuRows(g, raws, pids_t, fact_list, refs, procs, with_procs, containered)
                built.append(with_procs)
            self._gpus = gpus_built
            all_gpus = self._all_gpus = tuple(built)
            self._reading = reading
            self._containered = any(map(_CONTAINERED, gpus_built.values()))
        self._facts = facts
        slurm_status: SlurmStatus | None = None
        slurm_alerts: tuple[Alert, ...] = ()
        if self.slurm is not None:
            all_gpus, slurm_status, slurm_alerts = self.slurm.apply(
                all_gpus, facts, now, wait=self.container_wait if self.polls == 0 else 0.0)

        zone = self._zone
        stamp = datetime.fromtimestamp(now, zone[0]) if zone[1] <= now < zone[2] else self._local_stamp(now)
        docker = self._docker
        if docker is None or docker.available is not inventory.available or docker.error != inventory.error:
            docker = self._docker = DockerStatus(inventory.available, inventory.error)
        # positional, in field order: host, time, driver and CUDA versions, GPUs, Docker, containers,
        # imbalance, alerts, warnings, NVML version (the rest: their defaults)
        snap = Snapshot(self.host, stamp, reading.driver_version, reading.cuda_driver_version, all_gpus, docker,
                        (), _NO_IMBALANCE, (), warnings, reading.nvml_version, slurm=slurm_status)
        # History first: the judges read windows that end with this poll.
        self.history.add(snap, records.keys())
        # (the Slurm join may rebuild the GPUs: then their rows are asked)
        if not records and not (self._containered if self.slurm is None
                                else any(p.container is not None for g in all_gpus for p in g.processes)):
            containers: tuple[Container, ...] = ()  # build_containers' answer when it has nothing to build
        else:
            containers = build_containers(tuple(records.values()), all_gpus, self.history, self.settings, now)
        by_id = {c.id: c for c in containers} if containers else {}
        # A GPU none of whose rows a stale finding could apply to (most, most polls: see _judge_stale) is
        # judged as it is, without a call.
        # The positions of the GPUs that are judged are kept with the GPUs tuple they were found in (the
        # same tuple again: the same GPUs with the very same rows) and the threshold.
        threshold = self.settings.idle_holder_memory
        plan = self._stale_plan
        judged: list[Gpu]
        if plan[0] is all_gpus and plan[1] == threshold:
            if plan[2]:
                judged = list(all_gpus)
                for i in plan[2]:
                    judged[i] = self._judge_stale(all_gpus[i], by_id, records)
                before = self._stale_judged
                # the very GPUs judged last poll (the same findings): the last poll's tuple
                judged_gpus = before if len(before) == len(judged) and all(
                    a is b for a, b in zip(before, judged, strict=True)) else tuple(judged)
            else:
                judged_gpus = all_gpus
        else:
            stale_get = self._stale_candidates.get
            judged = []
            at: list[int] = []
            for g in all_gpus:
                kept = stale_get(g.index)
                if kept is not None and kept[0] is g.processes and kept[1] == threshold and not kept[2]:
                    judged.append(g)
                else:
                    judged.append(self._judge_stale(g, by_id, records))
                    if stale_get(g.index)[2]:  # type: ignore[index]  # _judge_stale keeps one
                        at.append(len(judged) - 1)
            judged_gpus = tuple(judged)
            self._stale_plan = (all_gpus, threshold, tuple(at))
        self._stale_judged = judged_gpus
        self._idle.prune(self.history)
        history = self.history
        # Built positionally, in field order (see the first Snapshot above), rather than copied field by field
        window = history.span
        snap = Snapshot(self.host, stamp, reading.driver_version, reading.cuda_driver_version, judged_gpus, docker,
                        containers, _NO_IMBALANCE, (), warnings, reading.nvml_version, window, slurm=slurm_status)
        imbalance = self._imbalance.update(history, snap)
        alerts = self._alerts.update(history, snap, imbalance)  # the snapshot built once more for both
        snap = Snapshot(self.host, stamp, reading.driver_version, reading.cuda_driver_version, judged_gpus, docker,
                        containers, imbalance, alerts + slurm_alerts, warnings, reading.nvml_version, window,
                        slurm=slurm_status)
        if self.house_rules is not None:
            snap = self._judge_rules(snap, now)
        if self.gpu_filter is not None:
            snap = replace(snap, gpus=tuple(g for g in snap.gpus if self.gpu_filter(g)))
        self.polls += 1
        return snap

    def _judge_rules(self, snap: Snapshot, now: float) -> Snapshot:
        """The house rules judged on this poll: violations (also raised as alerts, so every face that
        shows alerts shows them), live reservations and the rules file's problem, if any."""
        assert self.house_rules is not None
        rules = self.house_rules.read(now)
        if not rules.present:
            return snap
        violations, views = self._rules.update(rules, snap.gpus, snap.containers, now)
        alerts = snap.alerts + tuple(Alert(gpu=v.gpu, kind=f"rule_{v.rule}", severity="warning", message=v.message,
                                           since=v.since) for v in violations)
        warnings = snap.warnings + ((rules.error,) if rules.error else ())
        containers = snap.containers
        if any(v.container for v in violations):  # the containers view lists a container's broken rules
            named: dict[str, list[Finding]] = {}
            for v in violations:
                for name in (v.container or "").split(","):
                    if name:
                        named.setdefault(name, []).append(Finding(f"rule_{v.rule}", v.message))
            containers = tuple(replace(c, findings=c.findings + tuple(named[c.name])) if c.name in named else c
                               for c in containers)
        return replace(snap, rule_violations=violations, reservations=views, rules_error=rules.error,
                       alerts=alerts, warnings=warnings, containers=containers)

    def _judge_stale(self, g: Gpu, by_id: dict[str, Container], records: dict[str, ContainerRecord]) -> Gpu:
        """The GPU with its processes' stale findings; most processes have none, so
        only those with findings are rebuilt, and only those a finding could apply to are judged."""
        procs = g.processes
        threshold = self.settings.idle_holder_memory
        kept = self._stale_candidates.get(g.index)
        if kept is not None and kept[0] is procs and kept[1] == threshold:
            candidates = kept[2]
        else:
            # Whether any stale finding could apply to a row (judge_stale answers () for every other row,
            # whatever the history says): not a visible, parented, container-less, live process holding less
            # GPU memory than an idle holder must.
            candidates = tuple([i for i, p in enumerate(procs)
                                if not (p.visible and not p.orphaned and p.container is None and p.status != "zombie"
                                        and p.status != "disk-sleep"
                                        and (p.gpu_memory is None or p.gpu_memory < threshold))])
            self._stale_candidates[g.index] = (procs, threshold, candidates)
        if not candidates:
            return g
        found = tuple([(i, stale) for i in candidates
                       if (stale := judge_stale(procs[i], self.history, self.settings, by_id, records, self._idle))])
        if not found:
            return g
        last = self._stale_out.get(g.index)
        if last is not None and last[0] is g and last[1] == found:
            # an idle holder stays one poll after another: its row, and the GPU, are the last poll's objects
            # (what keeps its answers by identity downstream — history, judges, screens — keeps them)
            return last[2]
        out = list(procs)
        for i, stale in found:
            out[i] = replace(procs[i], stale=stale)
        judged = replace(g, processes=tuple(out))
        self._stale_out[g.index] = (g, found, judged)
        return judged

    def _local_stamp(self, now: float) -> datetime:
        """``now`` as an aware local time (``astimezone()``: the zone's offset and name at that moment), and
        the zone kept for the next ``ZONE_SPAN`` seconds when it is the same at their end: the local zone
        changes only at a transition (a DST change), and no zone has two within a minute that return to
        the same offset and name. (A poll then builds its time without the C library's zone lookup, whose
        code and transition tables are fetched cold every second.)"""
        stamp = datetime.fromtimestamp(now, tz=timezone.utc).astimezone()
        end = now + ZONE_SPAN
        ahead = datetime.fromtimestamp(end, tz=timezone.utc).astimezone()
        zone = stamp.tzinfo
        if zone is not None and ahead.tzinfo == zone and ahead.tzname() == stamp.tzname():
            self._zone = (zone, now, end)
        return stamp

    def _started(self, create_time: float | None) -> datetime | None:
        if create_time is None:
            return None
        started = self._started_cache.get(create_time)
        if started is None:
            if len(self._started_cache) > 20_000:
                self._started_cache.clear()
            started = datetime.fromtimestamp(create_time, tz=timezone.utc).astimezone()
            self._started_cache[create_time] = started
        return started

    def _rows(self, gpu_index: int, raws: tuple[RawProcess, ...], fact_list: list[ProcessFacts | None],
              last: _GpuRows | None, same_inventory: bool, records: dict[str, ContainerRecord],
              docker_available: bool) -> tuple[list[Process], list[ContainerRef | None]]:
        """A GPU's rows and their containers when its PIDs are not the last poll's in the same order (or
        the inventory changed): each row is the last poll's row of its PID when nothing it is built
        from changed (its NVML entry, facts and container), else built again."""
        last_at = dict(zip(last.pids, range(len(last.pids)), strict=True)) if last is not None else {}
        rows: list[Process] = []
        refs: list[ContainerRef | None] = []
        for raw, fact in zip(raws, fact_list, strict=True):
            ref = attribute(fact, records, docker_available) if fact is not None else None
            at = last_at.get(raw.pid)
            if last is not None and at is not None and last.facts[at] is fact and last.refs[at] == ref \
                    and (last.raws[at] is raw or last.raws[at] == raw):
                row = last.procs[at]
            else:
                row = self._process(gpu_index, raw, fact, ref)
            rows.append(row)
            refs.append(ref)
        return rows, refs

    def _process(
        self,
        gpu_index: int,
        raw: RawProcess,
        fact: ProcessFacts | None,
        ref: ContainerRef | None,
    ) -> Process:
        fact = fact or ProcessFacts(pid=raw.pid, visible=False, invisible_reason="vanished")
        create_time = fact.create_time
        started = self._started(create_time) if create_time is not None else None
        # positional, in field order (a keyword call matches 20 names)
        return Process(raw.pid, gpu_index, raw.type, raw.gpu_memory, raw.sm_utilization, fact.user, fact.command,
                       fact.exe, fact.cpu_percent, fact.host_memory, started, fact.visible, fact.invisible_reason,
                       create_time, fact.ppid, fact.status, fact.uid, fact.orphaned, ref, (), raw.mig_device)


class _GpuRows:
    """What one poll built one GPU's rows from, and what it built: the source's Gpu and process tuple,
    their PIDs, each PID's facts and container (in order), the rows, the Gpu carrying them, and whether
    any row is in a container. A plain slotted class: one per GPU per poll."""

    __slots__ = ("gpu", "raws", "pids", "facts", "refs", "procs", "with_procs", "containered")

    def __init__(self, gpu: Gpu, raws: tuple[RawProcess, ...], pids: tuple[int, ...],
                 facts: list[ProcessFacts | None], refs: list[ContainerRef | None],
                 procs: tuple[Process, ...], with_procs: Gpu, containered: bool) -> None:
        self.gpu = gpu
        self.raws = raws
        self.pids = pids
        self.facts = facts
        self.refs = refs
        self.procs = procs
        self.with_procs = with_procs
        self.containered = containered


#: a process entry's PID (one C call per tuple of entries: ``map(_PID, raws)``), and whether a GPU's rows
#: have one in a container
_PID = operator.attrgetter("pid")
_CONTAINERED = operator.attrgetter("containered")


#: how long (s) a poll's local zone is kept once it is the same at both ends (see Poller._local_stamp)
ZONE_SPAN = 60.0

#: the warning of a poller that sees none of the GPU processes' PIDs
_NAMESPACE_WARNING = ("gputui cannot see the GPU processes' PIDs: it runs in a container without the host's PID "
                      "namespace; start it with --pid=host.")

#: a snapshot's imbalance until the judge says (Snapshot's default)
_NO_IMBALANCE = Imbalance()

#: the inventory of a poller without a container source (one object: see Poller._inventory)
_CONTAINERS_OFF = ContainerInventory(False, "container information is off")


@functools.lru_cache(maxsize=8192)
def _parse_cgroup_cached(text: str) -> cgroups.CgroupMatch | None:
    """parse_cgroup per distinct cgroup text: thousands of processes share few cgroups,
    and a process's cgroup rarely changes, so a poll parses each text once."""
    return cgroups.parse_cgroup(text)


def attribute(fact: ProcessFacts, records: dict[str, ContainerRecord], docker_available: bool) -> ContainerRef | None:
    """The container a process runs in, from its cgroup, confirmed against the inventory."""
    if fact.cgroup is None:
        return None
    match = cgroups.name_pod(_parse_cgroup_cached(fact.cgroup))  # pod names where the kubelet tells them
    if match is None:
        return None
    record = records.get(match.id)
    if record is not None:
        return record.ref()
    if match.tentative:
        return None  # any two-level cgroup reads like containerd's /<namespace>/<id>: only containerd can say
    if match.runtime == "kubernetes":
        return ContainerRef(id=match.id, runtime="kubernetes", name=match.name, pod=match.pod,
                            namespace=match.namespace, pod_uid=match.pod_uid)
    if match.runtime == "docker" and docker_available:
        # The cgroup says docker, the daemon does not know it: another engine's container.
        return ContainerRef(id=match.id, runtime="other")
    return ContainerRef(id=match.id, runtime=match.runtime)
