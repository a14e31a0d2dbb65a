"""Planning a kill (:func:`plan_kill`): the targets are ``(pid, start time)`` pairs taken from a
snapshot, so what the user confirmed is exactly what gets signalled. Every guard that can refuse a
target runs here and gives one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputui.core.model import ContainerRef, Snapshot
from gputui.core.record import replace

if TYPE_CHECKING:
    pass

from gputui.actions.kill.backends import KillBackend
from gputui.actions.kill.model import KillPlan, KillTarget, Refusal, signal_name
from gputui.actions.kill.model import short_command as _short


def targets_from_snapshot(snapshot: Snapshot) -> dict[int, KillTarget]:
    """Every GPU process of a snapshot as a kill target, one per PID (its GPUs merged)."""
    out: dict[int, KillTarget] = {}
    for g in snapshot.gpus:
        for p in g.processes:
            prev = out.get(p.pid)
            if prev is None:
                out[p.pid] = KillTarget(
                    pid=p.pid, create_time=p.create_time, user=p.user, uid=p.uid, command=p.command,
                    gpus=((g.index, p.gpu_memory),), container=p.container, stale=p.stale, status=p.status,
                    mig=((g.index, p.mig_label),) if p.mig_label else (), job=p.job,
                )
            else:
                stale = prev.stale + tuple(f for f in p.stale if f not in prev.stale)
                mig = prev.mig + (((g.index, p.mig_label),) if p.mig_label else ())
                out[p.pid] = replace(prev, gpus=prev.gpus + ((g.index, p.gpu_memory),), stale=stale, mig=mig)
    return out


#: Why a process invisible here cannot be signalled, by the process source's reason.
def _invisible_reason(pid: int, reason: str | None, listed: bool) -> str:
    if reason == "other-namespace":
        return (f"PID {pid} is not visible in gputui's PID namespace (NVML reports host PIDs); run gputui on the "
                "host or in a container started with --pid=host to kill it.")
    if listed:
        return (f"PID {pid} is listed by the NVIDIA driver but no such process exists here; there is nothing to "
                "signal (a leaked driver context is released only by a GPU reset).")
    return _no_such(pid)


def _no_such(pid: int) -> str:
    return f"There is no process with PID {pid} here."


def plan_kill(
    snapshot: Snapshot,
    pids: Iterable[int],
    backend: KillBackend,
    *,
    signal: str = "TERM",
    timeout: float = 10.0,
    escalate: bool = False,
    force: bool = False,
    read_only: bool = False,
) -> KillPlan:
    """Targets for ``pids`` from ``snapshot``, each checked by every guard.

    ``snapshot`` is the listing the user saw (the dashboard's current view, or a
    fresh poll for the CLI); its start times are what execution will insist on.
    """
    sig = signal_name(signal)
    wanted = _unique(pids)
    if read_only:
        return read_only_plan(wanted, signal=sig, timeout=timeout, escalate=escalate)
    listed = targets_from_snapshot(snapshot)
    protected = backend.protected_pids()
    targets: list[KillTarget] = []
    refusals: list[Refusal] = []
    for pid in wanted:
        target = listed.get(pid)
        why = _refuse(pid, target, backend, protected, force)
        if why is not None:
            refusals.append(Refusal(pid, why, not_found=pid <= 0 or why == _no_such(pid)))
            continue
        if target is None:  # a non-GPU process, allowed by --force
            f = backend.facts(pid)
            target = KillTarget(pid=pid, create_time=f.create_time, user=f.user, uid=f.uid, command=f.command,
                                status=f.status)
        container = target.container
        if container is not None and container.runtime == "kubernetes":
            why = _pod_owned(pid, container, backend)
            if why is not None:
                refusals.append(Refusal(pid, why))
                continue
        if container is not None and container.runtime == "docker":
            record, error = backend.container_record(container.id)
            if record is not None and record.main_pid == pid:
                if error is not None:
                    refusals.append(Refusal(pid, (
                        f"PID {pid} is the main process of container {container.label}, which must be "
                        f"stopped through Docker, but Docker is not reachable: {error}.")))
                    continue
                target = replace(target, container_main=True, restart_policy=record.restart_policy)
            elif record is None and error is not None and backend.is_container_init(pid):
                refusals.append(Refusal(pid, (
                    f"PID {pid} runs in container {container.label} and may be its main process, which must "
                    f"be stopped through Docker, but Docker is not reachable: {error}.")))
                continue
        targets.append(target)
    return KillPlan(tuple(targets), tuple(refusals), sig, timeout, escalate)


#: A Kubernetes name as kubectl takes it (DNS subdomain): anything else is not put in a command line.
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _pod_owned(pid: int, container: ContainerRef, backend: KillBackend) -> str | None:
    """Why a Kubernetes container's main process is not gputui's to signal (the kubelet would start it
    again), with the command that stops it for good; None for its other processes."""
    record, _ = backend.container_record(container.id)
    main = record.main_pid == pid if record is not None and record.main_pid is not None \
        else backend.is_container_init(pid)
    if not main:
        return None
    pod = record.pod if record is not None and record.pod else container.pod
    namespace = record.namespace if record is not None and record.namespace else container.namespace
    what = f"PID {pid} is the main process of Kubernetes container {container.label}"
    if pod and namespace and _K8S_NAME.fullmatch(pod) and _K8S_NAME.fullmatch(namespace):
        return (f"{what} in pod {namespace}/{pod}, which the kubelet would restart; stop it with "
                f"'kubectl delete pod -n {namespace} {pod}'.")
    uid = f" (UID {container.pod_uid})" if container.pod_uid else ""
    return f"{what}, which the kubelet would restart; delete its pod{uid} with kubectl instead."


READ_ONLY = "Kills are disabled: gputui runs read-only (--read-only or read_only in the config)."


def read_only_plan(pids: Iterable[int], signal: str = "TERM", timeout: float = 10.0,
                   escalate: bool = False) -> KillPlan:
    """A plan that refuses every PID: read-only mode disables every kill."""
    return KillPlan((), tuple(Refusal(pid, f"PID {pid}: {READ_ONLY}") for pid in _unique(pids)),
                    signal_name(signal), timeout, escalate)


def _unique(pids: Iterable[int]) -> list[int]:
    out: list[int] = []
    for pid in pids:
        if pid not in out:
            out.append(pid)
    return out


def _refuse(pid: int, target: KillTarget | None, backend: KillBackend, protected: frozenset[int],
            force: bool) -> str | None:
    """The one-sentence reason this PID must not be signalled, or None."""
    if pid <= 0:
        return f"{pid} is not a process ID."
    if pid == 1:
        return "PID 1 is the system's init process; gputui never signals it."
    if pid in protected:
        return f"PID {pid} is gputui itself or one of its parents (such as your shell); gputui will not signal it."
    if backend.is_kernel_thread(pid):
        return f"PID {pid} is a kernel thread; signals cannot stop it."
    facts = backend.facts(pid)
    if target is not None and not facts.visible:
        return _invisible_reason(pid, facts.invisible_reason, listed=True)
    if target is None:
        if not facts.visible:
            return _invisible_reason(pid, facts.invisible_reason, listed=False)
        if not force:
            return (f"PID {pid} ({_short(facts.command)}) holds no GPU memory on the GPUs shown; gputui only kills "
                    "GPU processes unless you add --force.")
    uid = target.uid if target is not None else facts.uid
    user = (target.user if target is not None else facts.user) or (str(uid) if uid is not None else "another user")
    if backend.euid != 0 and uid != backend.euid:
        return f"PID {pid} belongs to {user}; only root can kill other users' processes."
    status = facts.status
    if status == "zombie":
        parent = f" PID {facts.ppid}" if facts.ppid else ""
        return (f"PID {pid} is a zombie: it has already exited and signals do nothing; its parent{parent} must "
                "reap it (or be killed itself).")
    return None
