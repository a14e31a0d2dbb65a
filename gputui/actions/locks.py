"""Per-container locks: one migration (or recovery) of a container at a time, across processes and users.

Two admins, or the dashboard and the CLI following the same suggestion, must not
both stop and recreate one container. Before it changes anything an action takes
an exclusive ``flock`` on a lock file per container id *and* per name (a second
migration planned against the copy the first one is creating has another id but
the same name). The lock dies with its process, so a crash never leaves a stale
lock; a journal whose container lock nobody holds is an interrupted action.

Lock files live in ``$GPUTUI_LOCK_DIR``, default ``/run/gputui/locks``: created by
root as root:docker, mode 2775 (docker-group users, who may act on containers
anyway, share it; nobody else may write to it), checked with ``fstat`` on every
use (:func:`gputui.actions.folders.open_trusted_dir`). Root refuses a lock folder
another user made (``GPUTUI_LOCK_DIR`` pointing at one included). Lock files are
0660, group docker, so nobody else can even open one to hold it; root ignores —
replaces, and says so — a lock file it does not trust (another owner outside the
docker group, or readable by others), so a user-made lock cannot make root refuse.
A user other than root who cannot write the system folder locks in
``$XDG_RUNTIME_DIR/gputui/locks`` (or the state folder). Who holds a lock is read
from ``/proc/locks`` and named by its executable (``/proc/PID/exe``), never by
its command line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from pathlib import Path

from gputui.actions.folders import docker_gid, open_trusted_dir, user_name

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class LockHeld(Exception):
    """Somebody else is acting on the container. ``str(exc)`` is one sentence naming the holder."""


SYSTEM_LOCK_DIR = "/run/gputui/locks"


def _lock_folder() -> tuple[str, int | None]:
    """The lock folder's path, and the mode root creates it with (None: never created here)."""
    base = os.environ.get("GPUTUI_LOCK_DIR")
    if base:
        return base, (0o2775 if os.geteuid() == 0 else 0o700)
    if os.geteuid() == 0:
        return SYSTEM_LOCK_DIR, 0o2775
    if os.access(SYSTEM_LOCK_DIR, os.W_OK | os.X_OK):
        return SYSTEM_LOCK_DIR, None
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "gputui", "locks"), 0o700
    from gputui.core.config import state_dir

    return os.path.join(state_dir(), "locks"), 0o700


def lock_dir() -> Path:
    """Where lock files live (see the module docstring)."""
    return Path(_lock_folder()[0])


def _open_lock_dir() -> int:
    """The lock folder, opened and checked (created when absent). Raises OSError with one clause."""
    path, mode = _lock_folder()
    return open_trusted_dir(path, 0o2775 if mode is None else mode, what="lock folder")


def _name(action: str, key: str) -> str:
    return f"{action}-{_SAFE.sub('_', key)[:80]}.lock"


def lock_path(action: str, key: str) -> Path:
    return lock_dir() / _name(action, key)


def _untrusted(st: os.stat_result) -> str | None:
    """Why root must not let this lock file decide anything (None: it may)."""
    if os.geteuid() != 0:
        return None
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != 0 and st.st_gid != docker_gid():
        return f"belongs to {user_name(st.st_uid)}, outside the docker group"
    if st.st_mode & 0o007:
        return f"other users may open (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open(dfd: int, name: str, path: Path, notes: list[str]) -> int:
    """Open a lock file for flock in the lock folder ``dfd``, creating it if needed (O_CREAT only when absent:
    with fs.protected_regular, O_CREAT on another user's file in a sticky folder fails). O_NONBLOCK: a FIFO
    planted under a lock's name must not hang gputui. A lock file root does not trust is replaced, and
    ``notes`` says so."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(5):
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except FileNotFoundError:
            fd = -1
        except OSError as exc:
            if exc.errno != errno.ELOOP or os.geteuid() != 0:
                raise
            fd = -2  # a symbolic link under a lock's name: not a lock
        if fd >= 0:
            st = os.fstat(fd)
            why = _untrusted(st)
            if why is None:
                return fd
            held = _holder_of(st.st_ino)
            os.close(fd)
            try:  # replace exactly what was judged, never a lock another root process has just made
                now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                    os.unlink(name, dir_fd=dfd)
                    by = f" (held by {held})" if held else ""
                    notes.append(f"Ignored the lock file {path}, which {why}{by}: gputui does not trust it "
                                 "and made a new one.")
            except FileNotFoundError:
                pass
            continue
        if fd == -2:
            os.unlink(name, dir_fd=dfd)
            notes.append(f"Ignored the lock file {path}, which is a symbolic link: gputui made a new one.")
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o660, dir_fd=dfd)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, 0o660)  # group docker by the folder's setgid bit; nobody else can open it
        except OSError:
            pass
        return fd
    raise OSError(errno.EAGAIN, f"cannot open {path}")


def _holder_of(ino: int) -> str | None:
    """Who holds a flock on the inode ``ino``: "pid 123 (python3.11, user alice)", or None."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        pid, where = parts[4], parts[5]
        if where.rsplit(":", 1)[-1] != str(ino) or not pid.isdigit() or pid == "0":
            continue
        return _describe_pid(int(pid))
    return None


def holder(path: Path) -> str:
    """Who holds the lock on ``path``: "pid 123 (python3.11, user alice)", or "another process"."""
    try:
        ino = os.stat(path, follow_symlinks=False).st_ino
    except OSError:
        return "another process"
    return _holder_of(ino) or "another process"


def _describe_pid(pid: int) -> str:
    """The process by its executable (``/proc/PID/exe``, else ``comm``): what it runs, not what it claims."""
    from gputui.core.safe_text import clean

    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return f"pid {pid}"
    try:
        prog = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                prog = f.read(64).strip()
        except OSError:
            prog = "?"
    return f"pid {pid} ({clean(prog[:64])}, user {clean(user_name(uid))})"


def is_held(action: str, key: str) -> bool:
    """Does a live process hold the lock for ``key`` (without taking it)? A lock root does not trust,
    or a lock folder it does not trust, holds nothing for root."""
    try:
        dfd = open_trusted_dir(_lock_folder()[0], None, what="lock folder")
    except OSError:
        return False
    try:
        fd = os.open(_name(action, key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    finally:
        os.close(dfd)
    try:
        if _untrusted(os.fstat(fd)):
            return False
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

    def __init__(self, fds: list[int], notes: list[str] | None = None) -> None:
        self._fds = fds
        #: lock files root did not trust and replaced, one sentence each (the caller shows them)
        self.notes = notes or []

    @classmethod
    def acquire(cls, action: str, keys: list[str], what: str) -> ContainerLock:
        """Lock every key or none. Raises LockHeld naming the holder, OSError if the lock dir is unusable."""
        fds: list[int] = []
        notes: list[str] = []
        dfd = _open_lock_dir()
        try:
            for key in sorted({k for k in keys if k}):
                name = _name(action, key)
                path = lock_dir() / name
                fd = _open(dfd, name, path, notes)
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    who = _holder_of(os.fstat(fd).st_ino) or "another process"
                    raise LockHeld(f"{what} is being {'migrated' if action == 'migrate' else action + 'ed'} by "
                                   f"{who}; wait for it to finish (or run 'gputui {action} "
                                   f"--recover' if it was interrupted).") from None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        finally:
            os.close(dfd)
        return cls(fds, notes)

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
