"""Containers and their GPU grants, read from containerd's own gRPC API (nerdctl, ctr, Kubernetes).

Why this shape:

* **containerd's API, every namespace.** ``Namespaces.List``, then per namespace
  ``Tasks.List`` (what runs: main PID, running or paused) and ``Containers.List``
  (labels, image, the OCI spec). Docker's own ``moby`` namespace is left out: the
  Docker source lists those containers already, with their Docker names.
* **Named like Docker containers.** nerdctl's ``nerdctl/name`` label, else the id;
  nerdctl compose's ``com.docker.compose.project/service`` labels. A container of
  the CRI (namespace ``k8s.io``, or the ``io.kubernetes.*`` labels) is
  ``runtime: "kubernetes"``: ``name`` is its Kubernetes container name, with pod,
  namespace and pod UID from the CRI labels; any other is ``runtime: "containerd"``
  with its containerd namespace.
* **Grants from the OCI spec** containerd stores: ``NVIDIA_VISIBLE_DEVICES`` in the
  process environment (what the NVIDIA runtime and device plugin set) and
  ``/dev/nvidiaN`` nodes, read by the one grant model. A Kubernetes container's
  grant can come instead from the kubelet (``pod_grants``, injected by the machine:
  the devices the pod-resources API lists for it).
* **Never raises, never waits long.** Every call has a deadline (``timeout``);
  any failure becomes ``ContainerInventory(False, "<one sentence>")`` and the
  channel is rebuilt next time. Without grpcio the sentence says what to install.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gputui.core.grants import HostGpus, read_grant
from gputui.core.model import ContainerInventory, ContainerRecord, GpuGrant, GrantSource

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
#: Docker's own namespace in containerd: its containers are the Docker source's.
DOCKER_NAMESPACE = "moby"
#: The CRI plugin's namespace: Kubernetes containers.
K8S_NAMESPACE = "k8s.io"
INSTALL = "pip install 'gputui[kubernetes]'"
_RUNNING, _PAUSED = 2, 4
_MAX_NAMESPACES = 64
_MAX_CONTAINERS = 4096
_MAX_LABEL = 256
_SPEC_LIMIT = 4 << 20
_NVIDIA_MAJOR = 195

#: (pod namespace, pod name, container name) -> the GPU and MIG UUIDs the kubelet lists for it
PodGrants = Callable[[], "Mapping[tuple[str, str, str], tuple[str, ...]] | None"]


def grpc_missing() -> str | None:
    """Why the gRPC sources cannot work here (one clause), or None."""
    import importlib.util

    for name in ("grpc", "google.protobuf"):
        try:
            if importlib.util.find_spec(name) is None:
                return f"grpcio is not installed ({INSTALL})"
        except (ImportError, ValueError):
            return f"grpcio is not installed ({INSTALL})"
    return None


def channel_target(address: str) -> str:
    """A socket path or ``unix://`` address as a gRPC target."""
    return address if address.startswith("unix:") else f"unix://{address}"


def describe_grpc_error(exc: BaseException, what: str, address: str, timeout: float) -> str:
    """A gRPC failure as one sentence naming the service and, where it helps, the fix."""
    code = getattr(exc, "code", None)
    name = ""
    try:
        name = code().name if callable(code) else ""
    except Exception:
        name = ""
    details = ""
    try:
        details = str(exc.details()) if hasattr(exc, "details") else ""
    except Exception:
        details = ""
    path = address[len("unix://"):] if address.startswith("unix://") else address
    low = details.lower()
    if "permission denied" in low:
        return f"permission denied on {path} (run gputui as root to read {what})"
    if name == "DEADLINE_EXCEEDED":
        return f"{what} did not answer within {timeout:g} s"
    if name == "UNAVAILABLE":
        if not os.path.exists(path):
            return f"{what} is not running (no socket at {path})"
        return f"{what} is not answering at {path}"
    if name == "UNIMPLEMENTED":
        return f"{path} does not serve the API gputui reads from {what}"
    text = " ".join((details or str(exc)).split())[:120]
    return f"cannot read {what} at {path}: {text}"


def _stubs(name: str) -> tuple[Any, Any]:
    """The generated messages and service stubs of one upstream .proto (``scripts/gen-protos.sh``)."""
    import importlib

    base = f"gputui.core.sources.protos.{name}"
    return importlib.import_module(f"{base}_pb2"), importlib.import_module(f"{base}_pb2_grpc")


def _label(labels: Mapping[str, str], key: str) -> str | None:
    value = labels.get(key)
    if not value or len(value) > _MAX_LABEL:
        return None
    return value


def spec_grant_attrs(spec_json: bytes) -> dict[str, Any]:
    """The GPU-relevant parts of an OCI spec as the inspect shape the grant model reads."""
    if not spec_json or len(spec_json) > _SPEC_LIMIT:
        return {}
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return {}
    if not isinstance(spec, dict):
        return {}
    env = [e for e in ((spec.get("process") or {}).get("env") or [])[:1024] if isinstance(e, str)]
    devices = []
    for dev in ((spec.get("linux") or {}).get("devices") or [])[:512]:
        if isinstance(dev, dict) and dev.get("type") == "c" and dev.get("major") == _NVIDIA_MAJOR:
            minor = dev.get("minor")
            if isinstance(minor, int) and not isinstance(minor, bool) and 0 <= minor <= 253:
                devices.append({"PathOnHost": f"/dev/nvidia{minor}", "PathInContainer": f"/dev/nvidia{minor}"})
    return {"Config": {"Env": env}, "HostConfig": {"Devices": devices}}


def kubelet_grant(device_ids: tuple[str, ...], host: HostGpus) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The kubelet's device ids for a container (GPU and MIG UUIDs) resolved on this host: (keys, problems)."""
    keys: list[str] = []
    problems: list[str] = []
    for ident in device_ids:
        key, problem = host.resolve(ident, "the kubelet's device list")
        if key is not None and key not in keys:
            keys.append(key)
        if problem:
            problems.append(problem)
    return tuple(keys), tuple(problems)


class ContainerdSource:
    """``ContainerSource`` over containerd's gRPC API; see the module docstring."""

    def __init__(self, address: str = DEFAULT_ADDRESS, timeout: float = 5.0,
                 pod_grants: PodGrants | None = None, skip_namespaces: tuple[str, ...] = (DOCKER_NAMESPACE,),
                 kubelet: object = None, refresh_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.address = channel_target(address)
        self.timeout = timeout
        self.refresh_after = refresh_after
        #: Containers.List calls made (the steady state makes none)
        self.list_calls = 0
        self._clock = clock
        #: namespace -> (the live tasks, when listed, their containers)
        self._listed: dict[str, tuple[frozenset[tuple[str, int]], float, list[Any]]] = {}
        self.pod_grants = pod_grants
        #: the kubelet reader behind ``pod_grants``, kept for doctor and closed with this source
        self.kubelet = kubelet
        self.skip_namespaces = skip_namespaces
        #: namespaces seen at the last inventory (doctor reports them)
        self.namespaces: tuple[str, ...] = ()
        self._channel: Any = None
        self._lock = threading.RLock()

    # -- ContainerSource ----------------------------------------------------
    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        missing = grpc_missing()
        if missing:
            return ContainerInventory(False, missing)
        host = HostGpus.from_uuids(gpu_uuids, minors)
        with self._lock:
            try:
                records = self._read(host)
            except Exception as exc:
                self._drop()
                return ContainerInventory(False, describe_grpc_error(exc, "containerd", self.address, self.timeout))
        return ContainerInventory(True, None, tuple(records))

    def resolve(self, container_id: str) -> ContainerInventory:
        """Whatever the inventory knows of one container id (containerd has no cheaper single lookup
        across namespaces)."""
        inv = self.inventory((), {})
        return ContainerInventory(inv.available, inv.error, tuple(r for r in inv.containers if r.id == container_id))

    def close(self) -> None:
        with self._lock:
            self._drop()
        close = getattr(self.kubelet, "close", None)
        if close is not None:
            close()

    # -- internals ----------------------------------------------------------
    def _drop(self) -> None:
        if self._channel is not None:
            try:
                self._channel.close()
            except Exception:
                pass
        self._channel = None

    def _connect(self) -> Any:
        if self._channel is None:
            import grpc

            self._channel = grpc.insecure_channel(self.address)
        return self._channel

    def _read(self, host: HostGpus) -> list[ContainerRecord]:
        containers_pb2, containers_pb2_grpc = _stubs("containerd.services.containers.v1.containers")
        namespace_pb2, namespace_pb2_grpc = _stubs("containerd.services.namespaces.v1.namespace")
        tasks_pb2, tasks_pb2_grpc = _stubs("containerd.services.tasks.v1.tasks")

        channel = self._connect()
        names = namespace_pb2_grpc.NamespacesStub(channel).List(namespace_pb2.ListNamespacesRequest(),
                                                               timeout=self.timeout)
        namespaces = [n.name for n in names.namespaces[:_MAX_NAMESPACES]]
        self.namespaces = tuple(namespaces)
        pod_grants = self.pod_grants() if self.pod_grants is not None else None
        tasks_api = tasks_pb2_grpc.TasksStub(channel)
        containers_api = containers_pb2_grpc.ContainersStub(channel)
        records: list[ContainerRecord] = []
        for ns in namespaces:
            if ns in self.skip_namespaces:
                continue
            meta = (("containerd-namespace", ns),)
            tasks = tasks_api.List(tasks_pb2.ListTasksRequest(), timeout=self.timeout, metadata=meta).tasks
            # a task is its container's init process: id = the container id (container_id is left empty)
            live = {t.id: t for t in tasks if t.status in (_RUNNING, _PAUSED) and t.container_id in ("", t.id)}
            if not live:
                self._listed.pop(ns, None)
                continue
            # The containers (labels, image, spec) are fetched again only when the tasks changed, or
            # after refresh_after seconds (labels can be updated in place): specs are kilobytes each.
            key = frozenset((t.id, t.pid) for t in live.values())
            kept = self._listed.get(ns)
            now = self._clock()
            if kept is not None and kept[0] == key and now - kept[1] < self.refresh_after:
                listed = kept[2]
            else:
                self.list_calls += 1
                answer = containers_api.List(containers_pb2.ListContainersRequest(), timeout=self.timeout,
                                             metadata=meta).containers
                listed = [c for c in answer[:_MAX_CONTAINERS] if c.id in live]
                self._listed[ns] = (key, now, listed)
            for c in listed:
                records.append(self._record(ns, c, live[c.id], host, pod_grants))
        for gone in [ns for ns in self._listed if ns not in namespaces]:
            del self._listed[gone]
        return records

    def _record(self, ns: str, c: Any, task: Any, host: HostGpus,
                pod_grants: Mapping[tuple[str, str, str], tuple[str, ...]] | None) -> ContainerRecord:
        labels = {k: v for k, v in list(c.labels.items())[:256] if len(k) <= _MAX_LABEL}
        kube = ns == K8S_NAMESPACE or "io.kubernetes.pod.name" in labels
        pod = _label(labels, "io.kubernetes.pod.name") if kube else None
        pod_ns = _label(labels, "io.kubernetes.pod.namespace") if kube else None
        k8s_name = _label(labels, "io.kubernetes.container.name") if kube else None
        attrs = spec_grant_attrs(bytes(c.spec.value)) if c.HasField("spec") else {}
        grant = read_grant(attrs, host, env_is_grant=True)
        gpus: GpuGrant = grant.gpus
        source: GrantSource = grant.source
        raw, problems = grant.raw, grant.problems
        devices = pod_grants.get((pod_ns, pod, k8s_name)) if kube and pod_grants and pod and pod_ns and k8s_name \
            else None
        if devices is not None:  # the kubelet's word is the pod's grant
            gpus, problems = kubelet_grant(devices, host)
            source, raw = "kubelet", devices
        env: dict[str, str] = {}
        for item in (attrs.get("Config") or {}).get("Env") or []:
            key, _, value = item.partition("=")
            env.setdefault(key, value)
        name = k8s_name if kube else _label(labels, "nerdctl/name")
        return ContainerRecord(
            id=c.id,
            name=name or c.id[:64],
            image=c.image[:_MAX_LABEL] or None,
            state="paused" if task.status == _PAUSED else "running",
            compose_project=_label(labels, "com.docker.compose.project"),
            compose_service=_label(labels, "com.docker.compose.service"),
            runtime="kubernetes" if kube else "containerd",
            gpus=gpus,
            grant_source=source,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            nvidia_visible_devices=env.get("NVIDIA_VISIBLE_DEVICES"),
            grant_raw=raw,
            main_pid=task.pid or None,
            labels=labels,
            grant_problems=problems,
            namespace=pod_ns if kube else ns,
            pod=pod,
            pod_uid=_label(labels, "io.kubernetes.pod.uid") if kube else None,
        )
