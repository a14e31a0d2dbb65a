"""Killing GPU processes without ever hitting the wrong one.

A kill is planned, confirmed, then executed:

* **Plan** (:func:`plan_kill`): the targets are ``(pid, start time)`` pairs taken
  from a snapshot, so what the user confirmed is exactly what gets signalled.
  Every guard that can refuse a target runs here and gives one sentence: PID
  ≤ 1, kernel threads, gputui itself and its ancestors, PIDs invisible in this
  PID namespace, zombies, processes that hold no GPU (unless ``force``), other
  users' processes (unless root) and read-only mode. A container's main process
  is not signalled at all: it is stopped through the Docker API, because a
  restart policy would otherwise start it again.
* **Execute** (:func:`execute_kill`): each target is *pinned* before it is
  signalled: a pidfd is opened (Linux ≥ 5.3) and only then is the start time
  compared, so a PID reused after the comparison cannot receive the signal.
  Without pidfds psutil's own reuse check is used. Then gputui waits up to the
  timeout, sends SIGKILL to survivors when escalation was asked for, re-reads
  NVML and reports the GPU memory that was freed. Every outcome and every
  refusal is appended to the audit log.

Where signals go is a :class:`KillBackend`: :class:`HostBackend` on a real
machine, :class:`DemoBackend` on the simulated server (``--demo``), so the CLI,
the dashboard and the tests run the same planning and reporting code.
"""

from __future__ import annotations

import os
import select
import signal as _signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from gputui.core.model import (
    ContainerRecord,
    ContainerRef,
    Finding,
    GpuReading,
    ProcessFacts,
    Snapshot,
)
from gputui.core.safe_text import clean
from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    from gputui.core.machine import Machine

#: The signals a user may choose, by the names the CLI and the UI use.
SIGNALS: dict[str, int] = {"TERM": _signal.SIGTERM, "INT": _signal.SIGINT, "KILL": _signal.SIGKILL}

#: Two readings of one process's start time agree within this many seconds
#: (psutil derives it from clock ticks since boot: 10 ms resolution).
START_TIME_TOLERANCE = 0.05

#: How long to keep re-reading NVML for the driver to drop a dead process's context.
SETTLE_SECONDS = 3.0

_PF_KTHREAD = 0x00200000


def signal_name(name: str) -> str:
    """'term' / 'SIGTERM' / 'TERM' -> 'TERM'. Raises ValueError for anything else."""
    key = name.strip().upper()
    if key.startswith("SIG"):
        key = key[3:]
    if key not in SIGNALS:
        raise ValueError(f"--signal must be TERM, INT or KILL, not {name!r}")
    return key


# -- data --------------------------------------------------------------------------


@dataclass(frozen=True)
class KillTarget:
    """One process the user may kill, as it was when listed."""

    pid: int
    create_time: float | None
    user: str | None
    uid: int | None
    command: str | None
    #: (GPU index, GPU memory in bytes or None) for every GPU it is on; empty for a non-GPU process.
    gpus: tuple[tuple[int, int | None], ...] = ()
    container: ContainerRef | None = None
    #: True for the container's main process: it is stopped through Docker instead of signalled.
    container_main: bool = False
    restart_policy: str | None = None
    stale: tuple[Finding, ...] = ()
    status: str | None = None
    #: GPU index -> the MIG device ("5:1") it runs on, for GPUs in MIG mode.
    mig: tuple[tuple[int, str], ...] = ()

    @property
    def gpu_memory(self) -> int | None:
        known = [m for _, m in self.gpus if m is not None]
        return sum(known) if known else None

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_time": self.create_time,
            "owner": self.user,
            "command": self.command,
            "gpus": list(self.gpu_indices),
            "gpu_memory": self.gpu_memory,
            "container": self.container.label if self.container else None,
            "container_id": self.container.id if self.container else None,
            "container_main": self.container_main,
            "stale": [f.kind for f in self.stale],
        }


@dataclass(frozen=True)
class Refusal:
    pid: int
    reason: str
    #: The PID names no process here (or is no PID at all): a usage error (exit 2), not a "no".
    not_found: bool = False


@dataclass(frozen=True)
class KillPlan:
    targets: tuple[KillTarget, ...]
    refusals: tuple[Refusal, ...]
    signal: str = "TERM"
    timeout: float = 10.0
    escalate: bool = False


@dataclass(frozen=True)
class Outcome:
    """What happened to one target."""

    pid: int
    #: "exited", "stopped" (container), "running" (survived), "gone" (exited before the signal),
    #: "refused" (failed a check at execution time) or "failed" (an error, e.g. permission).
    result: str
    message: str
    target: KillTarget | None = None
    signals: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.result in ("exited", "stopped", "gone")


@dataclass(frozen=True)
class GpuFreed:
    gpu: int
    freed: int
    used_before: int | None
    used_after: int | None


@dataclass(frozen=True)
class KillReport:
    outcomes: tuple[Outcome, ...]
    refusals: tuple[Refusal, ...]
    freed: tuple[GpuFreed, ...] = ()
    #: (gpu, pid) pairs NVML still listed after the settle time although the process is gone.
    still_listed: tuple[tuple[int, int], ...] = ()
    #: Problems that did not stop the kill (e.g. NVML could not be re-read).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals and all(o.ok for o in self.outcomes)

    @property
    def total_freed(self) -> int:
        return sum(f.freed for f in self.freed)

    def lines(self) -> list[str]:
        out = [o.message for o in self.outcomes]
        for f in self.freed:
            if f.used_before is not None and f.used_after is not None:
                out.append(f"GPU {f.gpu}: {fmt_bytes(f.freed)} freed (memory used "
                           f"{fmt_bytes(f.used_before, 'GiB')} → {fmt_bytes(f.used_after, 'GiB')}).")
            else:
                out.append(f"GPU {f.gpu}: {fmt_bytes(f.freed)} freed.")
        for gpu, pid in self.still_listed:
            out.append(f"GPU {gpu}: the driver still lists PID {pid} after {SETTLE_SECONDS:.0f} s; its memory "
                       "may be released shortly, or a leaked context holds it until the GPU is reset.")
        out += list(self.notes)
        return out

    def summary(self) -> str:
        """One line for a notification."""
        done = [o for o in self.outcomes if o.ok]
        parts = []
        if done:
            parts.append(f"killed {len(done)} process{'es' if len(done) != 1 else ''}")
        if self.total_freed:
            parts.append(f"freed {fmt_bytes(self.total_freed)}")
        bad = [o for o in self.outcomes if not o.ok]
        if bad:
            parts.append(f"{len(bad)} not killed")
        if self.refusals:
            parts.append(f"{len(self.refusals)} refused")
        text = ", ".join(parts) or "nothing was killed"
        return text[0].upper() + text[1:] + "."


class KillError(Exception):
    """The kill cannot start at all (e.g. the audit log is not writable). One sentence."""


# -- backends ----------------------------------------------------------------------


class Gone(Exception):
    """The process exited before it could be pinned."""


class Reused(Exception):
    """The PID now belongs to another process (start time differs)."""

    def __init__(self, now: float | None) -> None:
        super().__init__(now)
        self.now = now


class KillBackend(Protocol):
    """Where the facts come from and the signals go. See HostBackend and DemoBackend."""

    euid: int
    #: True when this backend acts on the simulated server.
    simulated: bool

    def protected_pids(self) -> frozenset[int]: ...

    def is_kernel_thread(self, pid: int) -> bool: ...

    def facts(self, pid: int) -> ProcessFacts: ...

    def is_container_init(self, pid: int) -> bool: ...

    def container_record(self, container_id: str) -> tuple[ContainerRecord | None, str | None]: ...

    def pin(self, pid: int, create_time: float | None) -> Any: ...

    def send(self, pinned: Any, sig: int) -> None: ...

    def wait(self, pinned: list[Any], timeout: float) -> list[Any]: ...

    def release(self, pinned: Any) -> None: ...

    def stop_container(self, container_id: str, timeout: float, kill: bool) -> None: ...

    def read_gpus(self) -> GpuReading: ...

    def close(self) -> None:
        """Release what the backend opened (Docker client, NVML)."""


@dataclass
class _Pinned:
    pid: int
    fd: int | None
    proc: Any  # psutil.Process when no pidfd


def _same_start(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= START_TIME_TOLERANCE


class HostBackend:
    """Signals real processes (pidfd when the kernel has it) and stops containers through Docker."""

    simulated = False

    def __init__(self, machine: Machine, docker_client: Callable[[], Any] | None = None,
                 docker_timeout: float = 10.0) -> None:
        from gputui.core.processes import HostProcessSource

        self.machine = machine
        self.euid = os.geteuid()
        # Its own process source: the poller's is not shared across threads (the dashboard kills from a worker
        # while polls go on). It computes start times exactly as the poller's does.
        self._processes = HostProcessSource()
        self._docker_client = docker_client
        self._docker_timeout = docker_timeout
        self._client: Any = None

    # facts
    def protected_pids(self) -> frozenset[int]:
        import psutil

        me = psutil.Process()
        try:
            parents = {p.pid for p in me.parents()}
        except psutil.Error:
            parents = {os.getppid()}
        return frozenset({me.pid, *parents})

    def is_kernel_thread(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                tail = fh.read().rsplit(b")", 1)[1].split()
            return bool(int(tail[6]) & _PF_KTHREAD)
        except (OSError, IndexError, ValueError):
            return False

    def facts(self, pid: int) -> ProcessFacts:
        got = self._processes.facts([pid]).get(pid)
        return got or ProcessFacts(pid=pid, visible=False, invisible_reason="vanished")

    def is_container_init(self, pid: int) -> bool:
        """A container's main process is a child of its runtime shim (containerd-shim, conmon)."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{ppid}/comm", "rb") as fh:
                comm = fh.read().decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            return False
        return comm.startswith(("containerd-shim", "conmon", "runc"))

    def container_record(self, container_id: str) -> tuple[ContainerRecord | None, str | None]:
        source = self.machine.containers
        if source is None:
            return None, "container information is off (--no-docker)"
        try:
            inv = source.resolve(container_id)
        except Exception as exc:  # a source should not raise; treat it as unavailable
            return None, str(exc)
        if not inv.available:
            return None, inv.error or "the Docker daemon is not reachable"
        for rec in inv.containers:
            if rec.id == container_id:
                return rec, None
        return None, None

    # actions
    def pin(self, pid: int, create_time: float | None) -> _Pinned:
        import psutil

        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                raise Gone() from None
            except OSError:
                fd = None  # ENOSYS on old kernels: fall back to psutil's reuse check
        try:
            proc = psutil.Process(pid)
            now = self.facts(pid).create_time
            if now is None:
                now = proc.create_time()
        except psutil.NoSuchProcess:
            self._close(fd)
            raise Gone() from None
        except psutil.AccessDenied:
            now = None
            proc = None
        if not _same_start(now, create_time):
            self._close(fd)
            raise Reused(now)
        return _Pinned(pid, fd, proc)

    def send(self, pinned: _Pinned, sig: int) -> None:
        """Raises ProcessLookupError when it already exited, PermissionError when not allowed."""
        import psutil

        if pinned.fd is not None:
            _signal.pidfd_send_signal(pinned.fd, sig)
            return
        try:
            pinned.proc.send_signal(sig)  # psutil refuses a reused PID (NoSuchProcess)
        except psutil.NoSuchProcess:
            raise ProcessLookupError(pinned.pid) from None
        except psutil.AccessDenied:
            raise PermissionError(pinned.pid) from None

    def wait(self, pinned: list[_Pinned], timeout: float) -> list[_Pinned]:
        """Wait until each has exited (a zombie counts as exited); return the survivors."""
        deadline = time.monotonic() + timeout
        alive = list(pinned)
        while alive:
            alive = [p for p in alive if not self._exited(p)]
            left = deadline - time.monotonic()
            if not alive or left <= 0:
                break
            fds = [p.fd for p in alive if p.fd is not None]
            if fds and len(fds) == len(alive):
                poller = select.poll()
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                poller.poll(max(1, int(min(left, 0.5) * 1000)))
            else:
                time.sleep(min(left, 0.05))
        return alive

    def _exited(self, p: _Pinned) -> bool:
        import psutil

        if p.fd is not None:
            ready, _, _ = select.select([p.fd], [], [], 0)
            return bool(ready)
        try:
            return not p.proc.is_running() or p.proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False

    def release(self, pinned: _Pinned) -> None:
        self._close(pinned.fd)

    @staticmethod
    def _close(fd: int | None) -> None:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _docker(self) -> Any:
        if self._client is None:
            if self._docker_client is not None:
                self._client = self._docker_client()
            else:
                from gputui.core.docker_source import docker_client

                # The same address rules as the container view: act on the daemon the user sees.
                self._client = docker_client(timeout=self._docker_timeout)
        return self._client

    def stop_container(self, container_id: str, timeout: float, kill: bool) -> None:
        client = self._docker()
        if kill:
            client.api.kill(container_id)
        else:
            client.api.stop(container_id, timeout=max(0, int(round(timeout))))

    def read_gpus(self) -> GpuReading:
        return self.machine.gpu.read()

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass


class DemoBackend:
    """Acts on the simulated server of ``--demo``: a kill removes the simulated process."""

    simulated = True

    def __init__(self, machine: Machine) -> None:
        assert machine.demo is not None
        self.machine = machine
        self.demo = machine.demo
        self.euid = os.geteuid()

    def protected_pids(self) -> frozenset[int]:
        return frozenset()

    def is_kernel_thread(self, pid: int) -> bool:
        return False

    def facts(self, pid: int) -> ProcessFacts:
        return self.demo.facts([pid])[pid]

    def is_container_init(self, pid: int) -> bool:
        return any(c.main_pid == pid for c in list(self.demo.containers.values()))

    def container_record(self, container_id: str) -> tuple[ContainerRecord | None, str | None]:
        inv = self.demo.inventory(self.demo.gpu_uuids(), {})
        for rec in inv.containers:
            if rec.id == container_id:
                return rec, None
        return None, None

    def pin(self, pid: int, create_time: float | None) -> int:
        f = self.facts(pid)
        if not f.visible:
            raise Gone()
        if not _same_start(f.create_time, create_time):
            raise Reused(f.create_time)
        return pid

    def send(self, pinned: int, sig: int) -> None:
        self.demo.kill_process(pinned)  # raises ProcessLookupError when gone

    def wait(self, pinned: list[int], timeout: float) -> list[int]:
        return [p for p in pinned if self.facts(p).visible]

    def release(self, pinned: int) -> None:
        pass

    def stop_container(self, container_id: str, timeout: float, kill: bool) -> None:
        c = self.demo.container_by_name(container_id)
        if c is None:
            raise LookupError(f"no such container {container_id[:12]} on the demo server")
        for pid in [p.pid for p in list(self.demo.procs.values()) if p.container == c.id]:
            try:
                self.demo.kill_process(pid)
            except ProcessLookupError:
                pass
        c.state = "exited"

    def read_gpus(self) -> GpuReading:
        return self.demo.read()

    def close(self) -> None:
        pass


def backend_for(machine: Machine, docker_timeout: float = 10.0) -> KillBackend:
    """The backend that matches how the machine was opened (demo or real)."""
    if machine.demo is not None:
        return DemoBackend(machine)
    return HostBackend(machine, docker_timeout=docker_timeout)


# -- planning -----------------------------------------------------------------------


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
                    mig=((g.index, p.mig_label),) if p.mig_label else (),
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


def _short(command: str | None, width: int = 40) -> str:
    if not command:
        return "unknown command"
    command = clean(command)  # one line, visible escapes: cut what the reader will see
    return command if len(command) <= width else command[: width - 1] + "…"


# -- confirmation text --------------------------------------------------------------


def describe_target(t: KillTarget) -> list[str]:
    """Lines that show one target in a confirmation: pid, user, command, GPU, memory, container, stale."""
    where = dict(t.mig)  # a process on a MIG device is shown by its instance, "GPU 5:1"
    gpus = ", ".join(f"GPU {where.get(i, i)} ({fmt_bytes(m)})" for i, m in t.gpus) or "no GPU"
    head = f"PID {t.pid}  {t.user or 'unknown user'}  {gpus}  {_short(t.command, 60)}"
    lines = [head]
    if t.container is not None:
        name = t.container.label
        if t.container_main:
            policy = t.restart_policy or "no"
            if policy in ("no", ""):
                why = "so that Docker records it as stopped rather than crashed"
            elif policy == "always":
                why = (f"because its restart policy ({policy}) would otherwise bring it back; Docker still starts it "
                       "again when the daemon restarts")
            else:
                why = f"because its restart policy ({policy}) would otherwise bring it back"
            lines.append(f"    container {name}: this is its main process, so the container is stopped through "
                         f"Docker, {why}.")
        else:
            lines.append(f"    in container {name}")
    for f in t.stale:
        lines.append(f"    stale ({f.kind}): {f.message}")
    if t.status == "disk-sleep":
        lines.append("    it is in uninterruptible sleep (D): it dies only when its driver call returns.")
    return lines


def confirmation_lines(plan: KillPlan) -> list[str]:
    lines: list[str] = []
    if plan.targets:
        n = len(plan.targets)
        how = f"SIG{plan.signal}"
        after = (f", wait up to {plan.timeout:g} s, then SIGKILL whatever is left" if plan.escalate
                 and plan.signal != "KILL" else f", wait up to {plan.timeout:g} s")
        lines.append(f"Kill {n} process{'es' if n != 1 else ''} with {how}{after}:")
        for t in plan.targets:
            lines.extend("  " + ln for ln in describe_target(t))
    if plan.refusals:
        lines.append("Refused:")
        lines.extend(f"  {r.reason}" for r in plan.refusals)
    return lines


# -- execution ----------------------------------------------------------------------


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
    sig_name = plan.signal
    sig = SIGNALS[sig_name]
    demo = isinstance(backend, DemoBackend)
    notes: list[str] = audit_refusals(plan.refusals, demo)
    outcomes: dict[int, Outcome] = {}
    pinned: dict[int, Any] = {}
    sent: dict[int, list[str]] = {}

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

    # 2. host processes: pin, then signal
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
    if pinned:
        say(f"Sent SIG{sig_name} to {', '.join(str(x) for x in pinned)}; waiting up to {plan.timeout:g} s…")

    # 3. wait, then escalate
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

    # 4. re-read NVML until the driver drops the dead processes' contexts
    entries = {o.pid: _held(o.target, before) for o in outcomes.values() if o.ok and o.target is not None}
    freed, still, nvml_note = _measure_freed(before, [e for held in entries.values() for e in held], backend, say)
    if nvml_note:
        notes.append(nvml_note)

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


def _pid_of(pinned: Any) -> int:
    return pinned if isinstance(pinned, int) else pinned.pid


def _docker_error(exc: Exception) -> str:
    from gputui.core.docker_source import describe_error

    return describe_error(exc).strip().rstrip(".")


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
