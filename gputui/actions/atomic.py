"""Replace a small file so that a crash at any instant leaves either the old content or the new.

Write a temporary file beside the target, fsync it, rename it over the target,
fsync the directory. Never truncate in place: a kill between truncate and write
leaves an empty file, and for a journal that is the only record of a container.
"""

from __future__ import annotations

import os
from pathlib import Path

from gputui.core.statefile import open_regular


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically and durably. Raises OSError; the target is then untouched."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)  # no link, no FIFO: never hangs
    try:
        os.fchmod(fd, mode)  # exactly this mode, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    try:
        os.rename(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    fsync_dir(path.parent)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
