"""Placement on MIG devices: ``gputui pick --mig``, and why whole-GPU picks skip MIG cards.

A MIG device has no utilization (the driver reports none in MIG mode), so it is
judged by memory alone: the least free memory seen during the sample, most free
first; ties go to the instance with fewer processes, then to the lower
``GPU:instance``. An instance granted to a running container (by ``MIG-`` UUID
or ``GPU:instance``) is *taken*, as a granted GPU is for whole-GPU picks.

Without ``--mig`` a card in MIG mode is never offered as a whole GPU: CUDA
cannot use it as one, only its MIG devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gputui.core.judges.placement import RESERVING_STATES
from gputui.core.judges.text import gib, plural
from gputui.core.mig import mig_label, resolve_mig
from gputui.core.model import Gpu, Snapshot
from gputui.core.record import record


@record
class MigLoad:
    """One MIG device over the sample."""

    gpu: int
    index: int
    uuid: str
    profile: str | None
    #: least free bytes seen during the sample; None when its memory was never read
    free_min: int | None
    processes: int

    @property
    def label(self) -> str:
        return mig_label(self.gpu, self.index)


def mig_loads(snapshots: Iterable[Snapshot]) -> dict[str, MigLoad]:
    """MIG UUID -> its load over the snapshots of the sample (the newest decides which instances exist)."""
    snaps = list(snapshots)
    if not snaps:
        return {}
    frees: dict[str, list[int]] = {}
    for snap in snaps:
        for g in snap.gpus:
            for m in g.mig_devices:
                if m.memory_free is not None:
                    frees.setdefault(m.uuid, []).append(m.memory_free)
    out: dict[str, MigLoad] = {}
    for g in snaps[-1].gpus:
        if g.lost or not g.mig_enabled:
            continue
        for m in g.mig_devices:
            seen = frees.get(m.uuid)
            out[m.uuid] = MigLoad(g.index, m.index, m.uuid, m.profile, min(seen) if seen else None,
                                  len(m.processes))
    return out


def mig_reservations(snap: Snapshot) -> dict[str, tuple[str, ...]]:
    """MIG UUID -> names of the running containers granted that MIG device."""
    out: dict[str, list[str]] = {}
    for c in snap.containers:
        if c.state not in RESERVING_STATES or c.gpus == "all":
            continue
        for ident in c.gpus:
            hit = resolve_mig(snap.gpus, ident)
            if hit is not None:
                out.setdefault(hit[1].uuid, []).append(c.name)
    return {u: tuple(names) for u, names in out.items()}


@record
class MigPick:
    chosen: tuple[MigLoad, ...]
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def pick_mig(loads: dict[str, MigLoad], reserved: dict[str, tuple[str, ...]], count: int = 1,
             min_free: int | None = None) -> MigPick:
    """The best ``count`` MIG devices by free memory, or one sentence naming what could not be met."""
    if not loads:
        return MigPick((), "No GPU is in MIG mode with MIG devices, so there is no MIG device to pick "
                           "(pick without --mig picks whole GPUs).")
    asked = f"{count} {'was' if count == 1 else 'were'} asked for"
    ranked = sorted(loads.values(), key=lambda m: (m.free_min is None, -(m.free_min or 0), m.processes,
                                                   m.gpu, m.index))
    free = [m for m in ranked if m.uuid not in reserved]
    if len(free) < count:
        taken = ", ".join(f"{m.label} to {' and '.join(reserved[m.uuid])}" for m in ranked if m.uuid in reserved)
        if not free:
            return MigPick((), f"All {plural(len(ranked), 'MIG device')} are granted to running containers "
                               f"({taken}).")
        return MigPick((), f"Only {plural(len(free), 'MIG device')} ({', '.join(m.label for m in free)}) "
                           f"{'is' if len(free) == 1 else 'are'} not granted to a running container ({taken}); "
                           f"{asked}.")
    roomy = free
    if min_free is not None:
        roomy = [m for m in free if m.free_min is not None and m.free_min >= min_free]
        if len(roomy) < count:
            known = [m for m in free if m.free_min is not None]
            if not roomy:
                if not known:
                    return MigPick((), f"No MIG device reports its free memory, so none can be shown to have "
                                       f"{gib(min_free)} free.")
                best = known[0]
                return MigPick((), f"No MIG device has {gib(min_free)} free: the most free is "
                                   f"{gib(best.free_min or 0)} on {best.label} ({best.profile or 'unknown profile'}).")
            return MigPick((), f"Only {plural(len(roomy), 'MIG device')} ({', '.join(m.label for m in roomy)}) "
                               f"{'has' if len(roomy) == 1 else 'have'} {gib(min_free)} free; {asked}.")
    return MigPick(tuple(roomy[:count]))


def format_mig_pick(chosen: Sequence[MigLoad], fmt: str) -> str:
    """``index`` 6:0 · ``uuid`` MIG-… · ``env`` CUDA_VISIBLE_DEVICES=MIG-… · ``docker`` --gpus device=MIG-…

    CUDA names MIG devices only by UUID, so ``env`` and ``docker`` use UUIDs.
    """
    ids = [m.uuid for m in chosen]
    if fmt == "index":
        return ",".join(m.label for m in chosen)
    if fmt == "uuid":
        return ",".join(ids)
    if fmt == "env":
        return "CUDA_VISIBLE_DEVICES=" + ",".join(ids)
    if fmt == "docker":
        return f"--gpus device={ids[0]}" if len(ids) == 1 else f"--gpus '\"device={','.join(ids)}\"'"
    raise ValueError(f"unknown format {fmt!r}")


def whole_gpus(gpus: Iterable[Gpu]) -> tuple[tuple[Gpu, ...], tuple[int, ...]]:
    """(GPUs that can be picked whole, indices of cards left out because they are in MIG mode)."""
    keep: list[Gpu] = []
    mig: list[Gpu] = []
    for g in gpus:
        mode = g.mig_mode  # g.mig_enabled, read without its frame (this runs for every GPU, every poll)
        (mig if mode is not None and mode.current and not g.lost else keep).append(g)
    return tuple(keep), tuple([g.index for g in mig])
