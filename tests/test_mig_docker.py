"""Real containers granted MIG devices (dockerd from tests/fixtures/dockerd.py, the fake driver in MIG mode).

Grants by ``--gpus device=MIG-…``, by ``GPU:instance`` and by the legacy
``NVIDIA_VISIBLE_DEVICES=MIG-…`` resolve to MIG devices: a container on its own
instance has no finding, one running on another instance of the card is
misplaced, a ``CUDA_VISIBLE_DEVICES`` naming an instance it was not granted is an
env-conflict, and a grant naming a MIG device that no longer exists is reported
by the containers view and by doctor.
"""

from __future__ import annotations

import json

import pytest

from tests.fakenvml.scenario import GiB, fake_mig_uuid, gpu, mig_device, process, scenario

pytestmark = [pytest.mark.docker, pytest.mark.integration]


def test_mig_grants_resolve_to_instances(docker_cleanup, fake_nvml):
    d = docker_cleanup
    m1, m2, m9 = fake_mig_uuid(0, 1, 0), fake_mig_uuid(0, 2, 0), fake_mig_uuid(0, 9, 0)
    by_uuid = d.run("mig-uuid", gpus=f"device={m1}")
    by_ref = d.run("mig-ref", gpus="device=0:1")  # MIG device 1 of GPU 0 (index order, GI 2)
    legacy = d.run("mig-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": m9})
    wrong = d.run("mig-wrong", gpus=f"device={m1}")  # granted 0:0 but its process runs on 0:2
    cvd = d.run("mig-cvd", gpus=f"device={m2}", environment={"CUDA_VISIBLE_DEVICES": m1})
    gone = d.run("mig-gone", gpus="device=MIG-deadbeef-0000-0000-0000-000000000000")
    pid = {c.name: c.attrs["State"]["Pid"] for c in (by_uuid, by_ref, legacy, wrong, cvd, gone)}

    fake_nvml.write(scenario([
        gpu(0, mig_mode=True, mig_devices=[
            mig_device(1, 0, "3g.40gb", processes=[process(pid["mig-uuid"], 4 * GiB)]),
            mig_device(2, 0, "2g.20gb", processes=[process(pid["mig-ref"], 3 * GiB),
                                                   process(pid["mig-cvd"], 1 * GiB)]),
            mig_device(9, 0, "1g.10gb", processes=[process(pid["mig-legacy"], 2 * GiB),
                                                   process(pid["mig-wrong"], 1 * GiB)]),
        ]),
        gpu(1),
    ]))
    res = fake_nvml.run_gputui("snapshot", "--json", env_extra={"DOCKER_HOST": d.host})
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    containers = {c["name"]: c for c in snap["containers"]}
    kinds = {name: [f["kind"] for f in c["findings"]] for name, c in containers.items()}

    assert containers["mig-uuid"]["gpus"] == [m1] and containers["mig-uuid"]["granted_gpus"] == [0]
    assert containers["mig-ref"]["gpus"] == [m2]  # "0:1" listed as the instance's UUID
    assert containers["mig-legacy"]["gpus"] == [m9] and containers["mig-legacy"]["grant_source"] == \
        "nvidia_runtime_env"
    for name in ("mig-uuid", "mig-ref", "mig-legacy"):
        assert kinds[name] == [], (name, containers[name]["findings"])
    assert kinds["mig-wrong"] == ["misplaced"]
    assert "runs on MIG device 0:2, outside its grant" in containers["mig-wrong"]["findings"][0]["message"]
    assert kinds["mig-cvd"] == ["env-conflict"]
    assert "names MIG device 0:0, which is not granted to it" in containers["mig-cvd"]["findings"][0]["message"]
    assert "env-conflict" in kinds["mig-gone"]
    assert any("does not exist on this host" in f["message"] for f in containers["mig-gone"]["findings"])
    procs = {p["pid"]: p for p in snap["gpus"][0]["processes"]}
    assert procs[pid["mig-ref"]]["container"]["name"] == "mig-ref" and procs[pid["mig-ref"]]["mig_device"] == 1

    res = fake_nvml.run_gputui("doctor", "--json", env_extra={"DOCKER_HOST": d.host})
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["mig-grants"]["status"] == "warn"
    assert checks["mig-grants"]["message"].startswith("mig-gone is granted MIG device MIG-deadbeef")
