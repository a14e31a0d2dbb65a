"""Journals survive their writer: durable on disk, reported as pending only once the writer is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gputui.actions.journal import Journal, pending_journals


def test_journal_is_on_disk_before_the_first_step_and_tracks_each_step(isolated_xdg):
    j = Journal.create("migrate", "trainer", {"summary": "trainer: GPU 0 -> GPU 2", "original": {"Id": "abc"}})
    assert j.path.parent == isolated_xdg / "state" / "gputui" / "journal"
    on_disk = json.loads(j.path.read_text())
    assert on_disk["original"] == {"Id": "abc"} and on_disk["step"] is None and on_disk["pid"] == os.getpid()
    j.update(step="stop")
    assert json.loads(j.path.read_text())["step"] == "stop"
    # Held by this (live) writer: in progress, not pending.
    assert pending_journals() == []
    j.finish()
    assert not j.path.exists()
    assert pending_journals() == []


def test_a_journal_whose_writer_died_is_pending_with_one_sentence(isolated_xdg):
    code = (
        "import os; from gputui.actions.journal import Journal\n"
        "j = Journal.create('migrate', 'trainer', {'summary': 'trainer: GPU 0 -> GPU 2'})\n"
        "j.update(step='rename')\n"
        "os._exit(9)  # killed between two steps\n"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(isolated_xdg / "state")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 9, r.stderr
    pending = pending_journals()
    assert len(pending) == 1
    p = pending[0]
    assert p.action == "migrate" and p.step == "rename"
    sentence = p.describe()
    assert sentence.startswith("An interrupted migrate was found: trainer: GPU 0 -> GPU 2")
    assert sentence.endswith("run 'gputui migrate --recover'.")
    assert pending_journals("kill") == []
    # Taking it over locks it again: no longer pending for anybody else.
    j = Journal.take(p)
    assert pending_journals() == []
    j.release()
    assert len(pending_journals()) == 1


def test_no_state_directory_means_nothing_pending(isolated_xdg):
    assert not (isolated_xdg / "state").exists()
    assert pending_journals() == []
    assert not (isolated_xdg / "state").exists()  # asking does not create it
