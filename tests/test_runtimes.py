"""Every container runtime, in-process: sources read side by side, cgroup forms, the faces' wording.

The real engines (podman, containerd, a kubelet stand-in) are driven in tests/test_podman.py and
tests/test_containerd_kubelet.py; here are the rules those rely on, each checked on its own.
"""

from __future__ import annotations

import threading
import time

import pytest

from gputui.core.config import ConfigError, load_settings
from gputui.core.fleet.model import FleetGpu, FleetHost, FleetProcess
from gputui.core.model import Container, ContainerInventory, ContainerRecord, ProcessFacts
from gputui.core.poller import attribute
from gputui.core.sources.cgroups import CgroupMatch, parse_cgroup
from gputui.core.sources.combined import CombinedContainers
from gputui.core.sources.kubelet_source import device_id, is_gpu_resource

HEX = "ab" * 32


class _Fixed:
    def __init__(self, *records: ContainerRecord, available: bool = True, error: str | None = None) -> None:
        self.inv = ContainerInventory(available, error, records)
        self.calls = 0

    def inventory(self, gpu_uuids, minors):
        self.calls += 1
        return self.inv

    def resolve(self, container_id):
        return ContainerInventory(True, None, tuple(r for r in self.inv.containers if r.id == container_id))

    def close(self):
        pass


class _Hung(_Fixed):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def inventory(self, gpu_uuids, minors):
        self.calls += 1
        self.release.wait(30)
        return ContainerInventory(True, None, (ContainerRecord(id="late", name="late", image=None, state="running"),))


def test_a_hung_engine_never_hides_the_others_nor_holds_more_than_one_thread():
    hung = _Hung()
    podman = _Fixed(ContainerRecord(id="p1", name="train", image=None, state="running", runtime="podman"))
    combined = CombinedContainers([("unix:///var/run/docker.sock", hung), ("unix:///run/podman/podman.sock", podman)],
                                  timeout=0.5)
    try:
        started = time.monotonic()
        inv = combined.inventory((), {})
        assert time.monotonic() - started < 5
        assert inv.available and [r.name for r in inv.containers] == ["train"]
        docker = "unix:///var/run/docker.sock"
        assert combined.down == {docker: f"{docker} did not answer within 0.5 s"}
        again = combined.inventory((), {})
        assert [r.name for r in again.containers] == ["train"] and hung.calls == 1 and podman.calls == 2
    finally:
        hung.release.set()
    deadline = time.monotonic() + 10
    while True:
        inv = combined.inventory((), {})
        if {r.name for r in inv.containers} == {"late", "train"}:
            break
        assert time.monotonic() < deadline
    assert combined.down == {}


def test_one_container_listed_by_two_parts_is_listed_once_and_all_down_says_why():
    same = ContainerRecord(id="x", name="web", image=None, state="running")
    combined = CombinedContainers([("docker", _Fixed(same)), ("containerd", _Fixed(same))])
    assert len(combined.inventory((), {}).containers) == 1
    down = CombinedContainers([("a", _Fixed(available=False, error="the Docker daemon is not running")),
                               ("b", _Fixed(available=False, error="containerd is not running"))])
    assert down.inventory((), {}) == ContainerInventory(False, "the Docker daemon is not running; containerd is "
                                                              "not running")


@pytest.mark.parametrize("path, expected", [
    (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/nerdctl-{HEX}.scope",
     CgroupMatch("containerd", HEX)),
    (f"0::/system.slice/nerdctl-{HEX}.scope", CgroupMatch("containerd", HEX)),
    ("0::/default/web-1x", CgroupMatch("containerd", "web-1x", namespace="default", tentative=True)),
    ("0::/k8s.io/" + HEX, CgroupMatch("containerd", HEX, namespace="k8s.io", tentative=True)),
    ("0::/user.slice/user-1000.slice", None),
    ("0::/system.slice/cron.service", None),
    (f"8:pids:/kubepods/burstable/pod1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b/{HEX}\n4:memory:/process_api/abc\n",
     CgroupMatch("kubernetes", HEX, pod_uid="1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b")),
])
def test_containerd_cgroup_forms(path, expected):
    assert parse_cgroup(path) == expected


def test_a_two_level_cgroup_names_a_container_only_when_containerd_knows_it():
    known = ContainerRecord(id="web-1x", name="web", image="busybox", state="running", runtime="containerd",
                            namespace="default")
    facts = ProcessFacts(pid=7, visible=True, cgroup="4:memory:/default/web-1x\n")
    ref = attribute(facts, {"web-1x": known}, True)
    assert ref is not None and (ref.name, ref.runtime, ref.namespace) == ("web", "containerd", "default")
    host = ProcessFacts(pid=8, visible=True, cgroup="4:memory:/process_api/5d7b0dc8dd56\n")
    assert attribute(host, {"web-1x": known}, True) is None


@pytest.mark.parametrize("raw, expected", [
    ("GPU-1234::3", "GPU-1234"), ("MIG-abcd", "MIG-abcd"), ("GPU-9", "GPU-9"), ("", None), ("a b", None),
    ("x" * 200, None),
])
def test_kubelet_device_ids_lose_the_time_slicing_suffix(raw, expected):
    assert device_id(raw) == expected


def test_kubelet_gpu_resources():
    assert [n for n in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "example.com/nic",
                        "amd.com/gpu") if is_gpu_resource(n)] == ["nvidia.com/gpu", "nvidia.com/gpu.shared",
                                                                   "nvidia.com/mig-1g.10gb"]


@pytest.mark.parametrize("text", ['containerd_address = "run/containerd.sock"\n',
                                  'kubelet_socket = "/var/lib/kubelet/\\u0007.sock"\n', "kubelet_socket = 3\n"])
def test_socket_settings_must_be_absolute_clean_paths(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_settings(path)


def test_socket_settings_read(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('containerd_address = "unix:///run/k3s/containerd/containerd.sock"\n'
                    'kubelet_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"\n')
    s = load_settings(path)
    assert (s.containerd_address, s.kubelet_socket) == ("/run/k3s/containerd/containerd.sock",
                                                        "/var/lib/kubelet/pod-resources/kubelet.sock")


def test_the_fleet_host_names_a_pod_and_sends_no_migrate_command_for_it():
    from gputui.ui.screens.fleet_host import migrate_command, process_cells

    gpu = FleetGpu(index=0, uuid="GPU-0", name="H100")
    host = FleetHost(host="n1", instance="n1:9835", job="gputui", up=True, last_seen=None, source="gputui",
                     gpus=(gpu, FleetGpu(index=1, uuid="GPU-1")))
    pod = FleetProcess(pid=7, user="root", exe="python", gpu_memory=1, container="cuda", runtime="kubernetes",
                       pod="trainer-0", namespace="ml")
    assert process_cells(gpu, pod)[4].plain == "ml/trainer-0/cuda"
    cmd, why = migrate_command(host, gpu, pod)
    assert cmd is None and "Kubernetes pod ml/trainer-0" in why and "nvidia.com/gpu" in why
    docker = FleetProcess(pid=8, user="root", exe="python", gpu_memory=1, container="web", runtime="docker")
    assert process_cells(gpu, docker)[4].plain == "web"
    assert migrate_command(host, gpu, docker)[0] is not None


def test_the_containers_view_shows_a_pods_grant_and_pod():
    from rich.console import Console

    from gputui.core.model import Gpu, Snapshot
    from gputui.ui.screens.containers import detail, grant_cell, via_cell

    c = Container(id=HEX, name="cuda", image="img", state="running", gpus=("GPU-1",), grant_source="kubelet",
                  cuda_visible_devices=None, gpu_memory=0, pids=(), runtime="kubernetes", granted_gpus=(1,),
                  pod="trainer-0", namespace="ml", pod_uid="1b2c")
    assert (grant_cell(c, 4), via_cell(c)) == ("1", "nvidia.com/gpu")
    snap = Snapshot(host="h", time=__import__("datetime").datetime.now().astimezone(), driver_version=None,
                    cuda_driver_version=None, gpus=tuple(Gpu(index=i, uuid=f"GPU-{i}", name="H100") for i in range(4)))
    console = Console(width=120, record=True)
    console.print(detail(c, snap))
    text = console.export_text()
    assert "ml/trainer-0  UID 1b2c" in text and "GPU 1 via nvidia.com/gpu" in text


def test_the_kubelets_log_links_name_a_container_of_any_cri(tmp_path):
    from gputui.core.sources.cgroups import ContainerLogs, name_pod

    crio = "0123456789abcdef" * 4
    logs = ContainerLogs(str(tmp_path))
    match = parse_cgroup(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4718_"
                         f"8a9b_0c1d2e3f4a5b.slice/crio-{crio}.scope\n")
    assert match is not None and match.runtime == "kubernetes"
    assert name_pod(match, containers=logs.lookup) == match  # no links: unnamed
    (tmp_path / f"trainer-0_ml_cuda-{crio}.log").symlink_to("/nonexistent")
    (tmp_path / "not_a_link_name.log").touch()
    named = name_pod(match, containers=logs.lookup)
    assert (named.namespace, named.pod, named.name, named.pod_uid) == \
        ("ml", "trainer-0", "cuda", "1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b")


def test_a_podman_socket_that_went_away_is_named_as_podmans(tmp_path):
    from gputui.core.sources.docker_source import DockerSource

    gone = f"unix://{tmp_path}/podman/podman.sock"
    inv = DockerSource(timeout=1, environ={"PATH": ""}, host=gone).inventory((), {})
    assert inv == ContainerInventory(False, f"podman's API service is not running (no socket at {tmp_path}/podman/"
                                            "podman.sock)")


def test_two_pods_with_a_container_of_the_same_name_make_distinct_series():
    from gputui.core.model import Finding, Gpu
    from gputui.exporter.metrics import _container_families

    def pod(name: str, uid: str) -> Container:
        return Container(id=uid * 32, name="cuda", image="img", state="running", gpus=("GPU-0",),
                         grant_source="kubelet", cuda_visible_devices=None, gpu_memory=1, pids=(),
                         findings=(Finding("misplaced", "m"),), runtime="kubernetes", granted_gpus=(0,), pod=name,
                         namespace="ml", pod_uid=uid)

    families = _container_families([pod("a-0", "a1"), pod("b-0", "b1")], (Gpu(index=0, uuid="GPU-0", name="X"),))
    for family in families:
        keys = [tuple(sorted(s.labels.items())) for s in family.samples]
        assert len(keys) == 2 and len(set(keys)) == 2, family.name
