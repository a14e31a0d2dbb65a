"""A real ``gputui record`` process over the fake NVIDIA driver while the scenario changes under it:
user A's process on GPU 0, then user B's; a container's process on GPU 1 (a real process in a
docker cgroup); an orphan holding memory. ``gputui who`` and ``gputui usage`` (real subprocesses)
must name the exact holders, and GPU-hours must match the wall time within the polling interval."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakenvml.scenario import GiB, gpu, process, scenario

INTERVAL = 0.5
#: how late a poll may start on a loaded machine, on top of the interval
LOAD = 0.5
USERS = ("gthsa", "gthsb")
CONTAINER_ID = "a1" * 32


#: real recorders, real users, subprocesses: every test here drives real parts
pytestmark = pytest.mark.functional


@pytest.fixture
def users():
    require(os.geteuid() == 0, "creating test users needs root")
    made = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                           check=True, capture_output=True)
            made.append(name)
    yield USERS
    for name in made:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def spawned():
    started: list = []
    yield started
    for item in started:
        if isinstance(item, subprocess.Popen):
            if item.poll() is None:
                item.kill()
            item.wait(timeout=10)
        else:
            try:
                os.kill(item, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cgroup_base() -> Path | None:
    """A cgroup hierarchy this test may create a group in: cgroup v1's pids, else the v2 root."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
            return base
    return None


@pytest.fixture
def docker_cgroup():
    """A cgroup named as Docker's cgroupfs driver names a container's (``/docker/<id>``)."""
    base = _cgroup_base()
    require(base is not None, "a writable cgroup hierarchy is needed to put a process in a container's cgroup")
    assert base is not None
    path = base / "docker" / CONTAINER_ID
    made_parent = not path.parent.exists()
    path.mkdir(parents=True, exist_ok=True)
    yield path
    for _ in range(50):  # empty once the test's process is killed
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.1)
    if made_parent:
        try:
            path.parent.rmdir()
        except OSError:
            pass


def _sleep_as(user: str) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"], user=user, stdin=subprocess.DEVNULL)


def _orphan() -> int:
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; p = subprocess.Popen(['sleep', '600']); print(p.pid, flush=True)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    parent.wait(timeout=10)
    parent.stdout.close()
    return worker


def _wait_for(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _heartbeat(db: Path) -> str | None:
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'heartbeat'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if row is None else row[0]


def _holders(fake, db, *args):
    res = fake.run_gputui("who", "--db", str(db), "--since", "1h", "--json", *args)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)["holders"]


def test_recorder_on_changing_scenario(fake_nvml, tmp_path, users, spawned, docker_cgroup):
    a_user, b_user = users
    a, b = _sleep_as(a_user), _sleep_as(b_user)
    box = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    spawned += [a, b, box]
    (docker_cgroup / "cgroup.procs").write_text(str(box.pid))
    orphan = _orphan()
    spawned.append(orphan)

    def phase(gpu0, gpu1, util0):
        fake_nvml.write(scenario([gpu(0, processes=gpu0, utilization_gpu=util0),
                                  gpu(1, processes=gpu1, utilization_gpu=0)]))

    phase([], [], 0)
    db = tmp_path / "history.db"
    env = fake_nvml.env({**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "run")})
    env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    rec = subprocess.Popen([sys.executable, "-m", "gputui", "record", "--no-docker", "--db", str(db),
                            "--interval", str(INTERVAL)], env=env, stderr=subprocess.PIPE, text=True)
    spawned.append(rec)
    try:
        assert _wait_for(lambda: _heartbeat(db) is not None, timeout=60)
        phase([process(a.pid, used_memory=4 * GiB, sm=70)], [process(box.pid, used_memory=2 * GiB, sm=0)], 80)
        t_a = time.time()
        assert _wait_for(lambda: any(h["pid"] == a.pid for h in _holders(fake_nvml, db)))
        time.sleep(4)
        phase([process(b.pid, used_memory=6 * GiB, sm=10)],
              [process(box.pid, used_memory=2 * GiB, sm=0), process(orphan, used_memory=1 * GiB, sm=0)], 0)
        t_switch = time.time()
        assert _wait_for(lambda: any(h["pid"] == b.pid for h in _holders(fake_nvml, db)))
        time.sleep(4)
        t_end = time.time()
        running = _holders(fake_nvml, db)
    finally:
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert f"writing {db} every {INTERVAL:g} s" in err

    # while it recorded: B, the container and the orphan were "still running", A was not
    assert {h["pid"]: h["running"] for h in running} == {a.pid: False, box.pid: True, b.pid: True, orphan: True}

    holders = _holders(fake_nvml, db, "--gpu", "0")
    assert [(h["user"], h["pid"], h["exe"], h["gpu"]) for h in holders] == [
        (a_user, a.pid, "sleep", 0), (b_user, b.pid, "sleep", 0)]
    assert holders[0]["peak_memory"] == 4 * GiB and holders[0]["mean_sm"] == 70
    assert holders[1]["peak_memory"] == 6 * GiB

    on1 = {h["pid"]: h for h in _holders(fake_nvml, db, "--gpu", "1")}
    assert on1[box.pid]["container_id"] == CONTAINER_ID and on1[box.pid]["runtime"] == "docker"
    assert on1[orphan]["stale"] == "orphan" and on1[orphan]["user"] == pwd.getpwuid(os.geteuid()).pw_name

    # --at a moment of A's time names A alone on GPU 0; the human table says so too
    mid = f"{(t_a + t_switch) / 2:.3f}"
    res = fake_nvml.run_gputui("who", "--db", str(db), "--gpu", "0", "--at", mid)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["GPU", "USER", "CONTAINER/JOB", "EXE", "PID"]
    assert [ln.split()[1] for ln in lines[1:]] == [a_user]

    res = fake_nvml.run_gputui("usage", "--db", str(db), "--since", "1h", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["key"]: r for r in json.loads(res.stdout)["rows"]}
    held_a = rows[a_user]["gpu_hours_held"] * 3600
    held_b = rows[b_user]["gpu_hours_held"] * 3600
    # A was listed from before t_a until t_switch; B from t_switch until t_end (each end within an interval)
    # (LOAD: a poll on a loaded machine may start a little late; never more than that)
    assert t_switch - t_a - 2 * INTERVAL - LOAD <= held_a <= t_switch - t_a + INTERVAL
    assert t_end - t_switch - 2 * INTERVAL - LOAD <= held_b <= t_end - t_switch + INTERVAL
    assert rows[a_user]["busy_gpu_hours"] == pytest.approx(rows[a_user]["gpu_hours_held"] * 0.8, rel=0.05)
    assert rows[b_user]["idle_hold_hours"] == pytest.approx(rows[b_user]["gpu_hours_held"], rel=0.01)
    assert rows[a_user]["peak_gpus"] == 1
    res = fake_nvml.run_gputui("usage", "--db", str(db), "--since", "1h", "--by", "container", "--csv")
    assert res.returncode == 0, res.stderr
    keyed = {line.split(",")[0]: line for line in res.stdout.splitlines()}
    assert CONTAINER_ID[:12] in keyed and "(host)" in keyed and "total" in keyed


def test_recorder_that_cannot_write_keeps_polling_and_doctor_says_why(fake_nvml, tmp_path, spawned):
    db = tmp_path / "history.db"
    content = b"not a database, and not gputui's to overwrite\n" * 64
    db.write_bytes(content)
    run_dir = tmp_path / "run"
    env = fake_nvml.env({**os.environ, "XDG_RUNTIME_DIR": str(run_dir)})
    env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    rec = subprocess.Popen([sys.executable, "-m", "gputui", "record", "--no-docker", "--db", str(db),
                            "--interval", str(INTERVAL)], env=env, stderr=subprocess.PIPE, text=True)
    spawned.append(rec)
    sentence = f"{db} is not an SQLite database; gputui leaves it as it is (give another --db)."
    try:
        assert _wait_for(lambda: (run_dir / "gputui" / "recorder.json").exists(), timeout=60)
        res = fake_nvml.run_gputui("doctor", "--json", "--no-docker", env_extra={"XDG_RUNTIME_DIR": str(run_dir)})
        doc = json.loads(res.stdout)
        check = {c["name"]: c for c in doc["checks"]}["history"]
        assert check["status"] == "warn"
        assert check["message"] == f"'gputui record' (PID {rec.pid}) is not writing the history: {sentence}"
        assert rec.poll() is None  # still polling
    finally:
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=30)
    assert rec.returncode == 0
    assert err.count(f"gputui record: not writing history: {sentence}") == 1, err
    assert db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("history")) == ["history.db"]


def test_a_users_database_is_created_0600(request, users):
    from tests.fixtures.unprivileged import readable_pythonpath

    user = users[0]
    # pytest's own folders are root's alone: the user's home is a folder of /tmp it can enter
    shared = Path(tempfile.mkdtemp(prefix="gputui-history-user-"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o755)
    home = shared / "home"
    home.mkdir()
    entry = pwd.getpwnam(user)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_STATE_HOME": str(home / "state"), "PYTHONPATH": readable_pythonpath()}
    code = ("from gputui.core.recorder import Recorder\n"
            "from gputui.core.sources.history_store import default_db_path\n"
            "r = Recorder(default_db_path(), 10.0)\n"
            "assert r.open(), r.problem\n"
            "r.close()\n"
            "print(default_db_path())\n")
    res = None
    for python in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not python:
            continue
        try:  # the venv's interpreter may live where the user cannot go (pyenv under /root)
            res = subprocess.run([python, "-c", code], user=user, env=env, capture_output=True, text=True,
                                 timeout=60, cwd=str(home))
        except OSError:
            continue
        if res.returncode == 0 or ("ModuleNotFoundError" not in res.stderr and "Permission" not in res.stderr):
            break
    require(res is not None and res.returncode == 0 or (res is not None and "Permission" not in res.stderr
                                                        and "ModuleNotFoundError" not in res.stderr),
            "no Python with gputui's dependencies is usable by an unprivileged user")
    assert res is not None and res.returncode == 0, res.stderr if res else ""
    db = Path(res.stdout.strip())
    assert db == home / "state" / "gputui" / "history.db"
    assert oct(db.stat().st_mode & 0o777) == "0o600" and db.stat().st_uid == entry.pw_uid
    assert oct(db.parent.stat().st_mode & 0o777) == "0o700"


def _as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` as nobody:nogroup with an interpreter and a gputui it can read."""
    from tests.fixtures.unprivileged import readable_pythonpath

    require(os.geteuid() == 0, "switching users needs root")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": readable_pythonpath(), "HOME": "/nonexistent"}
    res = None
    for python in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not python:
            continue
        try:
            res = subprocess.run([python, "-c", code], user="nobody", group="nogroup", extra_groups=[], env=env,
                                 capture_output=True, text=True, timeout=60, cwd="/")
        except OSError:
            continue
        if "ModuleNotFoundError" not in res.stderr and "Permission denied: '/root" not in res.stderr:
            return res
    require(False, "no Python with gputui's dependencies is usable by an unprivileged user")
    raise AssertionError("unreachable")


def test_operators_of_the_databases_group_read_it_while_it_is_written_and_after(request):
    from gputui.core.recorder import Recorder
    from tests.fixtures.synthetic import T0, gpu, proc, snapshot

    shared = Path(tempfile.mkdtemp(prefix="gputui-history-group-"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o755)  # the operators may not write in the folder: no -shm of their own
    db = shared / "history.db"
    code = ("import json, sys\nfrom gputui.cli import main\n"
            f"sys.exit(main(['who', '--db', {str(db)!r}, '--since', '0', '--until', '{T0 + 1000:.0f}', '--json']))")
    r = Recorder(str(db), 10.0)
    assert r.open(), r.problem
    for i in range(3):
        r.record(snapshot(T0 + 10 * i, [gpu(0, procs=[proc(1, 0)])]))
    for f in shared.iterdir():
        os.chown(f, 0, _nogroup())  # the operators' group
    res = _as_nobody(code)  # while the recorder has the database open (its -wal and -shm are there)
    assert res.returncode == 0, res.stderr
    assert [h["pid"] for h in json.loads(res.stdout)["holders"]] == [1]
    r.close()
    res = _as_nobody(code)  # after it stopped: no -wal, and nobody may create a -shm
    assert res.returncode == 0, res.stderr
    assert [h["pid"] for h in json.loads(res.stdout)["holders"]] == [1]
    assert sorted(p.name for p in shared.iterdir()) == ["history.db"]


def _nogroup() -> int:
    import grp

    return grp.getgrnam("nogroup").gr_gid
