"""Where a kill's facts come from and its signals go: :class:`HostBackend` on a real machine
(/proc, pidfds, psutil, the Docker API for containers' main processes), :class:`DemoBackend` on
the simulated server. :func:`backend_for` chooses by how the machine was opened.
"""

from __future__ import annotations

import os
import select
import signal as _signal
import time
from typing import TYPE_CHECKING, Any, Protocol

from gputui.core.model import ContainerRecord, GpuReading, ProcessFacts
from gputui.core.record import record

if TYPE_CHECKING:
    from gputui.core.machine import Machine

from gputui.actions.kill.model import PF_KTHREAD, START_TIME_TOLERANCE


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


@record(frozen=False)
class _Pinned:
    pid: int
    fd: int | None
    proc: Any  # psutil.Process when no pidfd


def _same_start(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= START_TIME_TOLERANCE


class HostBackend:
    """Signals real processes (pidfd when the kernel has it) and stops containers through Docker."""

    simulated = False

    def __init__(self, machine: Machine, docker_timeout: float = 10.0) -> None:
        from gputui.core.sources.processes import HostProcessSource

        self.machine = machine
        self.euid = os.geteuid()
        # Its own process source: the poller's is not shared across threads (the dashboard kills from a worker
        # while polls go on). It computes start times exactly as the poller's does.
        self._processes = HostProcessSource()
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
            return bool(int(tail[6]) & PF_KTHREAD)
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
            from gputui.core.sources.docker_source import docker_client

            # The one client factory, so kill acts on the daemon the container view reads.
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
