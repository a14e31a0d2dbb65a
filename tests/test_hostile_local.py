"""Issue 22, replayed as the people it is about: a local user who controls a process's argv, a
config file, a key file; a client that opens 1,000 sockets; a driver that repeats a UUID.

Each test runs the real code path (a real ``gputui`` subprocess on the fake driver, a real
unprivileged user made with ``useradd`` and removed after) and asserts what the operator would
notice: the labels a scrape shows, the exit status, whether ``/metrics`` answers, what ``pick``
prints.
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require
from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import REPO_ROOT, FakeNvml, GiB, gpu, process, scenario
from tests.fixtures.prometheus import free_port

SECRET = "hf_SECRETtoken0123456789"


@pytest.fixture
def local_user() -> Iterator[pwd.struct_passwd]:
    """A fresh unprivileged user (``gttr<n>``), removed afterwards (each test ends the processes it
    started as that user)."""
    require(os.geteuid() == 0 and shutil.which("useradd") is not None, "root and useradd are needed")
    name = f"gttr{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True, timeout=60)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True, timeout=60)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user may enter (the test's tmp_path is root's own, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gputui-trust-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pause_binary(folder: Path) -> Path:
    """A program that waits for a signal whatever its arguments (sleep would reject ``--hf-token``)."""
    require(shutil.which("gcc") is not None, "gcc is needed")
    src, binary = folder / "pause.c", folder / "pauser"
    src.write_text("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n")
    subprocess.run(["gcc", "-O0", "-o", str(binary), str(src)], check=True, capture_output=True, timeout=120)
    binary.chmod(0o755)
    return binary


def _as_user(user: pwd.struct_passwd, argv: list[str], executable: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, executable=executable, user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                            env={"PATH": "/usr/bin:/bin"}, cwd="/", stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _process_labels(text: str) -> dict[str, dict[str, str]]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return {s.labels["pid"]: s.labels for s in families["gputui_process_gpu_memory_bytes"].samples}


# -- Attack 7: the exe label came from the command line ---------------------------------------------


@pytest.mark.functional
def test_exe_is_the_executable_whatever_argv0_says(fake_nvml: FakeNvml, exporters, local_user,  # noqa: F811
                                                   shared_dir: Path):
    """A user's process exec'd with argv[0] ``" "`` and a token as its next word, and one renamed
    ``trainer`` by ``exec -a``: the scrape and the JSON name their executables, never a word of argv."""
    pauser = _pause_binary(shared_dir)
    hostile = _as_user(local_user, [" ", f"--hf-token={SECRET}"], str(pauser))
    renamed = _as_user(local_user, ["trainer", "600"], shutil.which("sleep") or "/bin/sleep")
    try:
        fake_nvml.write(scenario([gpu(0, processes=[process(hostile.pid, used_memory=2 * GiB),
                                                    process(renamed.pid, used_memory=3 * GiB)])]))
        e = start_exporter(exporters, fake_nvml, "--no-docker")
        labels = _process_labels(e.metrics())
        assert {pid: lab["exe"] for pid, lab in labels.items()} == {str(hostile.pid): "pauser",
                                                                    str(renamed.pid): "sleep"}
        assert all(lab["user"] == local_user.pw_name for lab in labels.values())
        assert SECRET not in e.metrics()

        out = subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--json", "--no-docker"],
                             env={**fake_nvml.env(), "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
                             text=True, timeout=120, check=True)
        procs = {p["pid"]: p for g in json.loads(out.stdout)["gpus"] for p in g["processes"]}
        assert procs[hostile.pid]["exe"] == "pauser" and procs[renamed.pid]["exe"] == "sleep"
    finally:
        for p in (hostile, renamed):
            p.kill()
            p.wait(timeout=10)


def test_exe_falls_back_to_comm_when_the_link_cannot_be_read(tmp_path: Path):
    """An unprivileged reader cannot follow another user's /proc/PID/exe: then ``comm`` (which the
    kernel sets from the executable's file name at exec), still never argv."""
    from gputui.core.sources.processes import exe_base_name

    assert exe_base_name(str(tmp_path), b"python3") == "python3"  # no exe link there
    (tmp_path / "exe").symlink_to("/opt/conda/bin/python3.11 (deleted)")
    assert exe_base_name(str(tmp_path), b"python3") == "python3.11"


# -- Attack 5: 1,000 idle connections took the exporter's descriptors ----------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sockets_held(pid: int) -> int:
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return held


@pytest.fixture
def many_files() -> Iterator[None]:
    """This test process may open a few thousand sockets (its limit is put back afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    require(want >= 2100, "a descriptor limit of at least 2100 is needed")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.functional
def test_a_thousand_idle_sockets_neither_starve_metrics_nor_spin(fake_nvml: FakeNvml, exporters,  # noqa: F811
                                                                 many_files):
    """An exporter with the 1,024 descriptors a service gets; a client opens 1,100 connections and
    says nothing (before, the exporter ran out of descriptors, its accept loop spun at half a core and
    /metrics went unanswered). /metrics still answers within a second, the exporter holds no more than its cap of
    connections, and its CPU stays near zero while the sockets sit there."""
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    e = start_exporter(exporters, fake_nvml, "--no-docker", "--interval", "2", nofile=1024)
    idle: list[socket.socket] = []
    try:
        for i in range(1100):  # a little over 1,000: the descriptors the exporter has besides are few
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", e.port))  # in progress: the handshake completes in the kernel
            idle.append(s)
            if i % 2:
                time.sleep(0.01)  # paced as an attacker would, so each is accepted (not lost in the backlog)
        time.sleep(1.0)  # let the exporter settle with its idle clients

        for _ in range(3):
            t0 = time.monotonic()
            with urllib.request.urlopen(e.url, timeout=5) as r:
                assert b"gputui_gpu_info" in r.read()
            assert time.monotonic() - t0 < 1.0
        assert _sockets_held(e.proc.pid) <= 64 + 4  # the cap, the listener and NVML's own

        before, t0 = _cpu_seconds(e.proc.pid), time.monotonic()
        time.sleep(3.0)
        used = (_cpu_seconds(e.proc.pid) - before) / (time.monotonic() - t0)
        assert used < 0.15, f"the exporter used {used:.0%} of a core while clients sat idle"
    finally:
        for s in idle:
            s.close()
    assert e.stop() == 0
    assert "Traceback" not in e.stderr_rest, e.stderr_rest


@pytest.mark.functional
def test_a_client_trickling_its_header_is_dropped_after_the_header_timeout(
        fake_nvml: FakeNvml, exporters):  # noqa: F811
    """Slowloris: a byte of header every quarter second kept a thread (and a descriptor) forever,
    each byte restarting the 30-second read timeout. The header timeout counts from the connect."""
    fake_nvml.write(scenario([gpu(0)]))
    e = start_exporter(exporters, fake_nvml, "--no-docker", "--header-timeout", "1")
    with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 15 and not closed:
            try:
                s.sendall(b"X")
                s.settimeout(0.25)
                closed = s.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
        assert closed, "the exporter kept a client that never finished its header"
        assert time.monotonic() - t0 < 10
    with urllib.request.urlopen(e.url, timeout=10) as r:
        assert r.status == 200


@pytest.mark.functional
def test_a_connection_cap_the_descriptor_limit_cannot_hold_is_refused_at_start():
    res = subprocess.run([sys.executable, "-m", "gputui", "exporter", "--demo", "--max-connections", "4096",
                          "--listen", "127.0.0.1:41201"], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                         capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)))
    assert res.returncode == 2
    assert "--max-connections" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "1024" in res.stderr  # names the limit it cannot fit in


# -- Attack 8: root obeyed a user's config; a FIFO key hung the start; duplicate UUIDs were picked -------


def _as_user_run(user: pwd.struct_passwd, script: str) -> None:
    """Run a shell line as ``user`` (setpriv drops root's ids and groups, as a real login would have)."""
    subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--",
                    "/bin/sh", "-c", script], check=True, capture_output=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "HOME": "/"}, cwd="/")


def _snapshot_as_root(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``gputui snapshot --json --demo`` as root with a user's environment, as ``sudo -E`` leaves it."""
    base = {k: v for k, v in os.environ.items() if k != "SUDO_UID"}
    full = {**base, "PYTHONPATH": str(REPO_ROOT), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / "state-of-root"), **env}
    return subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--json", "--demo", "--no-docker"],
                          env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.functional
def test_root_under_sudo_e_never_obeys_another_users_config(local_user, shared_dir: Path):
    """A user writes ~/.config/gputui/config.toml (``idle_window = 0`` and their own Prometheus);
    root runs gputui with that user's environment. Root obeys it only when that user is the one who
    ran sudo and nobody else can write it; otherwise one sentence and exit 2."""
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")
    home = shared_dir / "home"
    home.mkdir()
    os.chown(home, local_user.pw_uid, local_user.pw_gid)
    config = home / ".config" / "gputui" / "config.toml"
    _as_user_run(local_user, f"umask 022; mkdir -p {config.parent} && printf '%s\\n' "
                             f"'prometheus_url = \"http://127.0.0.1:41299\"' '[stale]' 'idle_window = 0' > {config}")
    assert config.stat().st_uid == local_user.pw_uid

    stranger = _snapshot_as_root(home)  # root, and no sudo: the file is not root's
    assert stranger.returncode == 2, stranger.stdout[:200] + stranger.stderr
    assert len(stranger.stderr.strip().splitlines()) == 1 and str(config) in stranger.stderr
    other = _snapshot_as_root(home, SUDO_UID=str(local_user.pw_uid + 1))  # someone else ran sudo -E
    assert other.returncode == 2, other.stderr
    assert json.loads(_snapshot_as_root(home, SUDO_UID=str(local_user.pw_uid)).stdout)["gpus"]  # their own: read

    _as_user_run(local_user, f"chmod 666 {config}")  # the invoker's own file, but anyone may rewrite it
    writable = _snapshot_as_root(home, SUDO_UID=str(local_user.pw_uid))
    assert writable.returncode == 2, writable.stderr


@pytest.mark.functional
def test_a_fifo_named_as_the_key_fails_fast_and_a_readable_key_is_warned(tmp_path: Path):
    require(shutil.which("openssl") is not None, "openssl is needed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "gputui", "exporter", "--demo", "--listen", f"127.0.0.1:{free_port()}",
            "--certfile", str(cert)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.monotonic()
    try:
        res = subprocess.run([*argv, "--keyfile", str(fifo)], env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the exporter hung opening a FIFO named as its key")
    assert res.returncode == 2 and time.monotonic() - t0 < 30
    assert str(fifo) in res.stderr and len(res.stderr.strip().splitlines()) == 1

    key.chmod(0o644)
    proc = subprocess.Popen([*argv, "--keyfile", str(key)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        first, second = proc.stderr.readline(), proc.stderr.readline()
        assert "warning" in first and str(key) in first and "644" in first  # said before it serves
        assert "serving https://" in second
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def _gputui(fake: FakeNvml, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputui", *args, "--no-docker"],
                          env={**fake.env(), "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.functional
def test_cards_with_a_shared_or_empty_uuid_are_flagged_and_never_picked(fake_nvml: FakeNvml):
    """A driver fault (or a hostile shim) reports one UUID for two cards and none for a third:
    ``pick --format docker`` printed ``device=GPU-dup,GPU-dup``, handing a job a card nobody chose."""
    good = "GPU-00000003-0000-0000-0000-000000000000"
    fake_nvml.write(scenario([gpu(0, uuid="GPU-dup"), gpu(1, uuid="GPU-dup"), gpu(2, uuid=""),
                              gpu(3, uuid=good, memory_used=8 * GiB, utilization_gpu=60)]))
    both = _gputui(fake_nvml, "pick", "--count", "2", "--format", "docker", "--sample", "0")
    assert both.returncode == 1 and both.stdout == ""  # only one card can be named: nothing printed
    one = _gputui(fake_nvml, "pick", "--format", "docker", "--sample", "0")
    assert one.returncode == 0 and one.stdout.strip() == f"--gpus device={good}"  # the busy one, but its own

    snap = json.loads(_gputui(fake_nvml, "snapshot", "--json").stdout)
    assert [g["uuid"] for g in snap["gpus"]] == ["GPU-dup", "GPU-dup", "", good]
    flagged = " ".join(snap["warnings"])
    assert all(f"GPU {i}" in flagged for i in (0, 1, 2)) and "GPU 3 " not in flagged


def test_uuid_rule():
    from gputui.core.model import Gpu
    from gputui.core.plausible import uuid_problems

    def g(i: int, uuid: str, lost: bool = False) -> Gpu:
        return Gpu(index=i, uuid=uuid, name="A100", lost=lost)

    assert uuid_problems([g(0, "GPU-a"), g(1, "GPU-b"), g(2, "", lost=True)]) == {}  # lost, never read: not suspect
    bad = uuid_problems([g(0, "GPU-a"), g(1, "GPU-a"), g(2, ""), g(3, "GPU-x,GPU-y"), g(4, "GPU-" + "f" * 200)])
    assert sorted(bad) == [0, 1, 2, 3, 4]


@pytest.mark.functional
def test_mig_devices_sharing_a_uuid_are_never_picked(fake_nvml: FakeNvml):
    """Two MIG devices of one card report the same UUID: ``pick --mig`` printed it as if it named one."""
    from tests.fakenvml.scenario import mig_device

    fake_nvml.write(scenario([
        gpu(0, mig_mode=True, mig_devices=[mig_device(1, 0, "3g.40gb", uuid="MIG-dup"),
                                           mig_device(2, 0, "3g.40gb", uuid="MIG-dup")]),
        gpu(1, mig_mode=True, mig_devices=[mig_device(1, 0, "3g.40gb", memory_used=30 * GiB)]),
    ]))
    picked = _gputui(fake_nvml, "pick", "--mig", "--format", "uuid", "--sample", "0")
    assert picked.returncode == 0 and picked.stdout.strip().startswith("MIG-") and "dup" not in picked.stdout
    both = _gputui(fake_nvml, "pick", "--mig", "--count", "2", "--format", "docker", "--sample", "0")
    assert both.returncode == 1 and "MIG-dup" not in both.stdout
