"""What /proc tells the host process source about the host and about processes' lifetimes, and the
cheapest ways to ask it (helpers of ``processes.py``).

- the PID namespace /proc shows (``proc_shows_host_pids``), ``hidepid``, the descriptor budget;
- whole /proc files read with raw os calls (``read_all``, ``read_small``);
- :func:`cpu_ns`: a process's CPU time (all its threads, in ns) through its POSIX CPU clock, one
  system call that costs about a fifth of generating its ``/proc/PID/stat`` line: the same figure
  stat's utime + stime are scaled from, so an unchanged clock means unchanged stat CPU ticks;
- :class:`ParentWatch`: a pidfd per parent process, polled once per poll: a process's parent can
  change without the process running (its parent exits and it is re-parented), and this tells when;
- the executable's base name (``exe_base_name``; ``psutil_exe`` where there is no /proc), whether a process
  holds a GPU device open (``holds_gpu``), the boot time (``boot_time``).
"""

from __future__ import annotations

import errno
import os
import select
import time
from typing import Any

#: Inode of the initial (host) PID namespace: PROC_PID_INIT_INO in the kernel's proc_ns.h.
INIT_PID_NS_INODE = 0xEFFFFFFC

def ns_inode(path: str) -> int | None:
    """The inode of a namespace link such as ``/proc/self/ns/pid`` (None if unreadable):
    comparing it with the kernel's fixed initial inodes tells host namespace from another."""
    try:
        link = os.readlink(path)
    except OSError:
        return None
    # "pid:[4026531836]"
    try:
        return int(link[link.index("[") + 1: link.index("]")])
    except ValueError:
        return None


def proc_shows_host_pids(proc: str = "/proc") -> bool:
    """Whether ``proc`` shows the host's (initial) PID namespace, whose PIDs NVML reports."""
    inode = ns_inode(f"{proc}/1/ns/pid")
    if inode is None:
        inode = ns_inode(f"{proc}/self/ns/pid")
    return inode is None or inode == INIT_PID_NS_INODE


def hidepid(proc: str) -> bool:
    """Whether /proc hides other users' processes from us (mount option hidepid, and we are not root)."""
    if os.geteuid() == 0:
        return False
    try:
        with open(f"{proc}/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 4 and parts[4] == proc and "hidepid=" in line and "hidepid=0" not in line \
                        and "hidepid=off" not in line:
                    return True
    except OSError:
        pass
    return False


def fd_budget() -> int:
    """How many /proc/PID/stat descriptors to keep open: up to a quarter of the soft
    descriptor limit (raised toward the hard limit, at most 16384, as servers do), so
    pinning never starves the rest of gputui."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 16384 if hard == resource.RLIM_INFINITY else min(hard, 16384)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        return 4096 if soft == resource.RLIM_INFINITY else max(0, soft // 4)
    except (ImportError, ValueError, OSError):
        return 0


def read_all(path: str) -> bytes:
    """A whole /proc file (raw os calls: a third cheaper than open() for 1000 small files a poll)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_small(path: str) -> bytes:
    """A one-line /proc file (stat, statm): one read, no end-of-file probe."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


#: CPUCLOCK_SCHED of a process (the kernel's posix-timers.h): MAKE_PROCESS_CPUCLOCK(pid, 2)
_CPUCLOCK_SCHED = 2
_clock_ns = getattr(time, "clock_gettime_ns", None)


def cpu_ns(pid: int) -> int | None:
    """The CPU time (ns) every thread of process ``pid`` has used, living and exited, from the
    process's CPU clock (``clock_getcpuclockid``); None when it cannot be read (gone, no such clock)."""
    if _clock_ns is None:
        return None
    try:
        value: int = _clock_ns(((~pid) << 3) | _CPUCLOCK_SCHED)
    except OSError:
        return None
    return value


class ParentWatch:
    """A pidfd per watched parent PID, polled without waiting: which parents exited since the last look.

    A pidfd names one process, never a PID's later owner, and polls readable once that process
    has exited (a zombie or gone): then its children have been re-parented.
    """

    def __init__(self) -> None:
        self._poll: Any = None  # select.poll (its type is not public)
        #: parent PID -> its pidfd, and back
        self.fds: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        #: False once pidfds turned out not to work here (Linux < 5.3)
        self.usable = hasattr(os, "pidfd_open")

    def watch(self, ppid: int) -> bool:
        """Start watching ``ppid`` (True when watched now); the caller counts the descriptor."""
        if not self.usable:
            return False
        try:
            fd = os.pidfd_open(ppid)
        except OSError as exc:
            if exc.errno == errno.ENOSYS:  # a kernel without pidfds (ESRCH: that parent is gone already)
                self.usable = False
            return False
        if self._poll is None:
            self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self.fds[ppid] = fd
        self._pids[fd] = ppid
        return True

    def exited(self) -> list[int]:
        """The watched parents that exited since the last call, no longer watched (their pidfds closed)."""
        if not self.fds:
            return []
        gone = [self._pids[fd] for fd, _ in self._poll.poll(0) if fd in self._pids]
        for ppid in gone:
            self.forget(ppid)
        return gone

    def forget(self, ppid: int) -> bool:
        """Stop watching ``ppid``; True when it was watched (one descriptor fewer)."""
        fd = self.fds.pop(ppid, None)
        if fd is None:
            return False
        self._pids.pop(fd, None)
        unwatch_pidfd(self._poll, fd)
        return True


def unwatch_pidfd(poller: Any, fd: int) -> None:
    """Take a pidfd out of ``poller`` (a ``select.poll``) and close it; either may already be done."""
    try:
        poller.unregister(fd)
    except (KeyError, ValueError):
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def exe_base_name(base: str, comm: bytes) -> str:
    """The executable's base name: the target of ``{base}/exe`` (`` (deleted)`` dropped when the file
    was replaced), or ``comm`` when that link cannot be read (another user's process to an unprivileged
    reader, a kernel thread). Never argv[0]: a process writes its own command line."""
    try:
        target = os.readlink(f"{base}/exe")
    except OSError:
        return comm.decode(errors="replace")
    if target.endswith(" (deleted)"):
        target = target[: -len(" (deleted)")]
    return os.path.basename(target) or comm.decode(errors="replace")


def psutil_exe(p: Any) -> str:
    try:
        return os.path.basename(p.exe()) or str(p.name())
    except Exception:  # noqa: BLE001 (psutil's AccessDenied and the like: fall back to the name)
        return str(p.name())


def holds_gpu(base: str) -> bool | None:
    """Whether the process at ``base`` (/proc/PID) has an NVIDIA device file open; None when we may not look."""
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"{base}/fd/{fd}").startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def boot_time(proc: str) -> float | None:
    """The boot time (POSIX seconds) from ``proc``/stat's btime line."""
    try:
        with open(f"{proc}/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
