"""Kill on the simulated server (--demo) and the guards that need no real processes.

The demo backend runs the same planning, confirmation, execution, freed-memory
and audit code as the real one; only where signals go differs. Real processes,
the fake NVIDIA driver and a real dockerd are in test_kill_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.actions.audit import audit_path
from gputui.actions.kill import (
    DemoBackend,
    KillPlan,
    KillTarget,
    confirmation_lines,
    describe_target,
    execute_kill,
    plan_kill,
    signal_name,
)
from gputui.core.config import GIB, Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.core.model import ContainerRef, Finding
from gputui.core.record import replace

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo():
    """The frozen demo machine, a snapshot of it and its kill backend."""
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    poller = machine.poller(Settings(), container_wait=2.0)
    snap = poller.poll()
    yield machine, snap, DemoBackend(machine)
    poller.close()
    machine.close()


def _audit() -> list[dict]:
    path = audit_path(demo=True)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _gputui(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "gputui", *args], capture_output=True, text=True, env=env,
                          input=input, stdin=None if input is not None else subprocess.DEVNULL, timeout=60)


def test_signal_names():
    assert signal_name("term") == "TERM"
    assert signal_name("SIGKILL") == "KILL"
    with pytest.raises(ValueError):
        signal_name("HUP")


def test_guards_refuse_init_nonexistent_and_non_gpu(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [1, 0, 99999, 5388], backend)
    reasons = {r.pid: r.reason for r in plan.refusals}
    assert "init" in reasons[1]
    assert "not a process ID" in reasons[0]
    assert "no process with PID 99999" in reasons[99999]
    assert [t.pid for t in plan.targets] == [5388]
    target = plan.targets[0]
    assert target.create_time is not None and target.gpus == ((0, 3 * GIB),)


def test_read_only_refuses_every_kill(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [5388, 6010], backend, read_only=True)
    assert plan.targets == ()
    assert all("read-only" in r.reason for r in plan.refusals)
    assert len(plan.refusals) == 2


def test_other_users_process_refused_unless_root(demo):
    machine, snap, backend = demo
    backend.euid = 1003  # carol
    plan = plan_kill(snap, [6010, 4201], backend)
    assert [t.pid for t in plan.targets] == [6010]
    assert plan.refusals[0].pid == 4201
    assert plan.refusals[0].reason == "PID 4201 belongs to bob; only root can kill other users' processes."
    backend.euid = 0
    assert [t.pid for t in plan_kill(snap, [4201], backend).targets] == [4201]


def test_container_main_process_goes_through_docker_and_says_why(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [4101, 4501], backend)
    by_pid = {t.pid: t for t in plan.targets}
    assert by_pid[4101].container_main and by_pid[4101].restart_policy == "unless-stopped"
    text = "\n".join(confirmation_lines(plan))
    assert "container llama-train: this is its main process, so the container is stopped through Docker, " \
           "because its restart policy (unless-stopped) would otherwise bring it back." in text
    # restart policy "no": still stopped through Docker, with the honest reason
    assert "container jupyter-alice: this is its main process" in text
    assert "rather than crashed" in text


def test_confirmation_shows_every_fact():
    t = KillTarget(pid=4242, create_time=1.0, user="carol", uid=1003, command="python worker.py --rank 3",
                   gpus=((0, 3 * GIB), (2, GIB)),
                   container=ContainerRef(id="a" * 64, name="trainer"),
                   stale=(Finding("orphan", "Its parent died; it was re-parented to init."),))
    text = "\n".join(describe_target(t))
    for part in ("PID 4242", "carol", "GPU 0 (3.0 GiB)", "GPU 2 (1.0 GiB)", "python worker.py --rank 3",
                 "in container trainer", "stale (orphan): Its parent died"):
        assert part in text


def test_execute_on_demo_frees_memory_and_audits(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [5388, 1], backend)
    report = execute_kill(plan, backend, snap)
    assert [o.result for o in report.outcomes] == ["exited"]
    assert [(f.gpu, f.freed) for f in report.freed] == [(0, 3 * GIB)]
    gpu0 = report.freed[0]
    assert gpu0.used_before - gpu0.used_after == 3 * GIB
    assert "GPU 0: 3.0 GiB freed" in "\n".join(report.lines())
    assert not report.ok  # PID 1 was refused
    records = _audit()
    assert [(r["pid"], r["result"]) for r in records] == [(1, "refused"), (5388, "intent"), (5388, "ok")]
    assert records[2]["freed"] == 3 * GIB and records[2]["signals"] == ["TERM"]
    assert records[1]["owner"] == "carol" and records[1]["user"]  # who acted vs whose process
    assert 5388 not in {p.pid for p in machine.demo.procs.values()}


def test_stopping_a_container_frees_all_its_processes(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [4601], backend)
    report = execute_kill(plan, backend, snap)
    assert report.ok, report.lines()
    assert "Container vllm-cache stopped through Docker" in report.lines()[0]
    assert report.freed[0].gpu == 4 and report.freed[0].freed == int(77.5 * GIB)
    assert machine.demo.container_by_name("vllm-cache").state == "exited"


def test_reused_pid_is_refused_at_execution(demo):
    machine, snap, backend = demo
    plan = plan_kill(snap, [6010], backend)
    # The listing saw a process that started 5 s later than the one now at that PID.
    stale_target = plan.targets[0]
    moved = KillPlan((replace(stale_target, create_time=stale_target.create_time + 5),), (), "TERM", 1.0, False)
    report = execute_kill(moved, backend, snap)
    assert report.outcomes[0].result == "refused"
    assert "start time changed" in report.outcomes[0].message
    assert 6010 in machine.demo.procs
    assert _audit()[-1]["result"] == "refused"


# -- the command line, on the demo ---------------------------------------------------------------


@pytest.mark.functional  # a process of its own
def test_cli_demo_kill_with_yes_reports_freed_memory():
    res = _gputui("--demo", "kill", "5388", "--yes")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Kill 1 process with SIGTERM, wait up to 10 s:" in out
    assert "PID 5388  carol  GPU 0 (3.0 GiB)" in out
    assert "exited after SIGTERM" in out
    assert "GPU 0: 3.0 GiB freed" in out
    assert _audit()[-1]["result"] == "ok"


@pytest.mark.functional  # a process of its own
def test_cli_without_yes_and_without_a_terminal_is_refused():
    res = _gputui("--demo", "kill", "5388")
    assert res.returncode == 2
    assert res.stderr.strip() == ("gputui: Refusing to kill without confirmation: stdin is not a terminal; "
                                  "add --yes.")
    assert "Traceback" not in res.stderr
    assert not any(r["result"] == "ok" for r in _audit())


@pytest.mark.functional  # a process of its own
def test_cli_read_only_refuses_and_records_it():
    res = _gputui("--demo", "--read-only", "kill", "5388", "--yes")
    assert res.returncode == 1
    assert "Kills are disabled: gputui runs read-only" in res.stderr
    assert [r["result"] for r in _audit()] == ["refused"]


@pytest.mark.functional  # a process of its own
def test_cli_only_refusals_exit_1_with_one_sentence_each():
    res = _gputui("--demo", "kill", "1", "--yes")
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == ["gputui: PID 1 is the system's init process; gputui never signals it."]


@pytest.mark.functional
def test_cli_a_pid_that_names_no_process_is_usage_and_nothing_is_killed():
    """Issue 13: "not found" is exit 2 everywhere (like 'migrate nosuch' and '--gpu 9'), and a list with a
    wrong PID acts on none of them."""
    res = _gputui("--demo", "kill", "1", "424242", "--yes")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["gputui: PID 1 is the system's init process; gputui never signals it.",
                                               "gputui: There is no process with PID 424242 here."]
    res = _gputui("--demo", "kill", "5388", "99999", "--yes")
    assert res.returncode == 2
    assert "There is no process with PID 99999 here." in res.stderr and "Nothing was killed." in res.stderr
    assert "exited after" not in res.stdout
    assert not any(r["result"] == "ok" for r in _audit())


@pytest.mark.functional  # a process of its own
def test_cli_bad_signal_is_usage():
    res = _gputui("--demo", "kill", "5388", "--signal", "HUP", "--yes")
    assert res.returncode == 2
    assert "--signal must be TERM, INT or KILL" in res.stderr


@pytest.mark.functional  # a process of its own
@pytest.mark.parametrize("answer, code, said", [("y", 0, "exited after SIGTERM"), ("n", 1, "Nothing was killed.")])
def test_cli_asks_on_a_terminal(answer, code, said):
    import pty

    master, slave = pty.openpty()
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen([sys.executable, "-m", "gputui", "--demo", "kill", "5388"], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        os.write(master, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == code, err
    assert "Proceed? [y/N] " in out
    assert said in out
    assert _audit()[-1]["result"] == ("ok" if answer == "y" else "refused")


@pytest.mark.functional
def test_demo_kills_never_reach_the_real_audit_log():
    """Issue 13: '--demo kill' used to append a record to the real audit log with no demo marker."""
    res = _gputui("--demo", "kill", "5388", "--yes")
    assert res.returncode == 0, res.stderr
    assert not audit_path().exists()
    records = _audit()  # the demo's own log
    assert records and all(r["demo"] is True for r in records)
    assert records[-1]["action"] == "kill" and records[-1]["pid"] == 5388
    # Refusals on the demo too.
    _gputui("--demo", "kill", "1", "--yes")
    assert not audit_path().exists()
    assert _audit()[-1]["result"] == "refused" and _audit()[-1]["demo"] is True
