"""containerd (nerdctl, ctr) and Kubernetes pods, named like Docker containers, on every face.

Real parts: a private containerd (its own root, state and socket) with containers started by ``ctr run`` in
the namespaces ``default`` (nerdctl and compose labels), ``k8s.io`` (the CRI's labels) and ``moby`` (Docker's,
never listed twice); a kubelet stand-in serving the real ``v1.PodResourcesLister`` proto on a private unix
socket; real ``sleep`` processes placed in real cgroup directories named as the kubelet names them. The
fake NVIDIA driver reports those processes' host PIDs on chosen GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from concurrent import futures
from pathlib import Path

import pytest

from gputui.core.sources.containerd_source import ContainerdSource
from gputui.core.sources.kubelet_source import KubeletReader
from tests.exporter_helpers import Exporter
from tests.fakenvml.scenario import GiB, fake_uuid, gpu, process, scenario
from tests.fixtures.containerd import IMAGE, Containerd

grpc = pytest.importorskip("grpc")

POD_UID = "1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b"
K8S_ID = "c0ffee" + "0" * 52 + "123456"  # a CRI container id: 64 hex digits
UUIDS = tuple(fake_uuid(i) for i in range(4))
MINORS = {i: fake_uuid(i) for i in range(4)}
CRI_LABELS = {"io.kubernetes.pod.name": "trainer-0", "io.kubernetes.pod.namespace": "ml",
              "io.kubernetes.pod.uid": POD_UID, "io.kubernetes.container.name": "cuda"}


class KubeletStandIn:
    """The kubelet's pod-resources API on a private socket, answering ``pods`` as the real proto says."""

    def __init__(self, path: str, pods: list[tuple[str, str, list[tuple[str, dict[str, list[str]]]]]]) -> None:
        from gputui.core.sources.protos.kubelet.podresources.v1 import api_pb2, api_pb2_grpc

        self.calls = 0
        stand_in = self

        class Lister(api_pb2_grpc.PodResourcesListerServicer):
            def List(self, request, context):  # noqa: N802 - the proto's name
                stand_in.calls += 1
                return api_pb2.ListPodResourcesResponse(pod_resources=[
                    api_pb2.PodResources(name=name, namespace=ns, containers=[
                        api_pb2.ContainerResources(name=cname, devices=[
                            api_pb2.ContainerDevices(resource_name=res, device_ids=ids)
                            for res, ids in devices.items()])
                        for cname, devices in containers])
                    for ns, name, containers in pods])

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()
        self.path = path

    def stop(self) -> None:
        self.server.stop(grace=None)


class KubeCgroup:
    """A real cgroup folder named as the kubelet names a container's (cgroupfs driver, BestEffort QoS),
    under a private parent so nothing else on the host is touched; ``sleep`` processes run in it."""

    def __init__(self, pod_uid: str, container_id: str) -> None:
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        self.base = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/pids")
        self.top = self.base / f"gtrt-{uuid.uuid4().hex[:8]}"
        self.dir = self.top / "kubepods" / "besteffort" / f"pod{pod_uid}" / container_id
        self.dir.mkdir(parents=True)
        self.procs: list[subprocess.Popen[bytes]] = []

    def sleep(self) -> int:
        proc = subprocess.Popen(["sleep", "3600"])
        self.procs.append(proc)
        (self.dir / "cgroup.procs").write_text(str(proc.pid))
        return proc.pid

    def remove(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
        for d in sorted((p for p in self.top.rglob("*") if p.is_dir()), key=lambda p: len(str(p)), reverse=True):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        self.top.rmdir()


@pytest.fixture
def kube_cgroup():
    if os.geteuid() != 0:
        pytest.skip("placing processes in cgroups needs root")
    made: list[KubeCgroup] = []

    def make(pod_uid: str, container_id: str) -> KubeCgroup:
        made.append(KubeCgroup(pod_uid, container_id))
        return made[-1]

    yield make
    for c in made:
        c.remove()


@pytest.fixture
def kubelet(tmp_path):
    started: list[KubeletStandIn] = []

    def start(pods) -> KubeletStandIn:
        started.append(KubeletStandIn(str(tmp_path / "kubelet.sock"), pods))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def _start_three(ctd: Containerd) -> dict[str, int]:
    return {
        "web": ctd.run("default", "web-1x", labels={"nerdctl/name": "web", "com.docker.compose.project": "shop",
                                                    "com.docker.compose.service": "web"},
                       env={"NVIDIA_VISIBLE_DEVICES": "1"}),
        "cuda": ctd.run("k8s.io", K8S_ID, labels=CRI_LABELS, env={"NVIDIA_VISIBLE_DEVICES": "3"}),
        "moby": ctd.run("moby", "dockers-own", labels={"nerdctl/name": "not-twice"}),
    }


@pytest.mark.integration
def test_containerd_source_names_every_namespace_but_dockers(containerd_cleanup, kubelet):
    ctd = containerd_cleanup
    pids = _start_three(ctd)
    stand_in = kubelet([("ml", "trainer-0", [("cuda", {"nvidia.com/gpu": [fake_uuid(1) + "::3", fake_uuid(2)],
                                                       "example.com/nic": ["eth9"]})])])
    reader = KubeletReader(stand_in.path, timeout=5, max_age=0)
    source = ContainerdSource(ctd.address, timeout=5, pod_grants=reader.grants)
    inv = source.inventory(UUIDS, MINORS)
    assert inv.available, inv.error
    # Steady state: the same tasks, so containerd's specs are not fetched again; the kubelet's answer is
    # reused for a few seconds.
    assert source.inventory(UUIDS, MINORS) == inv and source.list_calls == 2  # default and k8s.io once each
    cached = KubeletReader(stand_in.path, timeout=5)
    calls = stand_in.calls
    assert cached.grants() == cached.grants() and stand_in.calls == calls + 1
    by_id = {r.id: r for r in inv.containers}
    assert set(by_id) == {"web-1x", K8S_ID}  # moby's container is Docker's to list
    web, cuda = by_id["web-1x"], by_id[K8S_ID]
    assert (web.name, web.runtime, web.namespace, web.compose_project, web.compose_service, web.image,
            web.main_pid) == ("web", "containerd", "default", "shop", "web", IMAGE, pids["web"])
    assert (web.gpus, web.grant_source) == ((fake_uuid(1),), "nvidia_runtime_env")
    assert (cuda.name, cuda.runtime, cuda.pod, cuda.namespace, cuda.pod_uid, cuda.main_pid) == \
        ("cuda", "kubernetes", "trainer-0", "ml", POD_UID, pids["cuda"])
    # the kubelet's allocation is the grant (time-slicing suffix stripped), not the environment
    assert (cuda.gpus, cuda.grant_source) == ((fake_uuid(1), fake_uuid(2)), "kubelet")
    stand_in.stop()
    down = source.inventory(UUIDS, MINORS)
    assert down.available and {r.id: r.gpus for r in down.containers}[K8S_ID] == (fake_uuid(3),)
    assert reader.error is not None and "kubelet" in reader.error


@pytest.mark.integration
def test_every_face_names_containerd_and_kubernetes_containers(containerd_cleanup, kubelet, kube_cgroup,
                                                             fake_nvml, tmp_path):
    ctd = containerd_cleanup
    pids = _start_three(ctd)
    stand_in = kubelet([("ml", "trainer-0", [("cuda", {"nvidia.com/gpu": [fake_uuid(1) + "::3", fake_uuid(2)]})])])
    pod_dir = kube_cgroup(POD_UID, K8S_ID)
    sleeper = pod_dir.sleep()  # another process of the pod's container, in the kubelet's own cgroup form
    fake_nvml.write(scenario([
        gpu(0, processes=[process(pids["cuda"], 3 * GiB, sm=20)]),  # outside its grant
        gpu(1, processes=[process(pids["web"], 2 * GiB), process(sleeper, 1 * GiB)]),
        gpu(2), gpu(3),
    ]))
    args = ("--containerd", ctd.address, "--kubelet-socket", stand_in.path)
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    res = fake_nvml.run_gputui("snapshot", "--json", *args, env_extra=env)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    owner = {p["pid"]: p["container"] for g in snap["gpus"] for p in g["processes"]}
    assert owner[pids["web"]] == {"id": "web-1x", "name": "web", "image": IMAGE, "compose_project": "shop",
                                  "compose_service": "web", "runtime": "containerd", "pod": None,
                                  "namespace": "default", "pod_uid": None}
    kube = {"id": K8S_ID, "name": "cuda", "image": IMAGE, "compose_project": None, "compose_service": None,
            "runtime": "kubernetes", "pod": "trainer-0", "namespace": "ml", "pod_uid": POD_UID}
    assert owner[pids["cuda"]] == kube and owner[sleeper] == kube
    containers = {c["name"]: c for c in snap["containers"]}
    assert "not-twice" not in containers and "dockers-own" not in containers
    cuda = containers["cuda"]
    assert (cuda["runtime"], cuda["pod"], cuda["namespace"], cuda["pod_uid"], cuda["grant_source"]) == \
        ("kubernetes", "trainer-0", "ml", POD_UID, "kubelet")
    assert (cuda["granted_gpus"], cuda["used_gpus"]) == ([1, 2], [0, 1])
    kinds = {f["kind"]: f["message"] for f in cuda["findings"]}
    assert "runs on GPU 0, outside its grant" in kinds["misplaced"]
    assert "holds GPU 2" in kinds["idle-grant"]
    assert containers["web"]["runtime"] == "containerd" and containers["web"]["findings"] == []

    once = fake_nvml.run_gputui("--once", *args, env_extra=env)
    assert once.returncode == 0, once.stderr
    rows = {line.split()[1]: line for line in once.stdout.splitlines() if len(line.split()) > 1}
    assert "cuda" in rows[str(pids["cuda"])] and "web" in rows[str(pids["web"])]
    assert "container cuda [misplaced]" in once.stdout

    exporter = Exporter(["--interval", "0.5", "--dcgm-names", *args], {**fake_nvml.env(), **env})
    try:
        text = ""
        for _ in range(60):
            text = exporter.metrics()
            if 'pod="trainer-0"' in text:
                break
            time.sleep(0.5)
    finally:
        exporter.stop()
    lines = text.splitlines()
    proc = next(x for x in lines if x.startswith("gputui_process_gpu_memory_bytes{") and f'pid="{pids["cuda"]}"' in x)
    assert 'runtime="kubernetes"' in proc and 'pod="trainer-0"' in proc and 'namespace="ml"' in proc
    web = next(x for x in lines if x.startswith("gputui_process_gpu_memory_bytes{") and f'pid="{pids["web"]}"' in x)
    assert 'runtime="containerd"' in web and 'namespace="default"' in web
    dcgm = next(x for x in lines if x.startswith("DCGM_FI_DEV_FB_USED{") and 'gpu="0"' in x)
    assert 'container="cuda"' in dcgm and 'pod="trainer-0"' in dcgm and 'namespace="ml"' in dcgm

    kill = fake_nvml.run_gputui("kill", str(pids["cuda"]), "--yes", *args, env_extra=env)
    assert kill.returncode == 1, (kill.stdout, kill.stderr)
    assert "kubectl delete pod -n ml trainer-0" in kill.stderr + kill.stdout
    assert ctd.ctr("-n", "k8s.io", "tasks", "ls").count("RUNNING") == 1  # still running

    for name, owner_words in (("cuda", "Kubernetes pod ml/trainer-0"), ("web", "containerd container")):
        move = fake_nvml.run_gputui("migrate", name, "--to", "3", "--yes", *args, env_extra=env)
        assert move.returncode == 1, (move.stdout, move.stderr)
        assert owner_words in move.stderr and "gputui" in move.stderr

    doctor = fake_nvml.run_gputui("doctor", "--json", *args, env_extra=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    runtimes = checks["container-runtimes"]
    assert runtimes["status"] == "warn"  # Docker's socket is missing; containerd and the kubelet answer
    assert f"containerd at {ctd.address} (namespaces default, k8s.io, moby)" in runtimes["message"]
    assert f"kubelet at {stand_in.path} (1 pods)" in runtimes["message"]
    assert "no-docker.sock" in runtimes["message"] and runtimes["fix"]
    assert checks["kubernetes-names"]["status"] == "pass"


@pytest.mark.integration
def test_without_the_sockets_a_pod_is_its_uid_and_doctor_says_how_to_name_it(kube_cgroup, fake_nvml, tmp_path):
    sleeper = kube_cgroup(POD_UID, K8S_ID).sleep()
    fake_nvml.write(scenario([gpu(0, processes=[process(sleeper, 1 * GiB)])]))
    args = ("--containerd", str(tmp_path / "no-containerd.sock"), "--kubelet-socket", str(tmp_path / "no-kubelet.sock"))
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    snap = json.loads(fake_nvml.run_gputui("snapshot", "--json", *args, env_extra=env).stdout)
    ref = snap["gpus"][0]["processes"][0]["container"]
    assert (ref["runtime"], ref["id"], ref["pod_uid"], ref["pod"]) == ("kubernetes", K8S_ID, POD_UID, None)
    doctor = fake_nvml.run_gputui("doctor", "--json", *args, env_extra=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    names = checks["kubernetes-names"]
    assert names["status"] == "warn" and f"pod UID {POD_UID}" in names["message"]
    assert "--kubelet-socket" in names["fix"] and "--containerd" in names["fix"]
    assert "containerd is not running (no socket at" in checks["container-runtimes"]["message"]


@pytest.mark.tmux
def test_the_dashboard_and_containers_view_name_the_pod_and_judge_its_grant(containerd_cleanup, kubelet,
                                                                           fake_nvml, tmp_path):
    import shlex
    import shutil
    import sys

    from tests.conftest import require
    from tests.test_tmux_dashboard import Tmux

    gputui = Path(sys.executable).parent / "gputui"
    require(shutil.which("tmux") is not None and gputui.exists(), "tmux and the installed gputui are needed")
    ctd = containerd_cleanup
    pids = _start_three(ctd)
    stand_in = kubelet([("ml", "trainer-0", [("cuda", {"nvidia.com/gpu": [fake_uuid(1), fake_uuid(2)]})])])
    fake_nvml.write(scenario([gpu(0, processes=[process(pids["cuda"], 3 * GiB, sm=20)]),
                              gpu(1, processes=[process(pids["web"], 2 * GiB)]), gpu(2), gpu(3)]))
    env = fake_nvml.env()
    keep = {k: env[k] for k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "GPUTUI_FAKE_NVML_CALLS",
                                "XDG_CONFIG_HOME", "XDG_STATE_HOME", "HOME", "PATH") if k in env}
    keep["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
    command = (f"env {assignments} TERM=tmux-256color {shlex.quote(str(gputui))} --containerd {ctd.address} "
               f"--kubelet-socket {stand_in.path} --interval 1")
    tmux = Tmux()
    try:
        tmux.run("new-session", "-d", "-s", "dash", "-x", "200", "-y", "50", command)
        screen = tmux.wait_for(lambda s: str(pids["cuda"]) in s and "cuda" in s and "web" in s, 30,
                               "the processes with their containers")
        row = next(line for line in screen.splitlines() if str(pids["cuda"]) in line)
        assert "cuda" in row
        tmux.run("send-keys", "-t", "dash", "c")
        screen = tmux.wait_for(lambda s: "nvidia.com/gpu" in s and "misplaced" in s, 20, "the containers view")
        cuda = next(line for line in screen.splitlines() if "cuda" in line and "nvidia.com/gpu" in line)
        assert "1,2" in cuda  # the kubelet's grant; its process runs on GPU 0, outside it
        tmux.run("send-keys", "-t", "dash", "q")
        tmux.run("send-keys", "-t", "dash", "q")
    finally:
        tmux.kill()
