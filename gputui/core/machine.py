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
        else:
            from gputui.core.sources.house_rules import HouseRulesSource

            kwargs["house_rules"] = HouseRulesSource(settings.rules_path)
        if self.slurm is not None:
            from gputui.core.jobs import SlurmJoin

            kwargs["slurm"] = SlurmJoin(self.slurm, settings)
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
        return Machine(gpu=sim, processes=sim, containers=sim if docker else None, demo=sim)
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    gpu = NvmlSource()
    gpu.open()  # raises NvmlUnavailable with one sentence
    containers = None
    if docker:
        from gputui.core.sources.docker_source import DockerSource

        timeout = settings.docker_timeout if settings is not None else 5.0
        containers = DockerSource(timeout=timeout)
    return Machine(gpu=gpu, processes=HostProcessSource(), containers=containers, slurm=_slurm(settings))


def _slurm(settings: Settings | None) -> SlurmSource | None:
    """This node's Slurm source, or None (one stat when there is no slurm.conf)."""
    if not os.path.exists(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"):
        return None  # no Slurm here: not even the Slurm module is imported
    from gputui.core.sources.slurm import SlurmSource, find_slurm

    node = find_slurm()
    if node is None:
        return None
    return SlurmSource(node, timeout=settings.docker_timeout if settings is not None else 5.0)
