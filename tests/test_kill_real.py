"""``gputui kill`` against real processes listed by the fake NVIDIA driver, and a real dockerd.

The fake driver lists whatever PIDs the scenario names. A real driver drops a
process's context (and its memory) once the process has exited; here a watcher
thread does that: when a listed process dies, it rewrites the scenario without
it. gputui re-reads NVML after the kill, so "GPU memory freed" is observed the
way a user observes it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from gputui.actions.kill import HostBackend, KillPlan, KillTarget, execute_kill
from gputui.core.machine import Machine
from gputui.core.model import Snapshot
from gputui.core.sources.processes import HostProcessSource
from tests.conftest import require
from tests.fakenvml.scenario import FakeNvml, GiB, gpu, process, scenario
from tests.fixtures.unprivileged import readable_pythonpath

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Holders:
    """The GPU processes the fake driver lists; a process that dies is dropped, as a driver drops its context."""

    def __init__(self, fake: FakeNvml, gpus: int = 2) -> None:
        self.fake = fake
        self.gpus = gpus
        self.held: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._write()

    def _write(self) -> None:
        with self._lock:
            self.fake.write(scenario([
                gpu(i, processes=[process(pid, mem, sm=0) for pid, (g, mem) in self.held.items() if g == i])
                for i in range(self.gpus)
            ]))

    def add(self, pid: int, gpu_index: int = 0, memory: int = 2 * GiB, popen: subprocess.Popen | None = None) -> None:
        self.held[pid] = (gpu_index, memory)
        self._write()

        def watch() -> None:
            if popen is not None:
                popen.wait()
            else:
                while _alive(pid):
                    time.sleep(0.02)
            self.held.pop(pid, None)
            self._write()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        self._threads.append(t)


@pytest.fixture
def children():
    """Start python children that say 'ready' once set up; kill whatever is left afterwards."""
    started: list[subprocess.Popen] = []

    def spawn(code: str = "", *, preexec=None, python: str = sys.executable) -> subprocess.Popen:
        script = f"import signal, sys, time\n{code}\nprint('ready', flush=True)\ntime.sleep(120)\n"
        p = subprocess.Popen([python, "-c", script], stdout=subprocess.PIPE, text=True, preexec_fn=preexec)
        started.append(p)
        assert p.stdout.readline().strip() == "ready"
        return p

    yield spawn
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _audit() -> list[dict]:
    from gputui.actions.audit import audit_path

    path = audit_path()
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_kill_by_term_reports_the_gpu_memory_freed(fake_nvml, children):
    holders = Holders(fake_nvml)
    victim = children()
    holders.add(victim.pid, 0, 2 * GiB, popen=victim)
    res = fake_nvml.run_gputui("kill", str(victim.pid), "--yes", "--no-docker")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"PID {victim.pid}  root  GPU 0 (2.0 GiB)" in res.stdout
    assert "exited after SIGTERM" in res.stdout
    assert "GPU 0: 2.0 GiB freed" in res.stdout
    assert victim.wait(5) == -signal.SIGTERM
    record = _audit()[-1]
    assert (record["action"], record["result"], record["pid"], record["freed"]) == ("kill", "ok", victim.pid, 2 * GiB)


def test_a_process_ignoring_term_is_killed_only_with_escalate(fake_nvml, children):
    holders = Holders(fake_nvml)
    stubborn = children("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    holders.add(stubborn.pid, 1, 3 * GiB, popen=stubborn)

    res = fake_nvml.run_gputui("kill", str(stubborn.pid), "--yes", "--timeout", "0.5", "--no-docker")
    assert res.returncode == 1
    assert f"PID {stubborn.pid} is still running 0.5 s after SIGTERM" in res.stdout
    assert "--escalate" in res.stdout
    assert stubborn.poll() is None
    assert _audit()[-1]["result"] == "failed"

    res = fake_nvml.run_gputui("kill", str(stubborn.pid), "--yes", "--timeout", "0.5", "--escalate", "--no-docker")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "wait up to 0.5 s, then SIGKILL whatever is left" in res.stdout
    assert "ignored SIGTERM for 0.5 s and exited after SIGKILL" in res.stdout
    assert "GPU 1: 3.0 GiB freed" in res.stdout
    assert stubborn.wait(5) == -signal.SIGKILL
    assert _audit()[-1]["signals"] == ["TERM", "KILL"]


def test_refuses_pid_1_and_a_process_without_gpu_memory_unless_forced(fake_nvml, children):
    Holders(fake_nvml)
    bystander = children()
    res = fake_nvml.run_gputui("kill", "1", str(bystander.pid), "--yes", "--no-docker")
    assert res.returncode == 1
    first, second = res.stderr.splitlines()
    assert first == "gputui: PID 1 is the system's init process; gputui never signals it."
    assert second.startswith(f"gputui: PID {bystander.pid} (")
    shown = second[len(f"gputui: PID {bystander.pid} ("):second.index(") holds no GPU memory")]
    # the command line, cut to fit: whatever is shown is the start of the real one
    assert " ".join(bystander.args).startswith(shown.rstrip("…")) and shown.startswith(sys.executable[:20])
    assert second.endswith(") holds no GPU memory on the GPUs shown; gputui only kills GPU processes unless you "
                           "add --force.")
    assert bystander.poll() is None
    assert [r["result"] for r in _audit()] == ["refused", "refused"]

    res = fake_nvml.run_gputui("kill", str(bystander.pid), "--yes", "--force", "--no-docker")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"PID {bystander.pid}  root  no GPU" in res.stdout
    assert bystander.wait(5) == -signal.SIGTERM


def test_refuses_gputui_itself_and_its_parents(fake_nvml):
    Holders(fake_nvml)
    shell = f"exec {sys.executable} -m gputui kill $$ --yes --no-docker"
    env = fake_nvml.env()
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run(["sh", "-c", shell], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "is gputui itself or one of its parents" in res.stderr


def test_a_reused_pid_is_never_signalled(children):
    """A listed (pid, start time) whose PID now belongs to a new process: nothing is sent to the newcomer."""
    require(os.geteuid() == 0 and os.access("/proc/sys/kernel/ns_last_pid", os.W_OK),
            "reusing a PID on purpose needs root (/proc/sys/kernel/ns_last_pid)")
    source = HostProcessSource()
    machine = Machine(gpu=None, processes=source, containers=None)  # type: ignore[arg-type]
    first = children()
    facts = source.facts([first.pid])[first.pid]
    listed = KillTarget(pid=first.pid, create_time=facts.create_time, user="root", uid=0, command=facts.command,
                        gpus=((0, GiB),))
    pid = first.pid
    first.kill()
    first.wait()
    time.sleep(0.05)  # start times have 10 ms resolution: make the newcomer's differ
    newcomer = None
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
            fh.write(str(pid - 1))
        cand = children()
        if cand.pid == pid:
            newcomer = cand
            break
        cand.kill()
        cand.wait()
    require(newcomer is not None, "could not get the same PID again (the system forks too much)")
    before = Snapshot(host="t", time=None, driver_version=None, cuda_driver_version=None, gpus=())  # type: ignore[arg-type]
    report = execute_kill(KillPlan((listed,), (), "KILL", 1.0, False), HostBackend(machine), before)
    assert [o.result for o in report.outcomes] == ["refused"]
    assert "now belongs to a different process" in report.outcomes[0].message
    time.sleep(0.2)
    assert newcomer.poll() is None, "the newcomer that reused the PID was signalled"


@pytest.fixture
def shared_dir():
    """A directory an unprivileged user can read (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="gputui-kill-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_user(uid: int):
    def drop() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def _python_for(uid: int) -> tuple[str, str] | None:
    """An interpreter (and PYTHONPATH) with gputui's dependencies that ``uid`` can run.

    The venv's interpreter may live under a home directory other users cannot enter
    (pyenv in /root); the system python3 of the same version can use the venv's packages.
    """
    path = readable_pythonpath()
    for cand in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not cand:
            continue
        try:
            ok = subprocess.run([cand, "-c", "import gputui.cli, pynvml, psutil"], env={"PYTHONPATH": path},
                                preexec_fn=_as_user(uid), capture_output=True, timeout=30).returncode == 0
        except OSError:
            ok = False
        if ok:
            return cand, path
    return None


def test_another_users_process_is_refused_unless_root(fake_nvml, children, shared_dir):
    require(os.geteuid() == 0, "switching users needs root")
    python = _python_for(1) if _python_for(NOBODY) else None
    require(python is not None, "no Python with gputui's dependencies is usable by an unprivileged user")
    # The fake driver, readable by others.
    lib = shared_dir / "lib"
    lib.mkdir()
    shutil.copy(fake_nvml.lib_path, lib / fake_nvml.lib_path.name)
    (lib / fake_nvml.lib_path.name).chmod(0o755)
    fake = FakeNvml(shared_dir / "nvml")
    (shared_dir / "nvml").chmod(0o755)
    holders = Holders(fake)
    victim = children(preexec=_as_user(NOBODY), python=python[0])
    holders.add(victim.pid, 0, GiB, popen=victim)
    fake.scenario_path.chmod(0o644)
    state = shared_dir / "state"
    state.mkdir()
    state.chmod(0o1777)  # shared like /tmp: sticky, so no user can swap another's state folder
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": python[1], "HOME": str(shared_dir),
           "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(shared_dir / "config"),
           "LD_LIBRARY_PATH": str(lib), "GPUTUI_FAKE_NVML_SCENARIO": str(fake.scenario_path)}
    # uid 1 (daemon) tries to kill nobody's GPU process
    res = subprocess.run([python[0], "-m", "gputui", "kill", str(victim.pid), "--yes", "--no-docker"],
                         env=env, capture_output=True, text=True, timeout=60, preexec_fn=_as_user(1),
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.strip() == (f"gputui: PID {victim.pid} belongs to nobody; only root can kill other users' "
                                  "processes.")
    assert victim.poll() is None
    # root may
    res = fake.run_gputui("kill", str(victim.pid), "--yes", "--no-docker")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"PID {victim.pid}  nobody  GPU 0" in res.stdout
    assert victim.wait(5) == -signal.SIGTERM


# -- containers, through a real dockerd ------------------------------------------------------


@pytest.mark.docker
def test_a_containers_main_process_is_stopped_through_docker(fake_nvml, docker_cleanup):
    d = docker_cleanup
    holders = Holders(fake_nvml)
    c = d.run("gputui-kill-main", restart_policy={"Name": "always"})
    c.reload()
    main_pid = c.attrs["State"]["Pid"]
    holders.add(main_pid, 0, 4 * GiB)
    env = d.env(fake_nvml.env())
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-m", "gputui", "kill", str(main_pid), "--yes", "--timeout", "1"],
                         env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("container gputui-kill-main: this is its main process, so the container is stopped through Docker, "
            "because its restart policy (always) would otherwise bring it back") in res.stdout
    assert f"Container gputui-kill-main stopped through Docker (its main process was PID {main_pid})." in res.stdout
    assert "GPU 0: 4.0 GiB freed" in res.stdout
    c.reload()
    assert c.status == "exited"
    time.sleep(1.0)
    c.reload()
    assert c.status == "exited", "the restart policy brought the container back"
    record = _audit()[-1]
    assert record["container"] == "gputui-kill-main" and record["signals"] == ["docker-stop"]


@pytest.mark.docker
def test_a_process_execd_into_a_container_is_signalled_and_the_container_keeps_running(fake_nvml, docker_cleanup):
    d = docker_cleanup
    holders = Holders(fake_nvml)
    c = d.run("gputui-kill-exec")
    c.exec_run(["sleep", "300"], detach=True)
    deadline = time.monotonic() + 10
    pid = None
    while pid is None and time.monotonic() < deadline:
        rows = c.top(ps_args="-eo pid,args")["Processes"]
        found = [int(r[0]) for r in rows if r[1] == "sleep 300"]
        pid = found[0] if found else None
        time.sleep(0.05)
    assert pid is not None
    holders.add(pid, 1, GiB)
    env = d.env(fake_nvml.env())
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-m", "gputui", "kill", str(pid), "--yes", "--timeout", "2"],
                         env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "in container gputui-kill-exec" in res.stdout
    assert "exited after SIGTERM" in res.stdout
    c.reload()
    assert c.status == "running"
