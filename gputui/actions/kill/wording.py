"""The sentences a kill shows before it runs: each target, the plan, the decline and the demo notice.

The CLI and the dialog print these same lines (through :class:`gputui.actions.kill.flow.KillFlow`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    pass

from gputui.actions.kill.model import KillPlan, KillTarget
from gputui.actions.kill.model import short_command as _short


def describe_target(t: KillTarget) -> list[str]:
    """Lines that show one target in a confirmation: pid, user, command, GPU, memory, container, stale."""
    where = dict(t.mig)  # a process on a MIG device is shown by its instance, "GPU 5:1"
    gpus = ", ".join(f"GPU {where.get(i, i)} ({fmt_bytes(m)})" for i, m in t.gpus) or "no GPU"
    head = f"PID {t.pid}  {t.user or 'unknown user'}  {gpus}  {_short(t.command, 60)}"
    lines = [head]
    if t.container is not None:
        name = t.container.label
        if t.container_main:
            policy = t.restart_policy or "no"
            if policy in ("no", ""):
                why = "so that Docker records it as stopped rather than crashed"
            elif policy == "always":
                why = (f"because its restart policy ({policy}) would otherwise bring it back; Docker still starts it "
                       "again when the daemon restarts")
            else:
                why = f"because its restart policy ({policy}) would otherwise bring it back"
            lines.append(f"    container {name}: this is its main process, so the container is stopped through "
                         f"Docker, {why}.")
        else:
            lines.append(f"    in container {name}")
    if t.job is not None:
        j = t.job
        lines.append(f"    in Slurm job {j.id} ({j.user or 'unknown user'}{', ' + j.name if j.name else ''}): the job "
                     f"keeps its GPUs and runs on; 'gputui kill --job {j.id}' cancels the job through Slurm.")
    for f in t.stale:
        lines.append(f"    stale ({f.kind}): {f.message}")
    if t.status == "disk-sleep":
        lines.append("    it is in uninterruptible sleep (D): it dies only when its driver call returns.")
    return lines


def confirmation_lines(plan: KillPlan) -> list[str]:
    lines: list[str] = []
    if plan.targets:
        n = len(plan.targets)
        how = f"SIG{plan.signal}"
        after = (f", wait up to {plan.timeout:g} s, then SIGKILL whatever is left" if plan.escalate
                 and plan.signal != "KILL" else f", wait up to {plan.timeout:g} s")
        lines.append(f"Kill {n} process{'es' if n != 1 else ''} with {how}{after}:")
        for t in plan.targets:
            lines.extend("  " + ln for ln in describe_target(t))
    if plan.refusals:
        lines.append("Refused:")
        lines.extend(f"  {r.reason}" for r in plan.refusals)
    return lines


#: The last line when a kill ends without signalling anything.
NOTHING_KILLED = "Nothing was killed."
#: Said before the plan on the simulated server.
DEMO_NOTICE = "(demo: this acts on the simulated server, no real process is signalled)"


def declined(pid: int) -> str:
    """The audit log's reason for a target the user declined."""
    return f"PID {pid}: the user declined the confirmation."
