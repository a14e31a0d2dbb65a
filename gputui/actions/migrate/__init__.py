"""Move a container to another GPU: plan it, do it step by step, put everything back if a step fails.

Docker cannot change a running container's devices (``docker update`` cannot;
moby #47704), so a migration *recreates* the container with the same
configuration and a rewritten GPU grant. Operators will only use that if it can
never lose a container or its data, which shapes everything here:

* **The planner is pure.** :func:`plan_migration` turns the container's inspect
  data (``container.attrs``) into the create body of its successor. Everything is
  copied except what Docker generates (hostname = short id, endpoint ids, IPs,
  MACs, the short-id alias; static addresses are kept); anonymous volumes stay
  volume mounts of the *same* volume (a naive copy would mount new empty ones);
  an ``--entrypoint ""`` stays empty; the image is pinned by id if its tag has
  moved. The grant (read by the one grant model, :mod:`gputui.core.grants`) is
  rewritten entry by entry in the form the container used. The human diff is
  computed by comparing that body with the same body *without* the grant change,
  plus the effective command (what the copy would run), so any other change shows.
* **The executor is locked and journaled.** It holds the container's lock
  (:mod:`gputui.actions.locks`) and re-checks that the container is still the
  one planned. Before anything changes, the original inspect data goes to a
  journal (:mod:`gputui.actions.journal`). Then: restart policy
  ``no`` (so nothing revives the old one mid-swap), stop, rename to a backup
  name, create under the original name, start, verify, and only then remove the
  old container — never its volumes. Any failure undoes what was done, in
  reverse, and says what failed in one sentence; a stop Docker is still carrying
  out is waited for before the original is started again. A journal left by a
  crash is found by :func:`gputui.actions.journal.pending_journals` and finished
  or undone by :meth:`DockerMigrationEngine.recover`.
* **Engines.** :class:`DockerMigrationEngine` acts on a Docker daemon;
  :class:`DemoMigrationEngine` acts on the simulated server of ``--demo`` with
  the same planner, so the CLI and the UI run one code path.

Tests inject faults through :class:`MigrationHooks` (called before every step),
never by patching internals.

The package: :mod:`.model` (data), :mod:`.body` (the successor's create body), :mod:`.plan`
(grants → plan), :mod:`.engine` (the Docker executor), :mod:`.verify`, :mod:`.demo` (the demo
engine beside the real one) and :mod:`.record` (progress, audit, sentences); this module chooses
the engine and re-exports the names callers use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputui.core.config import Settings
    from gputui.core.machine import Machine

from gputui.actions.migrate.body import body_diff
from gputui.actions.migrate.demo import DemoMigrationEngine
from gputui.actions.migrate.engine import DockerMigrationEngine
from gputui.actions.migrate.model import (
    BACKUP_INFIX,
    READ_ONLY,
    STEP_TEXT,
    STEPS,
    MigrationEngine,
    MigrationHooks,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    MigrationResult,
    MigrationRun,
    MigrationUnavailable,
    Progress,
)
from gputui.actions.migrate.plan import (
    TargetOption,
    compose_change,
    container_usage,
    mig_target_refusal,
    observed_peak,
    plan_migration,
    resolve_destination,
    resolve_target,
    target_options,
    target_refusal,
)
from gputui.actions.migrate.record import audit_refusal, unreachable
from gputui.actions.migrate.verify import verify_container


def docker_client(timeout: float = 5.0) -> Any:
    """A connected Docker client for the daemon the container view reads (same address rules).

    Migration calls take longer than an inventory read (stop waits for the
    container's StopTimeout), so the HTTP timeout is generous. Raises
    MigrationUnavailable with one sentence when the daemon cannot be reached.
    """
    from gputui.core.sources.docker_source import docker_client as connect

    try:
        return connect(timeout=max(timeout, 60.0), ping=True)
    except Exception as exc:  # SourceUnavailable, requests' connection errors and the like
        raise MigrationUnavailable(unreachable(exc)) from None


def engine_for(machine: Machine, settings: Settings, hooks: MigrationHooks | None = None,
               client: Any = None) -> MigrationEngine:
    """The demo engine on the simulated server, the Docker engine otherwise."""
    if machine.demo is not None:
        return DemoMigrationEngine(machine.demo, read_only=settings.read_only, hooks=hooks)
    return DockerMigrationEngine(client or docker_client(settings.docker_timeout), hooks=hooks,
                                 read_only=settings.read_only)


def leftover_backups(client: Any) -> list[str]:
    """Names of ``*-gputui-old-*`` containers (backups a migration may have left), for --recover to report."""
    try:
        return sorted(c["Names"][0].lstrip("/") for c in client.api.containers(all=True)
                      if any(BACKUP_INFIX in n for n in c.get("Names") or []))
    except Exception:
        return []


__all__ = [
    "BACKUP_INFIX", "STEPS", "STEP_TEXT", "READ_ONLY", "MigrationPlan", "MigrationRefused", "MigrationNotFound",
    "MigrationUnavailable", "MigrationHooks", "MigrationRun", "MigrationResult", "MigrationEngine",
    "DockerMigrationEngine", "DemoMigrationEngine", "Progress", "TargetOption", "plan_migration", "body_diff",
    "target_options", "target_refusal", "observed_peak", "container_usage", "engine_for", "docker_client",
    "pending_journals", "audit_refusal", "JournalError", "leftover_backups", "compose_change", "resolve_target",
    "resolve_destination", "mig_target_refusal",
    "verify_container",
]
