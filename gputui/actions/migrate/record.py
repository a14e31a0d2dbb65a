"""What a migration tells the outside while it runs: progress notifications, the audit log, and
failures as one sentence (:mod:`gputui.core.errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputui.actions.migrate.model import STEPS, MigrationPlan, Progress, ProgressFn, ProgressState
from gputui.core.errors import sentence

if TYPE_CHECKING:
    pass


def notify(progress: ProgressFn | None, step: str, state: ProgressState, message: str) -> None:
    if progress is None:
        return
    number = STEPS.index(step) + 1 if step in STEPS else 0
    try:
        progress(Progress(step, number, len(STEPS), state, message))
    except Exception:
        pass  # a broken progress display must never break a migration half-way


def audit_migration(result: str, plan: MigrationPlan | None, **details: Any) -> None:
    from gputui.actions.audit import audit

    info: dict[str, Any] = {}
    if plan is not None:
        info = {
            "container": plan.container_name,
            "container_id": plan.container_id,
            "from_gpus": "all" if plan.from_all else list(plan.from_gpus),
            "to_gpu": plan.to_gpu,
            "to_uuid": plan.to_uuid,
            "forced": plan.forced,
            "demo": plan.demo,
        }
    info.update({k: v for k, v in details.items() if v is not None})
    try:
        audit("migrate", result, **info)
    except OSError:
        pass  # the state directory is unwritable: the action itself already happened or was undone


def audit_intent(plan: MigrationPlan) -> str | None:
    """Record the intent before the first step; one sentence when the audit log cannot take it."""
    from gputui.actions.audit import audit

    try:
        audit("migrate", "intent", container=plan.container_name, container_id=plan.container_id,
              from_gpus="all" if plan.from_all else list(plan.from_gpus), to_gpu=plan.to_gpu,
              to_uuid=plan.to_uuid, forced=plan.forced, demo=plan.demo)
    except OSError as exc:
        return f"cannot write the audit log ({exc.strerror or exc}); gputui changes nothing it cannot record."
    return None


def audit_refusal(container: str, target: str | int | None, reason: str, demo: bool = False) -> None:
    """Record that a migration the user asked for was refused (and why)."""
    audit_migration("refused", None, container=container, to_gpu=target, reason=reason, demo=demo)




def unreachable(exc: BaseException) -> str:
    """A failure talking to the daemon as one sentence (never Python's exception text)."""
    from gputui.core.sources.docker_source import describe_error

    return sentence(describe_error(exc))
