"""Migrating containers to, from and between MIG devices: the planner, the demo, and a real dockerd."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gputui.actions.migrate import DemoMigrationEngine, DockerMigrationEngine, MigrationNotFound, MigrationRefused
from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH, mig_uuid
from gputui.core.machine import open_machine
from gputui.core.model import ContainerRef, Gpu, MigDevice, MigMode, Process, Snapshot
from gputui.core.record import replace
from tests.fakenvml.scenario import GiB, MiB, fake_mig_uuid, fake_uuid

CMD = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"]


def demo():
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    assert machine.demo is not None
    return machine.demo, Fresh(machine)


class Fresh:
    """poll() with a fresh poller: the container inventory read after the move, not the watcher's last one."""

    def __init__(self, machine) -> None:
        self.machine = machine

    def poll(self) -> Snapshot:
        return self.machine.poller(Settings(), container_wait=2.0).poll()


def test_demo_moves_a_container_between_instances_and_to_a_whole_gpu():
    sim, poller = demo()
    engine = DemoMigrationEngine(sim, step_delay=0)
    plan = engine.plan("inference-api", "5:2", poller.poll())
    assert (plan.to_gpu, plan.to_mig, plan.to_uuid, plan.from_label) == (5, 2, mig_uuid(5, 2), "MIG device 5:0")
    assert plan.diff == (f'- HostConfig.DeviceRequests[0].DeviceIDs = ["{mig_uuid(5, 0)}"]',
                         f'+ HostConfig.DeviceRequests[0].DeviceIDs = ["{mig_uuid(5, 2)}"]')
    result = engine.execute(plan)
    assert result.ok and "moved from MIG device 5:0 to MIG device 5:2" in result.message
    snap = poller.poll()
    api = next(p for p in snap.processes if p.container is not None and p.container.name == "inference-api")
    assert (api.gpu_index, api.mig_label) == (5, "5:2")
    assert next(c for c in snap.containers if c.name == "inference-api").findings == ()
    # and off the MIG card, onto a whole GPU, by MIG UUID on the way back in
    engine.execute(engine.plan("inference-api", "6", snap))
    snap = poller.poll()
    api = next(p for p in snap.processes if p.container is not None and p.container.name == "inference-api")
    assert (api.gpu_index, api.mig_device) == (6, None)
    plan = engine.plan("inference-api", mig_uuid(5, 0), snap)
    assert (plan.to_label, plan.from_label) == ("MIG device 5:0", "GPU 6")


def test_refusals_name_the_instance():
    sim, poller = demo()
    engine = DemoMigrationEngine(sim, step_delay=0)
    snap = poller.poll()
    with pytest.raises(MigrationRefused, match=r"GPU 5 is split into MIG devices.*5:0 \(3g.40gb\), 5:1"):
        engine.plan("bert-finetune", "5", snap)
    with pytest.raises(MigrationRefused, match=r"MIG device 5:1 \(2g.20gb\) has 11.0 GiB free but bert-finetune "
                                               r"has used up to 18.0 GiB; use --force"):
        engine.plan("bert-finetune", "5:1", snap)
    assert engine.plan("bert-finetune", "5:1", snap, force=True).to_mig == 1
    with pytest.raises(MigrationRefused, match="already on MIG device 5:0"):
        engine.plan("inference-api", "5:0", snap)
    with pytest.raises(MigrationNotFound, match=r"no MIG device '5:9'.*5:0, 5:1, 5:2"):
        engine.plan("inference-api", "5:9", snap)


def mig_host(memory_used: int = 1 * GiB) -> Snapshot:
    """The fake host: GPU 0 in MIG mode (two 3g.40gb devices), GPU 1 whole."""
    devs = tuple(MigDevice(index=i, uuid=fake_mig_uuid(0, gi, 0), gpu_instance_id=gi, compute_instance_id=0,
                           profile="3g.40gb", memory_used=memory_used, memory_total=40192 * MiB)
                 for i, gi in enumerate((1, 2)))
    g0 = Gpu(index=0, uuid=fake_uuid(0), name="NVIDIA A100-SXM4-80GB", memory_total=80 * GiB,
             memory_used=2 * memory_used, minor_number=0, mig_mode=MigMode(True, True), mig_devices=devs)
    g1 = Gpu(index=1, uuid=fake_uuid(1), name="NVIDIA A100-SXM4-80GB", memory_total=80 * GiB,
             memory_used=1 * GiB, minor_number=1)
    return Snapshot(host="test", time=datetime.now(timezone.utc), driver_version="550.54.15",
                    cuda_driver_version="12.4", gpus=(g0, g1))


@pytest.mark.docker
def test_real_dockerd_moves_between_instances_in_each_grant_form(docker_cleanup):
    d = docker_cleanup
    a, b = fake_mig_uuid(0, 1, 0), fake_mig_uuid(0, 2, 0)
    d.run("mig-mv-uuid", gpus=f"device={a}", command=CMD, environment={"CUDA_VISIBLE_DEVICES": a})
    d.run("mig-mv-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": a}, command=CMD)
    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    snap = mig_host()
    for name in ("mig-mv-uuid", "mig-mv-legacy"):
        plan = engine.plan(name, "0:1", snap)
        assert (plan.from_label, plan.to_label, plan.to_uuid) == ("MIG device 0:0", "MIG device 0:1", b)
        result = engine.execute(plan, timeout=0.5)
        assert result.ok, result.message
    moved = d.client.api.inspect_container("mig-mv-uuid")
    assert moved["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [b]
    assert f"CUDA_VISIBLE_DEVICES={b}" in moved["Config"]["Env"]  # a MIG UUID there follows the move
    legacy = d.client.api.inspect_container("mig-mv-legacy")
    assert legacy["HostConfig"]["Runtime"] == "nvidia" and f"NVIDIA_VISIBLE_DEVICES={b}" in legacy["Config"]["Env"]
    # from an instance to a whole GPU, and the target instance's memory decides
    result = engine.execute(engine.plan("mig-mv-uuid", "1", snap), timeout=0.5)
    assert result.ok and d.client.api.inspect_container("mig-mv-uuid")["HostConfig"]["DeviceRequests"][0][
        "DeviceIDs"] == [fake_uuid(1)]
    full = mig_host(memory_used=39 * GiB)
    cid = d.client.api.inspect_container("mig-mv-legacy")["Id"]
    proc = Process(pid=4242, gpu_index=0, type="compute", gpu_memory=12 * GiB, sm_utilization=None,
                   container=ContainerRef(id=cid, name="mig-mv-legacy"), mig_device=1)
    full = replace(full, gpus=(replace(full.gpus[0], processes=(proc,)), full.gpus[1]))
    with pytest.raises(MigrationRefused, match=r"MIG device 0:0 \(3g.40gb\) has .* free but mig-mv-legacy has "
                                               r"used up to 12.0 GiB"):
        engine.plan("mig-mv-legacy", "0:0", full)


def test_target_options_list_the_instances_of_a_mig_card_not_the_card():
    from gputui.actions.migrate import target_options

    sim, poller = demo()
    snap = poller.poll()
    cid = next(c.id for c in snap.containers if c.name == "inference-api")
    opts = {o.ref: o for o in target_options(snap, cid, 6 * GiB)}
    assert "5" not in opts and {"5:0", "5:1", "5:2"} <= set(opts)
    assert opts["5:0"].current and opts["5:0"].refusal == "inference-api is already on MIG device 5:0."
    assert opts["5:2"].refusal is None and opts["5:2"].profile == "2g.20gb"
    bert = next(c.id for c in snap.containers if c.name == "bert-finetune")
    tight = {o.ref: o for o in target_options(snap, bert, 18 * GiB)}
    assert "has 11.0 GiB free but bert-finetune has used up to 18.0 GiB" in (tight["5:1"].refusal or "")


@pytest.mark.functional
async def test_the_dialog_moves_a_container_to_another_instance():
    from gputui.ui.app import make_app
    from gputui.ui.screens.migrate import MigrateScreen
    from tests.test_migrate_ui import dialog_shown, wait_for

    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    app = make_app(machine, Settings(), live=False)
    async with app.run_test(size=(140, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        app.push_screen(MigrateScreen(app.snapshot, container="inference-api", target="5:2"))
        await wait_for(pilot, lambda: dialog_shown(app))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.plan is not None)
        assert (dialog.plan.to_label, dialog.plan.from_label) == ("MIG device 5:2", "MIG device 5:0")
        assert [o.ref for o in dialog.options if o.mig is not None] == ["5:2", "5:1", "5:0"]  # most room first
        await pilot.press("y")
        await wait_for(pilot, lambda: dialog.state == "done")
        assert dialog.result.ok and "to MIG device 5:2" in dialog.result.message
        await pilot.press("escape")
        await wait_for(pilot, lambda: any(p.mig_label == "5:2" for p in app.snapshot.processes
                                          if p.container and p.container.name == "inference-api"))


def test_grant_model_reads_and_rewrites_mig_devices_in_every_form():
    from gputui.core.grants import HostGpu, HostGpus, read_grant, rewrite_grant

    gpus = mig_host().gpus
    host = HostGpus.of(gpus)
    a, b = fake_mig_uuid(0, 1, 0), fake_mig_uuid(0, 2, 0)
    cdi = {"HostConfig": {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=0:0"]}]}}
    grant = read_grant(cdi, host)
    assert grant.keys == (a,) and grant.problems == ()
    assert grant.describe(host) == "MIG device 0:0 (nvidia.com/gpu=0:0) via CDI device"
    rewrite_grant(cdi, grant, grant.entries, HostGpu(0, b, None, mig=1))
    assert cdi["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["nvidia.com/gpu=0:1"]
    legacy = {"HostConfig": {"Runtime": "nvidia"}, "Config": {"Env": [f"NVIDIA_VISIBLE_DEVICES={a}"]}}
    assert read_grant(legacy, host).keys == (a,)
    gone = read_grant({"HostConfig": {"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["0:7", "MIG-dead"],
                                                           "Capabilities": [["gpu"]]}]}}, host)
    assert gone.keys == () and gone.problems == (
        "its device request names MIG device 0:7, but GPU 0 has no MIG device 7",
        "its device request names MIG device MIG-dead, which does not exist on this host")
    # the container source is told GPU UUIDs only: MIG references are kept for the containers judge
    src = HostGpus.from_uuids([g.uuid for g in gpus])
    assert read_grant(cdi, src).keys == ("0:1",) and read_grant(legacy, src).keys == (a,)
