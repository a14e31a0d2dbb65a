"""The NVML source: GPUs and their processes through nvidia-ml-py.

Drivers differ in what they answer. Every query that fails becomes ``None``
(N/A on screen, null in JSON) — never a crash and never a made-up number — and
the reason is remembered so that a query the GPU does not support is not asked
again. Struct versions are probed once and the one that works is kept
(running processes ``_v3`` → ``_v2`` → v1, memory info ``_v2`` → v1, clock
event reasons → throttle reasons, enforced → management power limit). A GPU
that answers ``GPU_IS_LOST`` is reported with ``lost=True`` under the identity
read before, and the other GPUs go on. A query that should work but keeps
failing (e.g. ``NVML_ERROR_UNKNOWN`` in two polls in a row) becomes one
sentence in ``GpuReading.errors`` until it recovers.

What is read when — one poll asks each thing at most once:

=====================  ==================================================================
read once (open)       driver version, CUDA driver version, NVML version, GPU count,
                       handles; per GPU: name, UUID, PCI bus id, minor number,
                       max SM clock, max memory clock
cached (``slow_ttl``,  persistence mode, encoder and decoder utilization (and the batched
5 s by default)        fields below through their single getters when the batch cannot
                       carry them)
every poll             utilization (GPU and memory, one call), memory used/total/reserved,
                       temperature, fan speed, SM clock, memory clock, P-state,
                       clock-throttle reasons, compute processes, graphics processes,
                       per-process SM utilization (only when the GPU has processes);
                       one ``nvmlDeviceGetFieldValues`` call for power draw, power limit,
                       volatile uncorrected ECC errors, memory temperature, energy, PCIe
                       replays and remapped rows (``nvml_fields.py``); once per machine,
                       the XID events waiting (timeout 0)
=====================  ==================================================================

The process lists and process utilization are read through nvidia-ml-py's
function pointers with a buffer kept per GPU, so a steady state costs one
driver call each instead of two (size, then data) — and v1 structs, which
nvidia-ml-py no longer wraps, can still be read from old drivers.

pynvml is imported inside :meth:`NvmlSource.open`, not at module import: the
one-shot commands pay for it only when they really read a GPU.

The query rules (N/A, remembered failures, struct-version probing, the lost-GPU signal, the
process lists read through kept buffers) are ``nvml_query.py``, shared with the MIG reader
(``nvml_mig.py``) and the batched fields (``nvml_fields.py``); impossible values are judged in
``plausible.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gputui.core.model import Gpu, GpuReading, ProcessType, RawProcess, throttle_names
from gputui.core.plausible import PlausibleMemo, plausible_reading
from gputui.core.record import replace
from gputui.core.sources import NvmlUnavailable
from gputui.core.sources.nvml_doctor import NvmlLibraryInfo, binding_version, health, loaded_library_path
from gputui.core.sources.nvml_fields import FieldBatch, XidEvents
from gputui.core.sources.nvml_mig import MigReader
from gputui.core.sources.nvml_query import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    Device,
    Lost,
    NvmlQueries,
)
from gputui.core.sources.nvml_steady import Plan, make_plan, read_steady, refresh_slow
from gputui.core.sources.nvml_structs import PSTATE_UNKNOWN

#: How long slow values (power limit, ECC, persistence mode) are reused.
SLOW_TTL = 5.0
#: Consecutive failed polls of one query before it is reported in GpuReading.errors.
FAIL_THRESHOLD = 2
#: Per-poll fields a face may choose not to read (NvmlSource.leave_unread): no judge reads them.
OPTIONAL_FIELDS = frozenset({"pstate", "clock_memory"})

_CLOCK_SM = 1
_CLOCK_MEM = 2
_TEMPERATURE_GPU = 0
_ECC_UNCORRECTED = 1
_ECC_VOLATILE = 0
#: ``_processes``' samples when not read yet this poll: it asks them
_ASK: Any = object()

#: The readings dcgm-exporter's default counters add: (Gpu field, batched, cache name of its getter, the
#: getter, which part of the getter's answer). One getter answers all three remapped-row fields.
_DCGM: tuple[tuple[str, bool, str | None, str | None, int | None], ...] = (
    ("remapped_rows_failure", True, "remapped_rows", "nvmlDeviceGetRemappedRows", 3),
    ("memory_temperature", True, None, None, None),
    ("total_energy_consumption", True, "total_energy_consumption", "nvmlDeviceGetTotalEnergyConsumption", None),
    ("pcie_replay_counter", True, "pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter", None),
    ("remapped_rows_correctable", True, "remapped_rows", "nvmlDeviceGetRemappedRows", 0),
    ("remapped_rows_uncorrectable", True, "remapped_rows", "nvmlDeviceGetRemappedRows", 1),
    ("encoder_utilization", False, "encoder_utilization", "nvmlDeviceGetEncoderUtilization", 0),
    ("decoder_utilization", False, "decoder_utilization", "nvmlDeviceGetDecoderUtilization", 0),
)

#: temperature, fan speed, SM clock, memory clock and P-state: (field, function, arguments), read in one loop
_SCALARS = (("temperature", "nvmlDeviceGetTemperature", (_TEMPERATURE_GPU,)),
            ("fan_speed", "nvmlDeviceGetFanSpeed", ()), ("clock_sm", "nvmlDeviceGetClockInfo", (_CLOCK_SM,)),
            ("clock_memory", "nvmlDeviceGetClockInfo", (_CLOCK_MEM,)), ("pstate", "nvmlDeviceGetPerformanceState", ()))


#: Human names of fields for error sentences.
_LABELS = {
    "utilization": "utilization", "memory": "memory", "temperature": "temperature", "power_draw": "power draw",
    "fan_speed": "fan speed", "clock_sm": "SM clock", "clock_memory": "memory clock", "pstate": "P-state",
    "throttle_reasons": "throttle reasons", "power_limit": "power limit", "ecc_errors": "ECC errors",
    "persistence_mode": "persistence mode", "compute_processes": "compute processes",
    "graphics_processes": "graphics processes", "process_utilization": "process utilization",
    "name": "name", "uuid": "UUID", "pci_bus_id": "PCI bus id", "minor_number": "minor number",
    "clock_sm_max": "max SM clock", "clock_memory_max": "max memory clock", "handle": "device handle",
}


def init_error_sentence(code: int | None, detail: str = "") -> str:
    """One sentence naming why NVML could not start, for the user (exit 3)."""
    if code == LIBRARY_NOT_FOUND:
        return ("The NVIDIA driver library libnvidia-ml.so.1 was not found: no NVIDIA driver is installed "
                "here, or its library is not on the library path.")
    if code == DRIVER_NOT_LOADED:
        return "The NVIDIA kernel driver is not loaded (is there an NVIDIA GPU, and is the nvidia module loaded?)."
    if code == NO_PERMISSION:
        return "gputui has no permission to use the NVIDIA devices (/dev/nvidia*); ask an admin for access."
    if code == LIB_RM_VERSION_MISMATCH:
        return ("The NVIDIA driver library and the loaded kernel module have different versions, usually after "
                "a driver upgrade without a reboot; reboot or reload the nvidia kernel module.")
    if code == FUNCTION_NOT_FOUND:
        return "The NVIDIA driver library is too old for nvidia-ml-py (nvmlInit is missing); update the driver."
    reason = detail or (f"NVML error {code}" if code is not None else "unknown error")
    return f"NVML could not be initialised ({reason})."


def format_cuda_version(value: int | None) -> str | None:
    """NVML's CUDA driver version integer (12040) as nvidia-smi prints it ("12.4")."""
    if value is None or value <= 0:
        return None
    major, minor = value // 1000, (value % 1000) // 10
    return f"{major}.{minor}"


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Device(Device):
    """What the source keeps about one GPU between polls beyond what the query rules keep (a plain
    slotted class: cheap to import)."""

    __slots__ = ("name", "uuid", "pci_bus_id", "minor_number", "clock_sm_max", "clock_memory_max", "static_done",
                 "raws", "merged", "procs", "gpu", "batch", "steady")

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.name: str | None = None
        self.uuid: str | None = None
        self.pci_bus_id: str | None = None
        self.minor_number: int | None = None
        self.clock_sm_max: int | None = None
        self.clock_memory_max: int | None = None
        self.static_done = False
        #: the last poll's RawProcess per PID: handed out again while its type, memory and SM % are the same
        self.raws: dict[int, RawProcess] = {}
        #: the compute and graphics lists last merged, and the merge (pid -> (type, memory))
        self.merged: tuple[Any, Any, dict[int, tuple[ProcessType, int | None]]] | None = None
        #: the merge and SM samples the last process tuple was built from, and that tuple
        self.procs: tuple[dict[int, Any], dict[int, int] | None, tuple[RawProcess, ...]] | None = None
        #: everything the last Gpu was built from, and that Gpu: the same readings give the same object
        self.gpu: tuple[tuple[Any, ...], Gpu] | None = None
        #: the fields read through one nvmlDeviceGetFieldValues call per poll (nvml_fields.py)
        self.batch = FieldBatch()
        #: the steady poll's plan (nvml_steady.py), None while the full rules are needed
        self.steady: Plan | None = None


class NvmlSource:
    """A :class:`~gputui.core.sources.GpuSource` reading NVML through nvidia-ml-py.

    ``open()`` must be called first (it raises :class:`NvmlUnavailable` with one
    sentence); ``read()`` never raises for a failing GPU or query.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, slow_ttl: float = SLOW_TTL,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall_clock
        #: the query rules (N/A, remembered failures, struct versions) and the bound pynvml
        self._ask = NvmlQueries(slow_ttl)
        self._lock = threading.Lock()
        self._devices: list[_Device] = []
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        self.nvml_version: str | None = None
        #: the plausibility verdict of each GPU's last reading (an unchanged reading is not judged again)
        self._plausible: PlausibleMemo = {}
        #: the last poll's GPUs, processes and errors, and the reading made of them
        self._last: tuple[tuple[Gpu, ...], dict[int, tuple[RawProcess, ...]], tuple[str, ...], GpuReading] | None = None
        #: per-poll fields not asked for (see leave_unread)
        self._unread: frozenset[str] = frozenset()
        #: the unsigned-int getters of every poll, as NvmlQueries.per_poll asks them (None: left unread)
        self._scalars: tuple[tuple[str, str, tuple[int, ...]] | None, ...] = _SCALARS
        self._mig = MigReader(self._ask)
        self._xids = XidEvents()

    @property
    def slow_ttl(self) -> float:
        """How long slow values (power limit, ECC, persistence mode, the MIG layout) are reused."""
        return self._ask.slow_ttl

    @slow_ttl.setter
    def slow_ttl(self, seconds: float) -> None:
        self._ask.slow_ttl = seconds

    @property
    def _nv(self) -> Any:
        """pynvml while NVML is open, else None."""
        return self._ask.nv

    # -- lifecycle ------------------------------------------------------------------

    def open(self) -> None:
        """Load and initialise NVML, read the static facts. Raises NvmlUnavailable."""
        if self._nv is not None:
            return
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable(
                "nvidia-ml-py is not installed in gputui's Python environment; install it with "
                "'pip install nvidia-ml-py'."
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(init_error_sentence(getattr(exc, "value", None), str(exc))) from None
        except Exception as exc:  # a broken library or binding: still one sentence
            raise NvmlUnavailable(init_error_sentence(None, f"{type(exc).__name__}: {exc}")) from None
        self._ask.nv = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"NVML started but could not count the GPUs ({exc}).") from None
        self.driver_version = self._system(lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
        self.nvml_version = self._system(lambda: _text(pynvml.nvmlSystemGetNVMLVersion()))
        self.cuda_driver_version = format_cuda_version(self._system(self._cuda_version))
        self._devices = [_Device(index=i) for i in range(count)]
        self._last = None
        for dev in self._devices:
            self._attach(dev)
        self._xids.open(pynvml, {d.index: d.handle for d in self._devices if d.handle is not None})

    def close(self) -> None:
        """Shut NVML down (once). The source cannot be read afterwards."""
        nv, self._ask.nv = self._ask.nv, None
        self._ask.fns = {}
        if nv is None:
            return
        self._xids.close(nv)
        try:
            nv.nvmlShutdown()
        except Exception:
            pass

    @property
    def device_count(self) -> int:
        return len(self._devices)

    def leave_unread(self, fields: Iterable[str]) -> None:
        """Stop asking the driver for these per-poll fields; they read as N/A (None), as from a
        driver that cannot say. Only :data:`OPTIONAL_FIELDS` may be left unread: fields no judge
        reads, for a face that does not show them (the exporter, which exports neither P-state nor,
        without ``--dcgm-names``, the memory clock)."""
        unread = frozenset(fields)
        if not unread <= OPTIONAL_FIELDS:
            extra = sorted(unread - OPTIONAL_FIELDS)
            raise ValueError(f"only {sorted(OPTIONAL_FIELDS)} can be left unread, not {extra}")
        self._unread = unread
        self._scalars = tuple(None if a[0] in unread else a for a in _SCALARS)
        for dev in self._devices:  # the plans call what was asked before
            dev.steady = None

    # -- reading --------------------------------------------------------------------

    def read(self) -> GpuReading:
        """One poll of every GPU: values, lost flags, raw processes and persistent errors."""
        if self._nv is None:
            raise NvmlUnavailable("NVML is not initialised (NvmlSource.open() was not called or it was closed).")
        with self._lock:
            now = self._clock()
            gpus: list[Gpu] = []
            processes: dict[int, tuple[RawProcess, ...]] = {}
            self._xids.drain()
            ttl = self._ask.slow_ttl
            last = self._last
            # the very GPUs and process tuples of the last poll so far (compared by identity as they come:
            # no record's __eq__ runs), and whether any failure is counted
            same = last is not None and len(last[0]) == len(self._devices)
            clean = True
            for dev in self._devices:
                plan = dev.steady
                try:
                    steady = plan is not None and not dev.failures
                    if plan is not None and steady and now - plan.slow_at >= ttl:
                        # the slow values due, read again (a failure among them is N/A this poll, and asked
                        # again by the full rules at the next)
                        plan = dev.steady = refresh_slow(self, dev, plan, now)
                    if plan is not None and steady:
                        gpu, procs = read_steady(self, dev, plan, now)
                    else:  # the full rules, and a plan for the next poll from what they kept
                        gpu, procs = self._read_device(dev, now)
                        dev.steady = make_plan(self, dev, now, gpu)
                except Lost:
                    dev.steady = None
                    gpu, procs = self._lost_gpu(dev), None
                if same and (last[0][len(gpus)] is not gpu or last[1].get(dev.index) is not procs):  # type: ignore[index]
                    same = False
                if dev.failures:
                    clean = False
                gpus.append(gpu)
                if procs is not None:
                    processes[dev.index] = procs
            read = (tuple(gpus), processes, () if clean else self._error_sentences())
            # the very GPUs and process tuples of the last poll (of every GPU: the same PIDs in both), and its
            # errors: the last reading, as plausibility judged it (a function of the reading alone)
            if same and last[2] == read[2]:  # type: ignore[index]
                return last[3]  # type: ignore[index]
            # values no hardware can report (wrapped counters, driver bugs) become N/A with a warning
            reading = plausible_reading(GpuReading(
                driver_version=self.driver_version,
                cuda_driver_version=self.cuda_driver_version,
                gpus=read[0],
                processes=processes,
                errors=read[2],
                nvml_version=self.nvml_version,
            ), self._plausible)
            self._last = (*read, reading)
            return reading

    def _read_device(self, dev: _Device, now: float, fields: dict[str, float | int] | None = None,
                     answers: dict[str, Any] | None = None) -> tuple[Gpu, tuple[RawProcess, ...]]:
        """One GPU by the full rules. ``fields`` and ``answers``: the field batch and kept calls the steady
        reader (``nvml_steady.py``) already made this poll, not made again."""
        nv = self._nv
        if dev.handle is None:
            self._attach(dev)
            if dev.handle is None:
                if dev.last_error.get("handle") == "lost":
                    raise Lost
                # No handle for another reason: identity only, every value N/A (the error is reported).
                return replace(self._lost_gpu(dev), lost=False), ()
        elif not dev.static_done:  # a static query that failed before: ask again until it answers
            self._read_static(dev)
        ask = self._ask
        get, cached = ask.get, ask.cached
        if fields is None:
            fields = self._field_values(dev)
        util, mem, (temperature, fan, clock_sm, clock_mem, pstate), reasons = ask.per_poll(dev, self._scalars,
                                                                                         answers)
        # the batch's answers (what _field does first, inline); a getter closure only for a field it lacks
        power, power_limit, ecc = fields.get("power_draw"), fields.get("power_limit"), fields.get("ecc_errors")
        if dev.failures:
            for name, value in (("power_draw", power), ("power_limit", power_limit), ("ecc_errors", ecc)):
                if value is not None:
                    dev.failures.pop(name, None)
        if power is None:
            power = self._field(dev, fields, "power_draw", lambda d: get(
                d, "power_draw", nv.nvmlDeviceGetPowerUsage, d.handle))
        if power_limit is None:
            power_limit = self._field(dev, fields, "power_limit", lambda d: cached(
                d, "power_limit", now, self._power_limit))
        if ecc is None:
            ecc = self._field(dev, fields, "ecc_errors", lambda d: cached(d, "ecc_errors", now, lambda d: get(
                d, "ecc_errors", nv.nvmlDeviceGetTotalEccErrors, d.handle, _ECC_UNCORRECTED, _ECC_VOLATILE)))
        extra = self._dcgm_fields(dev, fields, now)
        persistence = self._slow(dev, "persistence_mode", "nvmlDeviceGetPersistenceMode", None, now)
        procs = self._processes(dev, answers)
        mig_mode, mig_devices, procs = self._mig.read(dev, now, procs)
        # Every input of the Gpu below: when none changed since the last poll, the last Gpu is it.
        key = (dev.uuid, dev.name, dev.pci_bus_id, dev.minor_number, dev.clock_sm_max, dev.clock_memory_max,
               util, mem, temperature, power, power_limit, fan,
               clock_sm, clock_mem, pstate, reasons, ecc, persistence, mig_mode, mig_devices, extra,
               mem[2] if mem is not None else None)
        if dev.gpu is not None and dev.gpu[0] == key:
            return dev.gpu[1], procs
        gpu = Gpu(
            index=dev.index,
            uuid=dev.uuid or "",
            name=dev.name or "Unknown GPU",
            pci_bus_id=dev.pci_bus_id,
            utilization_gpu=util[0] if util is not None else None,
            utilization_memory=util[1] if util is not None else None,
            memory_used=mem[0] if mem is not None else None,
            memory_total=mem[1] if mem is not None else None,
            temperature=int(temperature) if temperature is not None else None,
            power_draw=power / 1000.0 if power is not None else None,
            power_limit=power_limit / 1000.0 if power_limit is not None else None,
            fan_speed=int(fan) if fan is not None else None,
            clock_sm=int(clock_sm) if clock_sm is not None else None,
            clock_memory=int(clock_mem) if clock_mem is not None else None,
            clock_sm_max=dev.clock_sm_max,
            clock_memory_max=dev.clock_memory_max,
            pstate=int(pstate) if pstate is not None and pstate != PSTATE_UNKNOWN else None,
            throttle_reasons=throttle_names(int(reasons)) if reasons is not None else None,
            ecc_errors=int(ecc) if ecc is not None else None,
            persistence_mode=bool(persistence) if persistence is not None else None,
            minor_number=dev.minor_number,
            lost=False,
            mig_mode=mig_mode,
            mig_devices=mig_devices,
            memory_reserved=mem[2] if mem is not None else None,
            **extra,
        )
        dev.gpu = (key, gpu)
        return gpu, procs

    def _field_values(self, dev: _Device) -> dict[str, float | int]:
        """This poll's batched fields (one nvmlDeviceGetFieldValues call); {} when the driver or GPU
        cannot batch. Raises Lost."""
        if dev.batch.off:
            return {}
        try:
            fn = self._ask.function("nvmlDeviceGetFieldValues")
        except Exception:
            fn = None
            self._ask.missing.add("nvmlDeviceGetFieldValues")
        return dev.batch.read(fn, dev.handle)

    def _field(self, dev: _Device, fields: dict[str, float | int], name: str,
               single: Callable[[_Device], Any] | None) -> Any:
        """A batched field's value; its single getter when the batch does not carry it (the driver
        lacks the call or refused that field); None when the batch asked and got no answer this poll."""
        value = fields.get(name)
        if value is not None:
            if dev.failures:
                dev.failures.pop(name, None)
            return value
        if not dev.batch.off and name in dev.batch.names:
            code = dev.batch.errors.get(name)
            if code is not None:  # counted like a failing getter: a warning when it keeps failing
                self._ask.failed(dev, name, code, self._nv.NVMLError(code))
            return None
        return single(dev) if single is not None else None

    def _slow(self, dev: _Device, name: str, getter: str, part: int | None, now: float) -> Any:
        """A getter's answer (``part`` of it), asked once per ``slow_ttl`` (cached under ``name``)."""
        hit = dev.slow.get(name)  # cached()'s hit, inline (most polls)
        if hit is not None and now - hit[1] < self._ask.slow_ttl:
            value = hit[0]
            return value if part is None or value is None else value[part]
        fn = getattr(self._nv, getter)
        value = self._ask.cached(dev, name, now, lambda d: self._ask.get(d, name, fn, d.handle))
        return value if part is None or value is None else value[part]

    def _dcgm_fields(self, dev: _Device, fields: dict[str, float | int], now: float) -> dict[str, Any]:
        """The readings dcgm-exporter's default counters add: batched where NVML has a field id,
        else through their getters every ``slow_ttl`` seconds (:data:`_DCGM`)."""
        get = fields.get
        rf, mt, te = get("remapped_rows_failure"), get("memory_temperature"), get("total_energy_consumption")
        pr, rc, ru = get("pcie_replay_counter"), get("remapped_rows_correctable"), get("remapped_rows_uncorrectable")
        if not dev.failures and rf is not None and mt is not None and te is not None and pr is not None \
                and rc is not None and ru is not None:  # the batch answered every batched one: the loop below, inline
            return {"remapped_rows_failure": bool(rf), "memory_temperature": int(mt),
                    "total_energy_consumption": int(te), "pcie_replay_counter": int(pr),
                    "remapped_rows_correctable": int(rc), "remapped_rows_uncorrectable": int(ru),
                    "encoder_utilization": _int(self._slow(dev, "encoder_utilization",
                                                           "nvmlDeviceGetEncoderUtilization", 0, now)),
                    "decoder_utilization": _int(self._slow(dev, "decoder_utilization",
                                                           "nvmlDeviceGetDecoderUtilization", 0, now)),
                    "xid_last": self._xids.last.get(dev.index)}
        out: dict[str, Any] = {}
        for field, batched, name, getter, part in _DCGM:
            if not batched:
                value = self._slow(dev, name, getter, part, now)  # type: ignore[arg-type]  # set for these
            else:
                value = fields.get(field)
                if value is not None:  # the batch answered (what _field does first, inline)
                    if dev.failures:
                        dev.failures.pop(field, None)
                else:
                    single = None if getter is None else (
                        lambda d, n=name, g=getter, p=part: self._slow(d, n, g, p, now))
                    value = self._field(dev, fields, field, single)
            out[field] = None if value is None else bool(value) if field == "remapped_rows_failure" else int(value)
        out["xid_last"] = self._xids.last.get(dev.index)
        return out

    def _lost_gpu(self, dev: _Device) -> Gpu:
        return Gpu(index=dev.index, uuid=dev.uuid or "", name=dev.name or "Unknown GPU", pci_bus_id=dev.pci_bus_id,
                   clock_sm_max=dev.clock_sm_max, clock_memory_max=dev.clock_memory_max,
                   minor_number=dev.minor_number, lost=True)

    # -- queries --------------------------------------------------------------------

    def _system(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def _cuda_version(self) -> int | None:
        nv = self._nv
        for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            try:
                return int(getattr(nv, name)())
            except AttributeError:
                continue
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == FUNCTION_NOT_FOUND:
                    self._ask.missing.add(name)
                    continue
                return None
        return None

    def _attach(self, dev: _Device) -> None:
        """Get the GPU's handle and static facts; a lost GPU is retried at the next poll."""
        nv = self._nv
        try:
            dev.handle = nv.nvmlDeviceGetHandleByIndex(dev.index)
        except Exception as exc:
            dev.handle = None
            code = getattr(exc, "value", None) if isinstance(exc, nv.NVMLError) else None
            dev.last_error["handle"] = "lost" if code == GPU_IS_LOST else (str(exc) or type(exc).__name__)
            if code != GPU_IS_LOST:
                dev.failures["handle"] = dev.failures.get("handle", 0) + 1
            return
        dev.failures.pop("handle", None)
        try:
            self._read_static(dev)
        except Lost:
            pass

    def _read_static(self, dev: _Device) -> None:
        """Values that never change while the driver is loaded: read until each has an answer."""
        nv, h = self._nv, dev.handle
        if dev.name is None:
            v = self._ask.get(dev, "name", nv.nvmlDeviceGetName, h)
            dev.name = _text(v) if v is not None else None
        if dev.uuid is None:
            v = self._ask.get(dev, "uuid", nv.nvmlDeviceGetUUID, h)
            dev.uuid = _text(v) if v is not None else None
        if dev.pci_bus_id is None:
            v = self._ask.get(dev, "pci_bus_id", nv.nvmlDeviceGetPciInfo, h)
            dev.pci_bus_id = _text(v.busId) if v is not None else None
        if dev.minor_number is None:
            dev.minor_number = self._ask.get(dev, "minor_number", nv.nvmlDeviceGetMinorNumber, h)
        if dev.clock_sm_max is None:
            dev.clock_sm_max = self._ask.get(dev, "clock_sm_max", nv.nvmlDeviceGetMaxClockInfo, h, _CLOCK_SM)
        if dev.clock_memory_max is None:
            dev.clock_memory_max = self._ask.get(dev, "clock_memory_max", nv.nvmlDeviceGetMaxClockInfo, h, _CLOCK_MEM)
        dev.static_done = all(
            getattr(dev, f) is not None or f in dev.unsupported
            for f in ("name", "uuid", "pci_bus_id", "minor_number", "clock_sm_max", "clock_memory_max")
        )

    def _power_limit(self, dev: _Device) -> int | None:
        h, ask = dev.handle, self._ask
        return ask.variant(dev, "power_limit", ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"),
                           lambda name: ask.uint(name, h))

    # -- processes ------------------------------------------------------------------

    def _processes(self, dev: _Device, answers: dict[str, Any] | None = None,
                   lists: list[Any] | None = None, samples: Any = _ASK) -> tuple[RawProcess, ...]:
        """The GPU's processes. Steady state (the same lists and SM samples as the last poll, which
        ``NvmlQueries.running`` and ``process_utilization`` hand back as the same objects): the last tuple.
        ``samples``: this poll's SM samples when the steady reader already read them (asked only for a
        GPU with processes listed: the caller asked them when a list had an entry)."""
        compute, graphics = self._ask.running_both(dev, answers) if lists is None else lists
        if dev.merged is not None and dev.merged[0] is compute and dev.merged[1] is graphics:
            merged = dev.merged[2]
        else:
            # pid -> (type, memory), in the order first listed; compute processes alone, each listed once (the
            # usual answer): each as listed
            merged = {pid: ("compute", mem) for pid, mem in compute} if compute and not graphics else {}
            rest: tuple[Any, Any] = ((), ())
            if not merged or len(merged) != len(compute):  # type: ignore[arg-type]
                merged, rest = {}, (compute or (), graphics or ())
            # One process has one memory figure; NVML repeats it in both lists (the larger one is kept).
            for pid, mem in rest[0]:
                prev = merged.get(pid)
                if prev is not None and prev[1] is not None:
                    mem = prev[1] if mem is None else max(prev[1], mem)
                merged[pid] = ("compute", mem)
            for pid, mem in rest[1]:
                prev = merged.get(pid)
                if prev is None:
                    merged[pid] = ("graphics", mem)
                    continue
                if prev[1] is not None:
                    mem = prev[1] if mem is None else max(prev[1], mem)
                merged[pid] = ("graphics" if prev[0] == "graphics" else "compute+graphics", mem)
            dev.merged = (compute, graphics, merged)
        if not merged:
            dev.procs = None
            return ()
        if samples is _ASK:
            samples = self._ask.process_utilization(dev, self._wall())
        last_procs = dev.procs
        if last_procs is not None and last_procs[0] is merged \
                and (last_procs[1] is samples or last_procs[1] == samples):
            return last_procs[2]
        out = []
        last = dev.raws
        raws: dict[int, RawProcess] = {}
        for pid, (ptype, mem) in merged.items():
            sm = None if samples is None else samples.get(pid, 0)
            raw = last.get(pid)  # the last poll's entry while its figures are the same
            if raw is None or raw.sm_utilization != sm or raw.gpu_memory != mem or raw.type != ptype:
                raw = RawProcess(pid, ptype, mem, sm)
            raws[pid] = raw
            out.append(raw)
        dev.raws = raws
        result = tuple(out)
        dev.procs = (merged, samples, result)
        return result

    # -- errors ---------------------------------------------------------------------

    def _error_sentences(self) -> tuple[str, ...]:
        for dev in self._devices:  # most polls: no failure counted anywhere, nothing to say
            if dev.failures:
                break
        else:
            return ()
        out = []
        for dev in self._devices:
            bad = [f for f, n in dev.failures.items() if n >= FAIL_THRESHOLD]
            if not bad:
                continue
            labels = [_LABELS.get(f, f.replace("_", " ")) for f in bad]
            what = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
            reasons = sorted({dev.last_error.get(f, "error") for f in bad})
            polls = min(dev.failures[f] for f in bad)
            out.append(f"GPU {dev.index}: NVML failed to read {what} in the last {polls} polls "
                       f"({'; '.join(reasons)}).")
        return tuple(out)

    # -- doctor ---------------------------------------------------------------------

    def library_info(self) -> NvmlLibraryInfo:
        """Driver and library versions and per-GPU health, for ``gputui doctor``."""
        if self._nv is None:
            raise NvmlUnavailable("NVML is not initialised (NvmlSource.open() was not called or it was closed).")
        nv = self._nv
        with self._lock:
            devices = tuple(health(nv, dev) for dev in self._devices)
            process_struct = None
            variant = self._ask.variants.get("compute_processes")
            if variant is not None:
                process_struct = "v3" if variant.endswith("_v3") else "v2" if variant.endswith("_v2") else "v1"
            return NvmlLibraryInfo(
                driver_version=self.driver_version,
                cuda_driver_version=self.cuda_driver_version,
                nvml_version=self.nvml_version,
                nvidia_ml_py_version=binding_version(),
                library_path=loaded_library_path(nv),
                missing_functions=tuple(sorted(self._ask.missing)),
                process_struct=process_struct,
                devices=devices,
            )
