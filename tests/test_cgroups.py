"""PID -> container from recorded /proc/PID/cgroup contents, for every runtime and cgroup layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.core.sources.cgroups import CgroupMatch, PodDirectory, name_pod, parse_cgroup, parse_path

DATA = Path(__file__).parent / "data" / "cgroup"

RECORDED = "4a99790aa5c445ff25fd9a1d409cd70aa41d98d9a34d82d41f0175a596417335"
OUTER = "560e3e12b1e0dafa161e62fb3327ad65c98b7cd53849b17c627e8d3e1d419d6a"
INNER = "33bf6fbd7cd8379785a21e233d8e09f824e7bab459168a96312c1c882c1d7e1f"
PODMAN = "2f259bab93aaaaa2542ba43ef33eb990d0999ee1b9924b557b7be53c0b7a1bb9"
K8S = "17c132990e8e8523ccd403287b6ae761c1cd57f764df278bce7ed310bbddd7f1"
CRIO = "c64064614423cb790e88b3e5492ff5ccf673b25ae823089f7a60c65cda24d809"
UID = "7d3c9a2e-5b1f-4e0a-9c6d-2f8b1a4e6c30"

EXPECTED = {
    "docker-cgroupfs-v1.txt": CgroupMatch("docker", RECORDED),
    "docker-cgroupfs-v2.txt": CgroupMatch("docker", OUTER),
    "docker-systemd-v1.txt": CgroupMatch("docker", OUTER),
    "docker-systemd-v2.txt": CgroupMatch("docker", OUTER),
    "docker-systemd-v2-init-scope.txt": CgroupMatch("docker", OUTER),
    "docker-rootless-v2.txt": CgroupMatch("docker", OUTER),
    # docker-in-docker: the host's container is the outermost one.
    "dind-cgroupfs-v1.txt": CgroupMatch("docker", OUTER),
    "dind-systemd-v2.txt": CgroupMatch("docker", OUTER),
    "podman-v2.txt": CgroupMatch("podman", PODMAN),
    "podman-rootless-v2.txt": CgroupMatch("podman", PODMAN),
    "podman-cgroupfs-v1.txt": CgroupMatch("podman", PODMAN),
    "podman-conmon-v2.txt": None,
    "k8s-containerd-systemd-v2.txt": CgroupMatch("kubernetes", K8S, pod_uid=UID),
    "k8s-containerd-systemd-v1.txt": CgroupMatch("kubernetes", K8S, pod_uid=UID),
    "k8s-containerd-cgroupfs-v1.txt": CgroupMatch("kubernetes", K8S, pod_uid=UID),
    "k8s-guaranteed-cgroupfs-v2.txt": CgroupMatch("kubernetes", K8S, pod_uid=UID),
    "k8s-crio-systemd-v2.txt": CgroupMatch("kubernetes", CRIO, pod_uid=UID),
    "k8s-crio-conmon-v2.txt": None,
    "k8s-dockershim-systemd-v1.txt": CgroupMatch("kubernetes", K8S, pod_uid=UID),
    "private-cgroupns-systemd-v2.txt": CgroupMatch("docker", OUTER),
    "private-cgroupns-cgroupfs-v2.txt": CgroupMatch("docker", OUTER),
    "private-cgroupns-deep-v2.txt": CgroupMatch("docker", OUTER),
    "nerdctl-systemd-v2.txt": CgroupMatch("containerd", PODMAN),
    "host-session-v2.txt": None,
    "host-dockerd-v2.txt": None,
    "host-root-v1.txt": None,
    # any two-level path reads like containerd's /<namespace>/<id>: tentative, kept only if containerd knows it
    "host-process-v1-recorded.txt": CgroupMatch("containerd", "5d7b0dc8dd568062029f2e35f9917519",
                                                namespace="process_api", tentative=True),
}


def test_every_recorded_file_has_an_expectation():
    assert {p.name for p in DATA.glob("*.txt")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_cgroup(name):
    assert parse_cgroup((DATA / name).read_text()) == EXPECTED[name]


@pytest.mark.parametrize("text", ["", None, "garbage", "0::", "12:memory", "\n\n"])
def test_nothing_to_parse_is_not_a_container(text):
    assert parse_cgroup(text) is None


@pytest.mark.parametrize("path", [
    "/docker/" + OUTER[:63],  # one digit short
    "/docker/" + OUTER.upper(),  # ids are lower-case hex
    "/system.slice/docker-" + OUTER + "x.scope",
    "/system.slice/" + OUTER,  # a bare id under no engine's parent
    "/user.slice/pod" + UID.replace("-", "") + "/x",  # a pod-looking name outside kubepods, no container
])
def test_lookalikes_are_rejected(path):
    assert parse_path(path) is None


def test_a_v1_line_telling_the_pod_wins_over_one_that_does_not():
    text = f"4:memory:/docker/{K8S}\n1:name=systemd:/kubepods/burstable/pod{UID}/{K8S}\n"
    assert parse_cgroup(text) == CgroupMatch("kubernetes", K8S, pod_uid=UID)


def test_static_pod_uid_is_a_config_hash():
    uid = "6a7f1f1e0c2d4b5e8f9a0b1c2d3e4f50"
    assert parse_path(f"/kubepods/besteffort/pod{uid}/{K8S}") == CgroupMatch("kubernetes", K8S, pod_uid=uid)


def test_pod_names_come_from_the_kubelet_log_directories(tmp_path):
    (tmp_path / f"ml-team_trainer-7f9c_{UID}").mkdir()
    (tmp_path / "not-a-pod-dir").mkdir()
    pods = PodDirectory(str(tmp_path))
    match = parse_cgroup((DATA / "k8s-containerd-systemd-v2.txt").read_text())
    named = name_pod(match, pods.lookup)
    assert (named.pod, named.namespace, named.pod_uid, named.id) == ("trainer-7f9c", "ml-team", UID, K8S)
    # A pod created later is found once the directory changes.
    other = "11111111-2222-3333-4444-555555555555"
    assert pods.lookup(other) is None
    (tmp_path / f"default_other_{other}").mkdir()
    os.utime(tmp_path, (1, 1))  # a changed mtime, even within the same clock tick
    assert pods.lookup(other) == ("default", "other")


def test_pod_names_unknown_without_the_kubelet(tmp_path):
    pods = PodDirectory(str(tmp_path / "missing"))
    match = parse_cgroup((DATA / "k8s-crio-systemd-v2.txt").read_text())
    assert name_pod(match, pods.lookup) == match
    docker = parse_cgroup((DATA / "docker-systemd-v2.txt").read_text())
    assert name_pod(docker, pods.lookup) is docker
    assert name_pod(None) is None
