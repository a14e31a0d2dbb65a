"""Per-container locks: one migration (or recovery) of a container at a time, across processes and users.

Two admins, or the dashboard and the CLI following the same suggestion, must not
both stop and recreate one container. Before it changes anything an action takes
an exclusive ``flock`` on a lock file per container id *and* per name (a second
migration planned against the copy the first one is creating has another id but
the same name). The lock dies with its process, so a crash never leaves a stale
lock; a journal whose container lock nobody holds is an interrupted action.

Lock files live in ``$GPUTUI_LOCK_DIR``, default ``/run/lock/gputui`` (world
writable and sticky like ``/run/lock``, so root and docker-group users share
them). Who holds a lock is read from ``/proc/locks``, so the refusal can name
the process and its user.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import re
import tempfile
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class LockHeld(Exception):
    """Somebody else is acting on the container. ``str(exc)`` is one sentence naming the holder."""


def lock_dir() -> Path:
    """Where lock files live (created on demand, shared by every user)."""
    base = os.environ.get("GPUTUI_LOCK_DIR")
    if base:
        path = Path(base)
    else:
        root = Path("/run/lock") if os.path.isdir("/run/lock") else Path(tempfile.gettempdir())
        path = root / "gputui"
    try:
        path.mkdir(mode=0o1777, parents=True, exist_ok=True)
        if path.stat().st_uid == os.geteuid():
            os.chmod(path, 0o1777)  # umask must not keep other users out
    except OSError:
        pass
    return path


def lock_path(action: str, key: str) -> Path:
    return lock_dir() / f"{action}-{_SAFE.sub('_', key)[:80]}.lock"


def _open(path: Path) -> int:
    """Open a lock file for flock, creating it if needed (O_CREAT only when absent: with
    fs.protected_regular, O_CREAT on another user's file in a sticky directory fails).
    O_NONBLOCK: a FIFO another user planted under a lock's name must not hang gputui."""
    for _ in range(3):
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, 0o644)
        except OSError:
            pass
        return fd
    raise OSError(errno.EAGAIN, f"cannot open {path}")


def holder(path: Path) -> str:
    """Who holds the lock on ``path``: "pid 123 (gputui, user alice)", or "another process"."""
    try:
        ino = os.stat(path).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return "another process"
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        pid, where = parts[4], parts[5]
        if where.rsplit(":", 1)[-1] != str(ino) or not pid.isdigit() or pid == "0":
            continue
        return _describe_pid(int(pid))
    return "another process"


def _describe_pid(pid: int) -> str:
    from gputui.core.safe_text import clean

    try:
        status = Path(f"/proc/{pid}/status").read_text()
        uid = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")))
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, StopIteration, ValueError):
        return f"pid {pid}"
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    prog = "gputui" if any(b"gputui" in a for a in argv[:3]) else os.path.basename(argv[0].decode(errors="replace"))
    return f"pid {pid} ({clean(prog)}, user {clean(user)})"


def is_held(action: str, key: str) -> bool:
    """Does a live process hold the lock for ``key`` (without taking it)?"""
    path = lock_path(action, key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class ContainerLock:
    """Exclusive locks on every key of one container, held until :meth:`release` (or process death)."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    @classmethod
    def acquire(cls, action: str, keys: list[str], what: str) -> ContainerLock:
        """Lock every key or none. Raises LockHeld naming the holder, OSError if the lock dir is unusable."""
        fds: list[int] = []
        try:
            for key in sorted({k for k in keys if k}):
                path = lock_path(action, key)
                fd = _open(path)
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise LockHeld(f"{what} is being {'migrated' if action == 'migrate' else action + 'ed'} by "
                                   f"{holder(path)}; wait for it to finish (or run 'gputui {action} "
                                   f"--recover' if it was interrupted).") from None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return cls(fds)

    def release(self) -> None:
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._fds = []

    def __enter__(self) -> ContainerLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
