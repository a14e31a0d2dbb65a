"""Journals survive their writer: atomic on disk, found from any state directory, pending only once the
container lock is free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gputui.actions.journal import Journal, journal_dirs, pending_journals, system_journal_dir
from gputui.actions.locks import ContainerLock, LockHeld


def test_journal_is_on_disk_before_the_first_step_and_tracks_each_step(isolated_xdg):
    with ContainerLock.acquire("migrate", ["abc", "trainer"], "trainer"):
        j = Journal.create("migrate", "trainer", {"summary": "trainer: GPU 0 -> GPU 2", "original": {"Id": "abc"},
                                                  "container": {"id": "abc", "name": "trainer"}})
        # Root writes to the one system-wide directory, whatever its own state directory is.
        assert j.path.parent == system_journal_dir() == isolated_xdg / "system" / "journal"
        assert oct(j.path.parent.stat().st_mode & 0o7777) == "0o2775"
        on_disk = json.loads(j.path.read_text())
        assert on_disk["original"] == {"Id": "abc"} and on_disk["step"] is None and on_disk["pid"] == os.getpid()
        j.update(step="stop")
        assert json.loads(j.path.read_text())["step"] == "stop"
        assert [p.name for p in j.path.parent.iterdir()] == [j.path.name]  # no temporary file left beside it
        # Its container is locked by this (live) writer: in progress, not pending.
        assert pending_journals() == []
    assert [p.step for p in pending_journals()] == ["stop"]  # the lock is free: pending
    j.finish()
    assert not j.path.exists() and pending_journals() == []


@pytest.mark.functional  # fresh interpreters
def test_a_second_lock_on_the_same_container_is_refused_naming_the_holder(isolated_xdg):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys
        from gputui.actions.locks import ContainerLock
        lock = ContainerLock.acquire("migrate", ["c0ffee", "trainer"], "trainer")
        print("locked", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeld) as info:
            ContainerLock.acquire("migrate", ["trainer"], "trainer")  # the name alone is enough
        exe = os.path.basename(os.path.realpath(sys.executable))  # named by its executable, never its argv
        assert str(info.value) == (f"trainer is being migrated by pid {holder.pid} ({exe}, user root); wait for it "
                                   f"to finish (or run 'gputui migrate --recover' if it was interrupted).")
    finally:
        holder.stdin.close()
        holder.wait(30)
    ContainerLock.acquire("migrate", ["trainer"], "trainer").release()  # died with its holder


@pytest.mark.functional  # fresh interpreters
def test_a_journal_whose_writer_died_is_pending_with_one_sentence(isolated_xdg):
    code = (
        "import os; from gputui.actions.journal import Journal\n"
        "from gputui.actions.locks import ContainerLock\n"
        "lock = ContainerLock.acquire('migrate', ['abc', 'trainer'], 'trainer')\n"
        "j = Journal.create('migrate', 'trainer', {'summary': 'trainer: GPU 0 -> GPU 2',\n"
        "                   'container': {'id': 'abc', 'name': 'trainer'}})\n"
        "j.update(step='rename')\n"
        "os._exit(9)  # killed between two steps\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 9, r.stderr
    pending = pending_journals()
    assert len(pending) == 1
    p = pending[0]
    assert p.action == "migrate" and p.step == "rename"
    sentence = p.describe()
    assert sentence.startswith("An interrupted migrate was found: trainer: GPU 0 -> GPU 2")
    assert sentence.endswith("run 'gputui migrate --recover'.")
    assert pending_journals("kill") == []
    # Taking its container lock (as --recover does) makes it in progress again for everybody else.
    lock = ContainerLock.acquire("migrate", p.lock_keys, "trainer")
    assert pending_journals() == []
    lock.release()
    assert len(pending_journals()) == 1


def test_no_journal_directory_means_nothing_pending(isolated_xdg):
    assert journal_dirs() == [] or all(not list(d.glob("*.json")) for d in journal_dirs())
    assert pending_journals() == []
    assert not (isolated_xdg / "state").exists()  # asking does not create it


KILLER = textwrap.dedent("""
    import os, signal, sys
    from gputui.actions.journal import Journal

    n = int(sys.argv[1])
    calls = 0

    def counted(fn):
        def wrapper(*a, **kw):
            global calls
            calls += 1
            if calls == n:
                os.kill(os.getpid(), signal.SIGKILL)  # a real SIGKILL, right before this system call
            return fn(*a, **kw)
        return wrapper

    j = Journal.create("migrate", "trainer", {"summary": "s", "container": {"id": "abc", "name": "trainer"},
                                              "original": {"Id": "abc", "Config": {"Image": "x" * 5000}}})
    for name in ("open", "write", "fsync", "fchmod", "rename"):
        setattr(os, name, counted(getattr(os, name)))
    for step in ("journal", "restart-policy", "stop", "rename", "create", "start", "verify"):
        j.update(step=step)
    os._exit(0)
""")


@pytest.mark.functional  # fresh interpreters
def test_a_kill_at_every_journal_write_leaves_the_old_or_the_new_journal_never_an_empty_one(isolated_xdg):
    steps = [None, "journal", "restart-policy", "stop", "rename", "create", "start", "verify"]
    n, seen = 0, set()
    while True:
        n += 1
        for old in system_journal_dir().glob("*") if system_journal_dir().is_dir() else ():
            old.unlink()
        r = subprocess.run([sys.executable, "-c", KILLER, str(n)], env=dict(os.environ), timeout=60)
        pending = pending_journals()
        assert len(pending) == 1, n
        data = json.loads(pending[0].path.read_text())  # complete JSON, whatever instant the kill hit
        assert data["original"]["Config"]["Image"] == "x" * 5000
        seen.add(data["step"])
        if r.returncode == 0:
            break
        assert r.returncode == -signal.SIGKILL
        # The kill landed at or after the previous step's rename: the journal holds one of the steps.
        assert data["step"] in steps
    assert n > 7 * 5 and seen == set(steps)  # every write was hit (open, fchmod, write, fsync, rename)
