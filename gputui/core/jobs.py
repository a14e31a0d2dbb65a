"""Slurm joined to a poll: each GPU process's job, each GPU's allocations, and the findings.

:class:`SlurmWatcher` runs the Slurm source on its own thread (like the container
watcher: a hung slurmctld never delays a refresh; a poll takes the newest reading and
keeps the last job list slurmctld gave when it stops answering). :class:`SlurmJoin`
attaches jobs to the poll's GPUs and judges three findings, which join the alerts:

* ``outside_allocation`` — a job's process on a GPU that is not in the job's GRES;
* ``no_job`` — a GPU process on this Slurm node that belongs to no job;
* ``allocated_idle`` — a GPU allocated to a job, with no process and no load for
  longer than ``idle_grant_window``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from gputui.core.config import Settings
from gputui.core.jobs_model import Allocation, JobRef, SchedulerJob, SlurmStatus
from gputui.core.model import Alert, Gpu, ProcessFacts
from gputui.core.record import replace
from gputui.core.sources.background import BackgroundReader
from gputui.core.sources.slurm import SlurmReading, SlurmSource, job_from_cgroup


class SlurmWatcher:
    """Reads a SlurmSource every ``period`` seconds on a daemon thread; ``latest()`` never blocks on it."""

    def __init__(self, source: SlurmSource, period: float = 3.0, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        #: the newest scontrol listpids answer (slurmd), kept apart: it comes before squeue, which may hang
        self._pids: dict[int, tuple[str, str | None]] = {}
        self._lock = threading.Lock()
        self._reader = BackgroundReader(
            self._read, lambda exc: SlurmReading(False, f"the Slurm source failed: {exc}"),
            name="gputui-slurm", period=period, timeout=timeout, clock=clock)

    def start(self) -> None:
        self._reader.start()

    def refresh_now(self) -> None:
        self._reader.refresh_now()

    def latest(self, wait: float = 0.0) -> SlurmReading:
        self.start()
        latest, hung = self._reader.newest(wait)
        with self._lock:
            pids = self._pids
        if hung:
            return SlurmReading(False, "slurmctld is not responding", pids=pids)
        if latest is None:
            return SlurmReading(False, "waiting for slurmctld", pids=pids)
        return latest

    def stop(self) -> None:
        self._reader.stop()

    def _set_pids(self, pids: dict[int, tuple[str, str | None]]) -> None:
        with self._lock:
            self._pids = pids

    def _read(self) -> SlurmReading:
        return self.source.read(on_pids=self._set_pids)


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc).astimezone()


class SlurmJoin:
    """Attaches Slurm's view to each poll. Not thread-safe (the poller's thread only)."""

    def __init__(self, source: SlurmSource, settings: Settings, watcher: SlurmWatcher | None = None,
                 judge_no_job: bool = True) -> None:
        self.source = source
        #: whether a GPU process in no job is a finding (not in the demo, whose containers run outside Slurm)
        self.judge_no_job = judge_no_job
        self.node = source.node
        self.settings = settings
        self.watcher = watcher or SlurmWatcher(source, period=max(2.0, settings.interval),
                                               timeout=settings.docker_timeout)
        #: the last job list slurmctld gave (kept while it does not answer)
        self._jobs: tuple[SchedulerJob, ...] | None = None
        #: (finding kind, gpu, key) -> first seen
        self._since: dict[tuple[str, int, str], float] = {}

    def stop(self) -> None:
        self.watcher.stop()

    def apply(self, gpus: tuple[Gpu, ...], facts: dict[int, ProcessFacts], now: float,
              wait: float = 0.0) -> tuple[tuple[Gpu, ...], SlurmStatus, tuple[Alert, ...]]:
        reading = self.watcher.latest(wait=wait)
        if reading.available:
            self._jobs = reading.jobs
        jobs = {j.id: j for j in self._jobs or ()}
        index_of_minor = {g.minor_number: g.index for g in gpus if g.minor_number is not None}

        def nvml_gpus(job: SchedulerJob) -> tuple[int, ...]:
            out = (index_of_minor.get(self.node.minor_of(i)) for i in job.gres_indices)
            return tuple(sorted({i for i in out if i is not None}))

        job_gpus = {jid: nvml_gpus(j) for jid, j in jobs.items()}
        refs: dict[tuple[str, str | None], JobRef] = {}

        def ref(jid: str, step: str | None) -> JobRef:
            r = refs.get((jid, step))
            if r is None:
                j = jobs.get(jid)
                if j is None:
                    r = JobRef(id=jid, step=step)
                else:
                    left = None if j.end_time is None else max(0, int(j.end_time - now))
                    r = JobRef(id=jid, step=step, user=j.user, name=j.name, state=j.state, end_time=j.end_time,
                               time_left_s=left, gpus=job_gpus[jid])
                refs[(jid, step)] = r
            return r

        alerts: list[Alert] = []
        seen: set[tuple[str, int, str]] = set()
        used: dict[str, set[int]] = {}

        def finding(kind: str, gpu: int, key: str, severity: str, message: str, hold: float = 0.0) -> None:
            k = (kind, gpu, key)
            seen.add(k)
            since = self._since.setdefault(k, now)
            if now - since >= hold:
                alerts.append(Alert(gpu=gpu, kind=kind, severity=severity,  # type: ignore[arg-type]
                                    message=message, since=_at(since)))

        out: list[Gpu] = []
        for g in gpus:
            allocated = tuple(Allocation(job=jid, user=j.user, name=j.name) for jid, j in jobs.items()
                              if j.holds and g.index in job_gpus[jid])
            procs = []
            for p in g.processes:
                fact = facts.get(p.pid)
                where = job_from_cgroup(fact.cgroup if fact is not None else None) or reading.pids.get(p.pid)
                if where is None:
                    if p.visible and self.judge_no_job:
                        finding("no_job", g.index, str(p.pid), "warning",
                                f"PID {p.pid} ({p.user or 'unknown user'}) uses GPU {g.index} outside any Slurm "
                                "job.")
                    procs.append(p)
                    continue
                job = ref(*where)
                used.setdefault(job.id, set()).add(g.index)
                if job.id in jobs and g.index not in job.gpus:
                    granted = ", ".join(map(str, job.gpus)) or "none"
                    finding("outside_allocation", g.index, f"{job.id}:{p.pid}", "critical",
                            f"PID {p.pid} of job {job.id} ({job.user or 'unknown user'}) uses GPU {g.index}, "
                            f"outside its allocation (GPUs {granted}).")
                procs.append(replace(p, job=job))
            if allocated and not g.processes and not g.utilization_gpu:
                for a in allocated:
                    finding("allocated_idle", g.index, a.job, "warning",
                            f"GPU {g.index} is allocated to job {a.job} ({a.user or 'unknown user'}) but has "
                            "had no process and no load.", hold=self.settings.idle_grant_window)
            if procs != list(g.processes) or allocated != g.allocated_to:
                g = replace(g, processes=tuple(procs), allocated_to=allocated)
            out.append(g)
        self._since = {k: v for k, v in self._since.items() if k in seen}
        listed = tuple(ref(jid, None) for jid, j in jobs.items() if j.holds)
        status = SlurmStatus(node=self.node.name, available=reading.available, error=reading.error, jobs=listed,
                             used={jid: tuple(sorted(s)) for jid, s in used.items()})
        return tuple(out), status, tuple(alerts)
