"""Issue 18: hostile input never hurts the operator.

Every test here uses the real parts: real processes whose argv carries escape
sequences, the real ``gputui`` over the fake NVIDIA driver, a real dockerd
container with a hostile label and environment value, the dashboard in a real
terminal (tmux). Assertions are on the bytes gputui writes, on what the terminal
shows (title kept, cards present), on files outside the state folder, and on the
audit log as the signalled process itself saw it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakenvml.scenario import FakeNvml, GiB, gpu, process, scenario
from tests.test_kill_real import Holders

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
GPUTUI = Path(sys.executable).parent / "gputui"

TITLE = "\x1b]0;PWNED-TITLE\x07"
#: What issue 18 lists: OSC 0 and 2, OSC 52 (clipboard), CSI 2J, a bare ESC, BEL, C1 CSI, RLO, tab, newline.
HOSTILE = (TITLE + "\x1b]2;PWNED-2\x07\x1b[31mRED\x1b[0m\x1b[2J\x1b[HEVIL-CLEAR"
           "\x1b]52;c;UFdORUQ=\x07 \x1b bare \x07 bell \x9b31m c1 \u202eevil tab\there new\nline")
HOSTILE_ESCAPED = "^[]0;PWNED-TITLE^G^[]2;PWNED-2^G^[[31mRED^[[0m^[[2J^[[HEVIL-CLEAR"
LONG = "A" * 10_000

#: Bytes that must never reach a terminal from outside text.
FORBIDDEN = (b"\x1b", b"\x07", b"\x9b", b"\xc2\x9b", b"\xe2\x80\xae", b"\t", b"\r")


def assert_terminal_safe(data: bytes) -> None:
    for bad in FORBIDDEN:
        assert bad not in data, f"{bad!r} reached the terminal"
    assert all(b >= 0x20 or b == 0x0A for b in data), "a control byte reached the terminal"


def run(fake: FakeNvml, *args: str, env_extra: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = fake.env()
    env.setdefault("PYTHONPATH", str(REPO))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "gputui", *args], env=env, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def state_home() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "gputui"


def audit_records() -> list[dict]:
    path = state_home() / "audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


#: A child that, when SIGTERM arrives, writes whether the audit log already held its intent record.
VICTIM = """
import json, os, signal, sys, time
def on_term(*_):
    try:
        with open(os.environ["AUDIT"]) as fh:
            records = [json.loads(x) for x in fh]
    except OSError:
        records = []
    seen = any(r.get("pid") == os.getpid() and r.get("result") == "intent" for r in records)
    with open(os.environ["SEEN"], "w") as fh:
        fh.write("intent-recorded" if seen else "no-record")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.fixture
def hostile_process(tmp_path):
    """A real process whose argv holds every hostile sequence, a raw C1 byte and a 10,000-character argument."""
    seen = tmp_path / "seen"
    env = dict(os.environ, AUDIT=str(state_home() / "audit.jsonl"), SEEN=str(seen))
    # argv[0] is hostile too, so even a command cut to fit a confirmation line starts with it
    argv: list[str | bytes] = [TITLE + "x\x1b[2J", "-c", VICTIM, HOSTILE, b"raw-c1-\x9b-byte", LONG]
    proc = subprocess.Popen(argv, executable=sys.executable, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.seen = seen  # type: ignore[attr-defined]
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_once_writes_a_hostile_command_line_escaped_on_one_line(fake_nvml, hostile_process):
    fake_nvml.write(scenario([gpu(0, processes=[process(hostile_process.pid, 2 * GiB, sm=10)]), gpu(1)]))
    res = run(fake_nvml, "--once", "--no-docker")
    assert res.returncode == 0, res.stderr
    assert_terminal_safe(res.stdout)
    text = res.stdout.decode()
    (row,) = [ln for ln in text.splitlines() if str(hostile_process.pid) in ln]  # one process, one line
    assert HOSTILE_ESCAPED in row and "^Ihere new^Jline" in row and "\\x9b31m c1 \\u202eevil" in row
    assert "raw-c1-\ufffd-byte" in row and LONG in row  # a byte that is not UTF-8 is read as U+FFFD

    # JSON stays as it is: the real command line, escaped by JSON itself
    snap = json.loads(run(fake_nvml, "snapshot", "--json", "--no-docker").stdout)
    (p,) = snap["gpus"][0]["processes"]
    assert HOSTILE in p["command"]


def test_kill_confirmation_is_escaped_and_the_intent_is_recorded_before_the_signal(fake_nvml, hostile_process):
    holders = Holders(fake_nvml)
    holders.add(hostile_process.pid, 0, 2 * GiB, popen=hostile_process)
    res = run(fake_nvml, "kill", str(hostile_process.pid), "--yes", "--no-docker")
    assert res.returncode == 0, res.stdout + res.stderr
    assert_terminal_safe(res.stdout)
    assert_terminal_safe(res.stderr)
    assert f"PID {hostile_process.pid}  root  GPU 0 (2.0 GiB)" in res.stdout.decode()
    shown = f"PID {hostile_process.pid}  root  GPU 0 (2.0 GiB)  ^[]0;PWNED-TITLE^Gx^[[2J -c ^Jimport"
    assert shown in res.stdout.decode()
    # the process saw its intent record on disk when SIGTERM arrived
    assert hostile_process.wait(10) == 0
    assert hostile_process.seen.read_text() == "intent-recorded"
    results = [(r["pid"], r["result"]) for r in audit_records()]
    assert results == [(hostile_process.pid, "intent"), (hostile_process.pid, "ok")]
    assert HOSTILE in audit_records()[0]["command"]  # the record keeps the real text (JSON-escaped)


def test_hostile_gpu_name_and_impossible_values_are_escaped_and_na(fake_nvml, hostile_process):
    fake_nvml.write(scenario([
        gpu(0, name="\x1b]0;GPU-PWNED\x07\x1b[2JEvil GPU", temperature=4294967295, utilization_gpu=250,
            power_draw=4_000_000, memory_total=80 * GiB, memory_used=400 * GiB,
            processes=[process(hostile_process.pid, used_memory=-104857600, sm=10)]),
        gpu(1, temperature=40),
    ]))
    snap = json.loads(run(fake_nvml, "snapshot", "--json", "--no-docker").stdout)
    g0 = snap["gpus"][0]
    assert (g0["temperature"], g0["utilization_gpu"], g0["power_draw"], g0["memory_used"]) == (None,) * 4
    assert g0["processes"][0]["gpu_memory"] is None
    assert not snap["alerts"], snap["alerts"]  # nothing impossible is alerted on
    warning = next(w for w in snap["warnings"] if w.startswith("GPU 0: the driver reported impossible values"))
    assert "temperature (4294967295)" in warning and "GPU utilization (250)" in warning
    assert f"GPU memory of PID {hostile_process.pid} (18446744073604694016 bytes)" in warning

    def ints(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from ints(v)
        elif isinstance(x, list):
            for v in x:
                yield from ints(v)
        elif isinstance(x, int) and not isinstance(x, bool):
            yield x

    assert max(ints(snap)) <= 2**53

    once = run(fake_nvml, "--once", "--no-docker")
    assert once.returncode == 0
    assert_terminal_safe(once.stdout)
    row = next(ln for ln in once.stdout.decode().splitlines() if ln.startswith("  0  "))
    assert "^[]0;GPU-PWN" in row and "N/A" in row and "4294967295" not in row

    doctor = run(fake_nvml, "doctor", "--no-docker")
    assert doctor.returncode in (0, 1), doctor.stderr
    assert_terminal_safe(doctor.stdout)
    assert_terminal_safe(doctor.stderr)


@pytest.mark.tmux
def test_dashboard_in_tmux_keeps_its_title_and_cards(fake_nvml, hostile_process, tmp_path):
    require(shutil.which("tmux") is not None, "tmux is needed for the end-to-end dashboard test")
    require(GPUTUI.exists(), f"the gputui console script is not installed at {GPUTUI}")
    fake_nvml.write(scenario([
        gpu(0, name="\x1b]0;X\x07EvilGPU", processes=[process(hostile_process.pid, 2 * GiB, sm=10)]),
        gpu(1, name="NVIDIA H100 80GB HBM3"),
    ]))
    socket = f"gputui-hostile-{os.getpid()}"
    env = fake_nvml.env()
    keep = {k: env[k] for k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "XDG_CONFIG_HOME",
                                "XDG_STATE_HOME", "HOME", "PATH") if k in env}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
    command = f"env {assignments} TERM=tmux-256color {shlex.quote(str(GPUTUI))} --no-docker --interval 1"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=10).stdout

    try:
        tmux("new-session", "-d", "-s", "dash", "-x", "200", "-y", "50", command)
        tmux("select-pane", "-t", "dash", "-T", "operator-title")
        deadline = time.monotonic() + 30
        screen = ""
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", "dash")
            if str(hostile_process.pid) in screen and "H100 80GB HBM3" in screen and "^[]0;" in screen:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the dashboard never showed the hostile process; the screen was:\n{screen}")
        time.sleep(2.5)  # two more refreshes: the picture stays (a clear or retitle would show by now)
        screen = tmux("capture-pane", "-p", "-t", "dash")
        title = tmux("display-message", "-p", "-t", "dash", "#{pane_title}").strip()
        assert "PWNED" not in title and title == "operator-title"
        assert "H100 80GB HBM3" in screen and "^[]0;X^GEvil" in screen  # both cards, the name escaped
        assert str(hostile_process.pid) in screen and "^[]0;PWNED-TITLE^G" in screen
        tmux("send-keys", "-t", "dash", "q")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
        base = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / socket
        base.unlink(missing_ok=True)


@pytest.mark.docker
def test_container_label_and_env_are_escaped_in_the_plan_and_kept_in_json(docker_cleanup, fake_nvml,
                                                                          isolated_xdg):
    d = docker_cleanup
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    label = "proj\x1b]0;PWNED-TITLE\x07\x1b[2J\x9b\u202e"
    c = d.run("hostile-labels", gpus="device=0",
              command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
              environment={"EVIL": HOSTILE, "CUDA_VISIBLE_DEVICES": "0"},
              labels={"com.docker.compose.project": label, "com.docker.compose.service": "svc\x1b[2J",
                      "note": HOSTILE})
    env_value = "2\x1b]0;PWNED-ENV\x07\x1b[2J"
    e = d.run("hostile-env", gpus="device=2", command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
              environment={"CUDA_VISIBLE_DEVICES": env_value})
    pid = d.client.api.inspect_container(c.id)["State"]["Pid"]
    pid_env = d.client.api.inspect_container(e.id)["State"]["Pid"]
    fake_nvml.write(scenario([gpu(0, processes=[process(pid, 1 * GiB, sm=5)]), gpu(1),
                              gpu(2, processes=[process(pid_env, 1 * GiB, sm=5)]), gpu(3)]))
    env = {"DOCKER_HOST": d.host}

    dry = run(fake_nvml, "migrate", "hostile-labels", "--to", "1", "--dry-run", env_extra=env, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert_terminal_safe(dry.stdout)
    assert_terminal_safe(dry.stderr)
    text = dry.stdout.decode()
    assert "compose project proj^[]0;PWNED-TITLE^G^[[2J\\x9b\\u202e" in text
    assert "Dry run: nothing was changed" in text

    once = run(fake_nvml, "--once", env_extra=env, timeout=120)
    assert once.returncode == 0, once.stderr
    assert_terminal_safe(once.stdout)
    assert "hostile-labels" in once.stdout.decode() and "hostile-env" in once.stdout.decode()

    snap = json.loads(run(fake_nvml, "snapshot", "--json", env_extra=env, timeout=120).stdout)
    by_name = {x["name"]: x for x in snap["containers"]}
    assert by_name["hostile-labels"]["compose_project"] == label  # JSON keeps the real text
    assert by_name["hostile-env"]["cuda_visible_devices"] == env_value

    # a symlinked audit log: the migration does not start, the link's target is unchanged
    outside = isolated_xdg / "outside.txt"
    outside.write_text("precious\n")
    state_home().mkdir(parents=True, exist_ok=True)
    (state_home() / "audit.jsonl").symlink_to(outside)
    before = d.client.api.inspect_container("hostile-labels")["Id"]
    refused = run(fake_nvml, "migrate", "hostile-labels", "--to", "1", "--yes", env_extra=env, timeout=120)
    assert refused.returncode == 1
    assert "symbolic link" in refused.stdout.decode() + refused.stderr.decode()
    assert d.client.api.inspect_container("hostile-labels")["Id"] == before
    assert outside.read_text() == "precious\n"

    # with a real log, the intent is recorded before the first step and the result after
    (state_home() / "audit.jsonl").unlink()
    moved = run(fake_nvml, "migrate", "hostile-labels", "--to", "1", "--yes", "--timeout", "1", env_extra=env,
                timeout=120)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert_terminal_safe(moved.stdout)
    assert [r["result"] for r in audit_records() if r["action"] == "migrate"] == ["intent", "ok"]


# -- state files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log", ["audit.jsonl", "alerts.jsonl"])
def test_a_symlinked_log_is_refused_and_its_target_unchanged(fake_nvml, hostile_process, tmp_path, log):
    outside = tmp_path / "outside" / "passwd"
    outside.parent.mkdir()
    outside.write_text("root:x:0:0::/root:/bin/sh\n")
    before = outside.read_bytes()
    state_home().mkdir(parents=True, mode=0o700)
    (state_home() / log).symlink_to(outside)
    holders = Holders(fake_nvml)
    holders.add(hostile_process.pid, 0, 2 * GiB, popen=hostile_process)
    if log == "audit.jsonl":
        res = run(fake_nvml, "kill", str(hostile_process.pid), "--yes", "--no-docker")
        assert res.returncode == 1
        (line,) = res.stderr.decode().splitlines()
        assert "is a symbolic link, which gputui does not follow" in line and "kills nothing" in line
        assert hostile_process.poll() is None  # nothing was signalled without its record
    else:
        from datetime import datetime, timezone

        from gputui.core.judges.alerts import AlertRecorder
        from gputui.core.model import Alert, Snapshot

        recorder = AlertRecorder()
        alert = Alert(gpu=0, kind="temperature", severity="critical", message="GPU 0 is at 95°C",
                      since=datetime.now(timezone.utc))
        recorder.record(Snapshot(host="h", time=datetime.now(timezone.utc), driver_version=None,
                                 cuda_driver_version=None, gpus=(), alerts=(alert,)))
        assert recorder.error is not None and "symbolic link" in recorder.error
    assert outside.read_bytes() == before


def test_a_state_folder_others_may_write_is_refused(fake_nvml, hostile_process):
    Holders(fake_nvml).add(hostile_process.pid, 0, 2 * GiB, popen=hostile_process)
    state_home().mkdir(parents=True)
    state_home().chmod(0o777)
    res = run(fake_nvml, "kill", str(hostile_process.pid), "--yes", "--no-docker")
    assert res.returncode == 1
    assert "is writable by other users" in res.stderr.decode() and len(res.stderr.splitlines()) == 1
    assert hostile_process.poll() is None
    if os.geteuid() == 0:
        state_home().chmod(0o700)
        os.chown(state_home(), 65534, 65534)
        res = run(fake_nvml, "kill", str(hostile_process.pid), "--yes", "--no-docker")
        assert res.returncode == 1 and "belongs to uid 65534" in res.stderr.decode()
        assert hostile_process.poll() is None


def test_fifos_named_like_journals_or_locks_hang_nothing(fake_nvml, hostile_process):
    from gputui.actions.locks import lock_path

    Holders(fake_nvml).add(hostile_process.pid, 0, 2 * GiB, popen=hostile_process)
    system = Path(os.environ["GPUTUI_JOURNAL_DIR"])
    own = state_home() / "journal"
    for folder in (system, own):
        folder.mkdir(parents=True)
    os.mkfifo(system / "migrate-x.json")
    os.mkfifo(own / "migrate-y.json")
    # a real interrupted journal, whose container locks another user replaced with FIFOs
    (system / "migrate-z.json").write_text(json.dumps({
        "version": 1, "action": "migrate", "created": "2026-01-01T00:00:00+00:00", "step": "stop",
        "summary": "victim: GPU 0 -> GPU 1", "container": {"id": "c0ffee", "name": "victim"}}))
    for key in ("c0ffee", "victim"):
        lock = lock_path("migrate", key)
        lock.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(lock)
    for args in (["--once"], ["pick", "--sample", "0"], ["doctor"], ["migrate", "--recover", "--yes"]):
        res = run(fake_nvml, *args, "--no-docker", timeout=60)  # a hang raises TimeoutExpired
        assert b"Traceback" not in res.stderr, res.stderr
        if args == ["--once"]:
            assert res.returncode == 0
            assert b"An interrupted migrate was found: victim: GPU 0 -> GPU 1" in res.stderr
            assert b"migrate-x" not in res.stderr and b"migrate-y" not in res.stderr  # a FIFO is no journal
    res = run(fake_nvml, "kill", str(hostile_process.pid), "--yes", "--no-docker")
    assert res.returncode == 0, res.stderr
    assert (system / "migrate-x.json").is_fifo() and (own / "migrate-y.json").is_fifo()


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "too-big", "non-utf8", "deep"])
def test_a_config_that_is_not_a_small_regular_text_file_is_one_sentence_and_exit_2(fake_nvml, tmp_path, special):
    path = tmp_path / "config.toml"
    if special == "fifo":
        os.mkfifo(path)
    elif special == "/dev/zero":
        path = Path("/dev/zero")
    elif special == "too-big":
        path.write_text("# padding\n" * 200_000)
    elif special == "non-utf8":
        path.write_bytes(b"theme = \"\xff\xfe\"\n")
    else:
        path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    res = run(fake_nvml, "--config", str(path), "--once", "--no-docker", timeout=60)
    assert res.returncode == 2
    (line,) = res.stderr.decode().splitlines()
    assert line.startswith("gputui: ") and "Traceback" not in line
    assert str(path) in line


# -- numbers -------------------------------------------------------------------------------------------------


def test_kill_timeout_nan_signals_nothing_and_exits_2(fake_nvml, hostile_process):
    Holders(fake_nvml).add(hostile_process.pid, 0, 2 * GiB, popen=hostile_process)
    for bad in ("nan", "inf", "1e308", "-1"):
        res = run(fake_nvml, "kill", "--timeout", bad, "--yes", str(hostile_process.pid), "--no-docker")
        assert res.returncode == 2
        (line,) = res.stderr.decode().splitlines()
        assert "--timeout" in line and "Traceback" not in line
    assert hostile_process.poll() is None
    assert audit_records() == []
    assert not hostile_process.seen.exists()
    os.kill(hostile_process.pid, signal.SIGKILL)
