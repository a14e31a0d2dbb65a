"""The history writer behind ``gputui record``: judged Snapshots in, intervals out.

:class:`Recorder` keeps each living hold (gpu, pid, start time) in memory and, after every
poll, writes what changed in one transaction: a new row for a process first seen, the grown
figures of those still there, a closed row for those gone; and per GPU one row per finished
minute (min/mean/max). It never stops the caller: when the database cannot be written (locked
by another recorder, not SQLite, from a newer gputui, a full disk) it says so once in one
sentence (``problem``), keeps counting in memory and tries again on the next poll.

Times only move forward: a wall clock stepped back makes the recorder's time stand still until
the clock passes the last recorded instant again, so no interval ever has a negative length.
A gap longer than :data:`MAX_GAP_INTERVALS` intervals (a suspend, the recorder stopped) closes
the open holds: a row always covers time the recorder watched.

Nothing of a command line or an environment is stored: only the executable's base name.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from gputui.core.model import Process, Snapshot
from gputui.core.record import record
from gputui.core.sources.history_store import (
    IDLE_UTIL,
    MIGRATIONS,
    SCHEMA_VERSION,
    HistoryError,
    HistoryLocked,
    check_sqlite_file,
    check_version,
)

#: A poll later than this many intervals (and at least MIN_GAP seconds) after the previous one
#: starts new holds: the machine slept or the recorder was stopped.
MAX_GAP_INTERVALS = 3.0
MIN_GAP = 60.0
#: Longest stored text (user, names, image, exe): anything longer is cut.
MAX_TEXT = 256
#: Most finished GPU-minutes kept in memory while the database cannot be written (a week of 8 GPUs);
#: beyond that the oldest are dropped rather than growing without end.
MAX_PENDING_MINUTES = 8 * 7 * 1440
#: How often retention runs, and how many rows one pass deletes (so a prune never holds the writer long).
PRUNE_EVERY = 3600.0
PRUNE_BATCH = 5000


def exe_name(command: str | None) -> str | None:
    """The executable's base name from a command line (never an argument); None when unknown."""
    if not command:
        return None
    text = command.strip()
    if text.startswith("[") and text.endswith("]"):
        return _text(text[1:-1])
    first = text.split(None, 1)[0] if text else ""
    return _text(os.path.basename(first)) or None


#: Largest memory figure stored (1 PiB): a wrapped driver counter is not a reading.
MAX_BYTES = 1 << 50


def _bytes(value: int | None) -> int | None:
    return value if value is not None and 0 <= value <= MAX_BYTES else None


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value)
    return "".join(c for c in text[:MAX_TEXT] if c.isprintable()) or None


def _job(p: Process) -> str | None:
    """The job a process belongs to where a source attributes one (a Slurm job id, ...)."""
    job = getattr(p, "job", None)
    if job is None:
        return None
    for name in ("id", "job_id", "name"):
        value = getattr(job, name, None)
        if value is not None:
            return _text(value)
    return _text(job)


@record(frozen=False)
class _Hold:
    row: int | None
    fields: dict[str, Any]
    first: float
    last: float
    mem_peak: int | None = None
    mem_byte_s: float = 0.0
    sm_pct_s: float = 0.0
    sm_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = 0.0
    stale: str | None = None
    open: bool = True
    dirty: bool = True


@record(frozen=False)
class _Minute:
    minute: int
    n: int = 0
    sums: dict[str, float] | None = None
    mins: dict[str, float] | None = None
    maxs: dict[str, float] | None = None


_GPU_FIGURES = ("util", "mem", "temp", "power")


class Recorder:
    """Writes judged snapshots to the history database at ``path``. One thread at a time."""

    def __init__(self, path: str, interval: float, retention_days: float = 90.0,
                 log: Callable[[str], None] = lambda line: None) -> None:
        self.path = path
        self.interval = interval
        self.retention_days = retention_days
        self.log = log
        self.conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        #: the one sentence saying why nothing is being written, None while writing
        self.problem: str | None = None
        self._said: str | None = None
        self._holds: dict[tuple[int, int, float], _Hold] = {}
        self._closed: list[_Hold] = []
        self._minutes: dict[int, _Minute] = {}
        self._done_minutes: list[tuple[int, _Minute]] = []
        self._last: float | None = None
        self._last_pruned = 0.0
        #: rows inserted by the transaction in progress (gone again if it rolls back)
        self._inserted: set[int] = set()
        self.host = ""

    @property
    def writing(self) -> bool:
        return self.conn is not None and self.problem is None

    # -- opening ---------------------------------------------------------------------

    def open(self) -> bool:
        """Open (create, migrate) the database; False with ``problem`` set when it cannot be written."""
        try:
            self.conn = self._open()
        except HistoryError as exc:
            self._fail(str(exc))
            return False
        except sqlite3.Error as exc:
            self._fail(_sentence(exc, self.path))
            return False
        self._set_problem(None)
        return True

    def _open(self) -> sqlite3.Connection:
        path = self.path
        folder = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(folder, mode=0o750 if os.geteuid() == 0 else 0o700, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"Cannot create the folder {folder} for the history database: {exc.strerror}.") \
                from None
        _check_folder(folder)
        existed = check_sqlite_file(path)
        mode = 0o640 if os.geteuid() == 0 else 0o600
        try:
            # Created with its final mode before SQLite sees it; O_NOFOLLOW: never a link to elsewhere.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except OSError as exc:
            raise HistoryError(f"Cannot open the history database {path}: {exc.strerror}.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise HistoryLocked(f"Another 'gputui record' is writing {path}; this one keeps polling and writes "
                                "nothing.") from None
        if not existed:
            os.fchmod(fd, mode)  # whatever the umask: 0640 as root, 0600 as a user
        self._release_lock()
        self._lock_fd = fd
        try:
            conn = sqlite3.connect(path, timeout=2.0, isolation_level=None, check_same_thread=False)
            version = check_version(conn, path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            while version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                _run_script(conn, MIGRATIONS[version])
                version += 1
                conn.execute(f"PRAGMA user_version = {version}")
                conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            # Holds left open by a recorder that stopped end where it last saw them.
            conn.execute("UPDATE holds SET open = 0 WHERE open = 1")
            row = conn.execute("SELECT value FROM meta WHERE key = 'last_time'").fetchone()
            last = _float(row[0]) if row is not None else None
            # The last recorded instant holds time still after a clock step back across a restart; one
            # more than a day ahead was written under a clock that was wrong, and would stall it for good.
            if last is not None and last <= time.time() + 86400:
                self._last = max(self._last or 0.0, last)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('interval', ?), ('stopped', '0')", (str(self.interval),))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._release_lock()
            raise HistoryError(_sentence(exc, path)) from None
        except HistoryError:
            self._release_lock()
            raise
        return conn

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def close(self) -> None:
        """Write what is pending (holds stay open: the next recorder closes them) and close."""
        if self.conn is not None:
            if self.problem is None:
                self._flush_minutes()  # the minute in progress too
                self._flush()
                try:  # readers stop calling its holds "still running"
                    self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('stopped', '1')")
                except sqlite3.Error:
                    pass
            self.conn.close()
            self.conn = None
        self._release_lock()

    # -- recording -------------------------------------------------------------------

    def record(self, snap: Snapshot) -> None:
        """Count one poll and write it (or keep it until the database can be written)."""
        wall = snap.time.timestamp()
        now = wall if self._last is None else max(wall, self._last)  # never backwards
        dt = 0.0 if self._last is None else now - self._last
        if dt > max(MAX_GAP_INTERVALS * self.interval, MIN_GAP):
            for key in list(self._holds):
                self._end(key)
            self._flush_minutes()
            dt = 0.0
        self._last = now
        self.host = snap.host
        seen: set[tuple[int, int, float]] = set()
        for g in snap.gpus:
            util = g.utilization_gpu
            self._gpu_minute(g.index, now, util, g.memory_used, g.temperature, g.power_draw)
            for p in g.processes:
                key = (p.gpu_index, p.pid, p.create_time or 0.0)
                if key in seen:
                    continue
                seen.add(key)
                hold = self._holds.get(key)
                if hold is None:
                    self._holds[key] = self._new_hold(snap.host, g.uuid, p, now)
                    continue
                self._grow(hold, p, util, now, dt)
        for key in [k for k in self._holds if k not in seen]:
            self._end(key)
        if self.conn is None:
            self._retry_open()
        if self.conn is not None:
            self._flush()

    def _new_hold(self, host: str, uuid: str, p: Process, now: float) -> _Hold:
        c = p.container
        fields = {
            "host": _text(host) or "", "gpu": p.gpu_index, "gpu_uuid": _text(uuid), "pid": p.pid,
            "start_time": p.create_time or 0.0, "user": _text(p.user),
            "uid": p.uid if p.uid is not None and 0 <= p.uid < 1 << 32 else None,
            "container_id": _text(c.id) if c else None, "container_name": _text(c.name) if c else None,
            "image": _text(c.image) if c else None, "compose_project": _text(c.compose_project) if c else None,
            "compose_service": _text(c.compose_service) if c else None, "runtime": _text(c.runtime) if c else None,
            "job": _job(p), "exe": exe_name(p.command),
        }
        hold = _Hold(None, fields, now, now, mem_peak=_bytes(p.gpu_memory))
        hold.stale = _stale(p) or None
        return hold

    def _grow(self, hold: _Hold, p: Process, util: int | None, now: float, dt: float) -> None:
        hold.last = now
        mem = _bytes(p.gpu_memory)
        if mem is not None:
            hold.mem_peak = mem if hold.mem_peak is None else max(hold.mem_peak, mem)
            hold.mem_byte_s += mem * dt
        if p.sm_utilization is not None:
            hold.sm_pct_s += p.sm_utilization * dt
            hold.sm_s += dt
        if util is not None:
            hold.busy_s += dt * util / 100.0
            if util < IDLE_UTIL:
                hold.idle_s += dt
        kinds = _stale(p)
        if kinds and kinds != hold.stale:
            merged = sorted((set((hold.stale or "").split(",")) | set(kinds.split(","))) - {""})
            hold.stale = ",".join(merged)
        hold.dirty = True

    def _end(self, key: tuple[int, int, float]) -> None:
        hold = self._holds.pop(key)
        hold.open = False
        hold.dirty = True
        self._closed.append(hold)

    def _gpu_minute(self, gpu: int, now: float, util: int | None, mem: int | None, temp: int | None,
                    power: float | None) -> None:
        minute = int(now // 60)
        current = self._minutes.get(gpu)
        if current is None or current.minute != minute:
            if current is not None and current.n:
                self._done_minutes.append((gpu, current))
                if len(self._done_minutes) > MAX_PENDING_MINUTES:
                    del self._done_minutes[: len(self._done_minutes) - MAX_PENDING_MINUTES]
            current = self._minutes[gpu] = _Minute(minute, 0, {}, {}, {})
        values = {"util": util, "mem": _bytes(mem), "temp": temp, "power": power}
        assert current.sums is not None and current.mins is not None and current.maxs is not None
        current.n += 1
        for name, value in values.items():
            if value is None:
                continue
            v = float(value)
            if v != v or v in (float("inf"), float("-inf")):
                continue
            current.sums[name] = current.sums.get(name, 0.0) + v
            current.sums[name + "#"] = current.sums.get(name + "#", 0.0) + 1
            current.mins[name] = min(current.mins.get(name, v), v)
            current.maxs[name] = max(current.maxs.get(name, v), v)

    def _flush_minutes(self) -> None:
        for gpu, m in self._minutes.items():
            if m.n:
                self._done_minutes.append((gpu, m))
        self._minutes = {}

    # -- writing ---------------------------------------------------------------------

    def _retry_open(self) -> None:
        """Try the database again (the other recorder may have stopped, a disk been freed)."""
        try:
            self.conn = self._open()
        except (HistoryError, sqlite3.Error):
            self.conn = None

    def _flush(self) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for hold in [*self._holds.values(), *self._closed]:
                if hold.dirty:
                    self._write_hold(conn, hold)
            for gpu, m in self._done_minutes:
                self._write_minute(conn, gpu, m)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_time', ?), ('heartbeat', ?), ('host', ?)",
                         (repr(self._last or 0.0), repr(self._last or 0.0), self.host))
            self._prune(conn)
            conn.execute("COMMIT")
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._forget_new_rows()
            self._fail(_sentence(exc, self.path))
            return
        self._commit_done()
        self._set_problem(None)

    def _forget_new_rows(self) -> None:
        """After a rollback the rows inserted in it do not exist: insert them again next time."""
        for hold in [*self._holds.values(), *self._closed]:
            if hold.row is not None and hold.row in self._inserted:
                hold.row = None
        self._inserted.clear()

    def _commit_done(self) -> None:
        for hold in [*self._holds.values(), *self._closed]:
            hold.dirty = False
        self._closed = []
        self._done_minutes = []
        self._inserted = set()

    def _write_hold(self, conn: sqlite3.Connection, hold: _Hold) -> None:
        figures = (hold.last, int(hold.open), hold.mem_peak, hold.mem_byte_s, hold.sm_pct_s, hold.sm_s,
                   hold.busy_s, hold.idle_s, hold.stale)
        if hold.row is None:
            f = hold.fields
            cur = conn.execute(
                "INSERT INTO holds (host, gpu, gpu_uuid, pid, start_time, user, uid, container_id, container_name, "
                "image, compose_project, compose_service, runtime, job, exe, first_seen, last_seen, open, mem_peak, "
                "mem_byte_s, sm_pct_s, sm_s, busy_s, idle_s, stale) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (f["host"], f["gpu"], f["gpu_uuid"], f["pid"], f["start_time"], f["user"], f["uid"],
                 f["container_id"], f["container_name"], f["image"], f["compose_project"], f["compose_service"],
                 f["runtime"], f["job"], f["exe"], hold.first, *figures))
            hold.row = cur.lastrowid
            if hold.row is not None:
                self._inserted.add(hold.row)
            return
        conn.execute("UPDATE holds SET last_seen = ?, open = ?, mem_peak = ?, mem_byte_s = ?, sm_pct_s = ?, "
                     "sm_s = ?, busy_s = ?, idle_s = ?, stale = ? WHERE id = ?", (*figures, hold.row))

    @staticmethod
    def _write_minute(conn: sqlite3.Connection, gpu: int, m: _Minute) -> None:
        assert m.sums is not None and m.mins is not None and m.maxs is not None
        values: list[Any] = [gpu, m.minute, m.n]
        for name in _GPU_FIGURES:
            count = m.sums.get(name + "#", 0.0)
            mean = m.sums[name] / count if count else None
            low, high = m.mins.get(name), m.maxs.get(name)
            if name == "mem":
                values += [None if low is None else int(low), None if mean is None else int(mean),
                           None if high is None else int(high)]
            else:
                values += [low, None if mean is None else round(mean, 2), high]
        # A minute seen again (a restart within it) is merged, never written over.
        conn.execute(
            "INSERT INTO gpu_minutes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (gpu, minute) DO UPDATE SET "
            "util_min = min(coalesce(util_min, excluded.util_min), coalesce(excluded.util_min, util_min)), "
            "util_max = max(coalesce(util_max, excluded.util_max), coalesce(excluded.util_max, util_max)), "
            "util_mean = coalesce((coalesce(util_mean, excluded.util_mean) * n + "
            "coalesce(excluded.util_mean, util_mean) * excluded.n) / (n + excluded.n), util_mean), "
            "mem_min = min(coalesce(mem_min, excluded.mem_min), coalesce(excluded.mem_min, mem_min)), "
            "mem_max = max(coalesce(mem_max, excluded.mem_max), coalesce(excluded.mem_max, mem_max)), "
            "mem_mean = coalesce((coalesce(mem_mean, excluded.mem_mean) * n + "
            "coalesce(excluded.mem_mean, mem_mean) * excluded.n) / (n + excluded.n), mem_mean), "
            "temp_min = min(coalesce(temp_min, excluded.temp_min), coalesce(excluded.temp_min, temp_min)), "
            "temp_max = max(coalesce(temp_max, excluded.temp_max), coalesce(excluded.temp_max, temp_max)), "
            "power_min = min(coalesce(power_min, excluded.power_min), coalesce(excluded.power_min, power_min)), "
            "power_max = max(coalesce(power_max, excluded.power_max), coalesce(excluded.power_max, power_max)), "
            "n = n + excluded.n", values)

    def _prune(self, conn: sqlite3.Connection) -> None:
        """Retention, a batch at a time, at most once per PRUNE_EVERY seconds of recorder time."""
        now = self._last or 0.0
        if now - self._last_pruned < PRUNE_EVERY:
            return
        self._last_pruned = now
        cutoff = now - self.retention_days * 86400
        conn.execute("DELETE FROM holds WHERE id IN (SELECT id FROM holds WHERE last_seen < ? AND open = 0 LIMIT ?)",
                     (cutoff, PRUNE_BATCH))
        conn.execute("DELETE FROM gpu_minutes WHERE minute < ?", (int(cutoff // 60),))

    # -- saying so -------------------------------------------------------------------

    def _fail(self, sentence: str) -> None:
        self._set_problem(sentence)

    def _set_problem(self, sentence: str | None) -> None:
        self.problem = sentence
        if sentence != self._said:
            if sentence is not None:
                self.log(f"not writing history: {sentence}")
            elif self._said is not None:
                self.log(f"writing history to {self.path} again")
            self._said = sentence


def _check_folder(folder: str) -> None:
    """The database's folder must be this user's (or root's) and writable by nobody else: in a shared
    folder another user could put links where SQLite creates its -wal and -shm files."""
    import stat

    try:
        st = os.stat(folder)
    except OSError as exc:
        raise HistoryError(f"Cannot use the folder {folder} for the history database: {exc.strerror}.") from None
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HistoryError(f"The folder {folder} may be written by other users; give --db a path in a folder of "
                           "your own.")


def _float(text: object) -> float | None:
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _stale(p: Process) -> str:
    return ",".join(sorted({f.kind for f in p.stale}))


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Each statement of a migration, inside the caller's transaction (executescript would commit)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _sentence(exc: Exception, path: str) -> str:
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if "disk is full" in text or code == 13 or getattr(exc, "errno", None) == errno.ENOSPC:
        return f"The disk holding {path} is full; gputui keeps polling and writes again when there is room."
    if "locked" in text or "busy" in text:
        return f"The history database {path} is locked by another writer; gputui keeps polling and tries again."
    if "not a database" in text:
        return f"{path} is not an SQLite database; gputui leaves it as it is (give another --db)."
    if "readonly" in text or "read-only" in text:
        return f"The history database {path} is read-only here; gputui keeps polling and writes nothing."
    return f"The history database {path} cannot be written ({text}); gputui keeps polling and tries again."
