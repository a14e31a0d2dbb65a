"""HostProcessSource: facts about PIDs from /proc.

Two kinds of tests: against the real /proc with processes the test starts
(compared with psutil, which users' other tools agree with), and against small
/proc trees written by the test, for the cases a test machine cannot stage
(a container's init, a dead login shell, another PID namespace).
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from gputui.core.sources.processes import INIT_PID_NS_INODE, HostProcessSource, proc_shows_host_pids

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
BTIME = 1_700_000_000


# -- the real /proc -------------------------------------------------------------------------------


@pytest.fixture
def child():
    procs: list[subprocess.Popen] = []

    def spawn(*args: str) -> subprocess.Popen:
        p = subprocess.Popen(list(args))
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.mark.functional  # a process of its own
def test_real_process_facts_agree_with_psutil(child) -> None:
    p = child("sleep", "123")
    time.sleep(0.1)
    facts = HostProcessSource().facts([p.pid, os.getpid()])
    f = facts[p.pid]
    ps = psutil.Process(p.pid)
    assert f.visible and f.invisible_reason is None
    assert f.command == "sleep 123"
    assert f.user == ps.username() and f.uid == ps.uids().real
    assert f.create_time == ps.create_time()  # the identity the kill guard compares
    assert f.host_memory == ps.memory_info().rss
    assert f.ppid == os.getpid() and f.status == "sleeping"
    assert f.cgroup == Path(f"/proc/{p.pid}/cgroup").read_text()
    assert f.cpu_percent is None  # first sighting
    assert f.orphaned is False
    assert facts[os.getpid()].visible


@pytest.mark.functional  # a process of its own
def test_cpu_percent_measures_a_busy_process(child) -> None:
    busy = child("python3", "-c", "while True: pass")
    idle = child("sleep", "60")
    time.sleep(0.3)
    source = HostProcessSource()
    ps = psutil.Process(busy.pid)
    source.facts([busy.pid, idle.pid])
    c0, w0 = sum(ps.cpu_times()[:2]), time.monotonic()
    time.sleep(0.8)
    c1, w1 = sum(ps.cpu_times()[:2]), time.monotonic()
    facts = source.facts([busy.pid, idle.pid])
    expected = 100.0 * (c1 - c0) / (w1 - w0)  # what it really used, however loaded this machine is
    assert expected > 0
    assert facts[busy.pid].cpu_percent == pytest.approx(expected, abs=max(8.0, 0.25 * expected))
    assert facts[idle.pid].cpu_percent == 0.0


@pytest.mark.functional  # a process of its own
def test_a_vanished_pid_is_kept_and_marked(child) -> None:
    p = child("sleep", "60")
    source = HostProcessSource()
    assert source.facts([p.pid])[p.pid].visible
    p.kill()
    p.wait()
    gone = source.facts([p.pid])[p.pid]
    assert gone.visible is False and gone.invisible_reason == "vanished" and gone.user is None


@pytest.mark.functional  # a process of its own
def test_a_zombie_is_visible_with_its_status(child) -> None:
    z = child("true")
    deadline = time.time() + 5
    while time.time() < deadline and psutil.Process(z.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.02)
    f = HostProcessSource().facts([z.pid])[z.pid]
    assert f.visible and f.status == "zombie" and f.command == "[true]"


# -- /proc trees written by the test ---------------------------------------------------------------


class FakeProc:
    """A directory shaped like /proc for the files HostProcessSource reads."""

    def __init__(self, root: Path, ns_inode: int = INIT_PID_NS_INODE) -> None:
        self.root = root
        root.mkdir()
        (root / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\nprocesses 10\n")
        (root / "self").mkdir()
        (root / "self" / "stat").write_text("1 (x) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 1 1\n")
        (root / "self" / "ns").mkdir()
        os.symlink(f"pid:[{ns_inode}]", root / "self" / "ns" / "pid")
        self.add(1, comm="systemd", ppid=0, session=1, pgrp=1, nspid=(1,))
        os.makedirs(root / "1" / "ns", exist_ok=True)
        os.symlink(f"pid:[{ns_inode}]", root / "1" / "ns" / "pid")

    def add(self, pid: int, comm: str = "python", ppid: int = 1, pgrp: int | None = None,
            session: int | None = None, state: str = "S", utime: int = 0, stime: int = 0,
            starttime: int = 1000, rss_pages: int = 100, uid: int = 0, nspid: tuple[int, ...] | None = None,
            cmdline: str | None = None, cgroup: str = "0::/user.slice\n") -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        pgrp = pid if pgrp is None else pgrp
        session = pid if session is None else session
        rest = ["0", "-1", "4194304", "0", "0", "0", "0", str(utime), str(stime), "0", "0", "20", "0", "1", "0",
                str(starttime), "1000000", str(rss_pages)]
        (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pgrp} {session} " + " ".join(rest) + " 0 0\n")
        (d / "statm").write_text(f"1000 {rss_pages} 50 1 0 100 0\n")
        ns = " ".join(str(n) for n in (nspid or (pid,)))
        (d / "status").write_text(f"Name:\t{comm}\nState:\t{state}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                  f"NSpid:\t{ns}\n")
        (d / "cmdline").write_bytes(("\0".join((cmdline or comm).split()) + "\0").encode())
        (d / "cgroup").write_text(cgroup)

    def remove(self, pid: int) -> None:
        import shutil

        shutil.rmtree(self.root / str(pid))


@pytest.fixture
def fake_proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_facts_from_the_files(fake_proc: FakeProc) -> None:
    fake_proc.add(4242, comm="python", ppid=1, session=1, starttime=12345, rss_pages=2048, uid=0,
                  cmdline="python train.py --lr 3e-4", cgroup="0::/system.slice/docker-abc.scope\n", state="R")
    f = HostProcessSource(proc=str(fake_proc.root)).facts([4242])[4242]
    assert f.visible and f.user == pwd.getpwuid(0).pw_name and f.uid == 0
    assert f.command == "python train.py --lr 3e-4"
    assert f.create_time == 12345 / TICKS + BTIME
    assert f.host_memory == 2048 * PAGE and f.status == "running" and f.ppid == 1
    assert f.cgroup == "0::/system.slice/docker-abc.scope\n"


def _has_name(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_a_uid_without_a_name_shows_the_number(fake_proc: FakeProc) -> None:
    uid = next(u for u in range(54321, 64000) if not _has_name(u))  # a uid this machine has no name for
    fake_proc.add(77, uid=uid)
    assert HostProcessSource(proc=str(fake_proc.root)).facts([77])[77].user == str(uid)


def test_cpu_percent_is_the_tick_delta_over_time(fake_proc: FakeProc) -> None:
    clock = Clock()
    source = HostProcessSource(proc=str(fake_proc.root), clock=clock)
    fake_proc.add(50, utime=100, stime=20)
    assert source.facts([50])[50].cpu_percent is None
    clock.t += 2.0
    fake_proc.add(50, utime=100 + TICKS, stime=20 + TICKS // 2)  # 1.5 s of CPU in 2 s
    assert source.facts([50])[50].cpu_percent == 75.0
    clock.t += 0.01  # too soon for tick resolution: keep the last figure
    fake_proc.add(50, utime=100 + 2 * TICKS, stime=20 + TICKS // 2)
    assert source.facts([50])[50].cpu_percent == 75.0


def test_a_reused_pid_is_a_new_process(fake_proc: FakeProc) -> None:
    clock = Clock()
    source = HostProcessSource(proc=str(fake_proc.root), clock=clock)
    fake_proc.add(60, comm="old", starttime=500, cmdline="old job")
    first = source.facts([60])[60]
    clock.t += 1
    fake_proc.add(60, comm="new", starttime=900, cmdline="new job", utime=50)
    second = source.facts([60])[60]
    assert first.command == "old job" and second.command == "new job"
    assert second.create_time != first.create_time and second.cpu_percent is None


def test_exec_refreshes_the_command_line(fake_proc: FakeProc) -> None:
    source = HostProcessSource(proc=str(fake_proc.root))
    fake_proc.add(61, comm="bash", cmdline="bash run.sh")
    assert source.facts([61])[61].command == "bash run.sh"
    fake_proc.add(61, comm="python", cmdline="python train.py")  # same pid and start: exec()
    assert source.facts([61])[61].command == "python train.py"


def test_the_namespace_of_proc_is_that_of_its_pid_1(tmp_path: Path) -> None:
    # `unshare --pid` without remounting /proc: we live in a new namespace, /proc still shows the host's
    proc = FakeProc(tmp_path / "proc")
    os.unlink(proc.root / "self" / "ns" / "pid")
    os.symlink("pid:[4026532999]", proc.root / "self" / "ns" / "pid")
    assert proc_shows_host_pids(str(proc.root)) is True
    # a container's /proc: its PID 1 is the container's init
    os.unlink(proc.root / "1" / "ns" / "pid")
    os.symlink("pid:[4026532999]", proc.root / "1" / "ns" / "pid")
    assert proc_shows_host_pids(str(proc.root)) is False


def test_another_pid_namespace_explains_missing_pids(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", ns_inode=4026532999)
    proc.add(5)
    source = HostProcessSource(proc=str(proc.root))
    assert source.host_pids is False
    facts = source.facts([5, 31337])
    assert facts[31337].visible is False and facts[31337].invisible_reason == "other-namespace"
    assert facts[5].visible is True  # this namespace has no NVIDIA device files to check against


# -- orphans ------------------------------------------------------------------------------------------


def orphaned(proc: FakeProc, pid: int) -> bool:
    return HostProcessSource(proc=str(proc.root)).facts([pid])[pid].orphaned


def test_nohup_job_after_its_shell_exited_is_orphaned(fake_proc: FakeProc) -> None:
    # session 700 (the login shell) is gone; reparented to PID 1
    fake_proc.add(710, ppid=1, pgrp=710, session=700)
    assert orphaned(fake_proc, 710) is True


def test_a_job_adopted_by_systemd_user_is_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(900, comm="systemd", ppid=1, session=900, nspid=(900,))
    fake_proc.add(910, ppid=900, pgrp=905, session=880)  # its launcher (group 905) and shell (880) exited
    assert orphaned(fake_proc, 910) is True


def test_a_service_started_by_init_is_not_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(720, ppid=1, pgrp=720, session=720)  # session leader: started detached on purpose
    assert orphaned(fake_proc, 720) is False


def test_a_container_init_under_its_shim_is_not_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(800, comm="containerd-shim", ppid=1, session=800)
    fake_proc.add(810, comm="python", ppid=800, pgrp=810, session=810, nspid=(810, 1))
    fake_proc.add(820, comm="python", ppid=800, pgrp=820, session=800)  # docker exec without a tty
    assert orphaned(fake_proc, 810) is False
    assert orphaned(fake_proc, 820) is False


def test_the_main_process_under_tini_is_not_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(830, comm="tini", ppid=800, pgrp=830, session=830, nspid=(830, 1))
    fake_proc.add(831, comm="python", ppid=830, pgrp=831, session=830, nspid=(831, 7))
    assert orphaned(fake_proc, 831) is False


def test_a_worker_whose_trainer_died_in_a_container_is_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(840, comm="tini", ppid=800, pgrp=840, session=840, nspid=(840, 1))
    # the trainer (group leader 841) died; its worker was adopted by the container's init
    fake_proc.add(842, comm="pt_data_worker", ppid=840, pgrp=841, session=840, nspid=(842, 9))
    assert orphaned(fake_proc, 842) is True


def test_a_child_of_a_live_shell_is_not_orphaned(fake_proc: FakeProc) -> None:
    fake_proc.add(600, comm="bash", ppid=1, session=600)
    fake_proc.add(601, ppid=600, pgrp=601, session=600)
    assert orphaned(fake_proc, 601) is False


def test_orphaned_when_the_shell_exits_later(fake_proc: FakeProc) -> None:
    clock = Clock()
    source = HostProcessSource(proc=str(fake_proc.root), clock=clock)
    fake_proc.add(600, comm="bash", ppid=1, session=600)
    fake_proc.add(601, ppid=600, pgrp=601, session=600)
    assert source.facts([601])[601].orphaned is False
    fake_proc.remove(600)
    fake_proc.add(601, ppid=1, pgrp=601, session=600)
    clock.t += 1
    assert source.facts([601])[601].orphaned is True


def test_host_memory_follows_the_process(fake_proc: FakeProc) -> None:
    clock = Clock()
    source = HostProcessSource(proc=str(fake_proc.root), clock=clock)
    fake_proc.add(70, rss_pages=100)
    assert source.facts([70])[70].host_memory == 100 * PAGE
    clock.t += 1
    fake_proc.add(70, rss_pages=300)
    assert source.facts([70])[70].host_memory == 300 * PAGE


@pytest.mark.functional  # a process of its own
def test_pinned_stat_descriptors_follow_the_process_and_never_leak():
    """Descriptors kept on /proc/PID/stat are closed when the process goes, and a
    process that exited reads as vanished rather than as stale numbers."""
    import subprocess as sp

    from gputui.core.sources.processes import HostProcessSource

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    src = HostProcessSource()
    before = open_fds()
    children = [sp.Popen(["sleep", "60"]) for _ in range(5)]
    try:
        pids = [c.pid for c in children]
        first = src.facts(pids)
        assert all(first[p].visible for p in pids)
        assert open_fds() == before + 10  # two pinned descriptors each (stat, statm)
        again = src.facts(pids)
        assert [again[p].create_time for p in pids] == [first[p].create_time for p in pids]
        children[0].kill()
        children[0].wait()
        gone = src.facts(pids)
        assert not gone[pids[0]].visible and gone[pids[0]].invisible_reason == "vanished"
        assert all(gone[p].visible for p in pids[1:])
        assert open_fds() == before + 8
    finally:
        for c in children:
            c.kill()
            c.wait()
        src.close()
    assert open_fds() == before


# -- reused stat figures (the exporter) -------------------------------------------------------------


def _wait_status(pid: int, status: str) -> None:
    deadline = time.time() + 5
    while time.time() < deadline and psutil.Process(pid).status() != status:
        time.sleep(0.01)
    assert psutil.Process(pid).status() == status


def _refreshing(clock: Clock, seconds: float = 5.0) -> HostProcessSource:
    source = HostProcessSource(clock=clock)
    if not source.refresh_every(seconds):
        pytest.skip("this kernel has no pidfds (Linux < 5.3)")
    return source


@pytest.mark.functional  # a process of its own
def test_reused_figures_wait_for_the_refresh_period_while_every_poll_reads_them_by_default(child) -> None:
    """A stopped process reads as stopped at once on the dashboard; with figures reused for 5 s
    (the exporter) it does so at the first read after 5 s."""
    clock = Clock()
    p = child("sleep", "60")
    _wait_status(p.pid, psutil.STATUS_SLEEPING)
    every_poll, reused = HostProcessSource(clock=clock), _refreshing(clock)
    try:
        assert every_poll.facts([p.pid])[p.pid].status == reused.facts([p.pid])[p.pid].status == "sleeping"
        p.send_signal(signal.SIGSTOP)
        _wait_status(p.pid, psutil.STATUS_STOPPED)
        clock.t += 1
        assert every_poll.facts([p.pid])[p.pid].status == "stopped"
        assert reused.facts([p.pid])[p.pid].status == "sleeping"
        clock.t += 4
        assert reused.facts([p.pid])[p.pid].status == "stopped"
    finally:
        p.send_signal(signal.SIGCONT)
        every_poll.close()
        reused.close()


@pytest.mark.functional  # a process of its own
def test_reused_figures_never_outlive_their_process(child) -> None:
    """Within the refresh period, an exit is seen on the next poll: a zombie at once as a zombie,
    a reaped process as vanished."""
    clock = Clock()
    p = child("sleep", "60")
    _wait_status(p.pid, psutil.STATUS_SLEEPING)
    source = _refreshing(clock)
    try:
        assert source.facts([p.pid])[p.pid].status == "sleeping"
        p.kill()  # not reaped yet: a zombie
        _wait_status(p.pid, psutil.STATUS_ZOMBIE)
        clock.t += 1
        assert source.facts([p.pid])[p.pid].status == "zombie"
        clock.t += 1
        assert source.facts([p.pid])[p.pid].status == "zombie"
        p.wait()
        clock.t += 1
        gone = source.facts([p.pid])[p.pid]
        assert gone.visible is False and gone.invisible_reason == "vanished"
    finally:
        source.close()


@pytest.mark.functional  # a process of its own
@pytest.mark.skipif(os.geteuid() != 0, reason="steering the next PID (ns_last_pid) needs root")
def test_reused_figures_do_not_survive_pid_reuse(child) -> None:
    """The PID of an exited process handed to a new one within the refresh period: the new
    process's facts, not the old one's."""
    clock = Clock()
    old = child("sleep", "60")
    source = _refreshing(clock)
    try:
        _wait_status(old.pid, psutil.STATUS_SLEEPING)
        assert source.facts([old.pid])[old.pid].command == "sleep 60"
        old.kill()
        old.wait()
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(old.pid - 1))
        except OSError:
            pytest.skip("/proc/sys/kernel/ns_last_pid is not writable here")
        new = child("sleep", "61")
        if new.pid != old.pid:
            pytest.skip("another process took the PID first")
        _wait_status(new.pid, psutil.STATUS_SLEEPING)
        clock.t += 1
        again = source.facts([new.pid])[new.pid]
        assert again.visible and again.command == "sleep 61"
    finally:
        source.close()


@pytest.mark.functional  # a process of its own
def test_reused_figures_keep_no_descriptor_past_their_process(child) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    clock = Clock()
    source = _refreshing(clock)
    before = open_fds()
    procs = [child("sleep", "60") for _ in range(3)]
    try:
        pids = [p.pid for p in procs]
        assert all(f.visible for f in source.facts(pids).values())
        assert open_fds() == before + 9  # a stat and a statm descriptor and a pidfd each
        procs[0].kill()
        procs[0].wait()
        clock.t += 1
        assert not source.facts(pids)[pids[0]].visible
        assert open_fds() == before + 6
    finally:
        source.close()
    assert open_fds() == before


def test_figures_are_reused_only_where_a_pidfd_can_vouch_for_them(fake_proc: FakeProc) -> None:
    source = HostProcessSource(proc=str(fake_proc.root))
    assert source.refresh_every(5.0) is False and source.refresh == 0.0


@pytest.mark.functional
def test_a_low_descriptor_budget_keeps_every_stat_line_pinned_before_any_statm(child) -> None:
    """Pinned stat lines are what an idle process's steady state needs; statm descriptors (re-read every few
    seconds) may take only what the budget leaves once every known process can have its stat line."""
    source = HostProcessSource()
    source._fd_budget = 4  # a host whose descriptor limit is low
    procs = [child("sleep", "60") for _ in range(3)]
    try:
        pids = [p.pid for p in procs]
        assert all(f.visible for f in source.facts(pids).values())
        assert all(source._static[pid].stat_fd is not None for pid in pids)
    finally:
        source.close()
