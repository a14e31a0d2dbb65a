"""The steady read of one GPU for ``NvmlSource.read``: the same driver calls and the same answers as the full
rules (``nvml.py``, ``nvml_query.py``), made from a plan kept per GPU instead of a chain of methods.

Once a GPU answered every per-poll call (the field batch with every field, the eight getters, both process
lists) and its slow values (persistence mode, encoder and decoder utilization, MIG mode — off) are cached,
its poll is: the batch call, the other calls in one ``starmap`` over their (function, arguments) tuples (no
bytecode per call), the filled out-parameters read, the SM samples call (kept with its count and start time
in the same block) when a list has an entry, and the Gpu and process tuple handed back as they were while
none of them changed. Slow values due are read by their C functions as nvidia-ml-py's getters answer them.
Anything else — a call that does not answer, a field missing from the batch, a failure counted, MIG mode on —
hands the GPU back to the full rules for that poll (with the answers already had: no call is made
twice), and the plan is made again from what they kept.

A plan is made from the GPU's kept calls (``Device.calls``), so it is keyed on them: the same C function,
argument tuple (handle first) and out-parameter; the slow values it carries are those cached with their
time, and it ends when the first of them is due.
"""

from __future__ import annotations

import ctypes
import operator
from itertools import starmap
from operator import itemgetter
from struct import Struct
from typing import Any

from gputui.core.model import Gpu, MigMode, RawProcess, throttle_names
from gputui.core.sources.nvml_fields import FIELDS
from gputui.core.sources.nvml_query import NOT_AVAILABLE_ULL, NOT_FOUND, samples_since
from gputui.core.sources.nvml_structs import PSTATE_UNKNOWN, RUNNING, SAMPLES_BY_COUNT, MemoryV2, process_struct

__all__ = ["Plan", "make_plan", "read_steady", "refresh_slow"]

#: calls its first argument with the rest (operator.call from Python 3.11)
_call: Any = getattr(operator, "call", None) or (lambda fn, *args: fn(*args))
_second = itemgetter(1)
#: the batch's field names in FIELDS' order (a plan exists only while the batch asks every one)
_ALL = tuple(FIELDS)
_SLOW = ("persistence_mode", "encoder_utilization", "decoder_utilization")
_UTIL = "process_utilization"
#: the slow values read again by ``refresh_slow``: (name, C function, how many unsigned ints it writes, the
#: part of its answer the Gpu shows); nvidia-ml-py's getter answers the first int alone, or a list of them
_SLOW_CALLS = (("persistence_mode", "nvmlDeviceGetPersistenceMode", 1, None),
               ("encoder_utilization", "nvmlDeviceGetEncoderUtilization", 2, 0),
               ("decoder_utilization", "nvmlDeviceGetDecoderUtilization", 2, 0),
               ("mig_mode", "nvmlDeviceGetMigMode", 2, None))


class Plan:
    """What one GPU's steady poll calls and reads, made from its kept calls (see the module's text)."""

    __slots__ = ("batch", "calls", "keys", "block", "unpack", "pick", "reset", "lists", "util", "slow_at", "slow",
                 "last")

    def __init__(self, batch: tuple[Any, ...], calls: tuple[Any, ...], keys: tuple[str, ...], block: Any,
                 unpack: Struct, pick: Any, reset: tuple[Struct, int, tuple[int, ...]] | None,
                 lists: tuple[Any, ...], util: tuple[Any, ...] | None, slow_at: float, slow: tuple[Any, ...]) -> None:
        #: the field batch: (C function, handle, count, buffer, whole-answer Struct, value types)
        self.batch = batch
        #: the calls made after the batch as (C function, *arguments), and the name each is kept under (Device.calls)
        self.calls = calls
        self.keys = keys
        #: every out-parameter of those calls (and the lists' counts), one after the other in one ctypes
        #: struct that the kept calls write into, read in one unpack; ``pick`` takes utilization (GPU,
        #: memory), memory used, total and reserved, temperature, fan, SM clock, memory clock, P-state and
        #: reasons from that reading with a None after it (refused for good or left unread: N/A)
        self.block = block
        self.unpack = unpack
        self.pick = pick
        #: the process lists' counts set before the calls: (Struct, offset in the block, buffer lengths)
        self.reset = reset
        #: compute, graphics: (its count's place in the reading, buffer, kept name), or None (N/A, no call)
        self.lists = lists
        #: the kept process-utilization call, made after the lists when one has an entry, its count and start
        #: time in the block after the others (not in ``unpack``'s reading): (C function, its arguments, a
        #: Struct setting count and start, their offset, the count), or None (the full rules ask it)
        self.util = util
        #: the oldest cached slow value's time, and (persistence, encoder, decoder, MIG mode) as the Gpu has them
        self.slow_at = slow_at
        self.slow = slow
        #: the values the last Gpu was built from, and that Gpu
        self.last: tuple[tuple[Any, ...], Gpu] | None = None


#: block struct types by their fields' types
_BLOCKS: dict[tuple[Any, ...], Any] = {}


def _format(kind: Any) -> str:
    """``kind``'s bytes as a Struct format of standard sizes, its padding included (ctypes' layout)."""
    if kind is ctypes.c_uint or kind is ctypes.c_ulonglong:
        return "I" if kind is ctypes.c_uint else "Q"
    out, pos = "", 0
    for name, ftype in kind._fields_:
        offset = getattr(kind, name).offset
        out += f"{offset - pos}x" if offset > pos else ""
        out += _format(ftype)
        pos = offset + ctypes.sizeof(ftype)
    size = ctypes.sizeof(kind)
    return out + (f"{size - pos}x" if size > pos else "")


def _block(kinds: tuple[Any, ...]) -> tuple[Any, Struct, list[int], list[int]]:
    """A ctypes struct of these out-parameter types one after the other, a Struct reading it whole, and
    each one's offset in the struct and place of its first value in the reading."""
    block = _BLOCKS.get(kinds)
    if block is None:
        block = _BLOCKS[kinds] = type("Outs", (ctypes.Structure,),
                                      {"_fields_": [(f"f{i}", kind) for i, kind in enumerate(kinds)]})
    fmt, pos, offsets, firsts, count = "=", 0, [], [], 0
    for i, kind in enumerate(kinds):
        offset = getattr(block, f"f{i}").offset
        fmt += f"{offset - pos}x" if offset > pos else ""
        part = Struct("=" + _format(kind))
        fmt += part.format[1:]
        offsets.append(offset)
        firsts.append(count)
        count += len(part.unpack(bytes(part.size)))
        pos = offset + ctypes.sizeof(kind)
    whole = Struct(fmt)
    if whole.size > ctypes.sizeof(block):
        raise ValueError("out-parameter layout")
    return block, whole, offsets, firsts


def make_plan(src: Any, dev: Any, now: float, last_gpu: Gpu | None) -> Plan | None:
    """A plan for ``dev`` from what the full rules kept this poll, or None while they are needed: its kept
    calls moved to write into one block (their out-parameters' values copied). ``last_gpu``: the Gpu the
    full rules built from the values now in the out-parameters."""
    ask = src._ask
    handle = dev.handle
    if handle is None or not dev.static_done or dev.failures:
        return None
    batch = dev.batch
    fn = ask.fns.get("nvmlDeviceGetFieldValues")
    if fn is None or batch.off or batch.names != _ALL or batch.errors or batch.plan is None or batch.buf is None:
        return None
    kept: list[tuple[str, Any]] = []  # (name, kept call), scalars then lists
    present: list[str | None] = []
    names = ("utilization", "memory", *[a[0] if a is not None else None for a in src._scalars], "throttle_reasons")
    for name in names:
        if name is None:  # left unread
            present.append(None)
            continue
        fast = dev.calls.get(name)
        if fast is None or fast[2][0] is not handle:
            if name in dev.unsupported or name in ask.absent:
                present.append(None)
                continue
            return None
        kept.append((name, fast))
        present.append(name)
    scalars = len(kept)
    lists: list[Any] = []
    for graphics in (False, True):
        family = RUNNING[graphics][0]
        if family in dev.unsupported or family in ask.absent:
            lists.append(None)
            continue
        chosen = ask.variants.get(family)
        fast = dev.calls.get(chosen) if chosen is not None else None
        if fast is None or fast[2][0] is not handle:
            return None
        lists.append(len(kept))
        kept.append((chosen, fast))
    hits = [dev.slow.get(name) for name in _SLOW]
    has_mig = getattr(ask.nv, "nvmlDeviceGetMigMode", None) is not None
    if has_mig:
        hits.append(dev.slow.get("mig_mode"))
    if any(hit is None for hit in hits):
        return None
    slow_at = min(hit[1] for hit in hits)
    if now - slow_at >= ask.slow_ttl:
        return None
    mode: MigMode | None = src._mig._mode(dev, now) if has_mig else None
    if mode is not None and mode.current:
        return None
    kinds = tuple(type(fast[1]) for _, fast in kept)
    ufast = dev.calls.get(_UTIL)
    if ufast is not None and (ufast[2][0] is not handle or type(ufast[1]) is not ctypes.c_uint
                              or type(ufast[2][3]) is not ctypes.c_ulonglong):
        ufast = None
    block_type, whole, offsets, firsts = _block(kinds + ((ctypes.c_uint, ctypes.c_ulonglong) if ufast else ()))
    if ufast is not None:  # the reading stops before the samples' count and start time
        whole = _block(kinds)[1]
    block = block_type()
    base = ctypes.addressof(block)
    calls: list[Any] = []
    for i, (name, fast) in enumerate(kept):  # each kept call moved into the block, its last answer with it
        fn_i, out, args = fast
        ctypes.memmove(base + offsets[i], ctypes.addressof(out), ctypes.sizeof(out))
        view = kinds[i].from_buffer(block, offsets[i])
        args = (*args[:-1], ctypes.byref(view)) if i < scalars else (args[0], ctypes.byref(view), *args[2:])
        dev.calls[name] = (fn_i, view, args)
        calls.append((fn_i, *args))
    # where each Gpu value is in the reading (-1: the None after it)
    at = dict(zip([k[0] for k in kept[:scalars]], firsts, strict=False))
    u, m = at.get("utilization", -1), at.get("memory", -1)
    v2 = m >= 0 and kinds[[k[0] for k in kept].index("memory")] is MemoryV2
    pick = [u, u + 1 if u >= 0 else -1, (m + 4 if v2 else m + 2) if m >= 0 else -1,
            (m + 1 if v2 else m) if m >= 0 else -1, m + 2 if v2 else -1]
    pick += [at.get(name, -1) if name is not None else -1 for name in present[2:]]
    if any(offsets[i] != offsets[scalars] + 4 * (i - scalars) for i in range(scalars, len(kept))):
        return None  # (the lists' counts are set in one pack: side by side)
    util = None
    if ufast is not None:  # its count and start time moved into the block like the others
        i = len(kept)
        cview = ctypes.c_uint.from_buffer(block, offsets[i])
        sview = ctypes.c_ulonglong.from_buffer(block, offsets[i + 1])
        cview.value, sview.value = ufast[1].value, ufast[2][3].value
        uargs = (handle, ufast[2][1], ctypes.byref(cview), sview)
        dev.calls[_UTIL] = (ufast[0], cview, uargs)
        util = (ufast[0], uargs, Struct(f"=I{offsets[i + 1] - offsets[i] - 4}xQ"), offsets[i], cview)
    reset = None
    if scalars < len(kept):
        reset = (Struct("=" + "I" * (len(kept) - scalars)), offsets[scalars],
                 tuple(len(fast[2][2]) for _, fast in kept[scalars:]))
    persistence, enc, dec = (hit[0] for hit in hits[:3])
    plan = Plan((fn, handle, batch.count, batch.buf, batch.plan[0], batch.plan[1]), tuple(calls),
                tuple(k[0] for k in kept), block, whole, itemgetter(*pick),
                reset,
                tuple(None if i is None else (firsts[i], kept[i][1][2][2], kept[i][0],
                                              process_struct(kept[i][1][2][2]._type_)) for i in lists), util, slow_at,
                (None if persistence is None else bool(persistence), None if enc is None else int(enc[0]),
                 None if dec is None else int(dec[0]), mode))
    if last_gpu is not None:
        values = batch.plan[0].unpack_from(batch.buf)
        plan.last = ((whole.unpack_from(block), values[2::3], src._xids.last.get(dev.index)), last_gpu)
    return plan


def _function(ask: Any, name: str) -> Any:
    """``NvmlQueries.function``'s C function, or None when the library lacks it."""
    try:
        return ask.function(name)
    except Exception:
        return None


def _raise(exc: BaseException) -> None:
    raise exc


def _read_slow(src: Any, dev: Any, now: float, ttl: float, count: int) -> list[Any]:
    """The first ``count`` slow values as ``NvmlSource._slow`` reads them (the cached one while it is not
    due), through their C functions (looked up once, as the full rules look up the per-poll getters; the
    out-parameters made afresh as nvidia-ml-py's getter makes them: kept ones would be cold memory at every
    refresh): what the getter would answer is cached, and a call that does not answer is what the getter
    raises, handed to the full rules' reading of it (counted, N/A)."""
    ask = src._ask
    fns = ask.fns
    out: list[Any] = []
    slow = dev.slow
    for entry in _SLOW_CALLS[:count]:
        name = entry[0]
        hit = slow.get(name)
        if hit is not None and now - hit[1] < ttl:
            value = hit[0]
        elif name in dev.unsupported:  # refused for good: N/A, cached again as NvmlQueries.cached does (no call)
            value = None
            slow[name] = (None, now)
        elif (fns.get(entry[1]) or _function(ask, entry[1])) is None:
            if name == "mig_mode":  # (the MIG reader's own rule)
                out.append(_MIG_FULL)
                continue
            value = src._slow(dev, name, entry[1], None, now)
        else:
            first = ctypes.c_uint()
            second = ctypes.c_uint() if entry[2] == 2 else None
            try:
                ret: Any = fns[entry[1]](dev.handle, ctypes.byref(first)) if second is None else \
                    fns[entry[1]](dev.handle, ctypes.byref(first), ctypes.byref(second))
            except Exception as exc:  # binding trouble: what the getter raises
                ret = exc
            if ret == 0:
                value = first.value if second is None else [first.value, second.value]
                if dev.failures:  # NvmlQueries.get's success, inline
                    dev.failures.pop(name, None)
                slow[name] = (value, now)
            else:
                error = ret if isinstance(ret, BaseException) else ask.nv.NVMLError(ret)
                value = ask.cached(dev, name, now, lambda d, n=name, e=error: ask.get(d, n, _raise, e))
        part = entry[3]
        out.append(value if part is None or value is None else value[part])
    return out


#: ``_read_slow``'s MIG mode when the MIG reader reads it itself
_MIG_FULL: Any = object()


def refresh_slow(src: Any, dev: Any, plan: Plan, now: float) -> Plan | None:
    """The plan with its slow values read again as the full rules read them when due (persistence mode,
    encoder and decoder utilization, MIG mode), or None when MIG mode is now on (the full rules list its
    devices). A slow value that failed reads N/A this poll, as in the full rules (its failure is counted,
    so the next poll is the full rules' and asks it again)."""
    has_mig = getattr(src._ask.nv, "nvmlDeviceGetMigMode", None) is not None
    persistence, enc, dec, *mig = _read_slow(src, dev, now, src._ask.slow_ttl, 4 if has_mig else 3)
    mode: MigMode | None = None
    if has_mig:  # the MIG reader's mode from the value cached above (None: it did not answer this poll)
        mode = src._mig._mode(dev, now) if mig[0] is _MIG_FULL or mig[0] is not None else None
    if mode is not None and mode.current:  # (a plan is made only while MIG mode is off)
        return None
    slow = (None if persistence is None else bool(persistence), None if enc is None else int(enc),
            None if dec is None else int(dec), mode)
    if slow != plan.slow:
        plan.slow = slow
        plan.last = None
    hits = [dev.slow.get(name) for name in (*_SLOW, "mig_mode")[:4 if has_mig else 3]]
    plan.slow_at = min(hit[1] for hit in hits if hit is not None) if all(hits) else now
    return plan


def read_steady(src: Any, dev: Any, plan: Plan, now: float) -> tuple[Gpu, tuple[RawProcess, ...]]:
    """One GPU's poll through its plan (the caller checked that no failure is counted and no slow value is
    due). Raises Lost."""
    bfn, handle, count, buf, whole, kinds = plan.batch
    try:
        ret = bfn(handle, count, buf)
    except Exception:  # binding trouble: what FieldBatch.read makes of it
        ret = 13  # FUNCTION_NOT_FOUND
    fv: tuple[Any, ...] | None = None
    if ret == 0:
        values = whole.unpack_from(buf)
        if values[0::3] == kinds and not any(values[1::3]):
            fv = values[2::3]
    if fv is None:  # not every field answered: the full rules, with this answer
        dev.steady = None
        return src._read_device(dev, now, fields=dev.batch.take(ret))  # type: ignore[no-any-return]
    reset = plan.reset
    if reset is not None:  # the lists' counts: how many entries their buffers hold
        reset[0].pack_into(plan.block, reset[1], *reset[2])
    try:
        rets = list(starmap(_call, plan.calls))
    except Exception:  # binding trouble in one of them: the full rules ask again and say what it is
        dev.steady = None
        return src._read_device(dev, now, fields=dict(zip(_ALL, fv, strict=True)))  # type: ignore[no-any-return]
    if any(rets):  # one did not answer: the full rules, with these answers
        dev.steady = None
        return src._read_device(dev, now, fields=dict(zip(_ALL, fv, strict=True)),  # type: ignore[no-any-return]
                                answers=dict(zip(plan.keys, rets, strict=True)))
    ask = src._ask
    got: list[Any] = []
    lists = dev.lists
    outs = plan.unpack.unpack_from(plan.block)
    for kept in plan.lists:  # running_both's reading of an answer, inline
        if kept is None:
            got.append(None)
            continue
        at, kbuf, name, layout = kept
        n = outs[at]
        if n > len(kbuf):
            n = len(kbuf)
        last = lists.get(name)
        if last is not None and last[2] is kbuf and last[4] == n:
            raw = last[3].raw
            if raw == last[0]:
                got.append(last[1])
                continue
            if layout is not None:  # NvmlQueries._entries' reading of new bytes in the same view, inline
                entries = tuple(layout.iter_unpack(raw))
                if NOT_AVAILABLE_ULL not in map(_second, entries):
                    lists[name] = (raw, entries, kbuf, last[3], n)
                    got.append(entries)
                    continue
        got.append(ask._entries(dev, name, kbuf, n, ctypes.sizeof(kbuf._type_)))
    util = plan.util
    if util is not None and (got[0] or got[1]):  # processes listed: their SM samples (_processes' ask, inline)
        ufn, uargs, uset, uat, ucount = util
        ubuf = uargs[1]
        wall = src._wall()
        uset.pack_into(plan.block, uat, len(ubuf), samples_since(dev.util_seen, wall))
        try:
            uret: Any = ufn(*uargs)
        except Exception as exc:  # binding trouble: the full rules say what it is
            uret = exc
        if uret == 0:
            n = ucount.value
            if n > len(ubuf):
                n = len(ubuf)
            last = lists.get(_UTIL)
            whole = SAMPLES_BY_COUNT.get(n) if last is not None and len(last) > 5 and last[2] is ubuf and last[4] == n \
                else None
            samples = None
            if whole is not None:  # NvmlQueries.samples' usual answer, inline: the bytes read in one unpack
                raw = last[3].raw
                if raw == last[0]:
                    samples = last[1]  # the same samples as the last poll: the same answer
                else:
                    values = whole.unpack(raw)
                    pids, sms = values[0::3], values[2::3]
                    same = pids == last[5] and sms == last[6]
                    if same or len(set(pids)) == n:  # one sample per process: each its newest
                        top = max(values[1::3]) if n else 0
                        if top > dev.util_seen:
                            dev.util_seen = top
                        # the same processes at the same SM %, newer samples: the same answer
                        samples = last[1] if same else {pid: sm if sm < 100 else 100
                                                        for pid, sm in zip(pids, sms, strict=True)}
                        lists[_UTIL] = (raw, samples, ubuf, last[3], n, pids, sms)
            if samples is None:
                samples = ask.samples(dev, ubuf, n)
        elif uret == NOT_FOUND:  # no sample in the window: every process is idle
            samples = {}
        else:  # the full rules read this answer (a failure counted, a buffer grown), and a new plan is made
            dev.steady = None
            samples = ask.process_utilization(dev, wall, answered=uret)
        merged = dev.merged
        kept_procs = dev.procs
        if merged is not None and merged[0] is got[0] and merged[1] is got[1] and kept_procs is not None \
                and kept_procs[0] is merged[2] and (kept_procs[1] is samples or kept_procs[1] == samples):
            procs = kept_procs[2]  # _processes' steady answer, inline
        else:
            procs = src._processes(dev, lists=got, samples=samples)
    else:
        procs = src._processes(dev, lists=got)
    xid = src._xids.last.get(dev.index)
    key = (outs, fv, xid)  # (the slow values are the plan's own)
    last_gpu = plan.last
    if last_gpu is not None and last_gpu[0] == key:
        return last_gpu[1], procs
    ug, um, used, total, reserved, temperature, fan, clock_sm, clock_mem, pstate, reasons = plan.pick((*outs, None))
    power, power_limit, ecc, mt, te, pr, rc, ru, rf = fv
    persistence, enc, dec, mode = plan.slow
    names = throttle_names(reasons) if reasons is not None else None
    gpu = Gpu(
        index=dev.index, uuid=dev.uuid or "", name=dev.name or "Unknown GPU", pci_bus_id=dev.pci_bus_id,
        utilization_gpu=ug, utilization_memory=um, memory_used=used, memory_total=total,
        temperature=temperature, power_draw=power / 1000.0, power_limit=power_limit / 1000.0, fan_speed=fan,
        clock_sm=clock_sm, clock_memory=clock_mem, clock_sm_max=dev.clock_sm_max,
        clock_memory_max=dev.clock_memory_max,
        pstate=pstate if pstate is not None and pstate != PSTATE_UNKNOWN else None,
        throttle_reasons=names, ecc_errors=int(ecc), persistence_mode=persistence, minor_number=dev.minor_number,
        lost=False, mig_mode=mode, mig_devices=(), memory_reserved=reserved,
        remapped_rows_failure=bool(rf), memory_temperature=int(mt), total_energy_consumption=int(te),
        pcie_replay_counter=int(pr), remapped_rows_correctable=int(rc), remapped_rows_uncorrectable=int(ru),
        encoder_utilization=enc, decoder_utilization=dec, xid_last=xid,
    )
    plan.last = (key, gpu)
    return gpu, procs
