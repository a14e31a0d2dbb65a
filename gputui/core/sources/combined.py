"""Several container sources read as one: Docker and podman side by side, containerd, the kubelet.

A host may run Docker *and* podman (each with its own socket), or containerd
under Docker. The poller takes one :class:`~gputui.core.sources.ContainerSource`;
this one asks each of its parts in turn and joins their containers (a container
id listed by an earlier part is not listed again: Docker's own containers are
also in containerd's ``moby`` namespace). It is available when any part is;
the parts that are down are named in :attr:`CombinedContainers.down` (doctor and
``--debug`` say which and why) without hiding the ones that answer.

Each part keeps its own timeout; the :class:`gputui.core.poller.ContainerWatcher`
thread that calls this one keeps every part off the UI thread.
"""

from __future__ import annotations

import threading

from gputui.core.model import ContainerInventory, ContainerRecord
from gputui.core.sources import ContainerSource


class CombinedContainers:
    """``ContainerSource`` over ``parts`` (name, source), first part first."""

    def __init__(self, parts: list[tuple[str, ContainerSource]]) -> None:
        self.parts = list(parts)
        #: name -> the sentence of each part that was down at the last inventory
        self.down: dict[str, str] = {}
        self._lock = threading.Lock()

    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        return self._join([(name, src.inventory(gpu_uuids, minors)) for name, src in self.parts])

    def resolve(self, container_id: str) -> ContainerInventory:
        answers = []
        for name, src in self.parts:
            inv = src.resolve(container_id)
            answers.append((name, inv))
            if inv.containers:
                break
        return self._join(answers, record_down=False)

    def close(self) -> None:
        for _, src in self.parts:
            try:
                src.close()
            except Exception:
                pass

    def _join(self, answers: list[tuple[str, ContainerInventory]], record_down: bool = True) -> ContainerInventory:
        records: dict[str, ContainerRecord] = {}
        down = {name: inv.error or "not available" for name, inv in answers if not inv.available}
        for _, inv in answers:
            for r in inv.containers:
                records.setdefault(r.id, r)
        if record_down:
            with self._lock:
                self.down = down
        if any(inv.available for _, inv in answers):
            return ContainerInventory(True, None, tuple(records.values()))
        return ContainerInventory(False, "; ".join(dict.fromkeys(down.values())) or "no container runtime",
                                  tuple(records.values()))
