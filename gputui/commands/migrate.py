"""``gputui migrate CONTAINER --to GPU``: recreate a container on another GPU, with rollback.

The plan (the grant before and after, the exact configuration change, the
steps) is printed first; ``--dry-run`` stops there. On a terminal gputui asks
y/N, elsewhere it needs ``--yes``. Each step is printed as it completes; a
failing step restores the original container and says what failed.
``gputui migrate --recover`` finishes or undoes a migration that was interrupted
(gputui killed, host rebooted) from the journal it left.

Exit status: 0 migrated (or recovered, or a dry run); 1 refused, declined,
failed and rolled back; 2 bad usage (no such container or GPU, no ``--yes``
without a terminal); 3 NVML or Docker could not be reached.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from gputui.actions.journal import JournalError, journal_dirs, pending_journals, system_journal_dir
from gputui.actions.migrate import (
    BACKUP_INFIX,
    READ_ONLY,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    MigrationUnavailable,
    Progress,
    audit_refusal,
    docker_client,
    engine_for,
    leftover_backups,
)
from gputui.actions.migrate.flow import COMPOSE_REMINDER, DEMO_NOTICE, NOTHING_CHANGED, MigrateFlow
from gputui.actions.migrate.plan import runtime_refusal
from gputui.commands.prompt import ask, interactive
from gputui.context import EXIT_NO, EXIT_OK, EXIT_UNAVAILABLE, UsageError, seconds_arg
from gputui.core.safe_text import clean


def add_parser(sub, common):
    p = sub.add_parser(
        "migrate",
        help="move a container to another GPU (recreates it identically, rolls back on failure)",
        description=(
            "Recreate a container on another GPU with everything else identical: image, command, environment, "
            "labels, volumes (anonymous ones re-attached by name), ports, networks, restart policy, limits, "
            "healthcheck. The old container is kept under a backup name until the new one is verified running. "
            "Every migration is written to the audit log."
        ),
    )
    common(p)
    p.add_argument("container", nargs="?", metavar="CONTAINER", help="container name or id (or a unique id prefix)")
    p.add_argument("--to", metavar="GPU", help="target GPU: index or UUID; or a MIG device: GPU:instance "
                                               "(e.g. 0:2) or MIG- UUID")
    p.add_argument("--from", dest="from_gpu", metavar="GPU",
                   help="for a container holding several GPUs: the one to move")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the configuration change only")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask for confirmation (required when stdin is not a terminal)")
    p.add_argument("--timeout", type=seconds_arg, default=5.0, metavar="SECONDS",
                   help="how long the new container must stay running before the old one is removed (default 5)")
    p.add_argument("--force", action="store_true",
                   help="move even if the target GPU lacks the free memory the container has used")
    p.add_argument("--recover", action="store_true",
                   help="finish or undo a migration that was interrupted (from its journal)")
    p.add_argument("--discard", action="store_true",
                   help="with --recover: forget the interrupted migrations it cannot finish (their journals are "
                        "moved aside; no container is touched)")
    return p


def run(ctx) -> int:
    args = ctx.args
    if args.recover:
        if args.container or args.to:
            raise UsageError("--recover takes no container or --to; it acts on interrupted migrations.")
        return _recover(ctx)
    if args.discard:
        raise UsageError("--discard goes with --recover.")
    if not args.container or args.to is None:
        raise UsageError("Usage: gputui migrate CONTAINER --to GPU (or gputui migrate --recover).")
    if getattr(args, "no_docker", False) and not ctx.demo:
        raise UsageError("gputui migrate acts through Docker; drop --no-docker.")
    out, err = ctx.stdout, ctx.stderr
    if ctx.settings.read_only and not args.dry_run:
        audit_refusal(args.container, args.to, READ_ONLY, demo=ctx.demo)
        print(clean(f"gputui: {READ_ONLY}"), file=err)
        return EXIT_NO
    if not ctx.demo:
        for pending in pending_journals("migrate"):
            who = (pending.data.get("container") or {})
            if args.container in (who.get("name"), who.get("id")) or \
                    (len(args.container) >= 4 and str(who.get("id", "")).startswith(args.container)):
                print(clean(f"gputui: {args.container} has an interrupted migration; run 'gputui migrate "
                            "--recover' first."), file=err)
                return EXIT_NO
            print(clean(f"gputui: warning: {pending.describe()}"), file=err)

    with ctx.polling(docker=True, apply_gpu=False) as polled:
        engine = None
        # A container that is not Docker's is refused before Docker is asked (it may not even run).
        found = polled.snapshot.container(args.container) if args.container and not ctx.demo else None
        why = runtime_refusal(found.name, found.runtime, found.pod, found.namespace) if found is not None else None
        if why is not None:
            audit_refusal(args.container, args.to, why, demo=False)
            print(clean(f"gputui: {why}"), file=err)
            return EXIT_NO
        try:
            engine = engine_for(polled.machine, ctx.settings.with_overrides(read_only=False)
                                if args.dry_run else ctx.settings)
            flow = MigrateFlow(engine, polled.snapshot, verify_timeout=args.timeout)
            if args.dry_run:
                return _dry_run(flow, args, ctx.settings.read_only, out, err)
            return _migrate(flow, args, out, err)
        except MigrationNotFound as exc:
            raise UsageError(str(exc)) from None
        except MigrationUnavailable as exc:
            print(clean(f"gputui: {exc}"), file=err)
            return EXIT_UNAVAILABLE
        except JournalError as exc:
            print(clean(f"gputui: {exc}"), file=err)
            return EXIT_NO
        finally:
            if engine is not None:
                engine.close()


def _migrate(flow: MigrateFlow, args: Any, out: TextIO, err: TextIO) -> int:
    """Plan, confirm, execute through the flow; print how it ended."""
    run = flow.run(args.container, args.to, lambda plan: _confirm(plan, flow.demo, args.yes, out),
                   force=args.force, from_gpu=args.from_gpu, progress=_progress(out), guard=_sigterm_interrupts)
    if run.status == "refused":
        print(clean(f"gputui: {run.refusal}"), file=err)
        return EXIT_NO
    if run.status == "declined" or run.result is None or run.plan is None:
        print(NOTHING_CHANGED, file=out)
        return EXIT_NO
    if run.result.ok:
        print(clean(run.result.message), file=out)
        if run.plan.compose_change:
            print(COMPOSE_REMINDER, file=out)
        return EXIT_OK
    print(clean(f"gputui: {run.result.message}"), file=err)
    return EXIT_NO

def _dry_run(flow: MigrateFlow, args: Any, read_only: bool, out: TextIO, err: TextIO) -> int:
    """--dry-run: the plan, printed; nothing is asked, changed or audited."""
    try:
        plan = flow.plan(args.container, args.to, force=args.force, from_gpu=args.from_gpu)
    except MigrationRefused as exc:
        print(clean(f"gputui: {exc}"), file=err)
        return EXIT_NO
    if flow.demo:
        print(DEMO_NOTICE, file=out)
    print(plan.describe(), file=out)
    note = " (read-only: it could not be carried out)" if read_only else ""
    print(clean(f"Dry run: nothing was changed{note}."), file=out)
    return EXIT_OK


def _confirm(plan: MigrationPlan, demo: bool, yes: bool, out: TextIO) -> bool:
    """Show the plan, then ask y/N (``--yes`` answers yes)."""
    if demo:
        print(DEMO_NOTICE, file=out)
    print(plan.describe(), file=out)
    out.flush()
    if yes:
        return True
    if not interactive():
        raise UsageError("Refusing to migrate without confirmation: stdin is not a terminal; add --yes.")
    return ask(f"Migrate {plan.container_name} to {plan.to_label}? [y/N] ", out) in ("y", "yes")


def _progress(out: TextIO) -> Callable[[Progress], None]:
    def show(p: Progress) -> None:
        # Steps that wait (a slow stop, verification) say so while they wait.
        if p.state in ("done", "skipped", "failed", "undoing") or \
                (p.state == "running" and p.step in ("stop", "verify")):
            print(clean(p.line()), file=out)
            out.flush()

    return show


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM during a migration rolls it back like Ctrl-C does (instead of dying between two steps)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _recover(ctx) -> int:
    out, err = ctx.stdout, ctx.stderr
    args = ctx.args
    if ctx.demo:
        print("The demo keeps no journals: there is nothing to recover.", file=out)
        return EXIT_OK
    pending = pending_journals("migrate")
    for p in pending:
        print(clean(p.describe()), file=out)
    if ctx.settings.read_only:
        print(clean(f"gputui: {READ_ONLY}"), file=err)
        return EXIT_NO
    try:
        client = docker_client(ctx.settings.docker_timeout)
    except MigrationUnavailable as exc:
        print(clean(f"gputui: {exc}"), file=err)
        return EXIT_UNAVAILABLE
    from gputui.actions.migrate import DockerMigrationEngine

    engine = DockerMigrationEngine(client)
    try:
        if not pending:
            print("No interrupted migration to recover.", file=out)
            _report_backups(client, out)
            return EXIT_OK
        if not args.yes:
            if not interactive():
                raise UsageError("Refusing to recover without confirmation: stdin is not a terminal; add --yes.")
            question = "Finish or undo these migrations now" + (" (and discard what cannot be)" if args.discard
                                                                 else "")
            if ask(f"{question}? [y/N] ", out) not in ("y", "yes"):
                print("Nothing was changed.", file=out)
                return EXIT_NO
        failed = False

        def progress(p: Progress) -> None:
            print(clean(f"  {p.message}"), file=out)
            out.flush()

        for p in pending:
            busy = False
            try:
                result = engine.recover(p, progress=progress)
                ok, message, busy = result.ok, result.message, result.result == "busy"
            except JournalError as exc:
                ok, message = False, str(exc)
            if ok:
                print(clean(message), file=out)
                continue
            print(clean(f"gputui: {message}"), file=err)
            if args.discard and not busy and p.path.exists():
                print(clean(_discard(p)), file=out)
            else:
                failed = True
        _report_backups(client, out)
        return EXIT_NO if failed else EXIT_OK
    finally:
        engine.close()


def _discard(p: Any) -> str:
    """Move a journal that cannot be finished aside (kept for the record, no longer pending)."""
    aside = p.path.parent / "discarded"
    try:
        aside.mkdir(mode=0o700, exist_ok=True)
        p.path.rename(aside / p.path.name)
    except OSError as exc:
        return f"Could not discard the journal {p.path}: {exc.strerror or exc}."
    backup = (p.data or {}).get("backup_name")
    keep = (f" Container {backup}, if it still exists, may be the only copy of the original: keep it."
            if backup else "")
    return f"Discarded the journal {p.path.name} (moved to {aside}); no container was touched.{keep}"


def _report_backups(client: Any, out) -> None:
    journaled = {str((p.data or {}).get("backup_name")) for p in pending_journals("migrate")}
    for name in leftover_backups(client):
        if name in journaled:
            continue
        original = name.split(BACKUP_INFIX, 1)[0]
        print(f"Note: container {name} looks like a migration backup with no journal this user can read "
              f"(journals are in {', '.join(str(d) for d in journal_dirs()) or system_journal_dir()}). If no "
              f"container {original} runs, it is the only copy of the original: do not remove it; "
              f"'docker rename {name} {original}' and 'docker start {original}' bring it back.", file=out)
