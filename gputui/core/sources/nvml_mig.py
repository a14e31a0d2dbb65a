"""MIG (Multi-Instance GPU) reading for :class:`~gputui.core.sources.nvml.NvmlSource`.

An A100/H100/H200 in MIG mode is split into up to seven MIG devices, each with
its own ``MIG-`` UUID, memory and processes. The card itself then answers
utilization (and per-process utilization) NOT_SUPPORTED: that is what real
drivers do, and gputui shows it as "not reported in MIG mode", never 0.

What is read when:

=====================  ==================================================================
cached (``slow_ttl``)  MIG mode (current, pending); the list of MIG devices (handles,
                       UUID, GPU/compute instance ids, profile, SM count) — instances
                       can be created and destroyed without a reset, so it is re-listed
every poll, per MIG    memory used/total, compute processes (which processes run on
device                 which instance; MIG runs no graphics contexts)
=====================  ==================================================================

A driver or binding without the MIG functions gives ``mig_mode=None`` (N/A), as
for every other missing function. Each MIG device is read as a ``Device`` of its own
through the source's :class:`~gputui.core.sources.nvml_query.NvmlQueries`, so the same
query rules (N/A on failure, struct version probing, GPU_IS_LOST handling) apply to it.
"""

from __future__ import annotations

from typing import Any

from gputui.core.model import MigDevice, MigMode, ProcessType, RawProcess
from gputui.core.record import record, replace
from gputui.core.sources.nvml_query import GPU_IS_LOST, Device, Lost, NvmlQueries

#: The most MIG devices one GPU can have (seven on A100/H100/H200); asked when the driver cannot say.
MAX_MIG_DEVICES = 7


def profile_of(name: str | None) -> str | None:
    """The MIG profile in a MIG device's name: "NVIDIA A100-SXM4-80GB MIG 3g.40gb" -> "3g.40gb"."""
    if not name or "MIG" not in name:
        return None
    tail = name.rsplit("MIG", 1)[1].strip()
    return tail or None


@record(frozen=False)
class _MigEntry:
    index: int
    child: Device
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    sm_count: int | None


@record(frozen=False)
class _MigState:
    entries: list[_MigEntry]
    listed_at: float


#: the four MigMode values, made once (a record is immutable: one object serves every GPU and poll)
_MODES: dict[tuple[bool, bool], MigMode] = {}


class MigReader:
    """Reads MIG mode and MIG devices of one source's GPUs (called with the source's lock held)."""

    def __init__(self, queries: NvmlQueries) -> None:
        """``queries``: the source's query rules (and its pynvml, once open)."""
        self._ask = queries
        self._state: dict[int, _MigState] = {}
        #: last current MIG mode seen per GPU, to ask utilization again after a mode change
        self._was_on: dict[int, bool] = {}

    def read(self, dev: Device, now: float, procs: tuple[RawProcess, ...]
             ) -> tuple[MigMode | None, tuple[MigDevice, ...], tuple[RawProcess, ...]]:
        """(mode, MIG devices, the card's processes with their MIG device) for one poll. Raises Lost."""
        mode = self._mode(dev, now)
        on = mode is not None and mode.current
        if self._was_on.get(dev.index, on) != on:
            # The mode changed (a GPU reset): what the card could not answer before, it may answer now.
            dev.unsupported.difference_update({"utilization", "process_utilization"})
            self._state.pop(dev.index, None)
        self._was_on[dev.index] = on
        if not on:
            self._state.pop(dev.index, None)
            return mode, (), procs
        state = self._state.get(dev.index)
        if state is None or now - state.listed_at >= self._ask.slow_ttl:
            state = _MigState(self._list(dev), now)
            self._state[dev.index] = state
        devices: list[MigDevice] = []
        found: dict[int, tuple[int, ProcessType, int | None]] = {}  # pid -> (mig index, type, memory)
        for e in state.entries:
            mem = self._ask.memory(e.child)
            pids: list[int] = []
            # compute only: MIG devices run no graphics contexts (NVIDIA's MIG user guide), so their graphics
            # list would cost one driver call per instance per poll to say nothing
            for pid, used in self._ask.running(e.child, graphics=False) or ():
                if pid not in pids:
                    pids.append(pid)
                prev = found.get(pid)
                found[pid] = (e.index, "compute", used if used is not None else (prev[2] if prev else None))
            devices.append(MigDevice(
                index=e.index, uuid=e.uuid, gpu_instance_id=e.gpu_instance_id,
                compute_instance_id=e.compute_instance_id, profile=e.profile,
                memory_used=mem[0] if mem is not None else None,
                memory_total=mem[1] if mem is not None else None,
                sm_count=e.sm_count, processes=tuple(pids),
            ))
        return mode, tuple(devices), _attach_processes(procs, found)

    def _mode(self, dev: Device, now: float) -> MigMode | None:
        ask = self._ask
        fn = getattr(ask.nv, "nvmlDeviceGetMigMode", None)
        if fn is None:  # a binding without MIG: N/A
            return None
        hit = dev.slow.get("mig_mode")  # cached()'s hit, inline (most polls)
        if hit is not None and now - hit[1] < ask.slow_ttl:
            value = hit[0]
        else:
            value = ask.cached(dev, "mig_mode", now, lambda d: ask.get(d, "mig_mode", fn, d.handle))
        if value is None:
            return None
        current, pending = value
        key = (bool(current), bool(pending))
        mode = _MODES.get(key)
        if mode is None:
            mode = _MODES[key] = MigMode(current=key[0], pending=key[1])
        return mode

    def _list(self, dev: Device) -> list[_MigEntry]:
        """Every MIG device of the card now: handles and the facts that do not change while it exists."""
        ask, nv = self._ask, self._ask.nv
        get = getattr(nv, "nvmlDeviceGetMigDeviceHandleByIndex", None)
        if get is None:
            return []
        count = self._opt(dev, "mig_devices", "nvmlDeviceGetMaxMigDeviceCount", dev.handle)
        entries: list[_MigEntry] = []
        for i in range(int(count) if count is not None else MAX_MIG_DEVICES):
            try:
                handle = get(dev.handle, i)
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == GPU_IS_LOST:
                    raise Lost from None
                continue  # NOT_FOUND: no MIG device in this slot
            except Exception:
                continue
            child = Device(dev.index)
            child.handle = handle
            uuid = ask.get(child, "uuid", nv.nvmlDeviceGetUUID, handle)
            if uuid is None:
                continue  # destroyed between listing and reading
            name = ask.get(child, "name", nv.nvmlDeviceGetName, handle)
            gi = self._opt(child, "gpu_instance_id", "nvmlDeviceGetGpuInstanceId", handle)
            ci = self._opt(child, "compute_instance_id", "nvmlDeviceGetComputeInstanceId", handle)
            attrs = self._opt(child, "attributes", "nvmlDeviceGetAttributes_v2", handle)
            entries.append(_MigEntry(
                index=i, child=child, uuid=_as_text(uuid),
                gpu_instance_id=int(gi) if gi is not None else None,
                compute_instance_id=int(ci) if ci is not None else None,
                profile=profile_of(_as_text(name)) if name is not None else None,
                sm_count=int(attrs.multiprocessorCount) if attrs is not None else None,
            ))
        return entries

    def _opt(self, dev: Device, field: str, function: str, handle: Any) -> Any:
        """One query through a function the binding may lack (then None, as NOT_SUPPORTED would be)."""
        fn = getattr(self._ask.nv, function, None)
        return None if fn is None else self._ask.get(dev, field, fn, handle)


def _attach_processes(procs: tuple[RawProcess, ...], found: dict[int, tuple[int, ProcessType, int | None]]
                      ) -> tuple[RawProcess, ...]:
    """The card's process list with each process's MIG device; processes only an instance lists are added."""
    out: list[RawProcess] = []
    seen: set[int] = set()
    for p in procs:
        seen.add(p.pid)
        hit = found.get(p.pid)
        if hit is None:
            out.append(p)
            continue
        memory = p.gpu_memory if p.gpu_memory is not None else hit[2]
        out.append(replace(p, mig_device=hit[0], gpu_memory=memory))
    for pid, (index, kind, memory) in found.items():
        if pid not in seen:
            out.append(RawProcess(pid=pid, type=kind, gpu_memory=memory, sm_utilization=None, mig_device=index))
    return tuple(out)


def _as_text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
