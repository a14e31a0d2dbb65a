"""Which GPUs the kubelet gave each Kubernetes container: its pod-resources API (gRPC ``v1.PodResourcesLister``).

``List`` answers pods by name and namespace, each container with the devices the
device plugins allocated to it — but no pod UID and no container id. The join to
processes is therefore made elsewhere, through what containerd records of the
container (the CRI labels ``io.kubernetes.pod.namespace/name`` and
``io.kubernetes.container.name``): :class:`KubeletReader` hands out a map
``(namespace, pod, container) -> device ids`` that the containerd source takes
as the Kubernetes containers' grants (the machine wires the two; neither imports
the other).

Devices: ``nvidia.com/gpu`` (and the ``nvidia.com/mig-*`` and ``*.shared``
resources of the NVIDIA device plugin) list GPU UUIDs or ``MIG-`` UUIDs; with
time-slicing the plugin writes ``<UUID>::<replica>``, the suffix is stripped.

Never raises: a failure is ``None`` with :attr:`KubeletReader.error` one sentence.
Every call has a deadline (``timeout``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
INSTALL = "pip install 'gputui[kubernetes]'"
_MAX_PODS = 4096
_MAX_NAME = 253
_MAX_DEVICES = 256


def is_gpu_resource(name: str) -> bool:
    """Whether a device-plugin resource is an NVIDIA GPU or MIG device (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``,
    ``nvidia.com/gpu.shared``)."""
    return name.startswith("nvidia.com/gpu") or name.startswith("nvidia.com/mig-")


def device_id(raw: str) -> str | None:
    """A device id as gputui resolves it: the time-slicing ``::N`` suffix stripped; None when not a GPU id."""
    ident = raw.split("::", 1)[0].strip()
    if not ident or len(ident) > 128 or any(ord(ch) < 33 or ord(ch) > 126 for ch in ident):
        return None
    return ident


class KubeletReader:
    """The kubelet's GPU allocations, read on demand; see the module docstring."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = 5.0, max_age: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.socket = socket[len("unix://"):] if socket.startswith("unix://") else socket
        self.timeout = timeout
        #: an answer is reused for this many seconds (allocations change when pods start, not every poll)
        self.max_age = max_age
        #: List calls made
        self.calls = 0
        self._clock = clock
        self._last: tuple[float, dict[tuple[str, str, str], tuple[str, ...]]] | None = None
        #: one sentence when the last read failed, else None
        self.error: str | None = None
        #: pods listed by the last read that succeeded
        self.pods = 0
        self._channel: object = None
        self._lock = threading.Lock()

    def grants(self) -> Mapping[tuple[str, str, str], tuple[str, ...]] | None:
        """(pod namespace, pod name, container name) -> GPU and MIG UUIDs; None when the kubelet cannot be read."""
        with self._lock:
            if self._last is not None and self._clock() - self._last[0] < self.max_age:
                return self._last[1]
            try:
                answer = self._read()
                self._last = (self._clock(), answer)
                return answer
            except ImportError:
                self.error = f"grpcio is not installed ({INSTALL})"
            except Exception as exc:
                self.error = self._describe(exc)
                self._drop()
            self._last = None
            return None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        close = getattr(self._channel, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass
        self._channel = None

    def _read(self) -> dict[tuple[str, str, str], tuple[str, ...]]:
        import importlib

        import grpc

        v1 = "gputui.core.sources.protos.kubelet.podresources.v1"
        api_pb2: Any = importlib.import_module(f"{v1}.api_pb2")
        api_pb2_grpc: Any = importlib.import_module(f"{v1}.api_pb2_grpc")

        if not os.path.exists(self.socket):
            raise FileNotFoundError(self.socket)
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        self.calls += 1
        answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        out: dict[tuple[str, str, str], tuple[str, ...]] = {}
        for pod in answer.pod_resources[:_MAX_PODS]:
            if not pod.name or len(pod.name) > _MAX_NAME or len(pod.namespace) > _MAX_NAME:
                continue
            for c in pod.containers:
                if not c.name or len(c.name) > _MAX_NAME:
                    continue
                ids: list[str] = []
                for dev in c.devices:
                    if not is_gpu_resource(dev.resource_name):
                        continue
                    for raw in dev.device_ids[:_MAX_DEVICES]:
                        ident = device_id(raw)
                        if ident is not None and ident not in ids:
                            ids.append(ident)
                out[(pod.namespace, pod.name, c.name)] = tuple(ids)
        self.error = None
        self.pods = len(answer.pod_resources)
        return out

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, FileNotFoundError):
            return f"the kubelet's pod-resources socket {self.socket} does not exist (is this a Kubernetes node?)"
        if isinstance(exc, PermissionError):
            return f"permission denied on {self.socket} (run gputui as root)"
        code = getattr(exc, "code", None)
        name = ""
        try:
            name = code().name if callable(code) else ""
        except Exception:
            name = ""
        details = ""
        try:
            details = str(exc.details()) if hasattr(exc, "details") else str(exc)
        except Exception:
            details = str(exc)
        if "permission denied" in details.lower():
            return f"permission denied on {self.socket} (run gputui as root)"
        if name == "DEADLINE_EXCEEDED":
            return f"the kubelet did not answer within {self.timeout:g} s at {self.socket}"
        if name == "UNAVAILABLE":
            return f"the kubelet is not answering at {self.socket}"
        if name == "UNIMPLEMENTED":
            return f"{self.socket} does not serve the kubelet's v1 pod-resources API"
        text = " ".join(details.split())[:120]
        return f"cannot read the kubelet at {self.socket}: {text}"
