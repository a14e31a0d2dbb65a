"""Executing a kill plan (:func:`execute_kill`): pin each target (pidfd, then compare the start
time), signal it or stop its container through Docker, wait, escalate if asked, re-read NVML for the
memory freed, and append every outcome and refusal to the audit log.
"""

from __future__ import annotations

import os
import signal as _signal
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gputui.core.errors import clause
from gputui.core.model import Snapshot

if TYPE_CHECKING:
    pass

from gputui.actions.kill.backends import DemoBackend, Gone, KillBackend, Reused
from gputui.actions.kill.model import (
    SETTLE_SECONDS,
    SIGNALS,
    GpuFreed,
    KillError,
    KillPlan,
    KillReport,
    KillTarget,
    Outcome,
    Refusal,
)
from gputui.actions.kill.model import short_command as _short


def _audit(result: str, demo: bool = False, **details: Any) -> str | None:
    """Append to the audit log (the demo's own log for ``demo``); returns a one-sentence problem
    instead of raising."""
    from gputui.actions.audit import audit

    try:
        audit("kill", result, demo=demo, **details)
    except OSError as exc:
        return f"Could not write the audit log: {exc.strerror or exc}."
    return None


def check_audit_writable(demo: bool = False) -> None:
    """Raise KillError unless the audit log (the demo's own for ``demo``) can be appended to: a kill
    must leave a record."""
    from gputui.actions.audit import audit_path
    from gputui.core.statefile import open_regular

    try:
        os.close(open_regular(audit_path(demo), os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    except OSError as exc:
        raise KillError(f"Cannot write the audit log ({exc.strerror or exc}); gputui kills nothing it cannot "
                        "record.") from None


def audit_refusals(refusals: Iterable[Refusal], demo: bool = False) -> list[str]:
    notes = []
    for r in refusals:
        problem = _audit("refused", demo, pid=r.pid, reason=r.reason)
        if problem and problem not in notes:
            notes.append(problem)
    return notes


def execute_kill(plan: KillPlan, backend: KillBackend, before: Snapshot,
                 progress: Callable[[str], object] | None = None) -> KillReport:
    """Signal (or stop) every target, wait, escalate if asked, re-read NVML, audit everything."""
    say = progress or (lambda _msg: None)
    demo = isinstance(backend, DemoBackend)
    notes: list[str] = audit_refusals(plan.refusals, demo)
    # 0. the intent, on disk before any signal: no path acts without a record
    for t in plan.targets:
        problem = _audit("intent", demo, **t.to_json(), signal=plan.signal, timeout=plan.timeout,
                         escalate=plan.escalate)
        if problem:
            message = f"Nothing was signalled: {problem[0].lower()}{problem[1:-1]}, and gputui kills nothing it " \
                      "cannot record."
            failed = tuple(Outcome(x.pid, "refused", message, x) for x in plan.targets)
            return KillReport(failed, plan.refusals, notes=tuple(notes))
    # 1. containers' main processes: through Docker (it waits and escalates itself)
    outcomes = _stop_containers(plan, backend, say)
    # 2. host processes: pin, then signal
    pinned, sent = _pin_and_signal(plan, backend, outcomes)
    if pinned:
        say(f"Sent SIG{plan.signal} to {', '.join(str(x) for x in pinned)}; waiting up to {plan.timeout:g} s…")
    # 3. wait, then escalate
    _wait_and_escalate(plan, backend, pinned, sent, outcomes, say)
    # 4. re-read NVML until the driver drops the dead processes' contexts
    entries = {o.pid: _held(o.target, before) for o in outcomes.values() if o.ok and o.target is not None}
    freed, still, nvml_note = _measure_freed(before, [e for held in entries.values() for e in held], backend, say)
    if nvml_note:
        notes.append(nvml_note)
    # 5. one audit record per outcome
    ordered = tuple(outcomes[t.pid] for t in plan.targets if t.pid in outcomes)
    for o in ordered:
        details: dict[str, Any] = o.target.to_json() if o.target else {"pid": o.pid}
        held = entries.get(o.pid)
        details.update(signal=plan.signal, signals=list(o.signals), outcome=o.result, message=o.message,
                       freed=None if held is None or nvml_note else
                       sum(m or 0 for i, pid, m in held if (i, pid) not in still))
        result = "ok" if o.ok else ("refused" if o.result == "refused" else "failed")
        problem = _audit(result, demo, **details)
        if problem and problem not in notes:
            notes.append(problem)
    return KillReport(ordered, plan.refusals, freed, still, tuple(notes))


def _stop_containers(plan: KillPlan, backend: KillBackend, say: Callable[[str], object]) -> dict[int, Outcome]:
    """Containers' main processes are stopped through Docker (it waits and escalates itself)."""
    sig_name = plan.signal
    outcomes: dict[int, Outcome] = {}
    for t in plan.targets:
        if not t.container_main or t.container is None:
            continue
        name = t.container.label
        say(f"Stopping container {name} through Docker…")
        try:
            backend.stop_container(t.container.id, plan.timeout, kill=sig_name == "KILL")
            how = "killed" if sig_name == "KILL" else "stopped"
            outcomes[t.pid] = Outcome(t.pid, "stopped", f"Container {name} {how} through Docker (its main process "
                                      f"was PID {t.pid}).", t,
                                      ("docker-kill" if sig_name == "KILL" else "docker-stop",))
        except Exception as exc:
            outcomes[t.pid] = Outcome(t.pid, "failed", f"Docker could not stop container {name}: "
                                      f"{_docker_error(exc)}.", t)
    return outcomes


def _pin_and_signal(plan: KillPlan, backend: KillBackend,
                    outcomes: dict[int, Outcome]) -> tuple[dict[int, Any], dict[int, list[str]]]:
    """Pin each host process (a reused PID is refused) and send it the plan's signal.
    Returns the pinned processes and the signals sent to each; other outcomes go to ``outcomes``."""
    sig_name = plan.signal
    sig = SIGNALS[sig_name]
    pinned: dict[int, Any] = {}
    sent: dict[int, list[str]] = {}
    for t in plan.targets:
        if t.container_main:
            continue
        try:
            p = backend.pin(t.pid, t.create_time)
        except Gone:
            outcomes[t.pid] = Outcome(t.pid, "gone", f"PID {t.pid} had already exited; nothing was signalled.", t)
            continue
        except Reused:
            outcomes[t.pid] = Outcome(t.pid, "refused", (
                f"PID {t.pid} now belongs to a different process than the one listed (its start time changed); "
                "nothing was signalled."), t)
            continue
        try:
            backend.send(p, sig)
        except ProcessLookupError:
            backend.release(p)
            outcomes[t.pid] = Outcome(t.pid, "gone", f"PID {t.pid} had already exited; nothing was signalled.", t)
            continue
        except PermissionError:
            backend.release(p)
            outcomes[t.pid] = Outcome(t.pid, "failed", (
                f"Permission denied: this user may not signal PID {t.pid} (owned by {t.user or 'another user'}); "
                "run gputui as root or as that user."), t)
            continue
        pinned[t.pid] = p
        sent[t.pid] = [sig_name]
    return pinned, sent


def _wait_and_escalate(plan: KillPlan, backend: KillBackend, pinned: dict[int, Any], sent: dict[int, list[str]],
                       outcomes: dict[int, Outcome], say: Callable[[str], object]) -> None:
    """Wait for the signalled processes, SIGKILL survivors when asked, record how each ended, release them."""
    sig_name = plan.signal
    survivors = backend.wait(list(pinned.values()), plan.timeout) if pinned else []
    if survivors and plan.escalate and sig_name != "KILL":
        say(f"SIG{sig_name} was ignored; sending SIGKILL…")
        for p in survivors:
            pid = _pid_of(p)
            try:
                backend.send(p, _signal.SIGKILL)
                sent[pid].append("KILL")
            except ProcessLookupError:
                pass
            except PermissionError:
                pass
        survivors = backend.wait(survivors, max(plan.timeout, 2.0))
    surviving = {_pid_of(p) for p in survivors}
    for t in plan.targets:
        if t.pid not in pinned:
            continue
        signals = tuple(sent[t.pid])
        if t.pid in surviving:
            facts = backend.facts(t.pid)
            if facts.status == "disk-sleep":
                why = ("it is in uninterruptible sleep inside a driver call and dies when that call returns; "
                       "until then it keeps its GPU memory")
            elif signals[-1] == "KILL":
                why = "SIGKILL has not taken effect yet"
            else:
                why = f"it may be handling or ignoring SIG{sig_name}; run again with --escalate or --signal KILL"
            outcomes[t.pid] = Outcome(t.pid, "running", (
                f"PID {t.pid} is still running {plan.timeout:g} s after SIG{'+SIG'.join(signals)}: {why}."), t, signals)
        elif len(signals) > 1:
            outcomes[t.pid] = Outcome(t.pid, "exited", (
                f"PID {t.pid} ({_short(t.command)}) ignored SIG{sig_name} for {plan.timeout:g} s and exited after "
                "SIGKILL."), t, signals)
        else:
            outcomes[t.pid] = Outcome(t.pid, "exited", f"PID {t.pid} ({_short(t.command)}) exited after "
                                      f"SIG{sig_name}.", t, signals)
    for p in pinned.values():
        backend.release(p)


def _pid_of(pinned: Any) -> int:
    return pinned if isinstance(pinned, int) else pinned.pid


def _docker_error(exc: Exception) -> str:
    from gputui.core.sources.docker_source import describe_error

    return clause(describe_error(exc))


def _held(target: KillTarget, before: Snapshot) -> list[tuple[int, int, int | None]]:
    """(gpu, pid, memory) entries a target's death should free: a stopped container frees all of its processes."""
    if target.container_main and target.container is not None:
        cid = target.container.id
        return [(g.index, p.pid, p.gpu_memory) for g in before.gpus for p in g.processes
                if p.container is not None and p.container.id == cid]
    return [(i, target.pid, m) for i, m in target.gpus]


def _measure_freed(
    before: Snapshot, held: list[tuple[int, int, int | None]], backend: KillBackend, say: Callable[[str], object]
) -> tuple[tuple[GpuFreed, ...], tuple[tuple[int, int], ...], str | None]:
    """Per GPU: the memory the dead processes held that the driver no longer attributes to them.

    A real driver tears a context down shortly after its process exits, so NVML is
    re-read for up to SETTLE_SECONDS until none of them is listed any more.
    """
    expect = {(i, pid) for i, pid, _ in held}
    if not expect:
        return (), (), None
    say("Re-reading NVML…")
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            reading = backend.read_gpus()
        except Exception as exc:
            return (), (), f"Could not re-read NVML to measure the memory freed: {exc}."
        listed = {(i, p.pid) for i, procs in reading.processes.items() for p in procs} & expect
        if not listed or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    used_before = {g.index: g.memory_used for g in before.gpus}
    used_after = {g.index: g.memory_used for g in reading.gpus}
    per_gpu: dict[int, int] = {}
    for i, pid, mem in held:
        if (i, pid) not in listed:
            per_gpu[i] = per_gpu.get(i, 0) + (mem or 0)
    freed = tuple(GpuFreed(i, amount, used_before.get(i), used_after.get(i)) for i, amount in sorted(per_gpu.items()))
    return freed, tuple(sorted(listed)), None
