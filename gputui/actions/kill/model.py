"""What a kill is made of: the signals, targets, refusals, the plan, outcomes and the report.

Plain frozen data, shared by the planner, the backends, the executor, the flow and both faces.
"""

from __future__ import annotations

import signal as _signal
from typing import TYPE_CHECKING, Any

from gputui.core.jobs_model import JobRef
from gputui.core.model import ContainerRef, Finding
from gputui.core.record import record
from gputui.core.safe_text import clean
from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    pass


#: The signals a user may choose, by the names the CLI and the UI use.
SIGNALS: dict[str, int] = {"TERM": _signal.SIGTERM, "INT": _signal.SIGINT, "KILL": _signal.SIGKILL}

#: Two readings of one process's start time agree within this many seconds
#: (psutil derives it from clock ticks since boot: 10 ms resolution).
START_TIME_TOLERANCE = 0.05

#: How long to keep re-reading NVML for the driver to drop a dead process's context.
SETTLE_SECONDS = 3.0

PF_KTHREAD = 0x00200000


def signal_name(name: str) -> str:
    """'term' / 'SIGTERM' / 'TERM' -> 'TERM'. Raises ValueError for anything else."""
    key = name.strip().upper()
    if key.startswith("SIG"):
        key = key[3:]
    if key not in SIGNALS:
        raise ValueError(f"--signal must be TERM, INT or KILL, not {name!r}")
    return key


# -- data --------------------------------------------------------------------------


@record
class KillTarget:
    """One process the user may kill, as it was when listed."""

    pid: int
    create_time: float | None
    user: str | None
    uid: int | None
    command: str | None
    #: (GPU index, GPU memory in bytes or None) for every GPU it is on; empty for a non-GPU process.
    gpus: tuple[tuple[int, int | None], ...] = ()
    container: ContainerRef | None = None
    #: True for the container's main process: it is stopped through Docker instead of signalled.
    container_main: bool = False
    restart_policy: str | None = None
    stale: tuple[Finding, ...] = ()
    status: str | None = None
    #: GPU index -> the MIG device ("5:1") it runs on, for GPUs in MIG mode.
    mig: tuple[tuple[int, str], ...] = ()
    #: The Slurm job it belongs to: killing it leaves the job holding its GPUs.
    job: JobRef | None = None

    @property
    def gpu_memory(self) -> int | None:
        known = [m for _, m in self.gpus if m is not None]
        return sum(known) if known else None

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_time": self.create_time,
            "owner": self.user,
            "command": self.command,
            "gpus": list(self.gpu_indices),
            "gpu_memory": self.gpu_memory,
            "container": self.container.label if self.container else None,
            "container_id": self.container.id if self.container else None,
            "container_main": self.container_main,
            "stale": [f.kind for f in self.stale],
            "job": self.job.id if self.job is not None else None,
        }


@record
class Refusal:
    pid: int
    reason: str
    #: The PID names no process here (or is no PID at all): a usage error (exit 2), not a "no".
    not_found: bool = False


@record
class KillPlan:
    targets: tuple[KillTarget, ...]
    refusals: tuple[Refusal, ...]
    signal: str = "TERM"
    timeout: float = 10.0
    escalate: bool = False


@record
class Outcome:
    """What happened to one target."""

    pid: int
    #: "exited", "stopped" (container), "running" (survived), "gone" (exited before the signal),
    #: "refused" (failed a check at execution time) or "failed" (an error, e.g. permission).
    result: str
    message: str
    target: KillTarget | None = None
    signals: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.result in ("exited", "stopped", "gone")


@record
class GpuFreed:
    gpu: int
    freed: int
    used_before: int | None
    used_after: int | None


@record
class KillReport:
    outcomes: tuple[Outcome, ...]
    refusals: tuple[Refusal, ...]
    freed: tuple[GpuFreed, ...] = ()
    #: (gpu, pid) pairs NVML still listed after the settle time although the process is gone.
    still_listed: tuple[tuple[int, int], ...] = ()
    #: Problems that did not stop the kill (e.g. NVML could not be re-read).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals and all(o.ok for o in self.outcomes)

    @property
    def total_freed(self) -> int:
        return sum(f.freed for f in self.freed)

    def lines(self) -> list[str]:
        out = [o.message for o in self.outcomes]
        for f in self.freed:
            if f.used_before is not None and f.used_after is not None:
                out.append(f"GPU {f.gpu}: {fmt_bytes(f.freed)} freed (memory used "
                           f"{fmt_bytes(f.used_before, 'GiB')} → {fmt_bytes(f.used_after, 'GiB')}).")
            else:
                out.append(f"GPU {f.gpu}: {fmt_bytes(f.freed)} freed.")
        for gpu, pid in self.still_listed:
            out.append(f"GPU {gpu}: the driver still lists PID {pid} after {SETTLE_SECONDS:.0f} s; its memory "
                       "may be released shortly, or a leaked context holds it until the GPU is reset.")
        out += list(self.notes)
        return out

    def summary(self) -> str:
        """One line for a notification."""
        done = [o for o in self.outcomes if o.ok]
        parts = []
        if done:
            parts.append(f"killed {len(done)} process{'es' if len(done) != 1 else ''}")
        if self.total_freed:
            parts.append(f"freed {fmt_bytes(self.total_freed)}")
        bad = [o for o in self.outcomes if not o.ok]
        if bad:
            parts.append(f"{len(bad)} not killed")
        if self.refusals:
            parts.append(f"{len(self.refusals)} refused")
        text = ", ".join(parts) or "nothing was killed"
        return text[0].upper() + text[1:] + "."


class KillError(Exception):
    """The kill cannot start at all (e.g. the audit log is not writable). One sentence."""


def short_command(command: str | None, width: int = 40) -> str:
    if not command:
        return "unknown command"
    command = clean(command)  # one line, visible escapes: cut what the reader will see
    return command if len(command) <= width else command[: width - 1] + "…"
