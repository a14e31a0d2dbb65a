"""The migration planner on recorded inspect data: identical except the GPU, refusals, the diff.

The inspect dicts below are shaped like what Docker 20.10 (API 1.41) returns
(recorded from a real daemon, trimmed); each test changes the part it is about.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest

from gputui.actions.migrate import (
    MigrationNotFound,
    MigrationRefused,
    body_diff,
    plan_migration,
    target_options,
)
from gputui.core.grants import HostGpus, read_grant
from gputui.core.model import ContainerRef, Gpu, Imbalance, Process, Snapshot, Suggestion

GIB = 1024**3
CID = "ecae91719978703fbdd3864b88c25dc8bb93188ec5f6863fe89cbd94f51853d9"
ANON = "fe9309adbc496b8652bedabe8b8cdaf7570644b405faf58e0880a22d5073c45a"
IMAGE_ID = "sha256:3eb9c7bafdaa690d0a57fffa6ed45260f2a127b24c7a3edcb940975ef2d58fc4"


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{i:012x}"


def gpus(n: int = 4, used: dict[int, int] | None = None, lost: tuple[int, ...] = ()) -> tuple[Gpu, ...]:
    used = used or {}
    return tuple(Gpu(index=i, uuid=uuid(i), name="NVIDIA A100-SXM4-80GB", memory_total=80 * GIB,
                     memory_used=used.get(i, 1 * GIB), minor_number=i + 10, utilization_gpu=10 * i,
                     lost=i in lost) for i in range(n))


def inspect(**changes) -> dict:
    """A running container started with --gpus device=0, env, a label, a named and an anonymous volume."""
    attrs = {
        "Id": CID,
        "Name": "/trainer",
        "Image": IMAGE_ID,
        "State": {"Status": "running", "Running": True, "Paused": False, "Restarting": False, "Dead": False,
                  "Pid": 7389},
        "RestartCount": 0,
        "HostConfig": {
            "Binds": ["data1:/data"],
            "NetworkMode": "none",
            "PortBindings": {},
            "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
            "AutoRemove": False,
            "VolumesFrom": None,
            "IpcMode": "private",
            "PidMode": "",
            "Links": None,
            "Runtime": "runc",
            "Memory": 8 * GIB,
            "NanoCpus": 4_000_000_000,
            "ShmSize": 67108864,
            "Devices": [],
            "DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]],
                                "Options": {}}],
        },
        "Mounts": [
            {"Type": "volume", "Name": "data1", "Source": "/var/lib/docker/volumes/data1/_data",
             "Destination": "/data", "Driver": "local", "Mode": "z", "RW": True, "Propagation": ""},
            {"Type": "volume", "Name": ANON, "Source": f"/var/lib/docker/volumes/{ANON}/_data",
             "Destination": "/anon", "Driver": "local", "Mode": "", "RW": True, "Propagation": ""},
        ],
        "Config": {
            "Hostname": CID[:12],
            "Domainname": "",
            "User": "1000:1000",
            "Env": ["FOO=bar", "CUDA_VISIBLE_DEVICES=0", "PATH=/bin"],
            "Cmd": ["python", "train.py"],
            "Healthcheck": {"Test": ["CMD-SHELL", "test -f /data/ok"], "Interval": 1_000_000_000},
            "Image": "busybox:test",
            "Volumes": {"/anon": {}},
            "WorkingDir": "/work",
            "Entrypoint": None,
            "Labels": {"app": "x"},
            "StopSignal": "SIGINT",
            "StopTimeout": 30,
        },
        "NetworkSettings": {"Networks": {"none": {"IPAMConfig": None, "Links": None, "Aliases": None,
                                                  "NetworkID": "ce72", "EndpointID": "", "IPAddress": "",
                                                  "MacAddress": "", "DriverOpts": None}}},
    }
    for path, value in changes.items():
        node = attrs
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return attrs


def plan(attrs=None, target="2", **kw):
    kw.setdefault("image_tag_id", IMAGE_ID)
    return plan_migration(attrs or inspect(), kw.pop("gpus", None) or gpus(), target, **kw)


def strip_grant(body: dict) -> dict:
    b = copy.deepcopy(body)
    b["HostConfig"].pop("DeviceRequests", None)
    return b


# -- identical except the GPU -------------------------------------------------------------


def test_device_request_is_rewritten_to_the_target_uuid_and_nothing_else_changes():
    attrs = inspect()
    p = plan(attrs)
    assert p.body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": 0, "DeviceIDs": [uuid(2)], "Capabilities": [["gpu"]], "Options": {}}]
    assert p.diff == (
        '- HostConfig.DeviceRequests[0].DeviceIDs = ["0"]',
        f'+ HostConfig.DeviceRequests[0].DeviceIDs = ["{uuid(2)}"]',
    )
    # Everything the user configured is in the body as it was.
    body, hc = p.body, p.body["HostConfig"]
    for key in ("User", "Env", "Cmd", "Healthcheck", "WorkingDir", "Labels", "StopSignal", "StopTimeout",
                "Volumes", "Entrypoint"):
        assert body[key] == attrs["Config"][key], key
    for key in ("RestartPolicy", "Memory", "NanoCpus", "ShmSize", "Runtime", "NetworkMode", "PortBindings"):
        assert hc[key] == attrs["HostConfig"][key], key
    assert body["Image"] == "busybox:test"
    assert (p.from_gpus, p.to_gpu, p.to_uuid) == ((0,), 2, uuid(2))
    assert p.stop_signal == "SIGINT" and p.stop_timeout == 30
    assert p.has_healthcheck and p.was_running
    assert p.backup_name.startswith("trainer-gputui-old-")
    # CUDA_VISIBLE_DEVICES=0 is container-relative: it survives the move untouched.
    assert "CUDA_VISIBLE_DEVICES=0" in body["Env"]


def test_anonymous_volume_stays_a_volume_mount_never_a_new_empty_one():
    p = plan()
    anon = {"Type": "volume", "Source": ANON, "Target": "/anon", "ReadOnly": False}
    assert p.body["HostConfig"]["Binds"] == ["data1:/data"]
    assert p.body["HostConfig"]["Mounts"] == [anon]
    assert any("anonymous volume fe9309adbc49 at /anon kept as a volume mount" in k for k in p.keeps)
    ro = inspect()
    ro["Mounts"][1]["RW"] = False
    assert plan(ro).body["HostConfig"]["Mounts"] == [dict(anon, ReadOnly=True)]
    # "-v /anon" as the SDK writes it: a bind with no source.
    sdk = inspect()
    sdk["HostConfig"]["Binds"] = ["data1:/data", "/anon"]
    assert plan(sdk).body["HostConfig"]["Binds"] == ["data1:/data"]
    assert plan(sdk).body["HostConfig"]["Mounts"] == [anon]
    # --mount type=volume,dst=/cache (no source) gets its volume's name.
    m = inspect()
    m["HostConfig"]["Binds"] = None
    m["HostConfig"]["Mounts"] = [{"Type": "volume", "Target": "/anon"}]
    m["Mounts"] = [m["Mounts"][1]]
    body = plan(m).body
    assert body["HostConfig"]["Mounts"] == [{"Type": "volume", "Target": "/anon", "Source": ANON}]
    assert body["HostConfig"]["Binds"] is None
    # Both bodies (original and new) pin it: the diff does not mention volumes.
    assert all("Binds" not in line and "Mounts" not in line for line in plan().diff)


def test_generated_hostname_is_dropped_a_chosen_one_kept():
    assert "Hostname" not in plan().body
    assert plan(inspect(Config__Hostname="trainbox")).body["Hostname"] == "trainbox"


def test_image_is_pinned_by_id_when_the_tag_moved():
    assert plan(image_tag_id=IMAGE_ID).body["Image"] == "busybox:test"
    moved = plan(image_tag_id="sha256:" + "9" * 64)
    assert moved.body["Image"] == IMAGE_ID
    assert any("now points to another image" in w for w in moved.warnings)
    gone = plan(image_tag_id=None)
    assert gone.body["Image"] == IMAGE_ID
    assert any("no longer exists" in w for w in gone.warnings)
    assert all("Image" not in line for line in moved.diff)


def test_user_networks_keep_aliases_and_drop_generated_ids_addresses_and_short_id_alias():
    attrs = inspect(HostConfig__NetworkMode="backend")
    attrs["NetworkSettings"]["Networks"] = {
        "backend": {"IPAMConfig": {"IPv4Address": "172.30.0.9"}, "Links": ["/db:/trainer/database"],
                    "Aliases": ["trainer", CID[:12], "api"], "NetworkID": "n1" * 32, "EndpointID": "e1" * 32,
                    "Gateway": "172.30.0.1", "IPAddress": "172.30.0.9", "IPPrefixLen": 16,
                    "MacAddress": "02:42:ac:1e:00:09", "DriverOpts": {"com.example": "1"}},
        "metrics": {"IPAMConfig": None, "Links": None, "Aliases": ["trainer", CID[:12]], "NetworkID": "n2",
                    "EndpointID": "e2", "IPAddress": "172.31.0.4", "MacAddress": "02:42:ac:1f:00:04",
                    "DriverOpts": None},
    }
    attrs["HostConfig"]["Links"] = ["/db:/trainer/database"]
    p = plan(attrs)
    assert p.body["NetworkingConfig"] == {"EndpointsConfig": {"backend": {
        "IPAMConfig": {"IPv4Address": "172.30.0.9"}, "Aliases": ["trainer", "api"], "Links": ["db:database"],
        "DriverOpts": {"com.example": "1"}}}}
    # The API takes one network at create time (before 1.44): the others are connected before start.
    assert p.connect == (("metrics", {"Aliases": ["trainer"]}),)
    assert p.body["HostConfig"]["Links"] == ["db:database"]


@pytest.mark.parametrize("mode", ["host", "none", "container:sidecar"])
def test_host_none_and_container_network_modes_get_no_networking_config(mode):
    attrs = inspect(HostConfig__NetworkMode=mode, Config__Hostname="sidecar-host")
    p = plan(attrs)
    assert "NetworkingConfig" not in p.body
    assert p.connect == ()
    # In another container's network namespace the hostname is that container's (watchtower #188).
    assert ("Hostname" in p.body) is (not mode.startswith("container:"))


# -- every grant form, rewritten in the form the container used -----------------------------


def test_legacy_runtime_nvidia_visible_devices_is_rewritten():
    attrs = inspect(HostConfig__Runtime="nvidia", HostConfig__DeviceRequests=None,
                    Config__Env=["NVIDIA_VISIBLE_DEVICES=1", "PATH=/bin"])
    p = plan(attrs, target="3")
    assert p.grant_form == "nvidia_runtime_env"
    assert p.from_gpus == (1,)
    assert f"NVIDIA_VISIBLE_DEVICES={uuid(3)}" in p.body["Env"]
    assert p.body["HostConfig"]["Runtime"] == "nvidia"
    assert p.diff == ("- Config.Env.NVIDIA_VISIBLE_DEVICES = \"1\"",
                      f"+ Config.Env.NVIDIA_VISIBLE_DEVICES = \"{uuid(3)}\"")


@pytest.mark.parametrize("runtime", ["nvidia-experimental", "NVIDIA"])
def test_any_nvidia_runtime_name_is_a_grant_migrate_can_move(runtime):
    attrs = inspect(HostConfig__Runtime=runtime, HostConfig__DeviceRequests=None,
                    Config__Env=["NVIDIA_VISIBLE_DEVICES=1", "PATH=/bin"])
    p = plan(attrs, target="3")
    assert (p.grant_form, p.from_gpus) == ("nvidia_runtime_env", (1,))
    assert f"NVIDIA_VISIBLE_DEVICES={uuid(3)}" in p.body["Env"]


def test_a_device_request_plus_a_device_node_holds_two_gpus_and_from_picks_one():
    node = {"PathOnHost": "/dev/nvidia13", "PathInContainer": "/dev/nvidia13", "CgroupPermissions": "rwm"}
    attrs = inspect(HostConfig__Devices=[node])  # --gpus device=0 plus GPU 3's node (minor 13)
    with pytest.raises(MigrationRefused, match="holds GPUs 0, 3; say which one"):
        plan(attrs)
    p = plan(attrs, from_gpu="3")
    assert p.from_gpus == (3,) and p.grant_form == "devices"
    assert p.body["HostConfig"]["Devices"][0]["PathOnHost"] == "/dev/nvidia12"
    assert p.body["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0"]
    assert p.grant_after == "GPU 0 via --gpus; GPU 2 (/dev/nvidia12) via device node"


def test_from_a_gpu_the_container_does_not_hold_is_refused():
    with pytest.raises(MigrationRefused, match=r"trainer does not hold GPU 2 \(it holds GPU 0\)") as info:
        plan(target="3", from_gpu="2")
    assert info.value.kind == "not-held"


def test_nvidia_visible_devices_without_the_nvidia_runtime_is_not_a_grant():
    # CUDA images set NVIDIA_VISIBLE_DEVICES=all by default; with runc it grants nothing.
    attrs = inspect(HostConfig__DeviceRequests=None, Config__Env=["NVIDIA_VISIBLE_DEVICES=all"])
    assert not read_grant(attrs, HostGpus.of(gpus()))
    with pytest.raises(MigrationRefused, match="has no GPU grant"):
        plan(attrs)


@pytest.mark.parametrize("written,expected", [("nvidia.com/gpu=0", "nvidia.com/gpu=2"),
                                              (f"nvidia.com/gpu={uuid(0)}", f"nvidia.com/gpu={uuid(2)}")])
def test_cdi_name_keeps_its_form(written, expected):
    attrs = inspect(HostConfig__DeviceRequests=[{"Driver": "cdi", "Count": 0, "DeviceIDs": [written],
                                                 "Capabilities": None, "Options": None}])
    p = plan(attrs)
    assert p.grant_form == "cdi"
    assert p.body["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [expected]
    assert len(p.diff) == 2


def test_raw_device_node_moves_to_the_target_minor_number():
    attrs = inspect(HostConfig__DeviceRequests=None, HostConfig__Devices=[
        {"PathOnHost": "/dev/nvidia11", "PathInContainer": "/dev/nvidia11", "CgroupPermissions": "rwm"},
        {"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl", "CgroupPermissions": "rwm"}])
    p = plan(attrs, target="2")
    assert p.from_gpus == (1,)  # minor 11 is GPU 1 on this host (minor numbers differ from indices)
    assert p.body["HostConfig"]["Devices"] == [
        {"PathOnHost": "/dev/nvidia12", "PathInContainer": "/dev/nvidia12", "CgroupPermissions": "rwm"},
        {"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl", "CgroupPermissions": "rwm"}]


def test_cuda_visible_devices_host_uuid_is_rewritten_index_is_left_alone():
    attrs = inspect(Config__Env=[f"CUDA_VISIBLE_DEVICES={uuid(0)}", "PATH=/bin"])
    p = plan(attrs)
    assert f"CUDA_VISIBLE_DEVICES={uuid(2)}" in p.body["Env"]
    assert f'+ Config.Env.CUDA_VISIBLE_DEVICES = "{uuid(2)}"' in p.diff
    assert plan().body["Env"] == inspect()["Config"]["Env"]


def test_all_gpus_becomes_the_target_and_an_index_beyond_it_is_warned_about():
    attrs = inspect(HostConfig__DeviceRequests=[{"Driver": "", "Count": -1, "DeviceIDs": None,
                                                 "Capabilities": [["gpu"]], "Options": {}}],
                    Config__Env=["CUDA_VISIBLE_DEVICES=1"])
    p = plan(attrs, target="3")
    assert p.from_all and p.from_label == "all GPUs"
    req = p.body["HostConfig"]["DeviceRequests"][0]
    assert (req["Count"], req["DeviceIDs"]) == (0, [uuid(3)])
    assert any("granted GPU 3 only" in w for w in p.warnings)
    assert any("CUDA_VISIBLE_DEVICES=1" in w and "set it to 0" in w for w in p.warnings)
    assert p.body["Env"] == ["CUDA_VISIBLE_DEVICES=1"]  # warned, never silently changed


def test_a_multi_gpu_grant_needs_from_and_moves_only_that_gpu():
    attrs = inspect(HostConfig__DeviceRequests=[{"Driver": "", "Count": 0, "DeviceIDs": ["0", uuid(1)],
                                                 "Capabilities": [["gpu"]], "Options": {}}])
    with pytest.raises(MigrationRefused, match="--from"):
        plan(attrs, target="3")
    p = plan(attrs, target="3", from_gpu="1")
    assert p.body["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0", uuid(3)]
    with pytest.raises(MigrationRefused, match="already holds GPU 0"):
        plan(attrs, target="0", from_gpu="1")


def test_target_by_uuid_and_unknown_target():
    assert plan(target=uuid(3)).to_gpu == 3
    with pytest.raises(MigrationNotFound, match="There is no GPU '7'"):
        plan(target="7")


# -- refusals, one sentence each ---------------------------------------------------------------


@pytest.mark.parametrize("label,kind", [("com.docker.swarm.task.id", "swarm"),
                                        ("io.kubernetes.pod.name", "kubernetes")])
def test_orchestrated_containers_are_refused(label, kind):
    with pytest.raises(MigrationRefused) as info:
        plan(inspect(Config__Labels={label: "x"}))
    assert info.value.kind == kind
    assert str(info.value).count(".") == 1 and str(info.value).startswith("trainer is")


@pytest.mark.parametrize("key,value", [("NetworkMode", "container:trainer"), ("PidMode", f"container:{CID}"),
                                       ("IpcMode", f"container:{CID[:12]}")])
def test_containers_sharing_its_namespaces_block_it(key, value):
    other = {"Id": "f" * 64, "Name": "/sidecar", "HostConfig": {key: value}}
    with pytest.raises(MigrationRefused, match="Container sidecar shares trainer's") as info:
        plan(others=[other])
    assert info.value.kind == "shared-namespace"
    unrelated = {"Id": "f" * 64, "Name": "/sidecar", "HostConfig": {key: "container:somebody-else"}}
    plan(others=[unrelated])


def test_volumes_from_blocks_it():
    other = {"Id": "f" * 64, "Name": "/backup", "HostConfig": {"VolumesFrom": ["trainer:ro"]}}
    with pytest.raises(MigrationRefused, match="mounts trainer's volumes"):
        plan(others=[other])


def test_same_gpu_lost_gpu_read_only_autoremove_paused():
    with pytest.raises(MigrationRefused, match="already on GPU 0"):
        plan(target="0")
    with pytest.raises(MigrationRefused, match="GPU 2 is lost"):
        plan(gpus=gpus(lost=(2,)))
    with pytest.raises(MigrationRefused, match="read-only") as info:
        plan(read_only=True)
    assert info.value.kind == "read-only"
    with pytest.raises(MigrationRefused, match="--rm"):
        plan(inspect(HostConfig__AutoRemove=True))
    paused = inspect()
    paused["State"]["Paused"] = True
    with pytest.raises(MigrationRefused, match="unpause"):
        plan(paused)


def test_target_that_cannot_fit_the_observed_peak_is_refused_unless_forced():
    full = gpus(used={2: 70 * GIB})
    with pytest.raises(MigrationRefused, match=r"GPU 2 has 10\.0 GiB free but trainer has used up to 20\.0 GiB") \
            as info:
        plan(gpus=full, peak_memory=20 * GIB)
    assert info.value.kind == "no-fit"
    forced = plan(gpus=full, peak_memory=20 * GIB, force=True)
    assert forced.forced and any(w.startswith("Forced:") for w in forced.warnings)
    assert plan(gpus=full, peak_memory=9 * GIB).to_gpu == 2


def test_compose_container_warns_and_prints_the_compose_change():
    attrs = inspect(Config__Labels={"com.docker.compose.project": "research",
                                    "com.docker.compose.service": "trainer",
                                    "com.docker.compose.config-hash": "abc"})
    p = plan(attrs)
    assert any("next 'docker compose up'" in w for w in p.warnings)
    assert f'device_ids: ["{uuid(2)}"]' in p.compose_change
    assert "reservations:" in p.compose_change and "  trainer:" in p.compose_change
    assert "To make the move survive" in p.describe()
    # The labels are copied as they are (config-hash included): the diff is still only the grant.
    assert p.body["Labels"] == attrs["Config"]["Labels"] and len(p.diff) == 2


def test_random_host_port_is_warned_about():
    attrs = inspect(HostConfig__PortBindings={"8080/tcp": [{"HostIp": "", "HostPort": ""}],
                                              "9090/tcp": [{"HostIp": "", "HostPort": "9090"}]})
    p = plan(attrs)
    assert [w for w in p.warnings if "random host port" in w] == [
        "Port 8080/tcp is published on a random host port; the new container gets a new one."]
    assert p.body["HostConfig"]["PortBindings"] == attrs["HostConfig"]["PortBindings"]


def test_describe_lists_grant_diff_and_steps():
    text = plan().describe()
    assert "from GPU 0 to GPU 2" in text
    assert "grant now:   GPU 0 via --gpus" in text
    assert f'+ HostConfig.DeviceRequests[0].DeviceIDs = ["{uuid(2)}"]' in text
    assert "anonymous volume fe9309adbc49 at /anon kept as a volume mount" in text
    assert "stop the old container (SIGINT, up to 30 s)" in text
    assert "restart policy unless-stopped" in text
    assert "Logs: 'docker logs' of the copy starts empty; the old container's logs are deleted with it at " \
           "step 8 (save them first: docker logs trainer > FILE)." in text
    assert json.dumps(plan().to_json())  # serialisable for logs and the journal


def test_body_diff_shows_every_changed_leaf():
    a = {"Env": ["A=1", "B=2"], "HostConfig": {"X": 1}}
    b = {"Env": ["A=1", "B=3", "C=4"], "HostConfig": {"X": 1}}
    assert body_diff(a, b) == ('- Config.Env.B = "2"', '+ Config.Env.B = "3"', '+ Config.Env.C = "4"')


# -- the dialog's target list ----------------------------------------------------------------


def test_target_options_put_the_suggestion_first_and_mark_what_cannot_fit():
    g = list(gpus(4, used={0: 30 * GIB, 1: 75 * GIB, 2: 2 * GIB, 3: 1 * GIB}))
    proc = Process(pid=10, gpu_index=0, type="compute", gpu_memory=20 * GIB, sm_utilization=50,
                   container=ContainerRef(id=CID, name="trainer"))
    g[0] = Gpu(**{**g[0].__dict__, "processes": (proc,)})
    snap = Snapshot(host="h", time=datetime.now(timezone.utc), driver_version=None, cuda_driver_version=None,
                    gpus=tuple(g), imbalance=Imbalance(True, ("pile-up",), "GPU 0 is piled up",
                                                       Suggestion(0, 2, "idle", container="trainer")))
    opts = target_options(snap, CID, peak_memory=20 * GIB, current=(0,))
    assert [o.index for o in opts] == [2, 3, 0, 1]
    assert opts[0].suggested and opts[0].refusal is None
    assert opts[2].current and "already on GPU 0" in opts[2].refusal
    assert "GPU 1 has 5.0 GiB free" in opts[3].refusal
    forced = {o.index: o for o in target_options(snap, CID, peak_memory=20 * GIB, force=True, current=(0,))}
    assert forced[1].refusal is None and forced[0].refusal is not None


# -- issue 11: the effective command, wording ----------------------------------------------------


def test_an_empty_entrypoint_is_posted_as_empty_and_the_effective_command_is_compared():
    attrs = inspect(Config__Entrypoint=None)
    attrs["Path"], attrs["Args"] = "python", ["train.py"]
    image = {"Entrypoint": ["/opt/nvidia/entrypoint.sh"], "Cmd": ["bash"]}
    p = plan(attrs, image_config=image)
    assert p.body["Entrypoint"] == [""] and len(p.diff) == 2  # the grant, nothing else
    assert p.command == ("python", "train.py")
    # Had the entrypoint not been kept, the plan would show what the copy runs instead.
    wrong = plan(dict(attrs, Path="/opt/nvidia/entrypoint.sh", Args=["python", "train.py"]), image_config=image)
    assert wrong.diff[-2:] == ('- (runs) = ["/opt/nvidia/entrypoint.sh", "python", "train.py"]',
                               '+ (runs) = ["python", "train.py"]')
    assert any("will be rolled back at the create step" in w for w in wrong.warnings)


def test_wording_restart_policy_retries_static_addresses_and_an_already_no_policy():
    attrs = inspect(HostConfig__RestartPolicy={"Name": "on-failure", "MaximumRetryCount": 5})
    assert "restart policy on-failure:5" in plan(attrs).keeps
    nets = inspect(HostConfig__NetworkMode="front")
    nets["NetworkSettings"] = {"Networks": {
        "front": {"IPAMConfig": None, "Aliases": ["trainer"], "IPAddress": "172.18.0.2"},
        "back": {"IPAMConfig": {"IPv4Address": "10.0.0.183"}, "Aliases": None, "IPAddress": "10.0.0.183"}}}
    assert ("networks back (aliases kept, static address 10.0.0.183 kept), front (aliases kept, address "
            "assigned by Docker)") in plan(nets).keeps
    no = inspect(HostConfig__RestartPolicy={"Name": "no", "MaximumRetryCount": 0})
    assert "2. set the old container's restart policy to 'no' (already 'no')" in plan(no).describe()
