"""NVML field values for ``NvmlSource``: many per-poll readings in one driver call, and XID events.

``nvmlDeviceGetFieldValues`` answers a list of field ids in one call, each entry with its
own return code. :class:`FieldBatch` asks it once per GPU per poll for every id in
:data:`FIELDS` that the GPU has not refused; an id the driver refuses (NOT_SUPPORTED, an
id newer than the driver) leaves the batch for good and the field falls back to its single
getter, if NVML has one (``NvmlSource`` asks it). When the driver lacks the call, or the GPU
refuses it as a whole, every field falls back.

:class:`XidEvents` registers every GPU for XID critical errors once and drains the event
set without waiting (timeout 0) on each poll: the last XID per GPU is what dcgm-exporter's
``DCGM_FI_DEV_XID_ERRORS`` reports.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from struct import Struct
from typing import Any

from gputui.core.sources.nvml_query import FUNCTION_NOT_FOUND, GPU_IS_LOST, PERMANENT, SUCCESS, Lost

__all__ = ["FIELDS", "FieldBatch", "Lost", "XidEvents"]

#: an entry or call refused for good (the query rules' PERMANENT): the field is not asked in the batch again
_REFUSED = PERMANENT

# nvmlValueType_t
_DOUBLE, _UINT, _ULONG, _ULL, _SLL, _SINT, _USHORT = range(7)

#: Gpu-side name -> NVML field id (nvml.h NVML_FI_DEV_*; the ids nvidia-ml-py names)
FIELDS: dict[str, int] = {
    # NVML_FI_DEV_POWER_AVERAGE, mW: the 1 s average nvmlDeviceGetPowerUsage reports on the boards that
    # have it (Ampere and newer, not GA100); others refuse the id and keep the getter
    "power_draw": 185,
    "power_limit": 190,  # NVML_FI_DEV_POWER_CURRENT_LIMIT, mW
    "ecc_errors": 4,  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL: volatile uncorrected
    "memory_temperature": 82,  # NVML_FI_DEV_MEMORY_TEMP, °C
    "total_energy_consumption": 83,  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
    "pcie_replay_counter": 94,  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    "remapped_rows_correctable": 142,  # NVML_FI_DEV_REMAPPED_COR
    "remapped_rows_uncorrectable": 143,  # NVML_FI_DEV_REMAPPED_UNC
    "remapped_rows_failure": 145,  # NVML_FI_DEV_REMAPPED_FAILURE
}

_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
#: at most this many events are taken from the set in one poll (the rest wait for the next)
MAX_EVENTS_PER_POLL = 64


class _Value(ctypes.Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class _FieldValue(ctypes.Structure):
    """nvmlFieldValue_t."""

    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32), ("timestamp", ctypes.c_int64),
                ("latencyUsec", ctypes.c_int64), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", _Value)]


class _EventData(ctypes.Structure):
    """nvmlEventData_t."""

    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


#: nvmlFieldValue_t's valueType, nvmlReturn and the value union's bytes (fieldId, scopeId, timestamp and
#: latencyUsec skipped), in native layout; and each nvmlValueType_t's reading of the union's bytes
_ENTRY = Struct(f"@{_FieldValue.valueType.offset}xII{_FieldValue.value.offset - _FieldValue.nvmlReturn.offset - 4}x"
                f"{ctypes.sizeof(_Value)}s")
_VALUES = {_DOUBLE: Struct("@d"), _UINT: Struct("@I"), _ULONG: Struct("@L"), _ULL: Struct("@Q"), _SLL: Struct("@q"),
           _SINT: Struct("@i"), _USHORT: Struct("@H")}
assert _ENTRY.size == ctypes.sizeof(_FieldValue)
#: each nvmlValueType_t's reading of the union's 8 bytes inside one whole-answer Struct (FieldBatch.plan)
_TYPED = {_DOUBLE: "d", _UINT: "I4x", _ULONG: "Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "I4x", _ULL: "Q",
          _SLL: "q", _SINT: "i4x", _USHORT: "H6x"}


def _plan(kinds: list[int]) -> Struct | None:
    """One Struct reading a whole answer whose entries have these value types: (valueType, nvmlReturn,
    value) per entry, the value read as its type (what _VALUES reads it as); None where it cannot."""
    head = _FieldValue.valueType.offset
    gap = _FieldValue.value.offset - head - 8
    tail = ctypes.sizeof(_FieldValue) - _FieldValue.value.offset - 8
    if ctypes.sizeof(_Value) != 8 or gap < 0 or tail < 0 or any(k not in _TYPED for k in kinds):
        return None
    plan = Struct("=" + "".join(f"{head}xII{gap}x{_TYPED[k]}{tail}x" for k in kinds))
    return plan if plan.size == ctypes.sizeof(_FieldValue) * len(kinds) else None


class FieldBatch:
    """The batch of one GPU: which fields are still asked, and the buffer they are read into."""

    __slots__ = ("names", "buf", "count", "off", "errors", "plan")

    def __init__(self) -> None:
        #: fields still asked in the batch (an entry refused for good leaves)
        self.names: tuple[str, ...] = tuple(FIELDS)
        self.buf: Any = None
        #: the call's count argument, made with the buffer
        self.count: Any = None
        #: True once the GPU or driver refused the call as a whole: every field uses its getter
        self.off = False
        #: this poll's entries that failed for a reason that may pass (field -> NVML error code)
        self.errors: dict[str, int] = {}
        #: after an answer in which every entry answered: a Struct reading a whole answer of the same value
        #: types, and those types (an answer of other types or with a failed entry is read entry by entry)
        self.plan: tuple[Struct, tuple[int, ...]] | None = None

    def read(self, fn: Callable[..., int] | None, handle: Any) -> dict[str, float | int]:
        """One ``nvmlDeviceGetFieldValues`` call: field -> value for each entry that answered.
        ``fn`` None: the driver lacks the call. Raises :class:`Lost`. A field missing from the
        answer is read by its single getter (if any); a refused one is not asked again here."""
        if fn is None or self.off or not self.names:
            self.off = self.off or fn is None
            return {}
        names = self.names
        if self.errors:
            self.errors = {}
        buf = self.buf
        if buf is None or len(buf) != len(names):  # the ids are the call's input, set once per buffer
            buf = self.buf = (_FieldValue * len(names))()
            self.count = ctypes.c_int32(len(names))
            self.plan = None
            for i, name in enumerate(names):
                entry = buf[i]
                entry.fieldId = FIELDS[name]
                entry.scopeId = 0
        try:
            ret = fn(handle, self.count, buf)
        except Exception:  # binding trouble: treat as a driver without the call
            ret = FUNCTION_NOT_FOUND
        return self.take(ret)

    def take(self, ret: int) -> dict[str, float | int]:
        """What :meth:`read` makes of its call's return code ``ret`` and the answer in the buffer (the
        steady reader calls it with the return code of a call it made). Raises :class:`Lost`."""
        names, buf = self.names, self.buf
        if ret == GPU_IS_LOST:
            raise Lost
        if ret != SUCCESS:
            if ret in _REFUSED:
                self.off = True
            else:
                self.errors = dict.fromkeys(names, ret)
            return {}
        plan = self.plan
        if plan is not None:  # the steady state: the whole answer in one unpack, every entry answered
            values = plan[0].unpack_from(buf)
            if values[0::3] == plan[1] and not any(values[1::3]):
                return dict(zip(names, values[2::3], strict=True))
        out: dict[str, float | int] = {}
        refused: list[str] = []
        # each entry's (valueType, nvmlReturn, value bytes) unpacked in one pass over the answer's bytes
        entries = list(_ENTRY.iter_unpack(ctypes.string_at(buf, ctypes.sizeof(buf))))
        if all(code == SUCCESS and kind in _VALUES for kind, code, _ in entries):
            kinds = [kind for kind, _, _ in entries]
            whole = _plan(kinds)
            self.plan = None if whole is None else (whole, tuple(kinds))
        for name, (kind, code, raw) in zip(names, entries, strict=True):
            if code == SUCCESS:
                reader = _VALUES.get(kind)  # _number, inline (every field of every GPU, every poll)
                if reader is not None:
                    out[name] = reader.unpack_from(raw)[0]
            elif code == GPU_IS_LOST:
                raise Lost
            elif code in _REFUSED:
                refused.append(name)
            else:
                self.errors[name] = code
        if refused:
            self.names = tuple(n for n in names if n not in refused)
        return out


class XidEvents:
    """XID critical errors of every GPU through one NVML event set, read without waiting."""

    def __init__(self) -> None:
        self._set: Any = None
        self._data = _EventData()
        self._wait: Any = None
        #: the wait call's arguments (the event set, the event data's pointer, a timeout of 0)
        self._args: tuple[Any, Any, Any] | None = None
        #: handle address -> GPU index, for the GPUs registered
        self._index: dict[int, int] = {}
        #: GPU index -> the last XID seen (0: none since registration)
        self.last: dict[int, int] = {}

    def open(self, nv: Any, handles: dict[int, Any]) -> None:
        """Create the event set and register every GPU that supports XID events (a GPU that
        does not stays N/A). Never raises."""
        try:
            self._set = nv.nvmlEventSetCreate()
            self._wait = nv._nvmlGetFunctionPointer("nvmlEventSetWait_v2")
        except Exception:
            self._set = None
            return
        for index, h in handles.items():
            try:
                if not nv.nvmlDeviceGetSupportedEventTypes(h) & _XID_CRITICAL:
                    continue
                nv.nvmlDeviceRegisterEvents(h, _XID_CRITICAL, self._set)
            except Exception:
                continue
            self._index[ctypes.cast(h, ctypes.c_void_p).value or 0] = index
            self.last[index] = 0
        if not self._index:
            self.close(nv)

    def drain(self) -> None:
        """Take every waiting event (timeout 0: never blocks the poll)."""
        if self._set is None:
            return
        data = self._data
        args = self._args
        if args is None or args[0] is not self._set:  # the call's arguments, made once per event set
            args = self._args = (self._set, ctypes.byref(data), ctypes.c_uint(0))
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                ret = self._wait(*args)
            except Exception:
                return
            if ret != SUCCESS:  # TIMEOUT: nothing waiting; anything else: try again next poll
                return
            index = self._index.get(data.device or 0)
            if index is not None and data.eventType & _XID_CRITICAL:
                self.last[index] = int(data.eventData)

    def close(self, nv: Any) -> None:
        s, self._set = self._set, None
        self._index = {}
        self.last = {}
        if s is not None:
            try:
                nv.nvmlEventSetFree(s)
            except Exception:
                pass
