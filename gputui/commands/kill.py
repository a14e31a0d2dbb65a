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

import argparse

from gputui.actions.kill import (
    READ_ONLY,
    KillError,
    Refusal,
    audit_refusals,
    backend_for,
    check_audit_writable,
    confirmation_lines,
    execute_kill,
    plan_kill,
    read_only_plan,
    signal_name,
)
from gputui.commands.prompt import ask, interactive
from gputui.context import EXIT_NO, EXIT_OK, EXIT_USAGE, UsageError, seconds_arg
from gputui.core.safe_text import clean


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process ID") from None
    return value


def _signal(text: str) -> str:
    try:
        return signal_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    p.add_argument("pids", nargs="+", type=_pid, metavar="PID", help="process IDs as NVML and gputui show them")
    p.add_argument("--signal", "-s", type=_signal, default="TERM", metavar="TERM|INT|KILL",
                   help="the signal to send (default TERM)")
    p.add_argument("--timeout", type=seconds_arg, default=10.0, metavar="SECONDS",
                   help="how long to wait for each process to exit (default 10)")
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

    backend = None
    with ctx.polling() as polled:
        machine, before = polled.machine, polled.snapshot
        try:
            backend = backend_for(machine, docker_timeout=max(ctx.settings.docker_timeout, 10.0))
            plan = plan_kill(before, args.pids, backend, signal=args.signal, timeout=args.timeout,
                             escalate=args.escalate, force=args.force, read_only=False)
            demo = machine.demo is not None
            missing = [r for r in plan.refusals if r.not_found]
            if missing:
                # A PID that names no process is a mistake in the command line: nothing is signalled
                # (the list may hold a typo), and the exit status is 2 like any "no such ..." argument.
                for note in audit_refusals(plan.refusals, demo):
                    print(clean(f"gputui: {note}"), file=err)
                for r in plan.refusals:
                    print(clean(f"gputui: {r.reason}"), file=err)
                if plan.targets:
                    print("gputui: Nothing was killed.", file=err)
                return EXIT_USAGE
            if not plan.targets:
                for note in audit_refusals(plan.refusals, demo):
                    print(clean(f"gputui: {note}"), file=err)
                for r in plan.refusals:
                    print(clean(f"gputui: {r.reason}"), file=err)
                return EXIT_NO
            if machine.demo is not None:
                print("(demo: this acts on the simulated server, no real process is signalled)", file=out)
            for line in confirmation_lines(plan):
                print(clean(line), file=out)
            out.flush()
            if not args.yes:
                if not interactive():
                    raise UsageError("Refusing to kill without confirmation: stdin is not a terminal; add --yes.")
                answer = ask("Proceed? [y/N] ", out)
                if answer not in ("y", "yes"):
                    audit_refusals((Refusal(t.pid, f"PID {t.pid}: the user declined the confirmation.")
                                    for t in plan.targets), demo)
                    print("Nothing was killed.", file=out)
                    return EXIT_NO

            def progress(msg: str) -> None:
                print(clean(msg), file=err)
                err.flush()

            report = execute_kill(plan, backend, before, progress=progress if interactive() else None)
            for line in report.lines():
                print(clean(line), file=out)
            return EXIT_OK if report.ok else EXIT_NO
        finally:
            if backend is not None:
                backend.close()
