"""The history database on real SQLite files: what the recorder writes from judged snapshots, what
``who``/``usage`` read back, and the faults (locked, not SQLite, newer schema, full disk, clock
stepped back) — each one sentence, the recorder counting on, no file written over."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from gputui.core.model import Finding
from gputui.core.record import replace
from gputui.core.recorder import Recorder
from gputui.core.sources.history_store import (
    HistoryError,
    gpu_minutes,
    holdings,
    open_reader,
    spans,
    summarise,
    usage,
)
from gputui.core.timespec import parse_time
from tests.fixtures.synthetic import T0, gpu, proc, snapshot

GIB = 1024**3


def _p(pid, g, user, mem=1.0, sm=0, container=None, create=None, command=None, stale=()):
    p = proc(pid, g, mem_gib=mem, sm=sm, container=container, create_time=create, stale=stale)
    return replace(p, user=user, command=command or p.command)


def _snap(t, procs, util=None):
    util = util or {}
    by_gpu = {}
    for p in procs:
        by_gpu.setdefault(p.gpu_index, []).append(p)
    return snapshot(t, [gpu(i, util=util.get(i, 0), procs=by_gpu.get(i, [])) for i in range(2)])


def _record(db, polls, interval=10.0, log=None):
    r = Recorder(str(db), interval, log=(log.append if log is not None else lambda line: None))
    assert r.open(), r.problem
    for t, procs, util in polls:
        r.record(_snap(t, procs, util))
    return r


def test_holds_are_intervals_with_who_and_figures(tmp_path):
    db = tmp_path / "h.db"
    a = _p(100, 0, "alice", mem=2.0, sm=40)
    b = _p(200, 0, "bob", mem=4.0, sm=80, container="train")
    polls = [(T0 + 10 * i, [a], {0: 50}) for i in range(31)]          # alice: 300 s at 50 %
    polls += [(T0 + 10 * i, [b], {0: 0}) for i in range(31, 62)]      # then bob: 300 s idle
    r = _record(db, polls)
    r.close()
    conn = open_reader(str(db))
    rows = holdings(conn, 0, 2e10)
    assert conn.execute("SELECT count(*) FROM holds").fetchone()[0] == 2  # intervals, not 62 samples
    assert [(h.user, h.pid, h.gpu, h.first_seen - T0, h.last_seen - T0) for h in rows] == [
        ("alice", 100, 0, 0.0, 300.0), ("bob", 200, 0, 310.0, 610.0)]
    assert rows[1].container_name == "train" and rows[1].runtime == "docker" and rows[1].exe == "python"
    assert rows[0].mem_peak == 2 * GIB and rows[0].sm_mean == 40.0
    assert not rows[1].running  # the recorder stopped
    by_user, total = usage(conn, 0, 2e10, "user")
    got = {u.key: (round(u.gpu_hours_held * 3600), round(u.busy_gpu_hours * 3600), round(u.idle_hold_hours * 3600),
                   round(u.memory_gib_hours * 3600), u.peak_gpus) for u in by_user}
    assert got == {"alice": (300, 150, 0, 600, 1), "bob": (300, 0, 300, 1200, 1)}
    assert round(total.gpu_hours_held * 3600) == 600
    # --at a moment in alice's time names only her; a period clipped halfway counts half
    assert [h.user for h in holdings(conn, T0 + 100, T0 + 100, [0])] == ["alice"]
    half, _ = usage(conn, T0 + 150, T0 + 460, "user")
    assert {u.key: round(u.gpu_hours_held * 3600) for u in half} == {"alice": 150, "bob": 150}


def test_usage_counts_a_gpu_once_per_key_and_the_most_gpus_at_once(tmp_path):
    db = tmp_path / "h.db"
    procs = [_p(1, 0, "alice"), _p(2, 0, "alice"), _p(3, 1, "alice")]
    r = _record(db, [(T0 + 10 * i, procs, {}) for i in range(7)])
    r.close()
    rows, total = usage(open_reader(str(db)), 0, 2e10, "user")
    assert [(u.key, round(u.gpu_hours_held * 3600), u.peak_gpus) for u in rows] == [("alice", 120, 2)]
    assert round(rows[0].memory_gib_hours * 3600) == 180  # memory is summed: three processes hold it
    by_gpu, _ = usage(open_reader(str(db)), 0, 2e10, "gpu")
    assert [(u.key, round(u.gpu_hours_held * 3600)) for u in by_gpu] == [("0", 60), ("1", 60)]


def test_a_process_that_leaves_and_a_new_one_with_the_same_pid_are_two_rows(tmp_path):
    db = tmp_path / "h.db"
    first, again = _p(7, 0, "alice", create=T0 - 50), _p(7, 0, "bob", create=T0 + 100)
    polls = [(T0 + 10 * i, [first], {}) for i in range(5)] + [(T0 + 10 * i, [again], {}) for i in range(12, 15)]
    _record(db, polls).close()
    assert [(h.user, h.start_time) for h in holdings(open_reader(str(db)), 0, 2e10)] == [
        ("alice", T0 - 50), ("bob", T0 + 100)]


def test_clock_stepped_back_never_makes_a_negative_interval(tmp_path):
    db = tmp_path / "h.db"
    a = _p(1, 0, "alice")
    times = [T0, T0 + 10, T0 + 20, T0 - 3600, T0 - 3590, T0 + 30, T0 + 40]
    _record(db, [(t, [a], {0: 100}) for t in times]).close()
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT first_seen, last_seen, busy_s FROM holds").fetchall()
    assert rows == [(T0, T0 + 40, 40.0)]  # time stood still while the clock was behind
    assert conn.execute("SELECT count(*) FROM holds WHERE last_seen < first_seen").fetchone()[0] == 0


def test_clock_stepped_back_across_a_restart_never_makes_a_negative_interval(tmp_path):
    import time

    db = tmp_path / "h.db"
    now = float(int(time.time()))
    _record(db, [(now, [_p(1, 0, "alice")], {}), (now + 10, [_p(1, 0, "alice")], {})]).close()
    # restarted with the clock an hour behind: its time stands still at the last recorded instant
    _record(db, [(now - 3600, [_p(2, 0, "bob")], {}), (now - 3590, [_p(2, 0, "bob")], {})]).close()
    rows = holdings(open_reader(str(db)), 0, 2e10)
    assert [(h.user, h.first_seen - now, h.last_seen - now) for h in rows] == [("alice", 0, 10), ("bob", 10, 10)]


def test_a_gap_in_polling_ends_the_hold(tmp_path):
    db = tmp_path / "h.db"
    a = _p(1, 0, "alice")
    _record(db, [(T0, [a], {}), (T0 + 10, [a], {}), (T0 + 4000, [a], {}), (T0 + 4010, [a], {})]).close()
    rows = holdings(open_reader(str(db)), 0, 2e10)
    assert [(h.first_seen - T0, h.last_seen - T0) for h in rows] == [(0, 10), (4000, 4010)]


def test_no_command_line_or_environment_enters_the_database(tmp_path):
    db = tmp_path / "h.db"
    secret = "--token=hunter2-SECRET AWS_SECRET_ACCESS_KEY=abc"
    a = _p(1, 0, "alice", command=f"/opt/venv/bin/python3 train.py {secret}")
    r = _record(db, [(T0 + 10 * i, [a], {}) for i in range(3)])
    r.close()
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("h.db"))
    assert b"hunter2" not in data and b"train.py" not in data and b"AWS_SECRET" not in data
    assert holdings(open_reader(str(db)), 0, 2e10)[0].exe == "python3"


def test_stale_kinds_are_kept_on_the_hold(tmp_path):
    db = tmp_path / "h.db"
    a = _p(1, 0, "carol")
    orphan = replace(a, stale=(Finding("orphan", "its parent exited"),))
    _record(db, [(T0, [a], {}), (T0 + 10, [orphan], {}), (T0 + 20, [a], {})]).close()
    assert holdings(open_reader(str(db)), 0, 2e10)[0].stale == "orphan"


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode is checked as root")
def test_database_is_created_0640_as_root(tmp_path):
    db = tmp_path / "new" / "h.db"
    old = os.umask(0)
    try:
        _record(db, [(T0, [], {})]).close()
    finally:
        os.umask(old)
    assert oct(db.stat().st_mode & 0o777) == "0o640"


# -- faults, on real files -------------------------------------------------------------


def test_not_sqlite_is_one_sentence_and_left_untouched(tmp_path):
    db = tmp_path / "h.db"
    content = b"my thesis, not a database\n" * 100
    db.write_bytes(content)
    log: list[str] = []
    r = Recorder(str(db), 10.0, log=log.append)
    assert not r.open()
    r.record(_snap(T0, [_p(1, 0, "alice")]))  # keeps counting, writes nothing
    r.close()
    assert r.problem == f"{db} is not an SQLite database; gputui leaves it as it is (give another --db)."
    assert log == [f"not writing history: {r.problem}"]
    assert db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]
    with pytest.raises(HistoryError, match="is not an SQLite database"):
        open_reader(str(db))


def test_newer_schema_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "h.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    r = Recorder(str(db), 10.0)
    assert not r.open()
    assert r.problem is not None and "schema version 7, newer than this gputui reads (1)" in r.problem
    r.record(_snap(T0, [_p(1, 0, "alice")]))
    r.close()
    assert db.read_bytes() == before
    with pytest.raises(HistoryError, match="newer than this gputui"):
        open_reader(str(db))


def test_an_older_database_is_migrated_forward(tmp_path):
    db = tmp_path / "h.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x)")  # an SQLite file at version 0 (from before the schema)
    conn.execute("INSERT INTO notes VALUES (1)")
    conn.commit()
    conn.close()
    _record(db, [(T0, [_p(1, 0, "alice")], {}), (T0 + 10, [_p(1, 0, "alice")], {})]).close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT x FROM notes").fetchall() == [(1,)]
    assert len(holdings(open_reader(str(db)), 0, 2e10)) == 1


def test_a_second_recorder_is_refused_while_the_first_writes(tmp_path):
    db = tmp_path / "h.db"
    first = _record(db, [(T0, [_p(1, 0, "alice")], {})])
    log: list[str] = []
    second = Recorder(str(db), 10.0, log=log.append)
    assert not second.open()
    assert second.problem == (f"Another 'gputui record' is writing {db}; this one keeps polling and writes "
                              "nothing.")
    second.record(_snap(T0 + 10, [_p(9, 1, "mallory")]))
    first.record(_snap(T0 + 10, [_p(1, 0, "alice")]))
    second.close()
    first.close()
    rows = holdings(open_reader(str(db)), 0, 2e10)
    assert [(h.user, h.last_seen - T0) for h in rows] == [("alice", 10.0)]


def test_a_reader_never_blocks_the_writer(tmp_path):
    db = tmp_path / "h.db"
    r = _record(db, [(T0, [_p(1, 0, "alice")], {})])
    reader = open_reader(str(db))
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM holds").fetchone()  # a read transaction stays open
    r.record(_snap(T0 + 10, [_p(1, 0, "alice")]))
    assert r.problem is None
    r.close()
    reader.close()


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k,mode=0700", "tmpfs", str(mount)],
                         capture_output=True)
    if res.returncode != 0:
        pytest.skip("a small tmpfs cannot be mounted here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.functional  # a real tmpfs, mounted for the test
def test_full_disk_is_one_sentence_and_the_recorder_catches_up(small_disk):
    db = small_disk / "h.db"
    log: list[str] = []
    r = Recorder(str(db), 10.0, log=log.append)
    assert r.open(), r.problem
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    # many new processes: their rows no longer fit
    t = T0
    for i in range(40):
        t = T0 + 10 * i
        r.record(_snap(t, [_p(1000 + k, k % 2, f"user{k}") for k in range(i * 5, i * 5 + 50)]))
        if r.problem:
            break
    assert r.problem == f"The disk holding {db} is full; gputui keeps polling and writes again when there is room."
    assert log[-1] == f"not writing history: {r.problem}"
    last = [_p(1000 + k, k % 2, f"user{k}") for k in range(3)]
    r.record(_snap(t + 10, last))
    filler.unlink()
    r.record(_snap(t + 20, last))
    assert r.problem is None and log[-1] == f"writing history to {db} again"
    r.close()
    conn = open_reader(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    users = {h.user for h in holdings(conn, 0, 2e10)}
    assert {"user0", "user1", "user2"} <= users


def test_gpus_are_kept_as_minutes_of_min_mean_max(tmp_path):
    db = tmp_path / "h.db"
    start = (T0 // 60 + 1) * 60  # a whole minute: 6 polls, utilization 0, 20 .. 100
    _record(db, [(start + 10 * i, [], {0: 20 * (i % 6)}) for i in range(12)]).close()
    minutes = gpu_minutes(open_reader(str(db)), 0, start, start + 120)
    assert [(m.minute * 60 - start, m.util) for m in minutes] == [(0, (0, 50, 100)), (60, (0, 50, 100))]
    assert minutes[0].temperature == (40, 40, 40)


def test_retention_forgets_what_ended_before_it(tmp_path):
    db = tmp_path / "h.db"
    r = Recorder(str(db), 10.0, retention_days=1)
    assert r.open()
    old, new = _p(1, 0, "alice"), _p(2, 0, "bob")
    for i in range(3):
        r.record(_snap(T0 + 10 * i, [old]))
    for i in range(3):  # two days later: alice's hold and her minutes are past retention
        r.record(_snap(T0 + 2 * 86400 + 10 * i, [new]))
    r.close()
    conn = open_reader(str(db))
    assert [h.user for h in holdings(conn, 0, 2e10)] == ["bob"]
    assert conn.execute("SELECT min(minute) FROM gpu_minutes").fetchone()[0] >= int((T0 + 86400) // 60)


def test_a_folder_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    r = Recorder(str(shared / "h.db"), 10.0)
    assert not r.open()
    assert r.problem == (f"The folder {shared} may be written by other users; give --db a path in a folder of "
                         "your own.")
    assert list(shared.iterdir()) == []


def test_wrapped_driver_counters_are_not_stored(tmp_path):
    db = tmp_path / "h.db"
    a = replace(_p(1, 0, "alice"), gpu_memory=2**64 - 1)
    r = _record(db, [(T0, [a], {}), (T0 + 10, [a], {})])
    assert r.problem is None
    r.close()
    assert holdings(open_reader(str(db)), 0, 2e10)[0].mem_peak is None


def test_time_forms():
    now = 1_800_000_000.0
    assert parse_time("30m", now) == now - 1800
    assert parse_time("8h", now) == now - 8 * 3600
    assert parse_time("7d", now) == now - 7 * 86400
    assert parse_time("1700000000", now) == 1_700_000_000.0
    assert parse_time("2026-12-01T22:00+01:00", now) == 1796158800.0
    os.environ["TZ"] = "UTC"
    try:
        import time

        time.tzset()
        assert parse_time("2026-12-01T22:00", now) == 1796162400.0  # local time unless an offset is given
    finally:
        del os.environ["TZ"]
        time.tzset()
    for bad in ("yesterday", "-5m", "1e400", "9999999999999", "x" * 100):
        with pytest.raises(ValueError):
            parse_time(bad, now)


def test_spans_clip_to_the_period():
    # a direct check of the arithmetic the two backends share
    from gputui.core.sources.history_store import Holding

    h = Holding(host="h", gpu=0, pid=1, start_time=0, user="u", container_id=None, container_name=None, image=None,
                compose_project=None, compose_service=None, runtime=None, job=None, exe=None, first_seen=0.0,
                last_seen=3600.0, running=False, mem_peak=GIB, mem_byte_s=3600.0 * GIB, sm_mean=None, busy_s=1800.0,
                idle_s=0.0)
    rows, total = summarise(spans([h], 1800.0, 7200.0, "user"))
    assert (rows[0].gpu_hours_held, rows[0].busy_gpu_hours, rows[0].memory_gib_hours) == (0.5, 0.25, 0.5)


def test_reader_of_a_missing_database_says_how_to_start(tmp_path):
    with pytest.raises(HistoryError, match="start 'gputui record'"):
        open_reader(str(Path(tmp_path) / "none.db"))
