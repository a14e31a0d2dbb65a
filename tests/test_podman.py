"""podman through its Docker-compatible API: a real rootful podman on a private socket, its containers' real
host PIDs reported on fake GPUs, read by the installed gputui.

podman refuses the whole container list when asked for the ``restarting`` state, keeps its device grants
outside the compat inspect, and names its cgroups ``libpod-<id>``: each face must still say which podman
container holds which GPU, with ``"runtime": "podman"`` and the grant podman stores.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from gputui.core.sources.docker_source import DockerSource, engine_hosts
from gputui.core.sources.podman import cdi_names, podman_grant_attrs
from tests.exporter_helpers import Exporter
from tests.fakenvml.scenario import GiB, fake_uuid, gpu, process, scenario
from tests.fixtures.podman import IMAGE, Podman

#: the tests that start podman and run gputui over the fake driver
real = pytest.mark.integration

UUIDS = tuple(fake_uuid(i) for i in range(4))
MINORS = {i: fake_uuid(i) for i in range(4)}


def _three(pod: Podman) -> dict[str, tuple[str, int]]:
    """One container per grant form podman keeps: the environment, a device node, none."""
    return {
        "pm-env": pod.run("pm-env", env={"NVIDIA_VISIBLE_DEVICES": "2"},
                          labels={"com.docker.compose.project": "lab", "com.docker.compose.service": "train"}),
        "pm-node": pod.run("pm-node", devices=[f"{pod.device_node(1)}:/dev/nvidia1"]),
        "pm-plain": pod.run("pm-plain"),
    }


@real
def test_the_podman_source_lists_names_runtime_and_stored_grants(podman_cleanup):
    pod = podman_cleanup
    made = _three(pod)
    inv = DockerSource(timeout=10, environ={"DOCKER_HOST": pod.host, "PATH": os.environ.get("PATH", "")}) \
        .inventory(UUIDS, MINORS)
    assert inv.available, inv.error
    by_name = {r.name: r for r in inv.containers}
    assert set(by_name) >= set(made)
    assert {by_name[n].runtime for n in made} == {"podman"}
    env, node, plain = by_name["pm-env"], by_name["pm-node"], by_name["pm-plain"]
    assert (env.gpus, env.grant_source, env.compose_project, env.compose_service) == \
        ((fake_uuid(2),), "nvidia_runtime_env", "lab", "train")
    assert (node.gpus, node.grant_source) == ((fake_uuid(1),), "devices")
    assert (plain.gpus, plain.grant_source) == ((), "none")
    assert {n: by_name[n].main_pid for n in made} == {n: pid for n, (_, pid) in made.items()}


@real
def test_every_face_names_podman_containers_and_judges_their_grants(podman_cleanup, fake_nvml):
    pod = podman_cleanup
    made = _three(pod)
    pid = {n: p for n, (_, p) in made.items()}
    fake_nvml.write(scenario([
        gpu(0, processes=[process(pid["pm-node"], 2 * GiB)]),  # granted GPU 1 (device node), runs on 0
        gpu(1),
        gpu(2, processes=[process(pid["pm-env"], 3 * GiB, sm=30)]),
        gpu(3, processes=[process(pid["pm-plain"], 1 * GiB)]),
    ]))
    env = {"DOCKER_HOST": pod.host}
    res = fake_nvml.run_gputui("snapshot", "--json", env_extra=env)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["docker"] == {"available": True, "error": None}
    owner = {p["pid"]: p["container"] for g in snap["gpus"] for p in g["processes"]}
    assert owner[pid["pm-env"]] == {"id": made["pm-env"][0], "name": "pm-env", "image": IMAGE,
                                    "compose_project": "lab", "compose_service": "train", "runtime": "podman",
                                    "pod": None, "namespace": None, "pod_uid": None}
    assert {owner[pid[n]]["name"]: owner[pid[n]]["runtime"] for n in made} == \
        {"pm-env": "podman", "pm-node": "podman", "pm-plain": "podman"}
    containers = {c["name"]: c for c in snap["containers"]}
    assert {n: containers[n]["runtime"] for n in made} == {n: "podman" for n in made}
    assert containers["pm-env"]["granted_gpus"] == [2] and containers["pm-env"]["findings"] == []
    assert containers["pm-node"]["granted_gpus"] == [1]
    assert [f["kind"] for f in containers["pm-node"]["findings"]] == ["misplaced"]
    assert containers["pm-plain"]["granted_gpus"] == []

    once = fake_nvml.run_gputui("--once", env_extra=env)
    assert once.returncode == 0, once.stderr
    rows = {line.split()[1]: line for line in once.stdout.splitlines() if line.split()[1:2] and
            line.split()[1].isdigit()}
    for name in made:
        assert name in rows[str(pid[name])]
    assert "container pm-node [misplaced]" in once.stdout

    exporter = Exporter(["--interval", "0.5"], {**fake_nvml.env(), **env})
    try:
        text = ""
        for _ in range(60):
            text = exporter.metrics()
            if 'container="pm-env"' in text:
                break
            time.sleep(0.5)
    finally:
        exporter.stop()
    line = next(x for x in text.splitlines() if x.startswith("gputui_process_gpu_memory_bytes{")
                and 'container="pm-env"' in x)
    assert 'runtime="podman"' in line
    memory = next(x for x in text.splitlines() if x.startswith("gputui_container_gpu_memory_bytes{")
                  and 'container="pm-env"' in x)
    assert 'runtime="podman"' in memory


@real
def test_migrate_refuses_a_podman_container_and_changes_nothing(podman_cleanup, fake_nvml):
    pod = podman_cleanup
    cid, pid = pod.run("pm-move", env={"NVIDIA_VISIBLE_DEVICES": "0"})
    fake_nvml.write(scenario([gpu(0, processes=[process(pid, 1 * GiB)]), gpu(1)]))
    before = pod.inspect("pm-move")
    res = fake_nvml.run_gputui("migrate", "pm-move", "--to", "1", "--yes", env_extra={"DOCKER_HOST": pod.host})
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "pm-move is a podman container, which gputui does not migrate" in res.stderr
    assert "podman run --device nvidia.com/gpu=N" in res.stderr
    after = pod.inspect("pm-move")
    assert (after["Id"], after["State"]["Pid"], after["Config"]["Env"], after["State"]["StartedAt"]) == \
        (before["Id"], before["State"]["Pid"], before["Config"]["Env"], before["State"]["StartedAt"])
    assert [c["Names"] for c in json.loads(pod.podman("ps", "-a", "--format", "json"))
            if "gputui-old" in " ".join(c["Names"])] == []


def test_sockets_docker_first_then_podman_rootful_then_the_users_own(tmp_path):
    def sock(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        return s

    rootful = tmp_path / "run" / "podman" / "podman.sock"
    runtime_dir = tmp_path / "user"
    own = runtime_dir / "podman" / "podman.sock"
    docker = runtime_dir / "docker.sock"
    env = {"XDG_RUNTIME_DIR": str(runtime_dir), "PATH": ""}
    # Nothing at all: Docker's place alone, so its absence is what the user is told.
    assert engine_hosts(env, podman_rootful=str(rootful)) == ["unix:///var/run/docker.sock"] or \
        os.path.exists("/var/run/docker.sock")
    keep = [sock(rootful), sock(own)]
    hosts = engine_hosts(env, podman_rootful=str(rootful))
    assert hosts[-2:] == [f"unix://{rootful}", f"unix://{own}"]
    keep.append(sock(docker))
    if not os.path.exists("/var/run/docker.sock"):
        assert engine_hosts(env, podman_rootful=str(rootful)) == \
            [f"unix://{docker}", f"unix://{rootful}", f"unix://{own}"]
    assert engine_hosts({**env, "DOCKER_HOST": "unix:///x.sock"}, podman_rootful=str(rootful)) == ["unix:///x.sock"]
    for s in keep:
        s.close()


def test_cdi_names_come_from_the_create_command_and_replace_the_nodes_they_made(tmp_path):
    cmd = ["podman", "run", "-d", "--device", "nvidia.com/gpu=1", "--device=nvidia.com/gpu=GPU-abc",
           "--device", "/dev/fuse", "img"]
    assert cdi_names(cmd) == ["nvidia.com/gpu=1", "nvidia.com/gpu=GPU-abc"]
    assert cdi_names("not a list") == [] and cdi_names([1, None]) == []
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"linux": {"devices": [
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
        {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]}}))
    attrs = {"HostConfig": {"Devices": []}}
    nodes = podman_grant_attrs(attrs, {"OCIConfigPath": str(spec), "Config": {"CreateCommand": []}}, (os.geteuid(),))
    assert nodes["HostConfig"]["Devices"] == [
        {"PathOnHost": "/dev/nvidia1", "PathInContainer": "/dev/nvidia1", "CgroupPermissions": "rwm"}]
    cdi = podman_grant_attrs(attrs, {"OCIConfigPath": str(spec), "Config": {"CreateCommand": cmd[:5]}},
                             (os.geteuid(),))
    assert [d["PathOnHost"] for d in cdi["HostConfig"]["Devices"]] == ["nvidia.com/gpu=1"]
    # A spec owned by someone else than root or the socket's owner is not read; a symlink is not followed.
    assert podman_grant_attrs(attrs, {"OCIConfigPath": str(spec)}, (os.geteuid() + 1,)) is attrs
    link = tmp_path / "link.json"
    link.symlink_to(spec)
    assert podman_grant_attrs(attrs, {"OCIConfigPath": str(link)}, (os.geteuid(),)) is attrs
    assert attrs == {"HostConfig": {"Devices": []}}


@real
def test_docker_and_podman_side_by_side_both_list_their_containers(docker_cleanup, podman_cleanup, fake_nvml,
                                                                   tmp_path):
    """Without DOCKER_HOST gputui reads Docker's socket and podman's: here the rootless places under
    XDG_RUNTIME_DIR (docker.sock, podman/podman.sock), pointed at the test daemons."""
    if os.path.exists("/var/run/docker.sock") or os.path.exists("/run/podman/podman.sock"):
        pytest.skip("this host's own Docker or podman socket would be read first")
    d, pod = docker_cleanup, podman_cleanup
    runtime_dir = tmp_path / "xdg"
    (runtime_dir / "podman").mkdir(parents=True)
    (runtime_dir / "docker.sock").symlink_to(d.host[len("unix://"):])
    (runtime_dir / "podman" / "podman.sock").symlink_to(pod.host[len("unix://"):])
    docker_pid = d.run("dk-side", gpus="device=0").attrs["State"]["Pid"]
    _, podman_pid = pod.run("pm-side", env={"NVIDIA_VISIBLE_DEVICES": "1"})
    fake_nvml.write(scenario([gpu(0, processes=[process(docker_pid, 1 * GiB)]),
                              gpu(1, processes=[process(podman_pid, 1 * GiB)])]))
    env = {**fake_nvml.env(), "XDG_RUNTIME_DIR": str(runtime_dir)}
    env.pop("DOCKER_HOST", None)
    res = subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    owner = {p["pid"]: p["container"] for g in snap["gpus"] for p in g["processes"]}
    assert (owner[docker_pid]["name"], owner[docker_pid]["runtime"]) == ("dk-side", "docker")
    assert (owner[podman_pid]["name"], owner[podman_pid]["runtime"]) == ("pm-side", "podman")
    granted = {c["name"]: (c["runtime"], c["granted_gpus"]) for c in snap["containers"]}
    assert granted["dk-side"] == ("docker", [0]) and granted["pm-side"] == ("podman", [1])
