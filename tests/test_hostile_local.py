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
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require
from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import REPO_ROOT, FakeNvml, GiB, gpu, process, scenario

SECRET = "hf_SECRETtoken0123456789"


@pytest.fixture
def local_user() -> Iterator[pwd.struct_passwd]:
    """A fresh unprivileged user (``gttr<n>``), removed with its processes afterwards."""
    require(os.geteuid() == 0 and shutil.which("useradd") is not None, "root and useradd are needed")
    name = f"gttr{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True, timeout=60)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False, capture_output=True, timeout=30)
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
