"""One migration, from a container name to a result: the flow ``gputui migrate`` and the dashboard's
migrate dialog both drive.

Each face supplies only how it asks and how it shows: the CLI calls :meth:`MigrateFlow.run` with a
``confirm`` callback (a y/N prompt or ``--yes``); the dialog calls the same steps
(:meth:`~MigrateFlow.plan`, :meth:`~MigrateFlow.execute`, :meth:`~MigrateFlow.decline`) from its
workers, its keys being the confirmation. So the verification timeout, the audit records of a
refusal or a decline, and the sentences exist once.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Literal

from gputui.actions.migrate.model import (
    MigrationEngine,
    MigrationPlan,
    MigrationRefused,
    MigrationResult,
    ProgressFn,
)
from gputui.actions.migrate.plan import runtime_refusal
from gputui.actions.migrate.record import audit_refusal
from gputui.core.record import record

if TYPE_CHECKING:
    from gputui.core.model import Snapshot

#: Seconds the new container must stay running (and healthy) before it counts as verified.
VERIFY_TIMEOUT = 5.0
#: The audit log's reason when the user says no.
DECLINED = "the user declined the confirmation"
#: Said before the plan on the simulated server.
DEMO_NOTICE = "(demo: this acts on the simulated server only; no real container is touched)"
#: The last line when a migration ends without changing anything.
NOTHING_CHANGED = "Nothing was changed."
#: Said after a successful migration of a compose service whose file still names the old GPU.
COMPOSE_REMINDER = "Remember the compose-file change above, or 'docker compose up' will move it back."
#: Refusals a dialog shows while the user is still choosing (another target may fit); the others end it.
RECOVERABLE = frozenset({"no-fit", "same-gpu", "target-lost", "ambiguous"})


@record(frozen=False)
class MigrateRun:
    """How a migration driven by :meth:`MigrateFlow.run` ended: ``refused`` (``refusal`` says why),
    ``declined``, or ``done`` (see ``result.ok``)."""

    status: Literal["refused", "declined", "done"]
    plan: MigrationPlan | None = None
    result: MigrationResult | None = None
    refusal: MigrationRefused | None = None


class MigrateFlow:
    """Migrations through ``engine`` (Docker, or the simulation in --demo), as ``snapshot`` shows the GPUs."""

    def __init__(self, engine: MigrationEngine, snapshot: Snapshot | None, *,
                 verify_timeout: float = VERIFY_TIMEOUT) -> None:
        self.engine = engine
        self.snapshot = snapshot
        self.verify_timeout = verify_timeout

    @property
    def demo(self) -> bool:
        return self.engine.demo

    def plan(self, container: str, target: str | int, *, force: bool = False, from_gpu: str | int | None = None,
             peak_memory: int | None = None, discard_changes: bool = False) -> MigrationPlan:
        """The plan (pure: nothing changes). Raises MigrationRefused, MigrationNotFound, MigrationUnavailable.
        ``discard_changes``: the copy starts from the image, without the files the container changed."""
        found = self.snapshot.container(container) if self.snapshot is not None else None
        why = runtime_refusal(found.name, found.runtime, found.pod, found.namespace) if found is not None else None
        if why is not None:
            raise MigrationRefused("runtime", why)
        return self.engine.plan(container, target, self.snapshot, force=force, from_gpu=from_gpu,
                                peak_memory=peak_memory, discard_changes=discard_changes)

    def refuse(self, container: str, target: str | int | None, refusal: MigrationRefused) -> None:
        """Record in the audit log that the migration the user asked for was refused."""
        audit_refusal(container, target, str(refusal), demo=self.demo)

    def decline(self, plan: MigrationPlan) -> None:
        """The user saw the plan and said no: the audit log records it."""
        audit_refusal(plan.container_name, plan.to_gpu, DECLINED, demo=self.demo)

    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None) -> MigrationResult:
        """Run a confirmed plan; a failure is a result with one sentence (the engine rolls back)."""
        return self.engine.execute(plan, progress=progress, timeout=self.verify_timeout)

    def run(self, container: str, target: str | int, confirm: Callable[[MigrationPlan], bool], *,
            force: bool = False, from_gpu: str | int | None = None,
            progress: ProgressFn | None = None,
            guard: Callable[[], AbstractContextManager[object]] = nullcontext,
            discard_changes: bool = False) -> MigrateRun:
        """Plan, ask ``confirm``, then execute (inside ``guard``) or record the refusal or the decline.
        MigrationNotFound and MigrationUnavailable propagate (usage, unreachable)."""
        try:
            plan = self.plan(container, target, force=force, from_gpu=from_gpu, discard_changes=discard_changes)
        except MigrationRefused as exc:
            self.refuse(container, target, exc)
            return MigrateRun("refused", refusal=exc)
        if not confirm(plan):
            self.decline(plan)
            return MigrateRun("declined", plan)
        with guard():
            result = self.execute(plan, progress)
        return MigrateRun("done", plan, result)

    def close(self) -> None:
        self.engine.close()
