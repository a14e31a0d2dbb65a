"""``gputui kill PID...``: signal GPU processes after showing exactly what will be hit.

The targets come from a fresh poll, so only processes NVML lists are eligible
(``--force`` admits others) and each carries the start time it had when listed:
if the PID is reused before the signal, nothing is sent. The confirmation shows
pid, user, command, GPUs and their memory, container and stale reasons; on a
terminal gputui asks y/N, elsewhere it needs ``--yes``.

Exit status: 0 every target is gone; 1 something was refused, declined, failed
or survived; 2 bad usage (a PID that names no process — then nothing is
signalled —, no ``--yes`` without a terminal); 3 the machine could not be read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from gputui.actions.kill import READ_ONLY, KillError, KillPlan, audit_refusals, check_audit_writable, read_only_plan
from gputui.actions.kill.flow import TIMEOUT, KillFlow
from gputui.actions.kill.wording import DEMO_NOTICE, NOTHING_KILLED, confirmation_lines
from gputui.commands.prompt import ask, interactive
from gputui.context import EXIT_NO, EXIT_OK, EXIT_USAGE, UsageError, pid_arg, seconds_arg, signal_arg
from gputui.core.safe_text import clean


def add_parser(sub, common):
    p = sub.add_parser(
        "kill",
        help="kill GPU processes safely (confirmation, ownership and PID-reuse checks, audit log)",
        description=(
            "Signal GPU processes. The confirmation shows pid, user, command, GPU, GPU memory, container and "
            "stale reasons. A container's main process is stopped through Docker instead. Afterwards NVML is "
            "re-read and the GPU memory freed is reported. Every kill is written to the audit log."
        ),
    )
    common(p)
    p.add_argument("pids", nargs="*", type=pid_arg, metavar="PID", help="process IDs as NVML and gputui show them")
    p.add_argument("--job", metavar="JOBID",
                   help="cancel this Slurm job through scancel instead (its owner or root; TERM is Slurm's own "
                        "cancel, INT/KILL are sent to every process of the job)")
    p.add_argument("--signal", "-s", type=signal_arg, default="TERM", metavar="TERM|INT|KILL",
                   help="the signal to send (default TERM)")
    p.add_argument("--timeout", type=seconds_arg, default=TIMEOUT, metavar="SECONDS",
                   help=f"how long to wait for each process to exit (default {TIMEOUT:g})")
    p.add_argument("--escalate", action="store_true",
                   help="send SIGKILL to processes still running when the timeout expires")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask for confirmation (required when stdin is not a terminal)")
    p.add_argument("--force", action="store_true",
                   help="also kill processes that hold no GPU memory")
    return p


def run(ctx) -> int:
    args = ctx.args
    out, err = ctx.stdout, ctx.stderr
    if args.job is not None:
        if args.pids:
            raise UsageError("Give PIDs or --job, not both.")
        return _run_job(ctx)
    if not args.pids:
        raise UsageError("Name the PIDs to kill, or --job JOBID to cancel a Slurm job.")
    if ctx.settings.read_only:
        plan = read_only_plan(args.pids, signal=args.signal, timeout=args.timeout, escalate=args.escalate)
        for note in audit_refusals(plan.refusals, ctx.demo):
            print(clean(f"gputui: {note}"), file=err)
        print(clean(f"gputui: {READ_ONLY}"), file=err)
        return EXIT_NO
    try:
        check_audit_writable(ctx.demo)
    except KillError as exc:
        print(clean(f"gputui: {exc}"), file=err)
        return EXIT_NO

    with ctx.polling() as polled:
        flow = KillFlow(polled.machine, polled.snapshot, args.pids, read_only=False,
                        docker_timeout=ctx.settings.docker_timeout, signal=args.signal, timeout=args.timeout,
                        escalate=args.escalate, force=args.force)
        try:
            result = flow.run(lambda plan: _confirm(plan, flow.demo, args.yes, out),
                              progress=_progress(err) if interactive() else None)
        finally:
            flow.close()
    for note in result.notes:
        print(clean(f"gputui: {note}"), file=err)
    if result.status in ("not-found", "refused"):
        for r in result.plan.refusals:
            print(clean(f"gputui: {r.reason}"), file=err)
        if result.status == "refused":
            return EXIT_NO
        if result.plan.targets:
            print(f"gputui: {NOTHING_KILLED}", file=err)
        return EXIT_USAGE  # like any argument that names nothing here
    if result.status == "declined" or result.report is None:
        print(NOTHING_KILLED, file=out)
        return EXIT_NO
    for line in result.report.lines():
        print(clean(line), file=out)
    return EXIT_OK if result.report.ok else EXIT_NO


def _confirm(plan: KillPlan, demo: bool, yes: bool, out: TextIO) -> bool:
    """Show exactly what will be hit, then ask y/N (``--yes`` answers yes)."""
    if demo:
        print(DEMO_NOTICE, file=out)
    for line in confirmation_lines(plan):
        print(clean(line), file=out)
    out.flush()
    if yes:
        return True
    if not interactive():
        raise UsageError("Refusing to kill without confirmation: stdin is not a terminal; add --yes.")
    return ask("Proceed? [y/N] ", out) in ("y", "yes")


def _progress(err: TextIO) -> Callable[[str], None]:
    def say(msg: str) -> None:
        print(clean(msg), file=err)
        err.flush()

    return say


def _run_job(ctx) -> int:
    """``kill --job``: plan from a fresh poll, confirm, scancel, wait for Slurm, audit."""
    from gputui.actions.kill.job import decline_job_kill, execute_job_kill, plan_job_kill, refuse_job_kill

    args, out, err = ctx.args, ctx.stdout, ctx.stderr
    if not ctx.settings.read_only:
        try:
            check_audit_writable(ctx.demo)
        except KillError as exc:
            print(clean(f"gputui: {exc}"), file=err)
            return EXIT_NO
    with ctx.polling(docker=False) as polled:
        plan = plan_job_kill(polled.snapshot, args.job, signal=args.signal, read_only=ctx.settings.read_only)
        source = polled.machine.slurm
        if not plan.ok or source is None:
            if not ctx.settings.read_only:
                refuse_job_kill(plan, demo=ctx.demo)
            print(clean(f"gputui: {plan.refusal}"), file=err)
            return EXIT_NO
        if ctx.demo:
            print("(demo: this acts on the simulated server, no real job is cancelled)", file=out)
        for line in plan.lines():
            print(clean(line), file=out)
        out.flush()
        if not args.yes:
            if not interactive():
                raise UsageError("Refusing to cancel without confirmation: stdin is not a terminal; add --yes.")
            if ask("Proceed? [y/N] ", out) not in ("y", "yes"):
                decline_job_kill(plan, demo=ctx.demo)
                print(NOTHING_KILLED, file=out)
                return EXIT_NO
        result = execute_job_kill(plan, source, timeout=max(args.timeout, 30.0),
                                  progress=_progress(err) if interactive() else None, demo=ctx.demo)
    print(clean(result.message), file=out if result.ok else err)
    return EXIT_OK if result.ok else EXIT_NO
