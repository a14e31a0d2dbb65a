"""Several container sources read as one: Docker and podman side by side, containerd, the kubelet.

A host may run Docker *and* podman (each with its own socket), or containerd
under Docker. The poller takes one :class:`~gputui.core.sources.ContainerSource`;
this one asks all of its parts at once, each on its own thread, and joins their
containers (a container id listed by an earlier part is not listed again:
Docker's own containers are also in containerd's ``moby`` namespace). It is
available when any part is; the parts that are down are named in
:attr:`CombinedContainers.down` without hiding the ones that answer.

A part that does not answer within ``timeout`` is reported down ("did not
answer") for this round and is not asked again until its call returns, so a
hung daemon holds one thread, never the others' containers and never the
:class:`gputui.core.poller.ContainerWatcher` thread that calls this one.
"""

from __future__ import annotations

import threading
import time

from gputui.core.model import ContainerInventory, ContainerRecord
from gputui.core.sources import ContainerSource


class _Part:
    def __init__(self, name: str, source: ContainerSource) -> None:
        self.name = name
        self.source = source
        self.busy = False
        self.result: ContainerInventory | None = None
        self.done = threading.Event()


class CombinedContainers:
    """``ContainerSource`` over ``parts`` (name, source), first part first; see the module docstring."""

    def __init__(self, parts: list[tuple[str, ContainerSource]], timeout: float = 5.0) -> None:
        self._parts = [_Part(name, src) for name, src in parts]
        self.timeout = timeout
        #: name -> the sentence of each part that was down at the last inventory
        self.down: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def parts(self) -> list[tuple[str, ContainerSource]]:
        return [(p.name, p.source) for p in self._parts]

    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        asked = []
        for part in self._parts:
            with self._lock:
                if part.busy:  # still inside last round's call: not asked again
                    continue
                part.busy = True
                part.done.clear()
            threading.Thread(target=self._ask, args=(part, gpu_uuids, dict(minors)),
                             name="gputui-containers-part", daemon=True).start()
            asked.append(part)
        deadline = time.monotonic() + self.timeout
        for part in asked:
            part.done.wait(max(0.0, deadline - time.monotonic()))
        answers = []
        for part in self._parts:
            with self._lock:
                finished = part in asked and part.done.is_set()
                result = part.result
            if finished and result is not None:
                answers.append((part.name, result))
            else:
                answers.append((part.name, ContainerInventory(
                    False, f"{part.name} did not answer within {self.timeout:g} s")))
        return self._join(answers)

    def resolve(self, container_id: str) -> ContainerInventory:
        answers = []
        for part in self._parts:
            inv = part.source.resolve(container_id)
            answers.append((part.name, inv))
            if inv.containers:
                break
        return self._join(answers, record_down=False)

    def close(self) -> None:
        for part in self._parts:
            try:
                part.source.close()
            except Exception:
                pass

    def _ask(self, part: _Part, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> None:
        try:
            result = part.source.inventory(gpu_uuids, minors)
        except Exception as exc:  # a source should not raise
            result = ContainerInventory(False, f"{part.name} failed: {exc}")
        with self._lock:
            part.result = result
            part.busy = False
            part.done.set()

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
