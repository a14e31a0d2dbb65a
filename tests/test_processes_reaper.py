"""Which parents adopt orphans: the parent's status file read for its two lines (Name, NSpid).

A parent is a reaper when its name is a known init or subreaper, or when it is a PID namespace's
init (its innermost PID, NSpid's last, is 1) whatever its name; any other line says nothing. Each
test writes a parent that only one of the lines can make a reaper."""

from __future__ import annotations

from pathlib import Path

from tests.test_processes import FakeProc, orphaned


def test_a_worker_adopted_by_a_containers_init_of_any_name_is_orphaned(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.add(850, comm="bash", ppid=800, pgrp=850, session=850, nspid=(850, 1))  # the container's PID 1
    proc.add(852, comm="python", ppid=850, pgrp=851, session=850, nspid=(852, 3))  # its group leader died
    assert orphaned(proc, 852) is True


def test_a_child_of_a_parent_whose_pid_only_ends_in_1_elsewhere_is_not_orphaned(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.add(860, comm="bash", ppid=800, pgrp=860, session=860, nspid=(860, 11))  # PID 11 inside: no init
    proc.add(862, comm="python", ppid=860, pgrp=861, session=860, nspid=(862, 12))
    assert orphaned(proc, 862) is False


def test_a_parent_named_like_a_subreaper_only_in_another_line_is_no_reaper(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.add(870, comm="bash", ppid=800, pgrp=870, session=870, nspid=(870,))
    status = proc.root / "870" / "status"
    status.write_text(status.read_text() + "Cpus_allowed_list:\tsystemd\nNSpid_extra:\t1\n")
    proc.add(872, comm="python", ppid=870, pgrp=871, session=870, nspid=(872,))
    assert orphaned(proc, 872) is False
