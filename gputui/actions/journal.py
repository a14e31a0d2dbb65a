"""Journals: what an action that changes the machine must remember to survive its own death.

A migration stops, renames and recreates a container. If gputui is killed (or
the host reboots) between two of those steps, the only record of the original
container is the journal written before the first step. So a journal is a JSON
file written before the first step and rewritten after every step — atomically
(:func:`gputui.actions.atomic.write_atomic`: write beside, fsync, rename, fsync
the directory), so a kill at any instant leaves the previous version or the
next, never an empty or half-written file. Temporary files a kill left beside a
journal (``.NAME.json.PID.tmp``, whose writer is dead) are removed by the next run.

**Where.** One system-wide folder, ``$GPUTUI_JOURNAL_DIR`` (default
``/var/lib/gputui/journal``): owned by root, group ``docker``, mode 2775, so a
docker-group user's migration can journal there too. Journals are mode 0600 (they
hold the container's environment, secrets included) and keep the environment once.
A user who cannot write there journals to ``$XDG_STATE_HOME/gputui/journal``.

**Whom root trusts.** gputui runs as root, and a journal tells ``--recover`` which
container to create or remove, so root reads journals *only* from the system
folder, never from home folders, and only when that folder (checked with
``fstat`` on the open folder, its parent too) belongs to root and nobody but
root and the docker group may write to it. A journal file is acted on only when
it is a regular file owned by root — or, for a user running ``--recover`` with
their own Docker rights, by that user — and writable by nobody else (group
``docker`` aside). A journal failing a check is listed with one sentence and
never acted on; at most :data:`READ_LIMIT` journals of a folder are read per run.

**In progress or interrupted.** The action holds the per-container lock
(:mod:`gputui.actions.locks`) while it runs; a journal whose lock nobody holds
was left by a writer that died, and is *pending*.

**Which daemon.** A migration records the Docker daemon it acted on (``docker
info`` ID and endpoint, :attr:`PendingJournal.daemon`); ``--recover`` acts only
on journals of the daemon it talks to.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputui.actions.atomic import fsync_dir, write_atomic
from gputui.actions.folders import docker_gid as _docker_gid
from gputui.actions.folders import open_trusted_dir as open_folder
from gputui.actions.folders import user_name as _name
from gputui.actions.locks import is_held
from gputui.core.config import state_dir, state_home
from gputui.core.record import field, record
from gputui.core.statefile import STATE_LIMIT, StateFileError, check_state_dir

JOURNAL_VERSION = 1
SYSTEM_JOURNAL_DIR = "/var/lib/gputui/journal"
#: Journals read per folder and run: a folder filled with junk costs milliseconds, not seconds.
READ_LIMIT = 200
#: Where ``--recover --discard`` moves what it gives up on, inside the journal folder.
DISCARDED = "discarded"
#: Marks, in a journal, an ``Env`` equal to the one stored once under ``"env"``.
ENV_REF = "@env"
_TMP = re.compile(r"^\.(.+\.json)\.([0-9]{1,10})\.tmp$")


def system_journal_dir() -> Path:
    return Path(os.environ.get("GPUTUI_JOURNAL_DIR") or SYSTEM_JOURNAL_DIR)


class JournalError(Exception):
    """A journal cannot be written or read. ``str(exc)`` is one sentence."""


def open_trusted_dir(path: Path, create_mode: int | None = None) -> int:
    """:func:`gputui.actions.folders.open_trusted_dir` for a journal folder: FileNotFoundError when absent,
    JournalError (one sentence) when it is not to be trusted."""
    try:
        return open_folder(path, create_mode)
    except StateFileError as exc:
        raise JournalError(f"{str(exc.strerror)[:1].upper()}{str(exc.strerror)[1:]}.") from None


def _system_mode() -> int:
    return 0o2775 if os.geteuid() == 0 else 0o700


def _usable_system_dir() -> Path | None:
    """The system-wide journal folder if this process may write it (root creates it)."""
    path = system_journal_dir()
    try:
        fd = open_trusted_dir(path, _system_mode() if os.geteuid() == 0 else None)
    except FileNotFoundError:
        return None
    except (OSError, JournalError):
        if os.geteuid() == 0:
            raise
        return None
    try:
        writable = os.access(path, os.W_OK | os.X_OK)
    finally:
        os.close(fd)
    return path if writable else None


def journal_dir() -> Path:
    """Where a new journal is written: the system-wide folder, else (a user who cannot write there)
    ``$XDG_STATE_HOME/gputui/journal``. Raises JournalError or OSError with one sentence."""
    system = _usable_system_dir()
    if system is not None:
        return system
    path = Path(state_dir()) / "journal"
    path.mkdir(mode=0o700, exist_ok=True)
    check_state_dir(path)
    return path


def journal_dirs() -> list[Path]:
    """Every folder a journal of this user may be in: the system-wide one and, for a user other than
    root, the user's own. Root never looks in home folders: another user writes those."""
    dirs = [system_journal_dir()]
    if os.geteuid() != 0:
        dirs.append(Path(state_home()) / "journal")
    return [d for d in dirs if d.is_dir()]


@record
class PendingJournal:
    """A journal whose writer is gone: an action was interrupted between two steps.

    ``problem`` (one sentence) marks a journal gputui must not act on: another user's, one others may
    write, or one in a folder it does not trust; it is listed, never recovered or discarded."""

    path: Path
    action: str
    data: dict[str, Any] = field(hash=False, compare=False)
    owner: str = ""
    problem: str | None = None

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
    def trusted(self) -> bool:
        """May this process act on it (read, recover, discard)?"""
        return self.readable and self.problem is None

    @property
    def container(self) -> tuple[str, str]:
        """The container's (name, id) the journal names."""
        who = self.data.get("container") or {}
        return str(who.get("name") or ""), str(who.get("id") or "")

    @property
    def daemon(self) -> dict[str, str]:
        """The Docker daemon the action acted on: ``{"id": ..., "root": ..., "endpoint": ...}`` (``docker info``'s
        ID and DockerRootDir, the address; empty if not recorded)."""
        got = self.data.get("daemon")
        return {k: str(v)[:500] for k, v in got.items() if k in ("id", "root", "endpoint") and v} \
            if isinstance(got, dict) else {}

    @property
    def lock_keys(self) -> list[str]:
        """The container lock keys of the action (its container's id and name)."""
        name, cid = self.container
        return [k for k in (cid, name) if k]

    def describe(self) -> str:
        """One sentence for a status line or the CLI."""
        if self.problem:
            return self.problem
        if not self.readable:
            owner = self.data.get("owner") or "another user"
            return (f"An interrupted {self.action} left the journal {self.path}, which this user cannot read "
                    f"(owned by {owner}); run 'sudo gputui {self.action} --recover'.")
        what = self.data.get("summary") or f"a {self.action}"
        when = f" (started {self.created})" if self.created else ""
        last = f", last completed step: {self.step}" if self.step else ""
        return f"An interrupted {self.action} was found: {what}{when}{last}; run 'gputui {self.action} --recover'."


@record
class JournalScan:
    """What :func:`scan_journals` found: the journals read, and how many more it left unread."""

    pending: list[PendingJournal]
    unread: int = 0


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "x"


#: Where a migration journal holds a container environment (the original's, the two create bodies).
_ENV_PATHS = (("original", "Config", "Env"), ("original_body", "Env"), ("body", "Env"))


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``data`` with ``path`` set to ``value``, copying the dicts on the way (never the caller's)."""
    out = dict(data)
    inner = out
    for key in path[:-1]:
        inner[key] = dict(inner[key])
        inner = inner[key]
    inner[path[-1]] = value
    return out


def pack_env(data: dict[str, Any]) -> dict[str, Any]:
    """The journal as written: the container's environment (secrets included) once, under ``"env"``."""
    env = next((e for e in (_get(data, p) for p in _ENV_PATHS) if isinstance(e, list)), None)
    if env is None:
        return data
    out = {**data, "env": env}
    for p in _ENV_PATHS:
        if _get(out, p) == env:
            out = _set(out, p, ENV_REF)
    return out


def unpack_env(data: dict[str, Any]) -> dict[str, Any]:
    """The journal as read back: every ``Env`` the writer stored once is in its place again."""
    env = data.get("env")
    if not isinstance(env, list):
        return data
    out = dict(data)
    for p in _ENV_PATHS:
        if _get(out, p) == ENV_REF:
            out = _set(out, p, list(env))
    return out


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
        _clean_temporary(directory)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = directory / f"{action}-{stamp}-{_slug(subject)}-{uuid.uuid4().hex[:6]}.json"
        full = {
            "version": JOURNAL_VERSION,
            "action": action,
            "created": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "user": _name(os.geteuid()),
            "step": None,
            **data,
        }
        journal = cls(path, full)
        journal._write()
        return journal

    @classmethod
    def take(cls, pending: PendingJournal) -> Journal:
        """Take over an interrupted journal to finish or undo it (``--recover``; the caller holds the lock).
        Read again, with every check: only a journal this process may act on is taken."""
        if not pending.trusted:
            raise JournalError(pending.describe())
        try:
            dfd = open_trusted_dir(pending.path.parent)
        except (OSError, JournalError) as exc:
            raise JournalError(f"The journal {pending.path} cannot be read any more: {exc}.") from None
        try:
            again = _load(dfd, pending.path, pending.action)
        finally:
            os.close(dfd)
        if again is None or not again.trusted:
            raise JournalError(again.describe() if again is not None else
                               f"The journal {pending.path} cannot be read any more.")
        data = dict(again.data)
        data["pid"] = os.getpid()
        return cls(pending.path, data)

    def update(self, **changes: Any) -> None:
        """Record progress durably before the next step starts."""
        if not self._open:
            raise JournalError(f"The journal {self.path} was already closed.")
        self.data.update(changes)
        self._write()

    def _write(self) -> None:
        text = json.dumps(pack_env(self.data), indent=1, sort_keys=False, default=str).encode("utf-8")
        try:
            write_atomic(self.path, text, 0o600)  # the container's environment: root or its writer only
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _clean_temporary(directory: Path, dfd: int | None = None) -> None:
    """Remove this user's ``.NAME.json.PID.tmp`` files whose writer is dead (a kill between write and rename)."""
    own = dfd is None
    try:
        if own:
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        assert dfd is not None
        for name in os.listdir(dfd):
            m = _TMP.match(name)
            if not m or _pid_alive(int(m.group(2))):
                continue
            try:
                if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_uid == os.geteuid():
                    os.unlink(name, dir_fd=dfd)
            except OSError:
                continue
    except OSError:
        pass
    finally:
        if own and dfd is not None:
            os.close(dfd)


_SKIP = None


def _load(dfd: int, path: Path, action: str) -> PendingJournal | None:
    """The journal ``path`` (a name in the folder ``dfd``), with the checks that decide whether it may be
    acted on; None for what is no journal (gone, a link, a FIFO or a device: it must not hang the caller)."""
    euid = os.geteuid()
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except PermissionError:
        try:
            owner = _name(os.stat(path.name, dir_fd=dfd, follow_symlinks=False).st_uid)
        except OSError:
            owner = "another user"
        return PendingJournal(path=path, action=action, data={"action": action, "unreadable": True,
                                                               "owner": owner}, owner=owner)
    except OSError:
        return _SKIP
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _SKIP
        owner = _name(st.st_uid)
        mode = stat.S_IMODE(st.st_mode)
        problem = None
        if st.st_uid != 0 and (euid == 0 or st.st_uid != euid):
            who = "root" if euid == 0 else "root or you"
            problem = (f"The journal {path} belongs to {owner}, not to {who}: gputui does not act on it "
                       f"({owner} may run 'gputui {action} --recover' with their own Docker rights).")
        elif mode & stat.S_IWOTH or (mode & stat.S_IWGRP and st.st_gid not in (0, _docker_gid())):
            problem = (f"The journal {path} is writable by other users (mode {mode:o}): gputui does not act "
                       f"on it.")
        if problem:
            return PendingJournal(path=path, action=action, data={"action": action}, owner=owner, problem=problem)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > STATE_LIMIT:
                chunks = [b"-"]
                break
            chunks.append(chunk)
    except OSError:
        return _SKIP
    finally:
        os.close(fd)
    try:
        data = json.loads(b"".join(chunks).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        data = {"action": action, "summary": f"an unreadable journal {path.name}", "damaged": True}
    return PendingJournal(path=path, action=str(data.get("action") or action)[:32], data=unpack_env(data),
                          owner=owner)


def scan_journals(action: str | None = None, limit: int = READ_LIMIT) -> JournalScan:
    """Journals left by interrupted actions (nobody holds their container lock), oldest first, at most
    ``limit`` read per folder (the rest are counted in ``unread``); a folder gputui must not trust is one
    entry with its ``problem``.

    Cheap (a few directory listings and small reads): the CLI and the dashboard
    call it at start to tell the user that something needs ``--recover``. A
    journal whose container another running gputui has locked is in progress, not pending.
    """
    out: list[PendingJournal] = []
    unread = 0
    for directory in journal_dirs():
        try:
            dfd = open_trusted_dir(directory)
        except FileNotFoundError:
            continue
        except (OSError, JournalError) as exc:
            text = str(exc) if isinstance(exc, JournalError) else \
                f"Cannot read the journal folder {directory}: {exc.strerror or exc}."
            out.append(PendingJournal(path=directory, action=action or "migrate", data={}, problem=text))
            continue
        try:
            _clean_temporary(directory, dfd)
            try:
                names = sorted(n for n in os.listdir(dfd) if n.endswith(".json") and not n.startswith(".")
                               and (action is None or n.split("-", 1)[0] == action))
            except OSError:
                names = []
            unread += max(0, len(names) - limit)
            for name in names[:limit]:
                pending = _load(dfd, directory / name, name.split("-", 1)[0])
                if pending is None or (action is not None and pending.action != action):
                    continue
                if pending.trusted and any(is_held(pending.action, k) for k in pending.lock_keys):
                    continue
                out.append(pending)
        finally:
            os.close(dfd)
    out.sort(key=lambda p: (str(p.data.get("created") or ""), p.path.name))
    return JournalScan(out, unread)


def pending_journals(action: str | None = None) -> list[PendingJournal]:
    """:func:`scan_journals`' journals (see there)."""
    return scan_journals(action).pending


def discard(pending: PendingJournal) -> Path:
    """Move a journal that cannot be finished to ``discarded/`` beside it (kept for the record, no longer
    pending). The folders are opened ``O_DIRECTORY | O_NOFOLLOW`` under the checked journal folder: a
    ``discarded`` that is a link, or that another user owns, is refused. Raises JournalError."""
    if not pending.trusted:
        raise JournalError(pending.describe())
    try:
        dfd = open_trusted_dir(pending.path.parent)
    except (OSError, JournalError) as exc:
        raise JournalError(str(exc) if isinstance(exc, JournalError) else
                           f"Cannot open the journal folder {pending.path.parent}: {exc.strerror or exc}.") from None
    aside = pending.path.parent / DISCARDED
    try:
        try:
            os.mkdir(DISCARDED, 0o700, dir_fd=dfd)
        except FileExistsError:
            pass
        try:
            afd = os.open(DISCARDED, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise JournalError(f"Could not discard the journal {pending.path}: {aside} is not a folder "
                                   "(a symbolic link is not followed).") from None
            raise
        try:
            st = os.fstat(afd)
            if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise JournalError(f"Could not discard the journal {pending.path}: {aside} belongs to "
                                   f"{_name(st.st_uid)} or others may write to it.")
            os.rename(pending.path.name, pending.path.name, src_dir_fd=dfd, dst_dir_fd=afd)
            os.fsync(dfd)
        finally:
            os.close(afd)
    except OSError as exc:
        raise JournalError(f"Could not discard the journal {pending.path}: {exc.strerror or exc}.") from None
    finally:
        os.close(dfd)
    return aside / pending.path.name
