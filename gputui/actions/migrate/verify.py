"""Verifying the successor (:func:`verify_container`): it stays running, does not restart and, with
a healthcheck, reports healthy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.actions.migrate.model import MigrationPlan

if TYPE_CHECKING:
    pass


def verify_container(api: Any, cid: str, plan: MigrationPlan, timeout: float, interval: float = 0.25,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Raise RuntimeError unless the container stays running for ``timeout`` s, does not restart,
    and (with a healthcheck) reports healthy. A healthcheck gets the time its own settings need."""
    start = time.monotonic()
    deadline = start + timeout
    health_deadline = deadline
    if plan.has_healthcheck:
        hc = (plan.body.get("Healthcheck") or {})
        every = (hc.get("Interval") or 30_000_000_000) / 1e9
        grace = (hc.get("StartPeriod") or 0) / 1e9 + every * ((hc.get("Retries") or 3) + 1)
        health_deadline = start + max(timeout, grace)
    first_restarts: int | None = None
    healthy = not plan.has_healthcheck
    while True:
        attrs = api.inspect_container(cid)
        state = attrs.get("State") or {}
        restarts = int(attrs.get("RestartCount") or 0)
        if first_restarts is None:
            first_restarts = restarts
        if state.get("Restarting") or restarts > first_restarts:
            raise RuntimeError("the new container is restarting")
        if not state.get("Running"):
            code = state.get("ExitCode")
            raise RuntimeError(f"the new container stopped (exit code {code})" if code is not None
                               else "the new container stopped")
        status = (state.get("Health") or {}).get("Status")
        if plan.has_healthcheck:
            if status == "unhealthy":
                raise RuntimeError("the new container's healthcheck reports unhealthy")
            if status == "healthy":
                healthy = True
        now = time.monotonic()
        if now >= deadline and healthy:
            return
        if now >= health_deadline:
            raise RuntimeError(f"the new container did not become healthy within {health_deadline - start:.0f} s")
        sleep(min(interval, max(0.01, (deadline if not healthy or now < deadline else health_deadline) - now)))
