"""The one grant model (gputui.core.grants): every form read, combined, resolved; rewritten in its own form.

The real-dockerd side (the view and migrate reading the same containers alike)
is in tests/test_migrate_unattended.py.
"""

from __future__ import annotations

import pytest

from gputui.core.grants import HostGpu, HostGpus, read_grant, rewrite_grant

UUIDS = tuple(f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}" for i in range(4))
#: minor numbers differ from indices on purpose: /dev/nvidia3 is GPU 1
MINORS = {2: UUIDS[0], 3: UUIDS[1], 0: UUIDS[2], 1: UUIDS[3]}
HOST = HostGpus.from_uuids(UUIDS, MINORS)


def attrs(requests=None, runtime="runc", env=(), devices=None) -> dict:
    return {"HostConfig": {"DeviceRequests": requests, "Runtime": runtime, "Devices": devices or []},
            "Config": {"Env": list(env)}}


def req(ids=None, count=0) -> dict:
    return {"Driver": "", "Count": count, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}


def node(minor: int) -> dict:
    return {"PathOnHost": f"/dev/nvidia{minor}", "PathInContainer": f"/dev/nvidia{minor}", "CgroupPermissions": "rwm"}


@pytest.mark.parametrize("runtime", ["nvidia", "nvidia-experimental", "NVIDIA", "nvidia-container-runtime"])
def test_every_nvidia_runtime_name_makes_the_variable_a_grant(runtime):
    grant = read_grant(attrs(runtime=runtime, env=["NVIDIA_VISIBLE_DEVICES=1"]), HOST)
    assert (grant.gpus, grant.source) == ((UUIDS[1],), "nvidia_runtime_env")


def test_forms_combine_and_each_entry_remembers_its_form():
    grant = read_grant(attrs([req(["0"])], devices=[node(3)]), HOST)
    assert grant.gpus == (UUIDS[0], UUIDS[1]) and grant.source == "device_request"
    assert [(e.form, e.raw, e.key) for e in grant.entries] == [
        ("device_request", "0", UUIDS[0]), ("devices", "/dev/nvidia3", UUIDS[1])]
    assert grant.describe(HOST) == "GPU 0 via --gpus; GPU 1 (/dev/nvidia3) via device node"


def test_count_and_all_and_problems():
    count = read_grant(attrs([req(count=6)]), HOST)
    assert count.gpus == UUIDS and count.raw == ("count=6",) and len(count.problems) == 2
    assert read_grant(attrs([req(count=-1)]), HOST).gpus == "all"
    ghost = read_grant(attrs([req(["9"])]), HOST)
    assert ghost.gpus == () and ghost.problems == (
        "its device request names GPU 9, which does not exist on this host (4 GPUs)",)


def test_rewrite_touches_only_the_moving_entry_in_its_own_form():
    a = attrs([req(["0"])], devices=[node(3)])
    body = {"Env": [], "HostConfig": a["HostConfig"]}
    grant = read_grant(body, HOST)
    moving = [e for e in grant.entries if e.form == "devices"]
    rewrite_grant(body, grant, moving, HostGpu(3, UUIDS[3], 1))  # GPU 3 is /dev/nvidia1
    assert body["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0"]
    assert body["HostConfig"]["Devices"] == [node(1)]
    assert read_grant(body, HOST).gpus == (UUIDS[0], UUIDS[3])


def test_rewrite_of_a_count_names_the_target_by_uuid():
    body = {"Env": [], "HostConfig": {"DeviceRequests": [req(count=2)]}}
    grant = read_grant(body, HOST)
    rewrite_grant(body, grant, grant.entries, HostGpu(2, UUIDS[2], 0))
    assert body["HostConfig"]["DeviceRequests"] == [req([UUIDS[2]])]
