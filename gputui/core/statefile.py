"""Opening gputui's own files safely: the state folder, its logs and journals, the config file.

gputui runs as root on machines shared with other users, sometimes with another
user's environment (``sudo -E`` keeps ``HOME`` and ``XDG_STATE_HOME``). So:

* the state folder must belong to the user running gputui and be writable by
  nobody else (:func:`check_state_dir`), inside a folder no other user can swap
  it in (:func:`check_state_parent`), and is created 0700;
* state files are opened with ``O_NOFOLLOW`` (a symlink planted in the folder is
  refused, never followed to another file) and created 0600;
* every file is opened with ``O_NONBLOCK`` and must be a regular file (``fstat``):
  a FIFO, a device or a socket named like a journal or a config file is refused
  instead of hanging the caller;
* reads are bounded (:func:`read_regular`'s ``limit``);
* a file that steers root (the config file) must belong to root or to the user who ran
  ``sudo`` (``SUDO_UID``) and be writable by nobody else (:func:`root_may_trust`): under
  ``sudo -E`` ``HOME`` and ``XDG_CONFIG_HOME`` are another user's.

Problems are :class:`StateFileError`, an ``OSError`` whose ``strerror`` is a
readable clause, so the callers' existing ``except OSError`` handlers keep working.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias, TypeVar

    #: a path as str or pathlib.Path: these functions use os calls only, so a one-shot need not import pathlib
    StrPath: TypeAlias = "str | os.PathLike[str]"
    _P = TypeVar("_P", str, "os.PathLike[str]")

__all__ = ["StateFileError", "append_text", "check_state_dir", "check_state_parent", "ensure_state_dir",
           "invoking_uid", "open_regular", "read_regular", "root_may_trust"]

CONFIG_LIMIT = 1 << 20  # 1 MiB: a config file is a few hundred bytes
STATE_LIMIT = 16 << 20  # 16 MiB: a journal is a few KiB


class StateFileError(OSError):
    """A state file or folder that gputui refuses to use; ``strerror`` says why."""


def check_state_dir(path: StrPath) -> None:
    """Raise :class:`StateFileError` unless ``path`` is a folder owned by this user and writable by nobody else."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise StateFileError(exc.errno, f"cannot use the state folder {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StateFileError(errno.ENOTDIR, f"the state folder {path} is not a folder")
    if st.st_uid != os.geteuid():
        raise StateFileError(errno.EPERM, f"the state folder {path} belongs to uid {st.st_uid}, not to the user "
                             f"running gputui (uid {os.geteuid()}); set XDG_STATE_HOME to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateFileError(errno.EPERM, f"the state folder {path} is writable by other users "
                             f"(mode {stat.S_IMODE(st.st_mode):o}); run 'chmod go-w {path}'")


def check_state_parent(path: StrPath) -> None:
    """Raise :class:`StateFileError` when another user could swap ``path`` itself: its parent folder must
    belong to this user or root, and be writable by nobody else unless it is sticky (like /tmp)."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(parent)
    except FileNotFoundError:
        return  # created below by this user
    except OSError as exc:
        raise StateFileError(exc.errno, f"cannot use the state folder {path}: {exc.strerror}") from None
    if st.st_uid not in (os.geteuid(), 0):
        raise StateFileError(errno.EPERM, f"the state folder {path} is inside {parent}, which belongs to uid "
                             f"{st.st_uid}, not to the user running gputui (uid {os.geteuid()}); set "
                             "XDG_STATE_HOME to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise StateFileError(errno.EPERM, f"the state folder {path} is inside {parent}, which other users may "
                             f"write to (mode {stat.S_IMODE(st.st_mode):o}); run 'chmod go-w {parent}'")


def ensure_state_dir(path: _P) -> _P:
    """``path`` created (0700, parents as needed) and checked by :func:`check_state_parent` and
    :func:`check_state_dir`."""
    check_state_parent(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StateFileError(exc.errno or errno.EIO,
                             f"cannot create the state folder {path}: {exc.strerror or exc}") from None
    check_state_dir(path)
    return path


def open_regular(path: StrPath, flags: int, mode: int = 0o600, follow: bool = False) -> int:
    """A descriptor for ``path`` opened with ``flags`` (``O_NOFOLLOW`` unless ``follow``),
    guaranteed to be a regular file; blocking mode is restored after the check."""
    extra = os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise StateFileError(errno.ELOOP, f"{path} is a symbolic link, which gputui does not follow "
                                 "in its state folder") from None
        if exc.errno == errno.ENXIO:  # opening a FIFO for writing with no reader
            raise StateFileError(errno.ENXIO, f"{path} is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(errno.EINVAL, f"{path} is not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def invoking_uid() -> int | None:
    """The user who ran ``sudo`` (``SUDO_UID``), when gputui runs as root through it; else None."""
    text = os.environ.get("SUDO_UID", "")
    if not (0 < len(text) <= 10 and text.isascii() and text.isdigit()):
        return None
    uid = int(text)
    return uid if 0 < uid < 2**32 - 1 else None


def root_may_trust(st: os.stat_result, path: StrPath) -> None:
    """Raise :class:`StateFileError` when gputui runs as root and the file ``st`` describes belongs to
    anyone but root and the user who ran sudo, or may be written by others: root never obeys a file
    another user controls."""
    if os.geteuid() != 0:
        return
    invoker = invoking_uid()
    if st.st_uid != 0 and st.st_uid != invoker:
        whom = "root" if invoker is None else f"root or the user who ran sudo (uid {invoker})"
        raise StateFileError(errno.EPERM, f"it belongs to uid {st.st_uid}, not to {whom}, and gputui running as "
                             f"root does not obey another user's file (pass --config with a file of your own)")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateFileError(errno.EPERM, f"other users may write to it (mode {stat.S_IMODE(st.st_mode):o}), so "
                             f"gputui running as root does not obey it; run 'chmod go-w {path}'")


def read_regular(path: StrPath, limit: int = STATE_LIMIT, follow: bool = False, trusted: bool = False) -> bytes:
    """The whole content of the regular file ``path``; :class:`StateFileError` if it is larger than ``limit``,
    or, with ``trusted``, when root may not trust it (:func:`root_may_trust`)."""
    fd = open_regular(path, os.O_RDONLY, follow=follow)
    try:
        if trusted:
            root_may_trust(os.fstat(fd), path)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise StateFileError(errno.EFBIG, f"{path} is larger than {limit // 1024} KiB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def append_text(path: StrPath, text: str, sync: bool = False) -> None:
    """Append ``text`` (UTF-8) to the regular file ``path``, created 0600 if missing, never through a symlink."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(text.encode("utf-8", "surrogateescape"))
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
