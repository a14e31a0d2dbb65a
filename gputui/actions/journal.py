"""Journals: what an action that changes the machine must remember to survive its own death.

A migration stops, renames and recreates a container. If gputui is killed (or
the host reboots) between two of those steps, the only record of the original
container is the journal written before the first step. So a journal is a JSON
file written before the first step and rewritten after every step — atomically
(:func:`gputui.actions.atomic.write_atomic`: write beside, fsync, rename, fsync
the directory), so a kill at any instant leaves the previous version or the
next, never an empty or half-written file.

**Where.** Whoever runs ``--recover`` (root through sudo, or the user who
started the migration) must find it, so journals go to one system-wide
directory, ``$GPUTUI_JOURNAL_DIR`` (default ``/var/lib/gputui/journal``; owned
by root, group ``docker``, mode 2775: every user sees that a journal exists, and
journals are mode 660, readable by the docker group, who may act on containers
anyway). When that directory cannot be written (a docker-group user before
root ever created it), the journal goes to ``$XDG_STATE_HOME/gputui/journal``;
root's ``--recover`` also looks in every user's state directory. A journal that
exists but cannot be read is still reported, with who can recover it.

**In progress or interrupted.** The action holds the per-container lock
(:mod:`gputui.actions.locks`) while it runs; a journal whose lock nobody holds
was left by a writer that died, and is *pending*.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputui.actions.atomic import fsync_dir, write_atomic
from gputui.actions.locks import is_held
from gputui.core.config import state_dir, state_home
from gputui.core.record import field, record
from gputui.core.statefile import read_regular

JOURNAL_VERSION = 1
SYSTEM_JOURNAL_DIR = "/var/lib/gputui/journal"


def system_journal_dir() -> Path:
    return Path(os.environ.get("GPUTUI_JOURNAL_DIR") or SYSTEM_JOURNAL_DIR)


def _docker_gid() -> int | None:
    try:
        return grp.getgrnam("docker").gr_gid
    except KeyError:
        return None


def _usable_system_dir() -> Path | None:
    """The system-wide journal directory if this process can write it (root creates it)."""
    path = system_journal_dir()
    if os.geteuid() == 0 and not path.is_dir():
        try:
            path.mkdir(parents=True, exist_ok=True)
            gid = _docker_gid()
            if gid is not None:
                os.chown(path, 0, gid)
            os.chmod(path, 0o2775 if gid is not None else 0o755)  # names visible to all, contents not
        except OSError:
            return None
    if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
        return path
    return None


def journal_dir() -> Path:
    """Where a new journal is written: the system-wide directory, else ``$XDG_STATE_HOME/gputui/journal``."""
    system = _usable_system_dir()
    if system is not None:
        return system
    path = Path(state_dir()) / "journal"
    path.mkdir(parents=True, exist_ok=True)
    return path


def journal_dirs() -> list[Path]:
    """Every directory a journal may be in: the system-wide one, this user's, and (for root) every user's."""
    dirs = [system_journal_dir(), Path(state_home()) / "journal"]
    if os.geteuid() == 0:
        # Home directories on disk, not the user database: enumerating LDAP users can take seconds.
        homes = [Path("/root"), *sorted(Path("/home").glob("*"))] if os.path.isdir("/home") else [Path("/root")]
        dirs.extend(h / ".local" / "state" / "gputui" / "journal" for h in homes)
    out: list[Path] = []
    seen: set[str] = set()
    for d in dirs:
        try:
            key = str(d.resolve())
        except OSError:
            key = str(d)
        if key not in seen and d.is_dir():
            seen.add(key)
            out.append(d)
    return out


class JournalError(Exception):
    """A journal cannot be written or read. ``str(exc)`` is one sentence."""


@record
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

    @property
    def readable(self) -> bool:
        return not self.data.get("unreadable")

    @property
    def lock_keys(self) -> list[str]:
        """The container lock keys of the action (its container's id and name)."""
        who = self.data.get("container") or {}
        return [str(k) for k in (who.get("id"), who.get("name")) if k]

    def describe(self) -> str:
        """One sentence for a status line or the CLI."""
        if not self.readable:
            owner = self.data.get("owner") or "another user"
            return (f"An interrupted {self.action} left the journal {self.path}, which this user cannot read "
                    f"(owned by {owner}); run 'sudo gputui {self.action} --recover'.")
        what = self.data.get("summary") or f"a {self.action}"
        when = f" (started {self.created})" if self.created else ""
        last = f", last completed step: {self.step}" if self.step else ""
        return f"An interrupted {self.action} was found: {what}{when}{last}; run 'gputui {self.action} --recover'."


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "x"


class Journal:
    """One action's journal. The caller holds the action's container lock while it exists.

    Create it with :meth:`create` (written before anything changes), call
    :meth:`update` after every step, :meth:`finish` to delete it once the action
    has fully completed or been undone, and :meth:`release` to let go of it while
    keeping it on disk (a rollback that failed leaves it for ``--recover``).
    """

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self._open = True

    @classmethod
    def create(cls, action: str, subject: str, data: dict[str, Any]) -> Journal:
        try:
            directory = journal_dir()
        except OSError as exc:
            raise JournalError(f"Cannot create a journal directory: {exc.strerror or exc}.") from None
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = directory / f"{action}-{stamp}-{_slug(subject)}-{uuid.uuid4().hex[:6]}.json"
        full = {
            "version": JOURNAL_VERSION,
            "action": action,
            "created": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "user": _user(),
            "step": None,
            **data,
        }
        journal = cls(path, full)
        journal._write()
        return journal

    @classmethod
    def take(cls, pending: PendingJournal) -> Journal:
        """Take over an interrupted journal to finish or undo it (``--recover``; the caller holds the lock)."""
        if not pending.readable:
            raise JournalError(pending.describe())
        data = _read(pending.path)
        if data is None:
            raise JournalError(f"The journal {pending.path} cannot be read any more.")
        data["pid"] = os.getpid()
        return cls(pending.path, data)

    def update(self, **changes: Any) -> None:
        """Record progress durably before the next step starts."""
        if not self._open:
            raise JournalError(f"The journal {self.path} was already closed.")
        self.data.update(changes)
        self._write()

    def _write(self) -> None:
        text = json.dumps(self.data, indent=1, sort_keys=False, default=str).encode("utf-8")
        shared = self.path.parent == system_journal_dir() and _docker_gid() is not None
        try:
            write_atomic(self.path, text, 0o660 if shared else 0o600)
        except OSError as exc:
            raise JournalError(f"Cannot write the journal {self.path}: {exc.strerror or exc}.") from None

    def finish(self) -> None:
        """The action completed or was fully undone: the journal has nothing left to say."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        fsync_dir(self.path.parent)
        self.release()

    def release(self) -> None:
        """Stop writing the journal (it stays on disk and becomes pending once the lock is released)."""
        self._open = False


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _read(path: Path) -> dict[str, Any] | None:
    try:  # never through a symlink, never blocking on a FIFO planted under a journal's name
        text = read_regular(path).decode("utf-8", "replace")
    except OSError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _owner(path: Path) -> str:
    try:
        uid = path.stat().st_uid
    except OSError:
        return "another user"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def pending_journals(action: str | None = None) -> list[PendingJournal]:
    """Journals left by interrupted actions (nobody holds their container lock), oldest first.

    Cheap (a few directory listings and small reads): the CLI and the dashboard
    call it at start to tell the user that something needs ``--recover``. A
    journal whose container another running gputui has locked is in progress, not pending.
    """
    out = []
    for directory in journal_dirs():
        try:
            paths = sorted(directory.glob("*.json"))
        except OSError:
            paths = []
        for path in paths:
            if path.is_symlink() or (path.exists() and not path.is_file()):
                continue  # a link, a FIFO or a device is no journal (and must not hang the caller)
            act = path.name.split("-", 1)[0]
            if action is not None and act != action:
                continue
            data = _read(path)
            if data is None:
                if not path.exists():
                    continue  # finished between the listing and the read
                if os.access(path, os.R_OK):
                    data = {"action": act, "summary": f"an unreadable journal {path.name}", "damaged": True}
                else:
                    data = {"action": act, "unreadable": True, "owner": _owner(path)}
            pending = PendingJournal(path=path, action=str(data.get("action") or act), data=data)
            if any(is_held(pending.action, k) for k in pending.lock_keys):
                continue
            out.append(pending)
    out.sort(key=lambda p: (str(p.data.get("created") or ""), p.path.name))
    return out
