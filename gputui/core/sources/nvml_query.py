"""The NVML query rules every NVML reader of gputui shares: the card (``nvml.py``), its MIG
devices (``nvml_mig.py``) and the batched field values (``nvml_fields.py``).

- **N/A**: a query that fails is ``None`` (N/A on screen, null in JSON), never a crash and
  never a made-up number (:meth:`NvmlQueries.get`).
- **Remembered failures**: a refusal that cannot pass (:data:`PERMANENT`: NOT_SUPPORTED, no
  permission, a function or struct version the driver lacks) puts the field in the device's
  ``unsupported`` set and it is not asked again; any other failure is counted per field
  (``failures``, with its ``last_error``) so the source can say when one keeps failing, and
  forgotten at the next answer.
- **Struct versions** are probed once per source, newest first, and the one that answers is
  kept for every GPU (:meth:`NvmlQueries.variant`).
- **A lost GPU** (``GPU_IS_LOST``) raises :class:`Lost`: the reader stops asking that GPU
  anything this poll.
- **Slow values** are reused for ``slow_ttl`` seconds (:meth:`NvmlQueries.cached`).

Process lists and utilization samples are read through C function pointers into ctypes
buffers kept per device (one driver call when the buffer fits, instead of size then data);
the same bytes as the last call's give the same Python object back.

pynvml is never imported here: the caller binds the module it opened (``NvmlQueries.nv``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from operator import itemgetter
from typing import Any, TypeVar

from gputui.core.sources.nvml_structs import (
    MEMORY_V2,
    RUNNING,
    SAMPLE,
    MemoryV1,
    MemoryV2,
    Utilization,
    UtilizationSample,
    process_struct,
    samples_struct,
)

__all__ = ["Device", "Lost", "NvmlQueries", "PERMANENT"]

# NVML return codes (nvml.h); named here so no reader needs pynvml to know them.
SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

#: Errors that mean "this GPU/driver cannot answer this", not "try again".
PERMANENT = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION, INVALID_ARGUMENT, ARGUMENT_VERSION_MISMATCH})

NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF
#: Process-utilization samples older than this (seconds) are not asked for.
UTIL_WINDOW = 1.0
_WINDOW_US = int(UTIL_WINDOW * 1_000_000)


def samples_since(util_seen: int, wall: float) -> int:
    """The time (µs since the epoch) SM samples are asked from: past the newest one seen (``util_seen``), but
    never less than ``UTIL_WINDOW`` before ``wall`` (the epoch now), so a fast refresh does not flicker to 0
    between samples."""
    since = int(wall * 1_000_000) - _WINDOW_US
    if util_seen and util_seen < since:
        since = util_seen
    return since if since > 0 else 0

_second = itemgetter(1)

#: the samples' bytes can be read with SAMPLE (its layout is UtilizationSample's)
_SAMPLE_FITS = SAMPLE.size == ctypes.sizeof(UtilizationSample)

#: ``NvmlQueries.again``'s answer when the getter is not kept (never asked, or its last call failed)
MISS: Any = object()

#: What a ``variant`` probe returns.
_R = TypeVar("_R")


class Lost(Exception):
    """A GPU answered GPU_IS_LOST; stop asking it anything this poll."""


class Device:
    """What the query rules keep about one device (a GPU or a MIG device) between polls."""

    __slots__ = ("index", "handle", "unsupported", "failures", "last_error", "slow", "util_seen", "buffers",
                 "lists", "outs", "calls")

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        #: fields this device cannot answer (NOT_SUPPORTED, no permission, ...): not asked again
        self.unsupported: set[str] = set()
        #: consecutive failed polls per field, and the last error text
        self.failures: dict[str, int] = {}
        self.last_error: dict[str, str] = {}
        #: slow fields: name -> (value, monotonic time read)
        self.slow: dict[str, tuple[Any, float]] = {}
        #: newest process-utilization sample timestamp seen (µs, the driver's clock)
        self.util_seen = 0
        #: reusable ctypes buffers for the process and sample lists
        self.buffers: dict[str, Any] = {}
        #: per list (process lists, utilization samples): the bytes the driver filled last, what they
        #: were read as (the same bytes are the same answer, so it is not read again), the buffer, a view
        #: of those bytes in it (read again without a foreign call) and the entries they hold (and, for the
        #: samples, their PIDs and SM % in order)
        self.lists: dict[str, tuple[Any, ...]] = {}
        #: per-poll getters' out-parameters (a ctypes value or struct, and a pointer to it), made once
        #: per device and field and filled by every call (see ``NvmlQueries.uint``)
        self.outs: dict[str, tuple[Any, Any]] = {}
        #: per-poll getters that answered their last call, by field or family: (C function, the kept
        #: out-parameter, the whole argument tuple, handle first), called again as they are (see
        #: ``NvmlQueries.again``); dropped at the first failure, so the full rules run again
        self.calls: dict[str, tuple[Any, Any, tuple[Any, ...]]] = {}


def kept_out(dev: Device, name: str, kind: Any) -> tuple[Any, Any]:
    """The out-parameter of type ``kind`` kept per device under ``name``, with its pointer (made once:
    a per-poll getter writes into the same ctypes object every call)."""
    kept = dev.outs.get(name)
    if kept is None:
        value = kind()
        if kind is MemoryV2:
            value.version = MEMORY_V2
        kept = dev.outs[name] = (value, ctypes.byref(value))
    return kept


class NvmlQueries:
    """The query rules of one source: the bound pynvml module, the C functions found, the struct
    versions probed, and the functions the driver lacks. Not thread-safe: the source's lock."""

    def __init__(self, slow_ttl: float) -> None:
        #: pynvml once the source opened NVML, else None
        self.nv: Any = None
        self.slow_ttl = slow_ttl
        #: C functions found by name (see ``function``); emptied when NVML is shut down
        self.fns: dict[str, Any] = {}
        #: probed once: the function that works for each versioned family ("memory", "compute_processes", ...)
        self.variants: dict[str, str] = {}
        #: families for which the driver has none of the candidate functions
        self.absent: set[str] = set()
        #: NVML functions this driver lacks that were asked for
        self.missing: set[str] = set()
        #: per_poll's fields for each tuple of scalar asks
        self._per_poll_names: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    # -- the rules -------------------------------------------------------------------

    def get(self, dev: Device, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML getter: its value, or None (remembering why). Raises Lost."""
        if name in dev.unsupported:
            return None
        try:
            value = fn(*args)
        except self.nv.NVMLError as exc:
            self.failed(dev, name, getattr(exc, "value", UNKNOWN), exc)
            return None
        except Exception as exc:  # ctypes/binding trouble (seen with mismatched drivers): N/A, never a crash
            self.failed(dev, name, UNKNOWN, exc)
            return None
        if dev.failures:  # succeeded, inline: this runs for every query of every poll
            dev.failures.pop(name, None)
        return value

    def failed(self, dev: Device, name: str, code: int, exc: BaseException) -> None:
        """Remember why ``name`` failed: for good (PERMANENT) or once more. Raises Lost."""
        if code == GPU_IS_LOST:
            raise Lost
        if code in PERMANENT:
            dev.unsupported.add(name)
            dev.failures.pop(name, None)
            if code == FUNCTION_NOT_FOUND:
                self.missing.add(name)
            return
        dev.failures[name] = dev.failures.get(name, 0) + 1
        dev.last_error[name] = str(exc) or type(exc).__name__

    @staticmethod
    def succeeded(dev: Device, name: str) -> None:
        if dev.failures:
            dev.failures.pop(name, None)

    def cached(self, dev: Device, name: str, now: float, read: Callable[[Any], Any]) -> Any:
        """``read(dev)``, reused for ``slow_ttl`` seconds (an answer, or a refusal for good)."""
        hit = dev.slow.get(name)
        if hit is not None and now - hit[1] < self.slow_ttl:
            return hit[0]
        value = read(dev)
        if value is not None or name in dev.unsupported:
            dev.slow[name] = (value, now)
        return value

    def function(self, name: str) -> Any:
        """The C function ``name`` of the loaded library; NVMLError(FUNCTION_NOT_FOUND) if the driver lacks it.
        Looked up once (nvidia-ml-py's lookup takes its library lock every time)."""
        fn = self.fns.get(name)
        if fn is not None:
            return fn
        nv = self.nv
        getter = getattr(nv, "_nvmlGetFunctionPointer", None)
        if getter is not None:
            fn = getter(name)
        else:
            try:
                fn = getattr(nv.nvmlLib, name)
            except AttributeError:
                raise nv.NVMLError(FUNCTION_NOT_FOUND) from None
        self.fns[name] = fn
        return fn

    def variant(self, dev: Device, family: str, candidates: tuple[str, ...], call: Callable[[str], _R]) -> _R | None:
        """Probe ``candidates`` (newest first) once per source; keep the first that answers.

        ``call(variant)`` raises NVMLError. While probing, a function the driver lacks
        (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH) or that says NOT_SUPPORTED moves on to
        the next candidate; the first that answers is kept for every GPU from then on (one
        struct version for the whole machine keeps figures comparable). Returns the value or
        None (recorded under ``family``).
        """
        if family in dev.unsupported or family in self.absent:
            return None
        nv = self.nv
        chosen = self.variants.get(family)
        if chosen is not None:  # probed: the kept variant alone (every poll after the first)
            try:
                value = call(chosen)
            except nv.NVMLError as exc:
                self.failed(dev, family, getattr(exc, "value", UNKNOWN), exc)
                return None
            except Exception as exc:
                self.failed(dev, family, UNKNOWN, exc)
                return None
            if dev.failures:
                dev.failures.pop(family, None)
            return value
        refused: tuple[int, BaseException] | None = None
        for name in candidates:
            try:
                value = call(name)
            except nv.NVMLError as exc:
                code = getattr(exc, "value", UNKNOWN)
                if code in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
                    self.missing.add(name)
                    continue
                if code == NOT_SUPPORTED:
                    refused = (code, exc)
                    continue
                self.failed(dev, family, code, exc)
                return None
            except Exception as exc:
                self.failed(dev, family, UNKNOWN, exc)
                return None
            self.variants[family] = name
            self.succeeded(dev, family)
            return value
        if refused is not None:  # the versions this driver has all say NOT_SUPPORTED for this GPU
            self.failed(dev, family, *refused)
            return None
        self.absent.add(family)  # the driver has none of them
        return None

    def again(self, dev: Device, name: str) -> Any:
        """A per-poll getter that answered its last call, called again with the same arguments (the
        steady state: one dict lookup instead of the rules' lookups of the function, the out-parameter
        and the refusals): its filled out-parameter, None when it failed now (remembered as
        :meth:`failed` does; the next call runs the full rules), or :data:`MISS` when it is not kept
        (or was kept for another handle). Raises Lost."""
        fast = dev.calls.get(name)
        if fast is None or fast[2][0] is not dev.handle:
            return MISS
        try:
            ret = fast[0](*fast[2])
        except Exception as exc:  # ctypes/binding trouble: N/A, never a crash
            ret = exc
        if ret != SUCCESS:
            self.dropped(dev, name, ret)
            return None
        if dev.failures:
            dev.failures.pop(name, None)
        return fast[1]

    def dropped(self, dev: Device, name: str, ret: int | Exception) -> None:
        """A kept call that failed now (its return code, or what ctypes raised): no longer kept, so the
        next call runs the full rules, and the failure remembered as :meth:`failed` does."""
        del dev.calls[name]
        if isinstance(ret, Exception):
            self.failed(dev, name, UNKNOWN, ret)
        else:
            self.failed(dev, name, ret, self.nv.NVMLError(ret))

    def u64(self, name: str, h: Any) -> int:
        """One ``unsigned long long`` out-parameter getter through its C function; raises NVMLError."""
        out = ctypes.c_ulonglong()
        ret = self.function(name)(h, ctypes.byref(out))
        if ret != SUCCESS:
            raise self.nv.NVMLError(ret)
        return int(out.value)

    def kept_u64(self, dev: Device, name: str, family: str | None = None) -> int:
        """:meth:`u64` into an out-parameter kept per device (a per-poll getter); raises NVMLError.
        ``family``: on an answer, the call is kept under it for :meth:`again`."""
        kept = kept_out(dev, name, ctypes.c_ulonglong)
        fn = self.function(name)
        args = (dev.handle, kept[1])
        ret = fn(*args)
        if ret != SUCCESS:
            raise self.nv.NVMLError(ret)
        if family is not None:
            dev.calls[family] = (fn, kept[0], args)
        return int(kept[0].value)

    def uint(self, name: str, h: Any) -> int:
        """One ``unsigned int`` out-parameter getter through its C function; raises NVMLError."""
        out = ctypes.c_uint()
        ret = self.function(name)(h, ctypes.byref(out))
        if ret != SUCCESS:
            raise self.nv.NVMLError(ret)
        return int(out.value)

    def out(self, dev: Device, name: str, function: str, kind: Any, *args: int) -> Any:
        """A per-poll getter ``function(handle, *args, kind *out)`` called straight through its C function
        into an out-parameter kept per device and field (nvidia-ml-py's wrapper makes a ctypes object, looks
        the function up under a lock and checks the return in three more calls, every time): the filled
        out-parameter, to be read at once (the next call refills it), or None with the failure remembered
        as :meth:`get` does. Raises Lost."""
        value = self.again(dev, name)
        if value is not MISS:
            return value
        if name in dev.unsupported:
            return None
        kept = kept_out(dev, name, kind)
        call_args = (dev.handle, *args, kept[1])
        try:
            fn = self.function(function)
            ret = fn(*call_args)
        except self.nv.NVMLError as exc:  # the driver lacks the function
            self.failed(dev, name, getattr(exc, "value", UNKNOWN), exc)
            return None
        except Exception as exc:  # ctypes/binding trouble: N/A, never a crash
            self.failed(dev, name, UNKNOWN, exc)
            return None
        if ret != SUCCESS:
            self.failed(dev, name, ret, self.nv.NVMLError(ret))
            return None
        if dev.failures:
            dev.failures.pop(name, None)
        dev.calls[name] = (fn, kept[0], call_args)  # answered: called as it is from now on (again)
        return kept[0]

    def scalar(self, dev: Device, name: str, function: str, *args: int) -> int | None:
        """An ``unsigned int`` getter (temperature, fan speed, a clock, the P-state) through :meth:`out`."""
        value = self.out(dev, name, function, ctypes.c_uint, *args)
        return None if value is None else value.value  # a c_uint's value is an int

    def per_poll(self, dev: Device, asks: tuple[tuple[str, str, tuple[int, ...]] | None, ...],
                 answers: dict[str, Any] | None = None
                 ) -> tuple[tuple[int, int] | None, tuple[int, int, int | None] | None, list[int | None], int | None]:
        """(utilization, memory, the :meth:`scalar` of each (field, function, arguments) of ``asks`` — None: not
        asked, None back —, throttle reasons), the per-poll getters of a device in one loop over its kept
        calls, in that order: each is what :meth:`again` answers, or what the full rules of
        :meth:`utilization`, :meth:`memory`, :meth:`scalar` and :meth:`throttle_reasons` answer where the
        call is not kept. One frame for the device's eight calls instead of two or three each. ``answers``:
        what kept calls already answered this poll (by name: the steady reader's), not called again.
        Raises Lost."""
        calls, handle = dev.calls, dev.handle
        names = self._per_poll_names.get(asks)
        if names is None:
            names = self._per_poll_names[asks] = (
                "utilization", "memory", *[a[0] if a is not None else None for a in asks], "throttle_reasons")
        got: list[Any] = []
        answered: list[str] = []
        for name in names:  # again(), inline, for each; the answers' bookkeeping after the loop
            fast = calls.get(name)  # (None: a field left unread, never kept)
            if fast is not None and fast[2][0] is handle:
                if answers is not None and name in answers:
                    ret = answers[name]
                else:
                    try:
                        ret = fast[0](*fast[2])
                    except Exception as exc:  # ctypes/binding trouble: N/A, never a crash
                        ret = exc
                if ret == SUCCESS:
                    got.append(fast[1])
                    answered.append(name)
                    continue
                self.dropped(dev, name, ret)
                got.append(None)
            else:
                got.append(None if name is None else MISS)
        if dev.failures:
            for name in answered:
                dev.failures.pop(name, None)
        u, m, reasons = got[0], got[1], got[-1]
        if u is MISS:
            util = self.utilization(dev)
        else:
            util = None if u is None else (int(u.gpu), int(u.memory))
        if m is MISS:
            mem = self.memory(dev)
        else:
            mem = None if m is None else (m.used, m.total, m.reserved if type(m) is MemoryV2 else None)
        scalars: list[int | None] = []
        for ask, value in zip(asks, got[2:-1], strict=True):
            if value is MISS:
                scalars.append(self.scalar(dev, *ask[:2], *ask[2]))  # type: ignore[index]  # the full rules
            else:
                scalars.append(None if value is None else value.value)
        if reasons is MISS:
            reasons = self.throttle_reasons(dev)
        elif reasons is not None:
            reasons = reasons.value
        return util, mem, scalars, reasons

    def utilization(self, dev: Device) -> tuple[int, int] | None:
        """(GPU %, memory %) from ``nvmlDeviceGetUtilizationRates`` through :meth:`out`."""
        u = self.out(dev, "utilization", "nvmlDeviceGetUtilizationRates", Utilization)
        return None if u is None else (int(u.gpu), int(u.memory))

    # -- readings every device has ------------------------------------------------------

    def memory(self, dev: Device) -> tuple[int, int, int | None] | None:
        """(used, total, reserved or None) through ``_v2`` → v1, each read into a struct kept per device."""
        m = self.again(dev, "memory")
        if m is not MISS:
            if m is None:
                return None
            return m.used, m.total, m.reserved if type(m) is MemoryV2 else None  # struct fields read as ints
        nv = self.nv

        def call(name: str) -> tuple[int, int, int | None]:
            v2 = name == "nvmlDeviceGetMemoryInfo_v2"
            kept = kept_out(dev, name, MemoryV2 if v2 else MemoryV1)
            fn = self.function(name)
            args = (dev.handle, kept[1])
            ret = fn(*args)
            if ret != SUCCESS:
                raise nv.NVMLError(ret)
            m = kept[0]
            dev.calls["memory"] = (fn, m, args)
            return int(m.used), int(m.total), int(m.reserved) if v2 else None

        return self.variant(dev, "memory", ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"), call)

    def throttle_reasons(self, dev: Device) -> int | None:
        """The clock-event (throttle) reasons mask: ``…ClocksEventReasons`` → ``…ClocksThrottleReasons``."""
        out = self.again(dev, "throttle_reasons")
        if out is not MISS:
            return None if out is None else out.value
        return self.variant(dev, "throttle_reasons",
                            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                            lambda name: self.kept_u64(dev, name, "throttle_reasons"))

    def running(self, dev: Device, graphics: bool) -> tuple[tuple[int, int | None], ...] | None:
        """The compute (or graphics) processes as (pid, memory or None), through ``_v3`` → ``_v2`` → v1."""
        family, structs, names = RUNNING[graphics]
        return self.variant(dev, family, names, lambda name: self._list(dev, name, structs[name]))

    def running_both(self, dev: Device, answers: dict[str, Any] | None = None
                     ) -> list[tuple[tuple[int, int | None], ...] | None]:
        """[compute, graphics]: :meth:`running` of both lists, the kept calls made inline (what
        :meth:`variant` and :meth:`_list` do for them, without their frames); the full rules for a list
        whose call is not kept or did not answer; ``answers``: what kept calls already answered this poll (by
        function name), not called again. Raises Lost."""
        out: list[tuple[tuple[int, int | None], ...] | None] = []
        calls, handle, lists = dev.calls, dev.handle, dev.lists
        for graphics in (False, True):
            family, structs, names = RUNNING[graphics]
            chosen = self.variants.get(family)
            fast = calls.get(chosen) if chosen is not None else None
            if chosen is None or fast is None or fast[2][0] is not handle or family in dev.unsupported \
                    or family in self.absent:
                out.append(self.running(dev, graphics))
                continue
            count, args = fast[1], fast[2]
            buf = args[2]
            try:
                if answers is not None and chosen in answers:
                    ret = answers[chosen]
                else:
                    count.value = len(buf)
                    ret = fast[0](*args)
            except Exception as exc:  # what variant() makes of it
                self.failed(dev, family, UNKNOWN, exc)
                out.append(None)
                continue
            if ret != SUCCESS:  # the rest of the rules, with this answer
                def answered(name: str, s: Any = structs[chosen], r: int = ret
                             ) -> tuple[tuple[int, int | None], ...]:
                    return self._list(dev, name, s, r)

                out.append(self.variant(dev, family, names, answered))
                continue
            if dev.failures:
                dev.failures.pop(family, None)
            n = min(count.value, len(buf))
            last = lists.get(chosen)
            # _entries' hit, inline: the same entries, read through the kept view of this buffer's first n
            if last is not None and last[2] is buf and last[4] == n and last[3].raw == last[0]:
                out.append(last[1])
            else:
                out.append(self._entries(dev, chosen, buf, n, ctypes.sizeof(buf._type_)))
        return out

    def _list(self, dev: Device, name: str, struct: Any, answered: int | None = None
              ) -> tuple[tuple[int, int | None], ...]:
        """One running-process list through a buffer kept per device (one C call when it fits). The
        same bytes as the last call's give the same tuple back, without reading the entries again.
        A call that answered is kept (its function, count and buffer) and made again as it is.
        ``answered``: what the kept call answered when the caller made it (not SUCCESS)."""
        size = ctypes.sizeof(struct)
        key = name  # one struct per function (RUNNING)
        fast = dev.calls.get(key)
        if fast is not None and fast[2][0] is dev.handle:  # the kept call; the buffer is the one it answered in
            count, args = fast[1], fast[2]
            buf = args[2]
            if answered is None:
                count.value = len(buf)
                ret = fast[0](*args)
            else:
                ret = answered
            if ret == SUCCESS:
                return self._entries(dev, key, buf, min(count.value, len(buf)), size)
            del dev.calls[key]
            if ret != INSUFFICIENT_SIZE:
                raise self.nv.NVMLError(ret)
        fn = self.function(name)
        ret, buf, count, args = _grown(dev, key, fn, struct, 32, lambda buf, n: (dev.handle, n, buf))
        if ret != SUCCESS:
            raise self.nv.NVMLError(ret)
        dev.buffers[key] = buf
        dev.calls[key] = (fn, count, args)
        return self._entries(dev, key, buf, min(count.value, len(buf)), size)

    @staticmethod
    def _entries(dev: Device, key: str, buf: Any, n: int, size: int) -> tuple[tuple[int, int | None], ...]:
        """The (pid, memory or None) of the first ``n`` entries of a filled process list (entries of
        ``size`` bytes); the same bytes as last time give the same tuple back."""
        last = dev.lists.get(key)
        if last is not None and last[2] is buf and last[4] == n:
            view = last[3]
            raw = view.raw
        else:
            view = (ctypes.c_char * (n * size)).from_buffer(buf)
            raw = view.raw
            if last is not None and last[0] == raw:
                dev.lists[key] = (raw, last[1], buf, view, n)
        if last is not None and last[0] == raw:
            cached: tuple[tuple[int, int | None], ...] = last[1]
            return cached
        layout = process_struct(buf._type_)
        result: tuple[tuple[int, int | None], ...]
        if layout is not None:  # every entry's (pid, usedGpuMemory) unpacked from the bytes in one pass
            result = tuple(layout.iter_unpack(raw))
            if NOT_AVAILABLE_ULL in map(_second, result):  # "not available": None
                result = tuple((pid, None if mem == NOT_AVAILABLE_ULL else mem) for pid, mem in result)
        else:
            out = []
            for i in range(n):
                entry = buf[i]
                mem = int(entry.usedGpuMemory)
                out.append((int(entry.pid), None if mem == NOT_AVAILABLE_ULL else mem))
            result = tuple(out)
        # the bytes read, the tuple read from them, and a view of those bytes in this buffer (read again
        # next time without a foreign call)
        dev.lists[key] = (raw, result, buf, view, n)
        return result

    def process_utilization(self, dev: Device, wall: float,
                            answered: int | BaseException | None = None) -> dict[int, int] | None:
        """Newest SM% sample per PID; {} when the driver has no recent samples; None when N/A.

        Asks from :func:`samples_since`. ``answered``: what the kept call made by the steady reader
        (``nvml_steady.py``) returned or raised this poll (it is not made again).
        """
        name = "process_utilization"
        if name in dev.unsupported:
            return None
        nv = self.nv
        since = samples_since(dev.util_seen, wall)
        struct = UtilizationSample
        fast = dev.calls.get(name)
        ret = INSUFFICIENT_SIZE
        try:
            if fast is not None and fast[2][0] is dev.handle:  # the call that answered, made again as it is
                count, args = fast[1], fast[2]
                buf: Any = args[1]
                if answered is None:
                    count.value = len(buf)
                    args[3].value = since
                    ret = fast[0](*args)
                elif isinstance(answered, BaseException):
                    raise answered
                else:
                    ret = answered
                if ret != SUCCESS and ret != NOT_FOUND:
                    del dev.calls[name]
            if ret == INSUFFICIENT_SIZE:  # not kept (or the kept buffer is too small): the full call
                fn = self.function("nvmlDeviceGetProcessUtilization")
                start = ctypes.c_ulonglong(since)
                ret, buf, count, args = _grown(dev, name, fn, struct, 64, lambda buf, n: (dev.handle, buf, n, start))
                dev.buffers[name] = buf
                if ret == SUCCESS or ret == NOT_FOUND:
                    dev.calls[name] = (fn, count, args)
            if ret == NOT_FOUND:  # supported, but no sample in the window: every process is idle
                self.succeeded(dev, name)
                return {}
            if ret != SUCCESS:
                raise nv.NVMLError(ret)
        except nv.NVMLError as exc:
            self.failed(dev, name, getattr(exc, "value", UNKNOWN), exc)
            return None
        except Exception as exc:
            dev.calls.pop(name, None)
            self.failed(dev, name, UNKNOWN, exc)
            return None
        if dev.failures:  # succeeded(), inline
            dev.failures.pop(name, None)
        return self.samples(dev, buf, min(count.value, len(buf)))

    @staticmethod
    def samples(dev: Device, buf: Any, n: int) -> dict[int, int]:
        """The newest SM % per PID of the first ``n`` samples in the filled buffer ``buf``; the same bytes
        as last time give the same dict back. Moves ``util_seen`` past them."""
        name = "process_utilization"
        struct = UtilizationSample
        last = dev.lists.get(name)
        # the answer's bytes through a view of them kept with the buffer (no foreign call to copy them)
        view = last[3] if last is not None and last[2] is buf and last[4] == n else \
            (ctypes.c_char * (n * ctypes.sizeof(struct))).from_buffer(buf)
        raw = view.raw
        if last is not None and last[0] == raw:  # the same samples: the same answer, util_seen already past them
            cached: dict[int, int] = last[1]
            return cached
        seen = dev.util_seen
        whole = samples_struct(n) if _SAMPLE_FITS else None
        if whole is not None:  # the whole answer in one unpack: (pid, timeStamp, smUtil) per sample
            values = whole.unpack(raw)
            pids, stamps, sms = values[0::3], values[1::3], values[2::3]
            same = last is not None and len(last) > 5 and last[5] == pids and last[6] == sms
            if same or len(set(pids)) == n:  # one sample per process (the driver's usual answer): each its newest
                if n and max(stamps) > seen:
                    dev.util_seen = max(stamps)
                result: dict[int, int]
                if same and last is not None:  # the same processes at the same SM %, newer samples: the same answer
                    result = last[1]
                else:
                    result = {pid: sm if sm < 100 else 100 for pid, sm in zip(pids, sms, strict=True)}
                dev.lists[name] = (raw, result, buf, view, n, pids, sms)
                return result
        newest: dict[int, tuple[int, int]] = {}
        # the samples' (pid, timeStamp, smUtil) unpacked from the bytes in one pass (a ctypes struct per
        # sample costs several times more); the layout is checked against the struct at import
        for pid, ts, sm in SAMPLE.iter_unpack(raw) if _SAMPLE_FITS else (
                (e.pid, e.timeStamp, e.smUtil) for e in buf[:n]):
            prev = newest.get(pid)
            if prev is None or ts >= prev[0]:
                newest[pid] = (ts, sm)
            if ts > seen:
                seen = ts
        dev.util_seen = seen
        result = {pid: min(100, sm) for pid, (_, sm) in newest.items()}
        dev.lists[name] = (raw, result, buf, view, n)
        return result


def _grown(dev: Device, key: str, fn: Any, struct: Any, first: int,
           arguments: Callable[[Any, Any], tuple[Any, ...]]) -> tuple[int, Any, Any, tuple[Any, ...]]:
    """Call ``fn`` with a buffer of ``struct`` entries kept per device under ``key`` (``first`` entries
    when there is none yet) and the count in/out parameter kept beside it, growing the buffer while the
    driver answers INSUFFICIENT_SIZE, four tries at most. ``arguments(buffer, count pointer)`` spells
    the call. Returns (the last return code, the buffer, the count, the last call's arguments)."""
    buf = dev.buffers.get(key)
    kept = kept_out(dev, key, ctypes.c_uint)
    count = kept[0]
    ret, args = INSUFFICIENT_SIZE, ()
    for _ in range(4):
        if buf is None:
            buf = (struct * first)()
        count.value = len(buf)
        args = arguments(buf, kept[1])
        ret = fn(*args)
        if ret != INSUFFICIENT_SIZE:
            break
        buf = (struct * (count.value * 2 + 16))()
    return ret, buf, count, args
