"""Journals: what an action that changes the machine must remember to survive its own death.

A migration stops, renames and recreates a container. If gputui is killed (or
the host reboots) between two of those steps, the only record of the original
container is the journal written before the first step. So a journal is a JSON
file in ``$XDG_STATE_HOME/gputui/journal/``, created before the first step and
rewritten (and fsynced, with its directory) after every step.

While an action runs it holds an exclusive ``flock`` on its journal. That is how
``pending_journals()`` tells "interrupted" (nobody holds the lock: the writer
died) from "in progress in another gputui" (the lock is held): a journal is
reported as pending only when its writer is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputui.core.config import state_dir, state_home

JOURNAL_VERSION = 1


def journal_dir() -> Path:
    """``$XDG_STATE_HOME/gputui/journal`` (created on demand)."""
    path = state_dir() / "journal"
    path.mkdir(parents=True, exist_ok=True)
    return path


class JournalError(Exception):
    """A journal cannot be written or read. ``str(exc)`` is one sentence."""


@dataclass(frozen=True)
class PendingJournal:
    """A journal whose writer is gone: an action was interrupted between two steps."""

    path: Path
    action: str
    data: dict[str, Any] = field(hash=False, compare=False)

    @property
    def created(self) -> str | None:
        return self.data.get("created")

    @property
    def step(self) -> str | None:
        """The last step that completed before the writer died."""
        return self.data.get("step")

    def describe(self) -> str:
        """One sentence for a status line or the CLI."""
        what = self.data.get("summary") or f"a {self.action}"
        when = f" (started {self.created})" if self.created else ""
        last = f", last completed step: {self.step}" if self.step else ""
        return f"An interrupted {self.action} was found: {what}{when}{last}; run 'gputui {self.action} --recover'."


def _fsync_dir(path: Path) -> None:
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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "x"


class Journal:
    """One action's journal, held (locked) by the process that runs the action.

    Create it with :meth:`create` (writes the file before anything changes), call
    :meth:`update` after every step, :meth:`finish` to delete it once the action
    has fully completed or been undone, and :meth:`release` to let go of it while
    keeping it on disk (a rollback that failed leaves it for ``--recover``).
    """

    def __init__(self, path: Path, data: dict[str, Any], lock_fd: int) -> None:
        self.path = path
        self.data = data
        self._fd: int | None = lock_fd

    @classmethod
    def create(cls, action: str, subject: str, data: dict[str, Any]) -> Journal:
        directory = journal_dir()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = directory / f"{action}-{stamp}-{_slug(subject)}-{uuid.uuid4().hex[:6]}.json"
        full = {
            "version": JOURNAL_VERSION,
            "action": action,
            "created": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "step": None,
            **data,
        }
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _rewrite(fd, path, full)
        except OSError as exc:
            raise JournalError(f"Cannot write the journal {path}: {exc.strerror or exc}.") from None
        return cls(path, full, fd)

    @classmethod
    def take(cls, pending: PendingJournal) -> Journal:
        """Lock an interrupted journal to finish or undo it (``--recover``)."""
        try:
            fd = os.open(pending.path, os.O_RDWR)
        except OSError as exc:
            raise JournalError(f"Cannot open the journal {pending.path}: {exc.strerror or exc}.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise JournalError(f"The journal {pending.path} is in use by another gputui.") from None
        data = _read(pending.path) or dict(pending.data)
        data["pid"] = os.getpid()
        return cls(pending.path, data, fd)

    def update(self, **changes: Any) -> None:
        """Record progress durably before the next step starts."""
        self.data.update(changes)
        if self._fd is None:
            raise JournalError(f"The journal {self.path} was already closed.")
        try:
            _rewrite(self._fd, self.path, self.data)
        except OSError as exc:
            raise JournalError(f"Cannot write the journal {self.path}: {exc.strerror or exc}.") from None

    def finish(self) -> None:
        """The action completed or was fully undone: the journal has nothing left to say."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        _fsync_dir(self.path.parent)
        self.release()

    def release(self) -> None:
        """Stop holding the journal (it stays on disk and becomes pending)."""
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


def _rewrite(fd: int, path: Path, data: dict[str, Any]) -> None:
    """Rewrite the journal in place through the locked descriptor.

    Writing through the same inode keeps the lock meaningful (a rename would give
    readers a new, unlocked inode); the data is fsynced before we go on, so a crash
    leaves either the previous content or the new one plus, at worst, trailing
    bytes, which the reader tolerates by parsing the first JSON document only.
    """
    text = json.dumps(data, indent=1, sort_keys=False, default=str).encode("utf-8")
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    view = memoryview(text)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.fsync(fd)
    _fsync_dir(path.parent)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _locked_by_someone(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
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


def pending_journals(action: str | None = None) -> list[PendingJournal]:
    """Journals left by interrupted actions (their writer is gone), oldest first.

    Cheap (a directory listing and a few small reads): the CLI and the dashboard
    call it at start to tell the user that something needs ``--recover``.
    A journal another running gputui holds is in progress, not pending.
    """
    directory = state_home() / "journal"
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob("*.json")):
        if _locked_by_someone(path):
            continue
        data = _read(path)
        if data is None:
            data = {"action": path.name.split("-", 1)[0], "summary": f"an unreadable journal {path.name}"}
        act = str(data.get("action") or path.name.split("-", 1)[0])
        if action is not None and act != action:
            continue
        out.append(PendingJournal(path=path, action=act, data=data))
    return out
