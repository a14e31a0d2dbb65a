"""Folders root may act in: the journal folder and the lock folder, checked on the open descriptor.

gputui runs as root on machines shared with other users. A folder another user
owns or may write to lets that user plant, swap or hold the files root acts on
(a journal naming a container to create or remove, a lock that makes root
refuse), so before each use such a folder is opened ``O_DIRECTORY |
O_NOFOLLOW`` under its parent and both are checked with ``fstat``:

* the folder belongs to root (or, for a user other than root, to that user) and
  nobody else may write to it, except the ``docker`` group, whose members may
  act on containers anyway;
* its parent belongs to root or this user and is writable by nobody else unless
  sticky, so nobody can swap the folder itself.

Problems are :class:`~gputui.core.statefile.StateFileError` (an ``OSError``
whose ``strerror`` is one clause).
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat

from gputui.core.statefile import StateFileError


def docker_gid() -> int | None:
    try:
        return grp.getgrnam("docker").gr_gid
    except KeyError:
        return None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def folder_problem(st: os.stat_result, path: object) -> str | None:
    """Why a folder with these ``fstat`` facts must not be trusted; None when it may."""
    euid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != 0 and (euid == 0 or st.st_uid != euid):
        return f"{path} belongs to {user_name(st.st_uid)}, not to root"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH or (mode & stat.S_IWGRP and st.st_gid not in (0, docker_gid())):
        return f"{path} is writable by other users (mode {mode:o})"
    return None


def _parent_problem(st: os.stat_result, path: object) -> str | None:
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} belongs to {user_name(st.st_uid)}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _set_mode(fd: int, mode: int) -> None:
    """A folder root creates with the setgid bit goes to group docker (2775), or stays root's (0755)."""
    try:
        if os.geteuid() == 0 and mode & stat.S_ISGID:
            gid = docker_gid()
            if gid is None:
                mode = 0o755
            else:
                os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)  # the umask must not decide who may write
    except OSError:
        pass


def open_trusted_dir(path: str | os.PathLike[str], create_mode: int | None = None,
                     what: str = "journal folder") -> int:
    """A descriptor of the folder ``path`` opened ``O_DIRECTORY | O_NOFOLLOW`` under its checked parent and
    checked itself; created with ``create_mode`` (parents 0755) when given and absent.

    Raises FileNotFoundError when it is absent (and not created), StateFileError when it is not to be
    trusted or cannot be opened."""
    full = os.path.abspath(path)
    parent, name = os.path.split(full)
    try:
        if create_mode is not None:
            os.makedirs(parent, mode=0o755, exist_ok=True)
        pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateFileError(exc.errno or errno.EIO, f"cannot open the {what} {full}: {exc.strerror}") from None
    try:
        problem = _parent_problem(os.fstat(pfd), parent)
        if problem:
            raise StateFileError(errno.EPERM, f"gputui does not use the {what} {full}: {problem}")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=pfd)
        except FileNotFoundError:
            if create_mode is None:
                raise
            try:
                os.mkdir(name, create_mode & 0o777, dir_fd=pfd)
                created = True
            except FileExistsError:
                created = False
            fd = os.open(name, flags, dir_fd=pfd)
            if created:
                _set_mode(fd, create_mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if isinstance(exc, StateFileError):
            raise
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StateFileError(errno.ELOOP, f"gputui does not use the {what} {full}: it is not a folder "
                                 "(a symbolic link is not followed)") from None
        raise StateFileError(exc.errno or errno.EIO, f"cannot open the {what} {full}: {exc.strerror}") from None
    finally:
        os.close(pfd)
    problem = folder_problem(os.fstat(fd), full)
    if problem:
        os.close(fd)
        raise StateFileError(errno.EPERM, f"gputui does not use the {what} {full}: {problem}")
    return fd
