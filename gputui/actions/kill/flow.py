"""One kill, from PIDs to report: the flow that ``gputui kill`` and the dashboard's kill dialog both drive.

Each face supplies only how it asks and how it shows: the CLI calls :meth:`KillFlow.run` with a
``confirm`` callback (a y/N prompt or ``--yes``); the dialog calls the same steps
(:meth:`~KillFlow.plan`, :meth:`~KillFlow.execute`, :meth:`~KillFlow.decline`) from its workers,
its keys being the confirmation. So the timeouts, the refusals, the audit records of a decline
and every sentence exist once, here and in :mod:`gputui.actions.kill.wording`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from gputui.actions.kill.backends import KillBackend, backend_for
from gputui.actions.kill.execute import audit_refusals, check_audit_writable, execute_kill
from gputui.actions.kill.model import KillPlan, KillReport, Refusal
from gputui.actions.kill.plan import plan_kill
from gputui.actions.kill.wording import declined
from gputui.core.record import field, record

if TYPE_CHECKING:
    from gputui.core.machine import Machine
    from gputui.core.model import Snapshot

#: Seconds to wait for each process to exit before reporting it (or escalating), on every face.
TIMEOUT = 10.0
#: The least time the Docker API gets to stop a container's main process.
DOCKER_TIMEOUT = 10.0


@record(frozen=False)
class KillRun:
    """How a kill driven by :meth:`KillFlow.run` ended.

    ``not-found``: a PID names no process (a usage error: nothing is signalled); ``refused``:
    every target was refused; ``declined``: the confirmation said no; ``done``: it ran (see
    ``report.ok``). ``notes`` are problems writing the audit log."""

    status: Literal["not-found", "refused", "declined", "done"]
    plan: KillPlan
    report: KillReport | None = None
    notes: list[str] = field(default_factory=list)


class KillFlow:
    """The kill of ``pids`` as listed in ``snapshot``, on ``machine``. Close it when done."""

    def __init__(self, machine: Machine, snapshot: Snapshot, pids: list[int], *, read_only: bool,
                 docker_timeout: float = DOCKER_TIMEOUT, signal: str = "TERM", timeout: float = TIMEOUT,
                 escalate: bool = False, force: bool = False) -> None:
        self.machine = machine
        self.snapshot = snapshot
        self.pids = pids
        self.read_only = read_only
        self.docker_timeout = max(docker_timeout, DOCKER_TIMEOUT)
        self.signal = signal
        self.timeout = timeout
        self.escalate = escalate
        self.force = force
        self._backend: KillBackend | None = None

    @property
    def demo(self) -> bool:
        """True on the simulated server: the audit goes to the demo's own log."""
        return self.machine.demo is not None

    @property
    def backend(self) -> KillBackend:
        """Created on first use: a real backend may connect to Docker (blocks; call it off the UI thread)."""
        if self._backend is None:
            self._backend = backend_for(self.machine, docker_timeout=self.docker_timeout)
        return self._backend

    def plan(self, signal: str | None = None, escalate: bool | None = None) -> KillPlan:
        """Every guard, for the PIDs as the snapshot lists them (``signal``/``escalate`` change the choice)."""
        if signal is not None:
            self.signal = signal
        if escalate is not None:
            self.escalate = escalate
        return plan_kill(self.snapshot, self.pids, self.backend, signal=self.signal, timeout=self.timeout,
                         escalate=self.escalate, force=self.force, read_only=self.read_only)

    def refuse(self, plan: KillPlan) -> list[str]:
        """Record the plan's refusals in the audit log; the problems writing it."""
        return audit_refusals(plan.refusals, self.demo)

    def decline(self, plan: KillPlan) -> list[str]:
        """The user saw the plan and said no: its refusals and the declined targets go to the audit log."""
        return audit_refusals([*plan.refusals, *(Refusal(t.pid, declined(t.pid)) for t in plan.targets)],
                              self.demo)

    def execute(self, plan: KillPlan, progress: Callable[[str], object] | None = None) -> KillReport:
        """Run a confirmed plan. Raises KillError when the audit log cannot be written (nothing is killed)."""
        check_audit_writable(self.demo)
        return execute_kill(plan, self.backend, self.snapshot, progress=progress)

    def run(self, confirm: Callable[[KillPlan], bool],
            progress: Callable[[str], object] | None = None) -> KillRun:
        """Plan, ask ``confirm`` (only when something can be killed), then execute or record the decline."""
        plan = self.plan()
        if any(r.not_found for r in plan.refusals):
            # A PID that names no process is a mistake in the command line: nothing is signalled
            # (the list may hold a typo).
            return KillRun("not-found", plan, notes=self.refuse(plan))
        if not plan.targets:
            return KillRun("refused", plan, notes=self.refuse(plan))
        if not confirm(plan):
            return KillRun("declined", plan, notes=self.decline(plan))
        return KillRun("done", plan, self.execute(plan, progress))

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
