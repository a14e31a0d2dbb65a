"""The interfaces between gputui and the outside world.

A *source* knows one outside system and nothing else. It turns that system's
failures into values (``None``, a ``lost`` flag, ``available=False`` with a
reason) and raises only when it cannot start at all (``SourceUnavailable``), which
the CLI turns into one sentence. The real machine, the demo and the tests all
plug into :class:`gputui.core.poller.Poller` through these protocols.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from gputui.core.model import ContainerInventory, GpuReading, ProcessFacts


class SourceUnavailable(Exception):
    """A source cannot work at all. ``str(exc)`` is one sentence for the user."""


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be initialised (no library, driver not loaded, no permission, mismatch)."""


@runtime_checkable
class GpuSource(Protocol):
    """Reads the GPUs and their NVML process lists."""

    def read(self) -> GpuReading:
        """One poll. Raises NvmlUnavailable only if NVML cannot be used at all."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ProcessSource(Protocol):
    """Looks up host facts about PIDs (user, command, CPU, memory, cgroup, parent)."""

    def facts(self, pids: Iterable[int]) -> dict[int, ProcessFacts]:
        """Facts for every pid asked for; a PID that cannot be seen is returned with visible=False."""
        ...


@runtime_checkable
class ContainerSource(Protocol):
    """Lists containers with their GPU grants. Never raises: failures become available=False."""

    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        """Containers that are running or hold a grant.

        ``gpu_uuids`` is this host's GPUs in NVML index order, so grants given by
        index resolve to UUIDs; ``minors`` maps /dev/nvidiaN minor numbers to UUIDs.
        """
        ...

    def resolve(self, container_id: str) -> ContainerInventory:
        """Look up one container id found in a cgroup path (confirming it exists)."""
        ...

    def close(self) -> None: ...
