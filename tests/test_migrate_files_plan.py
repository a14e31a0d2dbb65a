"""The planner's side of issue 23 on recorded inspect data: the container's own files, tmpfs mounts,
endpoint MACs on API >= 1.44, links on every network, --uts host, an unhealthy original, and the
command that recreates a pruned network.

The API 1.44 endpoint shapes are those of Docker 25 (``DNSNames`` is new there; a stopped container's
endpoint ``MacAddress`` is the one the user asked for, "" when Docker generates one; a running one's
is the address in use).
"""

from __future__ import annotations

import copy

import pytest

from gputui.actions.container_ops import connect_networks, link_pairs
from gputui.actions.migrate import MigrationRefused
from gputui.actions.migrate.body import create_body, keep_endpoint_macs
from gputui.actions.migrate.files import create_command
from gputui.actions.migrate.plan import ContainerFiles, carried_changes
from tests.test_migrate_plan import inspect, plan

MAC = "02:11:22:33:44:55"


def endpoint_125(mac: str, aliases: list[str] | None = None, links: list[str] | None = None) -> dict:
    """An endpoint as Docker 25 (API 1.44) shows it for a stopped container."""
    return {"IPAMConfig": None, "Links": links, "Aliases": aliases, "MacAddress": mac, "DriverOpts": None,
            "NetworkID": "5b1f0e8c2a7d", "EndpointID": "", "Gateway": "", "IPAddress": "", "IPPrefixLen": 0,
            "IPv6Gateway": "", "GlobalIPv6Address": "", "GlobalIPv6PrefixLen": 0, "DNSNames": None}


def on_networks(running: bool, mac_front: str, mac_back: str) -> dict:
    attrs = inspect(HostConfig__NetworkMode="front")
    attrs["State"]["Running"] = running
    attrs["NetworkSettings"]["Networks"] = {
        "front": endpoint_125(mac_front, aliases=["web"]),
        "back": endpoint_125(mac_back, links=["/db:/trainer/database"]),
    }
    return attrs


def test_a_mac_the_user_set_is_kept_from_api_1_44_and_generated_ones_are_not():
    body, connect, _ = create_body(on_networks(False, MAC, ""), "busybox:test", None, "1.44")
    assert body["NetworkingConfig"]["EndpointsConfig"]["front"]["MacAddress"] == MAC
    assert "MacAddress" not in dict(connect)["back"]  # Docker generates that one: the copy gets its own
    # Before 1.44 the endpoint MAC is operational data (the user's is Config.MacAddress, copied with Config).
    body, _, _ = create_body(on_networks(False, MAC, ""), "busybox:test", None, "1.43")
    assert "MacAddress" not in body["NetworkingConfig"]["EndpointsConfig"]["front"]


def test_a_running_containers_macs_are_read_again_once_it_stopped():
    running = on_networks(True, "02:42:ac:11:00:02", "02:42:ac:12:00:02")
    body, connect, _ = create_body(running, "busybox:test", None, "1.45")
    assert "MacAddress" not in body["NetworkingConfig"]["EndpointsConfig"]["front"]  # in use, maybe generated
    kept = keep_endpoint_macs(body, connect, on_networks(False, "", MAC))
    assert kept == [f"back {MAC}"]
    assert dict(connect)["back"]["MacAddress"] == MAC
    assert "MacAddress" not in body["NetworkingConfig"]["EndpointsConfig"]["front"]


class RecordingApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []

    def connect_container_to_network(self, cid, net, **kw):
        from docker.api import APIClient

        # What docker-py would post: its own endpoint builder must accept what we pass.
        APIClient(version="1.44").create_endpoint_config(
            aliases=kw["aliases"], links=kw["links"], ipv4_address=kw["ipv4_address"],
            ipv6_address=kw["ipv6_address"], link_local_ips=kw["link_local_ips"], driver_opt=kw["driver_opt"],
            mac_address=kw.get("mac_address"))
        self.calls.append((cid, net, kw))


def test_links_and_the_mac_reach_docker_py_in_its_own_form():
    body, connect, _ = create_body(on_networks(False, "", MAC), "busybox:test", None, "1.44")
    assert dict(connect)["back"]["Links"] == ["db:database"]  # the API's form, in the create body
    api = RecordingApi()
    connect_networks(api, "new", connect)
    (_, net, kw), = api.calls
    assert net == "back" and kw["links"] == [("db", "database")] and kw["mac_address"] == MAC
    assert link_pairs(["/db:/trainer/database", "cache"]) == [("db", "database"), ("cache", "")]


def test_uts_host_drops_the_hostname_docker_would_refuse():
    attrs = inspect(HostConfig__NetworkMode="host", Config__Hostname="gpu-node-7")
    attrs["HostConfig"]["UTSMode"] = "host"
    assert "Hostname" not in plan(attrs).body
    attrs["HostConfig"]["UTSMode"] = ""
    assert plan(attrs).body["Hostname"] == "gpu-node-7"  # --network host alone may name one


def test_changed_paths_outside_mounts_are_counted_and_carried():
    changes = [{"Path": "/anon", "Kind": 1}, {"Path": "/data", "Kind": 1}, {"Path": "/scratch", "Kind": 1},
               {"Path": "/bin", "Kind": 0}, {"Path": "/bin/ls", "Kind": 2}, {"Path": "/ckpt", "Kind": 1},
               {"Path": "/ckpt/model.pt", "Kind": 1}, {"Path": "/data/x", "Kind": 1}, {"Path": "/mnt", "Kind": 1},
               {"Path": "/mnt/deep", "Kind": 1}]
    attrs = inspect()
    attrs["HostConfig"]["Tmpfs"] = {"/scratch": ""}
    attrs["Mounts"].append({"Type": "bind", "Source": "/srv", "Destination": "/mnt/deep", "RW": True})
    assert carried_changes(changes, attrs) == ["D /bin/ls", "A /ckpt", "A /ckpt/model.pt"]
    p = plan(attrs, files=ContainerFiles(changes=tuple(changes), size_rw=5 << 20), now=0)
    assert p.layer_paths == 3 and p.layer_bytes == 5 << 20
    assert p.layer_image == "gputui-layer/trainer:" + p.backup_name.rsplit("-", 1)[1]
    assert p.body["Image"] == p.layer_image and p.body["Labels"]["io.gputui.migrate.image"] == "busybox:test"
    assert '+ Config.Image = "gputui-layer/trainer:' in "\n".join(p.diff)
    text = p.describe()
    assert "3 paths (5.0 MiB) changed since the image are carried" in text
    assert "tmpfs /scratch: contents lost (not measured: not read)" in text
    discarded = plan(attrs, files=ContainerFiles(changes=tuple(changes), size_rw=5 << 20, discard=True))
    assert discarded.layer_image is None and discarded.body["Image"] == "busybox:test"
    assert "3 paths (5.0 MiB) changed since the image are DISCARDED (--discard-changes)" in discarded.describe()
    nothing = plan(attrs, files=ContainerFiles(changes=({"Path": "/anon", "Kind": 1},), size_rw=0))
    assert nothing.layer_image is None and "nothing to carry" in nothing.describe()


def test_a_tmpfs_holding_data_needs_force():
    attrs = inspect()
    attrs["HostConfig"]["Mounts"] = [{"Type": "tmpfs", "Target": "/dev/shm/work"}]
    files = ContainerFiles(tmpfs={"/dev/shm/work": (8192, "")})
    with pytest.raises(MigrationRefused) as refused:
        plan(attrs, files=files)
    assert refused.value.kind == "tmpfs" and "holds 8.0 KiB, which a migration loses" in str(refused.value)
    assert "tmpfs /dev/shm/work: contents lost (holds 8.0 KiB)" in plan(attrs, files=files, force=True).describe()
    empty = ContainerFiles(tmpfs={"/dev/shm/work": (0, "")})
    assert "contents lost (empty)" in plan(attrs, files=empty).describe()


def test_an_unhealthy_original_and_a_link_to_nothing_are_said_in_the_plan():
    attrs = inspect(HostConfig__NetworkMode="front")
    attrs["State"]["Health"] = {"Status": "unhealthy", "FailingStreak": 4}
    attrs["NetworkSettings"]["Networks"] = {"front": endpoint_125(""),
                                            "back": endpoint_125("", links=["/gone:/trainer/g"])}
    warnings = plan(attrs, others=[]).warnings
    assert any("healthcheck reports unhealthy now" in w for w in warnings)
    assert any("links to container gone on network back, which does not exist" in w for w in warnings)
    other = copy.deepcopy(inspect(Name="/gone", Id="f" * 64))
    assert not any("does not exist" in w for w in plan(attrs, others=[other]).warnings)


def test_the_command_that_recreates_a_pruned_network_is_validated():
    facts = {"Driver": "bridge", "IPAM": {"Config": [{"Subnet": "10.231.7.0/24", "Gateway": "10.231.7.1"}]},
             "Internal": True}
    assert create_command("km-net", facts) == ("docker network create --driver bridge --subnet 10.231.7.0/24 "
                                               "--gateway 10.231.7.1 --internal km-net")
    hostile = {"Driver": "bridge; rm -rf /", "IPAM": {"Config": [{"Subnet": "$(reboot)", "Gateway": "10.0.0.1"}]}}
    assert create_command("km", hostile) == "docker network create --gateway 10.0.0.1 km"
    assert "not a valid network name" in create_command("km; reboot", {})


class SlowCommitApi:
    """Docker's commit as a slow call: it returns only once the migration has said it is still committing."""

    def __init__(self) -> None:
        import threading

        self.told = threading.Event()
        self.params: dict = {}

    def _url(self, path):
        return path

    def _post_json(self, url, data=None, params=None, timeout=None):
        self.params = dict(params or {}, timeout=timeout)
        assert self.told.wait(30), "no progress line while the commit ran"
        return {"Id": "sha256:" + "c" * 64}

    def _result(self, response, json=False):
        return response


class Recorder:
    def __init__(self) -> None:
        self.data: dict = {}

    def update(self, **kw):
        self.data.update(kw)


def test_a_long_commit_says_how_long_it_has_taken_and_is_journaled(monkeypatch):
    from gputui.actions.migrate import files
    from gputui.actions.migrate.model import MigrationRun

    monkeypatch.setattr(files, "COMMIT_TICK", 0.01)
    attrs = inspect()
    changes = ({"Path": "/ckpt/model.pt", "Kind": 1},)
    p = plan(attrs, files=ContainerFiles(changes=changes, size_rw=1 << 30))
    api, journal, lines = SlowCommitApi(), Recorder(), []

    def progress(pr):
        lines.append(pr.message)
        if "so far" in pr.message:
            api.told.set()

    run = MigrationRun(plan=p)
    files.commit_layer(api, run, journal, progress)
    assert lines[0] == f"commit the stopped original's files (1 path, 1.0 GiB) into {p.layer_image}"
    assert any(line.startswith("committing 1.0 GiB: ") and line.endswith(" s so far") for line in lines)
    assert lines[-1].startswith(f"committed 1.0 GiB into {p.layer_image} in ")
    assert journal.data == {"layer_started": True, "layer_image_id": "sha256:" + "c" * 64}
    assert api.params["container"] == p.container_id and api.params["pause"] is False
    assert 'LABEL "io.gputui.migrate.image"="busybox:test"' in api.params["changes"]
    assert api.params["timeout"] >= files.COMMIT_FLOOR_S  # a large layer is not cut off by the HTTP timeout


def test_an_abnormal_end_of_a_started_migration_names_recover(capfd):
    from types import SimpleNamespace

    from gputui.commands.migrate import _migrate

    class BrokenFlow:
        demo = False

        def run(self, container, target, confirm, *, guard, **kw):
            with guard():
                raise RuntimeError("a bug half-way")

    args = SimpleNamespace(container="trainer", to="2", yes=True, force=False, from_gpu=None,
                           discard_changes=False)
    with pytest.raises(RuntimeError):
        _migrate(BrokenFlow(), args, None, None)
    assert "the migration of trainer ended abnormally; run 'gputui migrate --recover'" in capfd.readouterr().err
