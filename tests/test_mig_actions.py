"""Kill and the imbalance judge around a card in MIG mode (the demo's GPU 5)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gputui.actions.kill import describe_target, targets_from_snapshot
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine


def demo_snapshot():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    return machine.poller(Settings(), container_wait=2.0).poll()


def test_kill_confirmation_names_the_instance():
    targets = targets_from_snapshot(demo_snapshot())
    assert describe_target(targets[6120])[0].startswith("PID 6120  bob  GPU 5:1 (8.5 GiB)")
    assert "GPU 0 (" in describe_target(targets[4101])[0]  # whole GPUs read as before


@pytest.mark.functional
def test_kill_a_process_of_an_instance_frees_its_memory():
    res = subprocess.run([sys.executable, "-m", "gputui", "kill", "--demo", "6230", "--yes"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "GPU 5:2 (5.0 GiB)" in res.stdout and "exited after SIGTERM" in res.stdout
    assert "GPU 5: 5.0 GiB freed" in res.stdout


@pytest.mark.functional
def test_imbalance_never_compares_or_targets_the_mig_card():
    doc = json.loads(subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--json", "--demo"],
                                    capture_output=True, text=True, timeout=120).stdout)
    imb = doc["imbalance"]
    assert imb["flagged"] and imb["suggestion"]["to_gpu"] != 5
    assert "GPUs 1-4, 6, 7" in imb["message"]  # GPU 5 is split into MIG devices: not one of "the others"


def test_a_full_mig_device_raises_memory_full_while_its_card_is_half_empty():
    from gputui.core.history import History
    from gputui.core.judges.alerts import AlertJudge
    from gputui.core.record import replace

    snap = demo_snapshot()
    g5 = snap.gpu(5)
    assert g5 is not None
    full = replace(g5.mig_devices[1], memory_used=int(19.2 * 1024**3))
    g5 = replace(g5, mig_devices=(g5.mig_devices[0], full, g5.mig_devices[2]))
    snap = replace(snap, gpus=tuple(g5 if g.index == 5 else g for g in snap.gpus))
    history = History()
    history.add(snap, ())
    alerts = AlertJudge(Settings()).update(history, snap)
    mine = [a for a in alerts if a.gpu == 5 and a.kind == "memory-full"]
    assert [a.message for a in mine] == [
        "MIG device 5:1 (2g.20gb)'s memory is 98% used (19.2 GiB of 19.5 GiB, 307 MiB free): "
        "new allocations there will fail."]


def test_an_idle_mig_grant_names_the_instance():
    from gputui.core.containers import build_containers
    from gputui.core.demo import mig_uuid
    from gputui.core.model import ContainerRecord

    snap = demo_snapshot()
    record = ContainerRecord(id="c" * 64, name="reserved-mig", image="img", state="running",
                             gpus=(mig_uuid(5, 1),), grant_source="device_request", grant_raw=(mig_uuid(5, 1),))
    c = next(c for c in build_containers((record,), snap.gpus, None, Settings(), FROZEN_EPOCH)
             if c.name == "reserved-mig")
    assert [f.kind for f in c.findings] == ["idle-grant"]
    assert c.findings[0].message.startswith("Provisional: reserved-mig holds MIG device 5:1 but runs nothing")
