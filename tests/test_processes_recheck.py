"""An idle process's re-checks (statm every RSS_REFRESH seconds, the orphan verdict every ORPHAN_RECHECK)
while its CPU clock stands still and its parent lives: they run on its last stat line, without the full
read, and what they find shows on that very read."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from gputui.core.sources.processes import ORPHAN_RECHECK, RSS_REFRESH, HostProcessSource
from tests.test_processes_steady import _Clock, _until

#: a parent named like a known subreaper (its comm set with prctl), in a session of its own, that starts a
#: process-group leader and a process in that group, and kills and reaps the leader when told
_PARENT = r"""
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(15, b"tini", 0, 0, 0)
leader = subprocess.Popen(["sleep", "60"], process_group=0)
member = subprocess.Popen(["sleep", "60"], process_group=leader.pid)
print(leader.pid, member.pid, flush=True)
sys.stdin.readline()
leader.kill()
leader.wait()
print("gone", flush=True)
sys.stdin.readline()
member.kill()
member.wait()
"""


def _sleeping(pid: int) -> bool:
    return psutil.Process(pid).name() == "sleep" and psutil.Process(pid).status() == psutil.STATUS_SLEEPING


@pytest.mark.functional  # processes of its own
def test_an_idle_process_whose_group_leader_exits_under_a_living_subreaper_turns_orphaned_at_the_recheck():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert parent.stdin is not None and parent.stdout is not None
    try:
        leader, member = map(int, parent.stdout.readline().split())
        _until(lambda: _sleeping(leader) and _sleeping(member))
        clock = _Clock()
        src = HostProcessSource(clock=clock)
        try:
            first = src.facts([member])[member]
            assert first.ppid == parent.pid and first.orphaned is False
            clock.t += 1
            assert src.facts([member])[member].orphaned is False  # steady
            parent.stdin.write("kill\n")
            parent.stdin.flush()
            assert parent.stdout.readline().strip() == "gone"
            clock.t += 1
            assert src.facts([member])[member].orphaned is False  # not re-checked yet
            clock.t += ORPHAN_RECHECK
            after = src.facts([member])[member]
            assert after.orphaned is True and after.ppid == parent.pid  # the same parent, its leader gone
        finally:
            src.close()
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.functional  # a process of its own
def test_an_idle_process_whose_pages_are_reclaimed_shows_its_new_rss_at_the_reread():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        _until(lambda: _sleeping(sleeper.pid))
        clock = _Clock()
        src = HostProcessSource(clock=clock)
        try:
            src.facts([sleeper.pid])
            clock.t += 1
            first = src.facts([sleeper.pid])[sleeper.pid]  # (its CPU % from the second read on)
            clock.t += 1
            assert src.facts([sleeper.pid])[sleeper.pid] is first  # steady: the very same facts
            # the kernel reclaims a sleeping process's pages: statm says less than before, stat's figure alike
            src._rss = lambda base, st: first.host_memory - 4096  # type: ignore[method-assign]
            clock.t += RSS_REFRESH
            assert src.facts([sleeper.pid])[sleeper.pid].host_memory == first.host_memory - 4096
        finally:
            src.close()
    finally:
        sleeper.kill()
        sleeper.wait()
