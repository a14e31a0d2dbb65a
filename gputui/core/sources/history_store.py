"""The history database (``gputui record`` writes it, ``who``/``usage`` and the dashboard read it).

SQLite from the standard library, in WAL mode: one writer (the recorder, which holds an
``flock`` on the file so that a second recorder is refused, not interleaved) and any number
of readers, who never block it. What is stored is *intervals*, not samples:

* ``holds`` — one row per process holding a GPU, keyed by (gpu, pid, start time), which
  grows while the process lives: who (user, container, image, compose project/service,
  runtime, job), the executable's base name (never the command line, never the
  environment), first/last seen, peak and time-weighted mean memory, mean SM %, and the
  seconds held while the GPU was busy (utilization-weighted) or idle;
* ``gpu_minutes`` — per GPU and minute, min/mean/max of utilization, memory in use,
  temperature and power.

The schema carries its version in ``PRAGMA user_version`` and is migrated forward by
the writer; a database from a newer gputui is refused, never rewritten. This module
opens databases and reads them; :mod:`gputui.core.recorder` writes them.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gputui.core.record import record

SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
#: GPU utilization (%) below which a held GPU counts as idle for ``idle_hold_hours``.
IDLE_UTIL = 5.0
#: A hold the recorder saw at its last poll is "still running" while that poll is at most this many
#: intervals (and at least RUNNING_FLOOR seconds) old: a late poll on a loaded host is not an end.
RUNNING_SLACK = 3.0
RUNNING_FLOOR = 30.0

#: Forward migrations: MIGRATIONS[v] takes a database at version v to v + 1.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS holds (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    gpu INTEGER NOT NULL,
    gpu_uuid TEXT,
    pid INTEGER NOT NULL,
    start_time REAL NOT NULL,
    user TEXT,
    uid INTEGER,
    container_id TEXT,
    container_name TEXT,
    image TEXT,
    compose_project TEXT,
    compose_service TEXT,
    runtime TEXT,
    job TEXT,
    exe TEXT,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    open INTEGER NOT NULL DEFAULT 1,
    mem_peak INTEGER,
    mem_byte_s REAL NOT NULL DEFAULT 0,
    sm_pct_s REAL NOT NULL DEFAULT 0,
    sm_s REAL NOT NULL DEFAULT 0,
    busy_s REAL NOT NULL DEFAULT 0,
    idle_s REAL NOT NULL DEFAULT 0,
    stale TEXT
);
CREATE INDEX IF NOT EXISTS holds_gpu_first ON holds (gpu, first_seen);
CREATE INDEX IF NOT EXISTS holds_last ON holds (last_seen);
CREATE TABLE IF NOT EXISTS gpu_minutes (
    gpu INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    n INTEGER NOT NULL,
    util_min REAL, util_mean REAL, util_max REAL,
    mem_min INTEGER, mem_mean INTEGER, mem_max INTEGER,
    temp_min REAL, temp_mean REAL, temp_max REAL,
    power_min REAL, power_mean REAL, power_max REAL,
    PRIMARY KEY (gpu, minute)
) WITHOUT ROWID;
"""
MIGRATIONS: dict[int, str] = {0: SCHEMA_V1}


class HistoryError(Exception):
    """The history database cannot be used; ``str(exc)`` is one sentence."""


class HistoryLocked(HistoryError):
    """Another recorder writes this database."""


def default_db_path() -> str:
    """``$GPUTUI_HISTORY_DB`` when set, else ``/var/lib/gputui/history.db`` as root and
    ``$XDG_STATE_HOME/gputui/history.db`` (default ``~/.local/state``) otherwise."""
    chosen = os.environ.get("GPUTUI_HISTORY_DB")
    if chosen:
        return chosen
    if os.geteuid() == 0:
        return "/var/lib/gputui/history.db"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gputui", "history.db")


def check_sqlite_file(path: str) -> bool:
    """True when ``path`` exists and is a non-empty SQLite database, False when it does not exist or
    is empty (a new database goes there). HistoryError for anything else: it is never written over."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HistoryError(f"Cannot read the history database {path}: {exc.strerror}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise HistoryError(f"The history database {path} is not a regular file.")
    if st.st_size == 0:
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise HistoryError(f"Cannot read the history database {path}: {exc.strerror}.") from None
    if head != SQLITE_MAGIC:
        raise HistoryError(f"{path} is not an SQLite database; gputui leaves it as it is (give another --db).")
    return True


def check_version(conn: sqlite3.Connection, path: str) -> int:
    """The schema version of an open database; HistoryError when a newer gputui wrote it."""
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path} is not a usable SQLite database ({exc}).") from None
    if version > SCHEMA_VERSION:
        raise HistoryError(f"The history database {path} has schema version {version}, newer than this gputui "
                           f"reads ({SCHEMA_VERSION}); upgrade gputui or give another --db.")
    return version


def open_reader(path: str, timeout: float = 5.0) -> sqlite3.Connection:
    """A read-only connection to an existing history database; HistoryError (one sentence) otherwise."""
    if not check_sqlite_file(path):
        raise HistoryError(f"There is no history database at {path}; start 'gputui record' (or give --db).")
    try:
        conn = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True, timeout=timeout,
                               check_same_thread=False)
        version = check_version(conn, path)
    except HistoryError:
        # A reader who may read the file but not create its -shm beside it (a group of operators, the
        # recorder stopped): with no -wal left, the file alone is the whole database.
        if not _readonly_whole(path):
            raise
        conn = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro&immutable=1", uri=True, timeout=timeout,
                               check_same_thread=False)
        version = check_version(conn, path)
    except sqlite3.Error as exc:
        raise HistoryError(f"Cannot open the history database {path}: {exc}.") from None
    if version < SCHEMA_VERSION:
        conn.close()
        raise HistoryError(f"The history database {path} has schema version {version}; run 'gputui record' once "
                           "to bring it up to date.")
    return conn


def _readonly_whole(path: str) -> bool:
    """True when this user cannot write beside ``path`` and no write-ahead log holds part of it."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        wal = os.stat(path + "-wal").st_size
    except FileNotFoundError:
        wal = 0
    except OSError:
        return False
    return wal == 0 and not os.access(folder, os.W_OK)


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


# -- what the readers return ----------------------------------------------------------


@record
class Holding:
    """One process's hold on one GPU, clipped to nothing: as recorded."""

    host: str
    gpu: int
    pid: int
    start_time: float
    user: str | None
    container_id: str | None
    container_name: str | None
    image: str | None
    compose_project: str | None
    compose_service: str | None
    runtime: str | None
    job: str | None
    exe: str | None
    first_seen: float
    last_seen: float
    running: bool
    mem_peak: int | None
    mem_byte_s: float
    sm_mean: float | None
    busy_s: float
    idle_s: float
    stale: str | None = None

    @property
    def held_s(self) -> float:
        return max(0.0, self.last_seen - self.first_seen)

    @property
    def mem_mean(self) -> float | None:
        return self.mem_byte_s / self.held_s if self.held_s > 0 else (float(self.mem_peak) if self.mem_peak else None)

    @property
    def who(self) -> str:
        """The container (name, else short id) or job it ran in, else "-"."""
        if self.container_name:
            return self.container_name
        if self.container_id:
            return self.container_id[:12]
        if self.job:
            return f"job {self.job}"
        return "-"

    def to_json(self, now_running: bool | None = None) -> dict[str, Any]:
        return {
            "host": self.host, "gpu": self.gpu, "pid": self.pid, "start_time": self.start_time,
            "user": self.user, "container": self.container_name or self.container_id,
            "container_id": self.container_id, "image": self.image, "compose_project": self.compose_project,
            "compose_service": self.compose_service, "runtime": self.runtime, "job": self.job, "exe": self.exe,
            "from": self.first_seen, "to": None if self.running else self.last_seen, "running": self.running,
            "last_seen": self.last_seen, "peak_memory": self.mem_peak,
            "mean_memory": None if self.mem_mean is None else round(self.mem_mean),
            "mean_sm": None if self.sm_mean is None else round(self.sm_mean, 1), "stale": self.stale,
        }


_HOLD_COLUMNS = ("host, gpu, pid, start_time, user, container_id, container_name, image, compose_project, "
                 "compose_service, runtime, job, exe, first_seen, last_seen, open, mem_peak, mem_byte_s, "
                 "sm_pct_s, sm_s, busy_s, idle_s, stale")


def _meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def last_poll(conn: sqlite3.Connection) -> tuple[float | None, float, bool]:
    """(when the recorder last recorded a poll, its interval, whether it has stopped)."""
    heartbeat = _meta(conn, "heartbeat")
    interval = _meta(conn, "interval")
    return (float(heartbeat) if heartbeat else None, float(interval) if interval else 10.0,
            _meta(conn, "stopped") == "1")


def holdings(conn: sqlite3.Connection, since: float, until: float, gpus: Sequence[int] = (),
             now: float | None = None) -> list[Holding]:
    """Every hold that overlaps [since, until] (on ``gpus`` when given), oldest first. A hold is
    "running" while the recorder still records it: open, seen at its last poll, and that poll recent."""
    heartbeat, interval, stopped = last_poll(conn)
    now = time.time() if now is None else now
    slack = max(RUNNING_SLACK * interval, RUNNING_FLOOR)
    live = heartbeat is not None and not stopped and heartbeat >= now - slack
    where = "first_seen <= ? AND last_seen >= ?"
    params: list[Any] = [until, since]
    if gpus:
        where += f" AND gpu IN ({','.join('?' * len(gpus))})"
        params.extend(gpus)
    sql = f"SELECT {_HOLD_COLUMNS} FROM holds WHERE {where} ORDER BY first_seen, gpu, pid"
    out = []
    for r in conn.execute(sql, params):
        running = live and bool(r[15]) and heartbeat is not None and r[14] >= heartbeat - slack
        out.append(Holding(
            host=r[0], gpu=r[1], pid=r[2], start_time=r[3], user=r[4], container_id=r[5], container_name=r[6],
            image=r[7], compose_project=r[8], compose_service=r[9], runtime=r[10], job=r[11], exe=r[12],
            first_seen=r[13], last_seen=r[14], running=running, mem_peak=r[16], mem_byte_s=r[17],
            sm_mean=(r[18] / r[19]) if r[19] else None, busy_s=r[20], idle_s=r[21], stale=r[22]))
    return out


@record
class GpuMinute:
    gpu: int
    minute: int
    util: tuple[float | None, float | None, float | None]
    memory: tuple[int | None, int | None, int | None]
    temperature: tuple[float | None, float | None, float | None]
    power: tuple[float | None, float | None, float | None]


def gpu_minutes(conn: sqlite3.Connection, gpu: int, since: float, until: float) -> list[GpuMinute]:
    """One GPU's per-minute min/mean/max in [since, until], oldest first."""
    rows = conn.execute(
        "SELECT minute, util_min, util_mean, util_max, mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, "
        "power_min, power_mean, power_max FROM gpu_minutes WHERE gpu = ? AND minute BETWEEN ? AND ? ORDER BY minute",
        (gpu, int(since // 60), int(until // 60)))
    return [GpuMinute(gpu, r[0], (r[1], r[2], r[3]), (r[4], r[5], r[6]), (r[7], r[8], r[9]), (r[10], r[11], r[12]))
            for r in rows]


# -- usage ------------------------------------------------------------------------------

BY_KEYS = ("user", "container", "image", "compose", "job", "gpu", "host")


@record
class Usage:
    """One key's figures over a period (hours are GPU-hours)."""

    key: str
    gpu_hours_held: float
    busy_gpu_hours: float
    memory_gib_hours: float
    idle_hold_hours: float
    peak_gpus: int

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "gpu_hours_held": round(self.gpu_hours_held, 4),
                "busy_gpu_hours": round(self.busy_gpu_hours, 4), "memory_gib_hours": round(self.memory_gib_hours, 4),
                "idle_hold_hours": round(self.idle_hold_hours, 4), "peak_gpus": self.peak_gpus}


def key_of(h: Holding, by: str) -> str:
    """The name a hold is counted under for ``--by`` (:data:`_KEY_SQL` says the same in SQL)."""
    if by == "user":
        return h.user or "(unknown)"
    if by == "container":
        return h.container_name or (h.container_id[:12] if h.container_id else "(host)")
    if by == "image":
        return h.image or "(none)"
    if by == "compose":
        return f"{h.compose_project}/{h.compose_service or ''}" if h.compose_project else "(none)"
    if by == "job":
        return h.job or "(none)"
    if by == "gpu":
        return str(h.gpu)
    return h.host


_KEY_SQL = {
    "user": "coalesce(user, '(unknown)')",
    "container": "coalesce(container_name, substr(container_id, 1, 12), '(host)')",
    "image": "coalesce(image, '(none)')",
    "compose": "CASE WHEN compose_project IS NULL THEN '(none)' "
               "ELSE compose_project || '/' || coalesce(compose_service, '') END",
    "job": "coalesce(job, '(none)')",
    "gpu": "CAST(gpu AS TEXT)",
    "host": "host",
}

#: One hold's part of a period, reduced to what usage adds up (a plain tuple: a 30-day report of a
#: busy machine has a hundred thousand): (key, (host, gpu), start, end, busy_s, idle_s, mem_byte_s).
Span = tuple[str, tuple[str, int], float, float, float, float, float]


def spans(items: Iterable[Holding], since: float, until: float, by: str) -> list[Span]:
    """Each hold clipped to [since, until]; its busy, idle and memory seconds pro rata."""
    out = []
    for h in items:
        start, end = max(h.first_seen, since), min(h.last_seen, until)
        if end <= start:
            continue
        share = (end - start) / h.held_s if h.held_s > 0 else 0.0
        out.append((key_of(h, by), (h.host, h.gpu), start, end, h.busy_s * share, h.idle_s * share,
                    h.mem_byte_s * share))
    return out


def db_spans(conn: sqlite3.Connection, since: float, until: float, by: str, order: str = "") -> Iterator[Span]:
    """:func:`spans` of every hold in the database, computed by SQLite (no record per hold); ``order``
    an ORDER BY of the result's columns (1 key, 2 host, 3 gpu, 4 start)."""
    sql = (f"SELECT {_KEY_SQL[by]}, host, gpu, max(first_seen, ?1) AS s, min(last_seen, ?2) AS e, "
           "(min(last_seen, ?2) - max(first_seen, ?1)) / (last_seen - first_seen), busy_s, idle_s, mem_byte_s "
           "FROM holds WHERE first_seen <= ?2 AND last_seen >= ?1 AND last_seen > first_seen "
           "AND min(last_seen, ?2) > max(first_seen, ?1)" + (f" ORDER BY {order}" if order else ""))
    for key, host, gpu, s, e, share, busy, idle, mem in conn.execute(sql, (since, until)):
        yield (key, (host, gpu), s, e, busy * share, idle * share, mem * share)


def summarise(items: Iterable[Span]) -> tuple[list[Usage], Usage]:
    """Per key and in total: GPU-hours held (the union of the key's time on each GPU, so two processes
    of one user on one GPU hold it once), busy and idle hours scaled to that union, memory GiB-hours
    (summed: both processes hold memory) and the most GPUs held at once. Sorted by GPU-hours held.
    The totals line adds the keys' figures up; its peak is the most GPUs anyone held at once."""
    spans_ = list(items)
    rows = _per_key(sorted(spans_, key=lambda s: (s[0], s[1], s[2])))
    total_peak = _peak(_merged(sorted(((s[1], s[2], s[3]) for s in spans_), key=lambda g: (g[0], g[1]))))
    return _with_total(rows, total_peak)


def _with_total(rows: list[Usage], peak: int) -> tuple[list[Usage], Usage]:
    rows.sort(key=lambda u: (-u.gpu_hours_held, u.key))
    total = Usage("total", sum(u.gpu_hours_held for u in rows), sum(u.busy_gpu_hours for u in rows),
                  sum(u.memory_gib_hours for u in rows), sum(u.idle_hold_hours for u in rows), peak)
    return rows, total


def _per_key(ordered: Iterable[Span]) -> list[Usage]:
    """One pass over spans sorted by (key, GPU, start): each key's union per GPU and its figures."""
    rows: list[Usage] = []
    key: str | None = None
    gpu: tuple[str, int] | None = None
    held = busy = idle = mem = 0.0
    segments: list[tuple[float, float]] = []
    # the GPU group in progress: its merged segments, raw seconds, busy and idle seconds
    merged: list[tuple[float, float]] = []
    raw = g_busy = g_idle = 0.0

    def close_gpu() -> None:
        nonlocal held, busy, idle, raw, g_busy, g_idle, merged
        union = sum(e - b for b, e in merged)
        scale = union / raw if raw > 0 else 0.0
        held += union
        busy += scale * g_busy
        idle += scale * g_idle
        segments.extend(merged)
        merged, raw, g_busy, g_idle = [], 0.0, 0.0, 0.0

    def close_key() -> None:
        nonlocal held, busy, idle, mem, segments
        if key is not None:
            close_gpu()
            rows.append(Usage(key, held / 3600, busy / 3600, mem / 1024**3 / 3600, idle / 3600, _peak(segments)))
        held = busy = idle = mem = 0.0
        segments = []

    for k, g, start, end, b, i, m in ordered:
        if k != key:
            close_key()
            key, gpu = k, g
        elif g != gpu:
            close_gpu()
            gpu = g
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
        raw += end - start
        g_busy += b
        g_idle += i
        mem += m
    close_key()
    return rows


def _merged(ordered: Iterable[tuple[tuple[str, int], float, float]]) -> list[tuple[float, float]]:
    """The union per GPU of (GPU, start, end) sorted by GPU and start: each GPU's held segments."""
    out: list[tuple[float, float]] = []
    gpu = None
    first = len(out)
    for g, start, end in ordered:
        if g != gpu:
            gpu, first = g, len(out)
        if len(out) > first and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _peak(segments: list[tuple[float, float]]) -> int:
    """The most segments (each a GPU held) open at one moment; one ending as another starts is not overlap."""
    events = sorted([(b, 1) for b, _ in segments] + [(e, -1) for _, e in segments])
    peak = now = 0
    for _, step in events:
        now += step
        if now > peak:
            peak = now
    return peak


def usage(conn: sqlite3.Connection, since: float, until: float, by: str) -> tuple[list[Usage], Usage]:
    """:func:`summarise` of the database's holds, SQLite sorting them for the two passes."""
    rows = _per_key(db_spans(conn, since, until, by, order="1, 2, 3, 4"))
    peak = _peak(_merged(((host, gpu), s, e) for host, gpu, s, e in conn.execute(
        "SELECT host, gpu, max(first_seen, ?1) AS s, min(last_seen, ?2) AS e FROM holds "
        "WHERE first_seen <= ?2 AND last_seen >= ?1 AND last_seen > first_seen "
        "AND min(last_seen, ?2) > max(first_seen, ?1) ORDER BY host, gpu, s", (since, until))))
    return _with_total(rows, peak)
