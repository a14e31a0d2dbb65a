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

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from gputui.actions.journal import (
    JournalError,
    PendingJournal,
    discard,
    journal_dirs,
    pending_journals,
    scan_journals,
    system_journal_dir,
)
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
from gputui.actions.migrate.record import unreachable
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
                   help="move even if the target GPU lacks the free memory the container has used, or a tmpfs "
                        "mount holds data (its contents are lost)")
    p.add_argument("--discard-changes", action="store_true",
                   help="do not carry the files the container changed outside its volumes (by default the "
                        "stopped original is committed into an image the copy is created from)")
    p.add_argument("--recover", action="store_true",
                   help="finish or undo the migrations that were interrupted on this Docker daemon (from their "
                        "journals); with CONTAINER, only that container's")
    p.add_argument("--from-journal", action="store_true",
                   help="with --recover: where the original and its backup are both gone, create the container "
                        "again from its journal (after showing the host paths, privileges and devices it names)")
    p.add_argument("--discard", action="store_true",
                   help="with --recover: forget the interrupted migrations it cannot finish (their journals are "
                        "moved aside; no container is touched)")
    return p


def run(ctx) -> int:
    args = ctx.args
    if args.recover:
        if args.to:
            raise UsageError("--recover takes no --to; it finishes or undoes interrupted migrations (of "
                             "CONTAINER only, if given).")
        return _recover(ctx)
    if args.discard:
        raise UsageError("--discard goes with --recover.")
    if args.from_journal:
        raise UsageError("--from-journal goes with --recover.")
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
        pending = pending_journals("migrate")
        for journal in pending:  # only a journal gputui may act on holds a container back
            if journal.trusted and _names(journal, args.container):
                print(clean(f"gputui: {args.container} has an interrupted migration; run 'gputui migrate "
                            f"--recover {args.container}' first."), file=err)
                return EXIT_NO
        for journal in pending[:3]:
            print(clean(f"gputui: warning: {journal.describe()}"), file=err)
        if len(pending) > 3:
            print(f"gputui: warning: {len(pending) - 3} more interrupted migrations; see 'gputui migrate --recover'.",
                  file=err)

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
            if _sudo() and not flow.demo:
                _say_daemon(engine, err)
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
    signals = _Signals(args.container)
    show = _progress(out)

    def progress(p: Progress) -> None:
        signals.seen(p)
        show(p)

    try:
        run = flow.run(args.container, args.to, lambda plan: _confirm(plan, flow.demo, args.yes, out),
                       force=args.force, from_gpu=args.from_gpu, progress=progress, guard=signals.guard,
                       discard_changes=args.discard_changes)
    except BaseException:
        if signals.started and not flow.demo:
            # Whatever ended the run early (a third signal, a bug), the journal says what to finish or undo.
            _say(f"gputui: the migration of {args.container} ended abnormally; run 'gputui migrate --recover' "
                 f"to finish or undo it.")
        raise
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
        plan = flow.plan(args.container, args.to, force=args.force, from_gpu=args.from_gpu,
                         discard_changes=args.discard_changes)
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
        if p.state in ("done", "skipped", "failed", "undoing", "info") or \
                (p.state == "running" and p.step in ("stop", "verify")):
            print(clean(p.line()), file=out)
            out.flush()

    return show


def _say(line: str) -> None:
    """One line to stderr straight to the descriptor: safe inside a signal handler, whatever print was doing."""
    try:
        os.write(2, (clean(line) + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


class _Signals:
    """What signals do while a migration runs, so an interruption never leaves the container down.

    * SIGINT / SIGTERM: the first one rolls the migration back (KeyboardInterrupt into the engine, which
      undoes what was done). Any further one, and any that comes while a failed step is being undone,
      is ignored with one line: stopping the rollback half-way is what leaves a container down.
    * SIGHUP (the ssh session dropped, the terminal closed): the migration carries on to its end, or
      rolls back, on its own: stdin, stdout and stderr go to /dev/null (a write to a hung-up terminal
      fails), and how it ended is in the audit log (and the journal, while one is needed).
    """

    def __init__(self, container: str) -> None:
        self.container = container
        self.interrupted = False
        self.rolling_back = False
        self.hung_up = False
        self.started = False

    def seen(self, p: Progress) -> None:
        if p.state in ("failed", "undoing"):
            self.rolling_back = True

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.interrupted or self.rolling_back:
            _say(f"gputui: already putting {self.container} back; this interrupt is ignored (stopping now could "
                 f"leave the container down).")
            return
        self.interrupted = True
        raise KeyboardInterrupt

    def _hangup(self, signum: int, frame: Any) -> None:
        if self.hung_up:
            return
        self.hung_up = True
        try:
            fd = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(fd, target)
            os.close(fd)
        except OSError:
            pass

    @contextmanager
    def guard(self) -> Iterator[None]:
        self.started = True
        try:
            previous = {sig: signal.signal(sig, handler) for sig, handler in (
                (signal.SIGINT, self._interrupt), (signal.SIGTERM, self._interrupt), (signal.SIGHUP, self._hangup))}
        except ValueError:  # not the main thread
            yield
            return
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.hung_up:
                from gputui.actions.audit import audit

                try:
                    audit("migrate", "detached", container=self.container,
                          reason="the terminal hung up (SIGHUP) during the migration, which went on without it")
                except OSError:
                    pass


def _recover(ctx) -> int:
    """--recover [CONTAINER]: finish or undo the interrupted migrations of the daemon gputui talks to."""
    out, err = ctx.stdout, ctx.stderr
    args = ctx.args
    if ctx.demo:
        print("The demo keeps no journals: there is nothing to recover.", file=out)
        return EXIT_OK
    scan = scan_journals("migrate")
    pending = [p for p in scan.pending if not args.container or _names(p, args.container)]
    if args.container and not pending:
        print(clean(f"No interrupted migration of {args.container} to recover."), file=out)
        return EXIT_OK
    if ctx.settings.read_only:
        for p in pending:
            print(clean(p.describe()), file=out)
        print(clean(f"gputui: {READ_ONLY}"), file=err)
        return EXIT_NO
    try:
        client = docker_client(ctx.settings.docker_timeout)
    except MigrationUnavailable as exc:
        for p in pending:
            print(clean(p.describe()), file=out)
        print(clean(f"gputui: {exc}"), file=err)
        return EXIT_UNAVAILABLE
    from gputui.actions.migrate import DockerMigrationEngine

    engine = DockerMigrationEngine(client)
    engine.from_journal = bool(args.from_journal)
    try:
        try:
            daemon = engine.daemon()
        except Exception as exc:
            print(clean(f"gputui: {unreachable(exc)}"), file=err)
            return EXIT_UNAVAILABLE
        if pending or _sudo():
            print(clean(f"Docker daemon: {daemon['endpoint']} (ID {daemon['id']}){_sudo_note()}."), file=out)
        mine, others, skipped = _sort(engine, pending)
        for p in skipped:
            print(clean(f"Skipped: {p.describe()}"), file=out)
        for endpoint, group in others.items():
            n = len(group)
            print(clean(f"{n} interrupted migration{'s' if n > 1 else ''} ({', '.join(_name(p) for p in group)}) "
                        f"belong{'s' if n == 1 else ''} to another Docker daemon (ID {group[0].daemon.get('id')}, "
                        f"{endpoint}); run with DOCKER_HOST={endpoint}."), file=out)
        if scan.unread:
            print(f"{scan.unread} more journals were not read this time; run --recover again after these.", file=out)
        if not mine:
            print("No interrupted migration to recover" + (" on this Docker daemon." if scan.pending else "."),
                  file=out)
            _report_backups(client, out, scan.pending)
            return EXIT_NO if skipped or others else EXIT_OK
        for p in mine:
            print(clean(p.describe()), file=out)
            name, cid = p.container
            print(clean(f"  journal {p.path} (owner {p.owner or '?'}); it changes container {name} ({cid[:12]})"),
                  file=out)
            if args.from_journal:
                from gputui.actions.migrate.recovery import risky_summary

                print(clean(f"  if it must be created from the journal: {risky_summary(p.data)}"), file=out)
        if not args.yes:
            if not interactive():
                raise UsageError("Refusing to recover without confirmation: stdin is not a terminal; add --yes.")
            question = "Finish or undo these migrations now" + (" (and discard what cannot be)" if args.discard
                                                                 else "")
            if ask(f"{question}? [y/N] ", out) not in ("y", "yes"):
                print("Nothing was changed.", file=out)
                return EXIT_NO
        failed = bool(skipped or others)

        def progress(p: Progress) -> None:
            print(clean(f"  {p.message}"), file=out)
            out.flush()

        for p in mine:
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
                done, said = _discard(p)
                print(clean(said), file=out if done else err)
                failed = failed or not done
            else:
                failed = True
        _report_backups(client, out, pending_journals("migrate"))
        return EXIT_NO if failed else EXIT_OK
    finally:
        engine.close()


def _names(p: PendingJournal, container: str) -> bool:
    """Does ``--recover CONTAINER`` mean this journal's container (its name, id, or an id prefix of 4+)?"""
    name, cid = p.container
    return container in (name, cid) or (len(container) >= 4 and cid.startswith(container))


def _name(p: PendingJournal) -> str:
    return p.container[0] or p.path.name


def _sudo() -> bool:
    import os

    return bool(os.environ.get("SUDO_USER"))


def _sudo_note() -> str:
    return "; sudo does not pass DOCKER_HOST on: set it after sudo for another daemon" if _sudo() else ""


def _say_daemon(engine: Any, err: TextIO) -> None:
    """Under sudo (which drops DOCKER_HOST), say which daemon the migration acts on."""
    try:
        daemon = engine.daemon()
    except Exception:
        return
    print(clean(f"gputui: acting on the Docker daemon at {daemon['endpoint']} (ID {daemon['id']})"
                f"{_sudo_note()}."), file=err)


def _sort(engine: Any, pending: list[PendingJournal]) -> tuple[list[PendingJournal], dict[str, list[PendingJournal]],
                                                                 list[PendingJournal]]:
    """Journals to act on here, those of other daemons (by endpoint), and those not to act on at all."""
    mine: list[PendingJournal] = []
    others: dict[str, list[PendingJournal]] = {}
    skipped: list[PendingJournal] = []
    for p in pending:
        if not p.trusted:
            skipped.append(p)
        elif engine.belongs_here(p) is False:
            others.setdefault(p.daemon.get("endpoint") or "an unknown endpoint", []).append(p)
        else:
            mine.append(p)
    return mine, others, skipped


def _discard(p: PendingJournal) -> tuple[bool, str]:
    """Move a journal that cannot be finished aside (kept for the record, no longer pending)."""
    try:
        moved = discard(p)
    except JournalError as exc:
        return False, f"gputui: {exc}"
    backup = (p.data or {}).get("backup_name")
    keep = (f" Container {backup}, if it still exists, may be the only copy of the original: keep it."
            if backup else "")
    return True, f"Discarded the journal {p.path.name} (moved to {moved.parent}); no container was touched.{keep}"


def _report_backups(client: Any, out, pending: list[PendingJournal]) -> None:
    journaled = {str((p.data or {}).get("backup_name")) for p in pending}
    for name in leftover_backups(client):
        if name in journaled:
            continue
        original = name.split(BACKUP_INFIX, 1)[0]
        print(f"Note: container {name} looks like a migration backup with no journal this user can read "
              f"(journals are in {', '.join(str(d) for d in journal_dirs()) or system_journal_dir()}). If no "
              f"container {original} runs, it is the only copy of the original: do not remove it; "
              f"'docker rename {name} {original}' and 'docker start {original}' bring it back.", file=out)
