"""Which sources gputui reads: the real machine, or the simulated demo server.

This is the one place that chooses; everything downstream (poller, CLI, app,
actions) receives a :class:`Machine` and runs the same code either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.core.config import Settings
from gputui.core.model import Gpu
from gputui.core.poller import Poller
from gputui.core.record import record
from gputui.core.sources import ContainerSource, GpuSource, ProcessSource

if TYPE_CHECKING:
    from gputui.core.demo import DemoMachine
    from gputui.core.sources.containerd_source import ContainerdSource
    from gputui.core.sources.slurm import SlurmSource


@record(frozen=False)
class Machine:
    gpu: GpuSource
    processes: ProcessSource
    containers: ContainerSource | None
    #: The simulated server, when running --demo (actions act on it instead of Docker/signals).
    demo: DemoMachine | None = None
    #: This node's Slurm, None off Slurm.
    slurm: SlurmSource | None = None

    def poller(self, settings: Settings, gpu_filter: Callable[[Gpu], bool] | None = None,
               container_wait: float = 0.0, clock: Callable[[], float] | None = None) -> Poller:
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        elif self.demo is not None:
            kwargs["clock"] = self.demo.clock
        if self.demo is not None:
            kwargs["host"] = self.demo.host
            kwargs["house_rules"] = self.demo.house_rules
        else:
            from gputui.core.sources.house_rules import HouseRulesSource

            kwargs["house_rules"] = HouseRulesSource(settings.rules_path)
        if self.slurm is not None:
            from gputui.core.jobs import SlurmJoin

            # the demo's containers run outside Slurm by design: no_job would flag every one of them
            kwargs["slurm"] = SlurmJoin(self.slurm, settings, judge_no_job=self.demo is None)
        return Poller(self.gpu, self.processes, self.containers, settings=settings, gpu_filter=gpu_filter,
                      container_wait=container_wait, **kwargs)

    def close(self) -> None:
        for src in (self.gpu, self.processes, self.containers):
            if src is not None:
                try:
                    getattr(src, "close", lambda: None)()
                except Exception:
                    pass


def open_machine(demo: bool = False, docker: bool = True, demo_clock: Callable[[], float] | None = None,
                 settings: Settings | None = None) -> Machine:
    """Sources for the real machine or the demo. Raises NvmlUnavailable on a real machine without NVML."""
    if demo:
        from gputui.core.demo import DemoMachine

        sim = DemoMachine(clock=demo_clock)
        return Machine(gpu=sim, processes=sim, containers=sim if docker else None, demo=sim,
                       slurm=sim.slurm)  # type: ignore[arg-type]  # the demo's Slurm reads like SlurmSource
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    gpu = NvmlSource()
    gpu.open()  # raises NvmlUnavailable with one sentence
    containers = None
    if docker:
        containers = container_sources(settings)
    return Machine(gpu=gpu, processes=HostProcessSource(), containers=containers, slurm=_slurm(settings))


def container_sources(settings: Settings | None = None) -> ContainerSource:
    """Every container engine this host runs, as one source: Docker's socket and podman's (see
    ``engine_hosts``), each read through the Docker Engine API; containerd (nerdctl, ctr, the CRI) through
    its gRPC API where its socket exists or is configured, with the kubelet's GPU allocations as the grants
    of Kubernetes containers."""
    from gputui.core.sources.combined import CombinedContainers
    from gputui.core.sources.docker_source import DockerSource, engine_hosts

    settings = settings or Settings()
    timeout = settings.docker_timeout
    hosts = engine_hosts()
    parts: list[tuple[str, ContainerSource]] = [(h, DockerSource(timeout=timeout, host=h)) for h in hosts]
    containerd = _containerd(settings)
    if containerd is not None:
        parts.append((f"containerd {containerd.address}", containerd))
    if len(parts) == 1:
        return parts[0][1]
    # each part has its own timeout; the whole answers a little sooner than the watcher gives up on it
    return CombinedContainers(parts, timeout=max(0.5, 0.8 * timeout))


def _containerd(settings: Settings) -> ContainerdSource | None:
    """containerd's source when its socket is configured or exists (the kubelet's reader likewise)."""
    import os

    from gputui.core.sources.containerd_source import DEFAULT_ADDRESS, ContainerdSource
    from gputui.core.sources.kubelet_source import DEFAULT_SOCKET, KubeletReader

    address = settings.containerd_address
    if address is None and not os.path.exists(DEFAULT_ADDRESS):
        return None
    kubelet_socket = settings.kubelet_socket
    if kubelet_socket is None and os.path.exists(DEFAULT_SOCKET):
        kubelet_socket = DEFAULT_SOCKET
    kubelet = KubeletReader(kubelet_socket, timeout=settings.docker_timeout) if kubelet_socket else None
    return ContainerdSource(address or DEFAULT_ADDRESS, timeout=settings.docker_timeout,
                            pod_grants=kubelet.grants if kubelet is not None else None, kubelet=kubelet)


def _slurm(settings: Settings | None) -> SlurmSource | None:
    """This node's Slurm source, or None (one stat when there is no slurm.conf)."""
    if not os.path.exists(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"):
        return None  # no Slurm here: not even the Slurm module is imported
    from gputui.core.sources.slurm import SlurmSource, find_slurm

    node = find_slurm()
    if node is None:
        return None
    return SlurmSource(node, timeout=settings.docker_timeout if settings is not None else 5.0)
