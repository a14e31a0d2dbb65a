"""Records of a batch scheduler's view (Slurm): jobs, a process's job, a GPU's allocations.

Kept beside ``model.py`` (which imports them) so the snapshot model stays one screen of
records per concern. Every value here came from outside (``squeue``, ``scontrol``, a
cgroup path) and was range-checked by the source before a record was built.
"""

from __future__ import annotations

from typing import Any

from gputui.core.record import field, record
from gputui.core.units import fmt_duration

#: Job states in which a job holds its allocation on the node.
HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING"})


@record
class SchedulerJob:
    """One job as the scheduler tells it (``squeue --json``)."""

    id: str
    user: str | None = None
    name: str | None = None
    state: str | None = None
    #: POSIX time the job's time limit ends; None when it has no limit or it is unknown.
    end_time: int | None = None
    #: GRES indices of its GPUs on this node (the minors of /dev/nvidiaN, before mapping).
    gres_indices: tuple[int, ...] = ()

    @property
    def holds(self) -> bool:
        return self.state in HOLDING_STATES


@record
class JobRef:
    """The job a GPU process belongs to, as attached to that process."""

    id: str
    step: str | None = None
    user: str | None = None
    name: str | None = None
    state: str | None = None
    end_time: int | None = None
    time_left_s: int | None = None
    #: NVML indices of the GPUs the job was allocated (empty when unknown).
    gpus: tuple[int, ...] = ()
    scheduler: str = "slurm"

    @property
    def label(self) -> str:
        """``job 123 · alice · 1h58m left`` — how a process's job reads in a table."""
        parts = [f"job {self.id}"]
        if self.user:
            parts.append(self.user)
        if self.time_left_s is not None:
            parts.append(f"{fmt_duration(self.time_left_s)} left")
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "scheduler": self.scheduler,
            "id": self.id,
            "step": self.step,
            "user": self.user,
            "name": self.name,
            "state": self.state,
            "end_time": self.end_time,
            "time_left_s": self.time_left_s,
            "gpus": list(self.gpus),
        }


@record
class Allocation:
    """A job a GPU is allocated to."""

    job: str
    user: str | None = None
    name: str | None = None
    scheduler: str = "slurm"

    def to_json(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "job": self.job, "user": self.user}


@record
class SlurmStatus:
    """Whether the scheduler answered, and the jobs on this node it told of (last answer kept)."""

    node: str
    available: bool
    error: str | None = None
    #: the jobs holding GPUs here; their ``gpus`` are the grant (GRES)
    jobs: tuple[JobRef, ...] = ()
    #: job id -> the GPUs its processes are on (the use)
    used: dict[str, tuple[int, ...]] = field(default_factory=dict, hash=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "available": self.available, "error": self.error,
                "jobs": [dict(j.to_json(), used_gpus=list(self.used.get(j.id, ()))) for j in self.jobs]}
