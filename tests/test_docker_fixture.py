"""The dockerd fixture behaves like a GPU host's Docker: what the container tests rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_gpus_flag_is_accepted_and_injects_nvidia_visible_devices(docker_cleanup):
    d = docker_cleanup
    c = d.run("fx-dev1", gpus="device=1")
    c.reload()
    assert c.attrs["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["1"]
    assert c.attrs["HostConfig"]["NetworkMode"] == "none"
    pid = c.attrs["State"]["Pid"]
    # dockerd injects the variable into the OCI spec only: the host sees it in the init's environ.
    assert _environ(pid)["NVIDIA_VISIBLE_DEVICES"] == "1"
    assert f"/docker/{c.id}" in Path(f"/proc/{pid}/cgroup").read_text()
    all_gpus = d.run("fx-all", gpus="all")
    all_gpus.reload()
    assert _environ(all_gpus.attrs["State"]["Pid"])["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_legacy_runtime_and_raw_device_node(docker_cleanup):
    d = docker_cleanup
    c = d.run("fx-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": "0"})
    c.reload()
    assert c.attrs["HostConfig"]["Runtime"] == "nvidia"
    node = d.device_node(3)
    raw = d.run("fx-raw", devices=[f"{node}:/dev/nvidia3:rwm"])
    raw.reload()
    assert raw.attrs["HostConfig"]["Devices"][0]["PathInContainer"] == "/dev/nvidia3"


def test_cleanup_removed_the_previous_tests_containers(dockerd):
    names = {c.name for c in dockerd.client.containers.list(all=True)}
    assert not names & {"fx-dev1", "fx-all", "fx-legacy", "fx-raw"}


def test_daemon_without_the_hook_refuses_gpus(dockerd_factory):
    import docker

    bare = dockerd_factory(hook=False)
    with pytest.raises(docker.errors.APIError, match="could not select device driver"):
        bare.run("fx-nohook", gpus="all")
    bare.remove_containers()
