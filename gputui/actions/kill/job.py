"""``gputui kill --job 123``: cancel a Slurm job through ``scancel``, planned, confirmed and audited.

Killing a job's processes behind Slurm's back leaves the job holding its GPUs and skips
its epilog and accounting; cancelling goes through Slurm. The plan comes from a fresh
poll: the job must be one Slurm lists on this node, and only its owner (or root) may
cancel it. ``TERM`` (the default) is Slurm's own cancel (SIGTERM, ``KillWait``, then
SIGKILL); ``INT`` and ``KILL`` are sent with ``scancel --full --signal``, to every
process of the job including its batch shell. Then gputui waits for Slurm to report the
job out of its running states and says which state it reached.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gputui.actions.audit import audit
from gputui.core.jobs_model import HOLDING_STATES, JobRef
from gputui.core.record import record
from gputui.core.safe_text import clean

if TYPE_CHECKING:
    from gputui.core.model import Snapshot
    from gputui.core.sources.slurm import SlurmSource

_JOB_ID_MAX = 12


@record
class JobKillPlan:
    """A planned job cancel: the job as listed, or one sentence saying why not."""

    job_id: str
    signal: str
    job: JobRef | None = None
    refusal: str | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None and self.job is not None

    def lines(self) -> list[str]:
        if self.job is None:
            return []
        j = self.job
        gpus = ", ".join(map(str, j.gpus)) or "none here"
        how = "scancel (SIGTERM, then SIGKILL after Slurm's KillWait)" if self.signal == "TERM" \
            else f"scancel --full --signal={self.signal}"
        left = "" if j.time_left_s is None else f", {j.label.rsplit(' · ', 1)[-1]}"
        return [f"Cancel Slurm job {j.id} with {how}:",
                f"  job {j.id}  {j.user or 'unknown user'}  {j.name or '-'}  {j.state or '?'}{left}  GPUs {gpus}"]


def caller_name() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def plan_job_kill(snapshot: Snapshot, job_id: str, signal: str = "TERM", read_only: bool = False,
                  uid: int | None = None, user: str | None = None) -> JobKillPlan:
    """Every guard, one sentence each: Slurm here, a job id, listed on this node, owned by the caller."""
    uid = os.geteuid() if uid is None else uid
    user = caller_name() if user is None else user
    if not job_id.isdigit() or len(job_id) > _JOB_ID_MAX:
        return JobKillPlan(job_id, signal, refusal=f"{clean(job_id)!r} is not a Slurm job id (a number).")
    if read_only:
        return JobKillPlan(job_id, signal, refusal="gputui is in read-only mode: no job is cancelled.")
    if snapshot.slurm is None:
        return JobKillPlan(job_id, signal, refusal=f"This node does not run Slurm (no slurmd answers), so there is "
                                                   f"no job {job_id} to cancel.")
    job = next((j for j in snapshot.slurm.jobs if j.id == job_id), None)
    if job is None:
        if not snapshot.slurm.available:
            return JobKillPlan(job_id, signal, refusal=f"Slurm is not answering ({snapshot.slurm.error}), so job "
                                                       f"{job_id} cannot be checked.")
        return JobKillPlan(job_id, signal, refusal=f"Slurm lists no running job {job_id} on this node.")
    if uid != 0 and (user is None or job.user != user):
        return JobKillPlan(job_id, signal, job=job,
                           refusal=f"Job {job_id} belongs to {job.user or 'another user'}; only its owner or root "
                                   "may cancel it.")
    return JobKillPlan(job_id, signal, job=job)


@record
class JobKillResult:
    ok: bool
    message: str


def execute_job_kill(plan: JobKillPlan, source: SlurmSource, timeout: float = 30.0,
                     progress: Callable[[str], object] | None = None,
                     clock: Callable[[], float] = time.monotonic, demo: bool = False) -> JobKillResult:
    """scancel, then wait for the job to leave its running states; audited either way."""
    from gputui.core.sources.slurm import SlurmError

    assert plan.job is not None
    job = plan.job
    details = {"job": job.id, "job_user": job.user, "job_name": job.name, "signal": plan.signal,
               "gpus": list(job.gpus), "scheduler": "slurm", "demo": demo}
    try:
        source.cancel(job.id, None if plan.signal == "TERM" else plan.signal)
    except SlurmError as exc:
        audit("kill-job", "failed", reason=str(exc), **details)
        return JobKillResult(False, f"Job {job.id} was not cancelled: {exc}")
    if progress is not None:
        progress(f"scancel sent to job {job.id}; waiting for Slurm…")
    deadline = clock() + timeout
    state: str | None = job.state
    while True:
        reading = source.read()
        if reading.available:
            now = next((j for j in reading.jobs if j.id == job.id), None)
            state = now.state if now is not None else "ended"
            if now is None or now.state not in HOLDING_STATES:
                break
        if clock() >= deadline:
            audit("kill-job", "timeout", state=state, **details)
            return JobKillResult(False, f"Job {job.id} was signalled but is still {state or 'unknown'} after "
                                        f"{timeout:g} s.")
        time.sleep(0.5)
    audit("kill-job", "ok", state=state, **details)
    gpus = ", ".join(map(str, job.gpus))
    freed = f"; Slurm can give GPU{'s' if len(job.gpus) != 1 else ''} {gpus} again" if gpus else ""
    return JobKillResult(True, f"Job {job.id} ({job.user or 'unknown user'}) is {state}{freed}.")


def refuse_job_kill(plan: JobKillPlan, demo: bool = False) -> None:
    audit("kill-job", "refused", job=plan.job_id, reason=plan.refusal, signal=plan.signal, scheduler="slurm",
          demo=demo)


def decline_job_kill(plan: JobKillPlan, demo: bool = False) -> None:
    audit("kill-job", "declined", job=plan.job_id, signal=plan.signal, scheduler="slurm", demo=demo)
