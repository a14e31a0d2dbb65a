"""Killing GPU processes without ever hitting the wrong one (the ``gputui.actions.kill`` package).

A kill is planned, confirmed, then executed:

* **Plan** (:func:`plan_kill`): the targets are ``(pid, start time)`` pairs taken
  from a snapshot, so what the user confirmed is exactly what gets signalled.
  Every guard that can refuse a target runs here and gives one sentence: PID
  ≤ 1, kernel threads, gputui itself and its ancestors, PIDs invisible in this
  PID namespace, zombies, processes that hold no GPU (unless ``force``), other
  users' processes (unless root) and read-only mode. A container's main process
  is not signalled at all: it is stopped through the Docker API, because a
  restart policy would otherwise start it again.
* **Execute** (:func:`execute_kill`): each target is *pinned* before it is
  signalled: a pidfd is opened (Linux ≥ 5.3) and only then is the start time
  compared, so a PID reused after the comparison cannot receive the signal.
  Without pidfds psutil's own reuse check is used. Then gputui waits up to the
  timeout, sends SIGKILL to survivors when escalation was asked for, re-reads
  NVML and reports the GPU memory that was freed. Every outcome and every
  refusal is appended to the audit log.

Where signals go is a :class:`KillBackend`: :class:`HostBackend` on a real
machine, :class:`DemoBackend` on the simulated server (``--demo``), so the CLI,
the dashboard and the tests run the same planning and reporting code.
"""

from gputui.actions.kill.backends import DemoBackend, Gone, HostBackend, KillBackend, Reused, backend_for
from gputui.actions.kill.execute import audit_refusals, check_audit_writable, execute_kill
from gputui.actions.kill.model import (
    SIGNALS,
    GpuFreed,
    KillError,
    KillPlan,
    KillReport,
    KillTarget,
    Outcome,
    Refusal,
    signal_name,
)
from gputui.actions.kill.plan import READ_ONLY, plan_kill, read_only_plan, targets_from_snapshot
from gputui.actions.kill.wording import confirmation_lines, describe_target

__all__ = [
    "READ_ONLY", "SIGNALS", "DemoBackend", "Gone", "GpuFreed", "HostBackend", "KillBackend", "KillError",
    "KillPlan", "KillReport", "KillTarget", "Outcome", "Refusal", "Reused", "audit_refusals", "backend_for",
    "check_audit_writable", "confirmation_lines", "describe_target", "execute_kill", "plan_kill",
    "read_only_plan", "signal_name", "targets_from_snapshot",
]
