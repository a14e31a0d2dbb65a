"""MIG devices as the faces and commands talk about them: labels, owners, notes, references.

A MIG device is named ``GPU:instance`` (``0:1`` = GPU 0, MIG device 1), as
nvidia-smi, CUDA and the container runtimes do, or by its ``MIG-`` UUID.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gputui.core.model import Gpu, MigDevice, Process, match_uuid

#: What a MIG card shows where its utilization would be (real drivers answer NOT_SUPPORTED).
MIG_LOAD_NOTE = "per-instance load is not reported in MIG mode"


def mig_label(gpu_index: int, mig_index: int) -> str:
    return f"{gpu_index}:{mig_index}"


def instance_processes(g: Gpu, m: MigDevice) -> tuple[Process, ...]:
    """The processes of one MIG device, as the poller enriched them."""
    return tuple(p for p in g.processes if p.mig_device == m.index)


def instance_owner(g: Gpu, m: MigDevice) -> str:
    """Who uses the instance, in a few words: "alice · 2 procs", "trainer · 1 proc" (a container), "idle"."""
    procs = instance_processes(g, m)
    if not procs:
        return "idle"
    containers = Counter(p.container.label for p in procs if p.container is not None)
    users = Counter(p.user for p in procs if p.user)
    who = ""
    if containers:
        who = containers.most_common(1)[0][0]
    elif users:
        who = users.most_common(1)[0][0]
    else:
        who = "unknown user"
    if len(containers) + (0 if containers else len(users)) > 1:
        who += " +"
    n = len(procs)
    return f"{who} · {n} proc{'s' if n != 1 else ''}"


def mig_notes(g: Gpu) -> list[str]:
    """Sentences about a GPU's MIG state worth telling: a pending mode change, MIG on with no instances."""
    out: list[str] = []
    if g.mig_mode is None or g.lost:
        return out
    if g.mig_reset_pending:
        change = "on" if g.mig_mode.pending else "off"
        out.append(f"GPU {g.index}: MIG mode turns {change} at the next GPU reset "
                   f"(pending ≠ current; run 'nvidia-smi -i {g.index} -r' when the GPU is idle).")
    if g.mig_enabled and not g.mig_devices:
        out.append(f"GPU {g.index}: MIG mode is on but no MIG devices exist, so CUDA sees no device on it; "
                   f"create them, e.g. 'nvidia-smi mig -i {g.index} -cgi 9,9 -C'.")
    return out


def find_mig_uuid(gpus: Iterable[Gpu], ident: str) -> tuple[Gpu, MigDevice] | None:
    """The MIG device a ``MIG-…`` UUID (or an unambiguous prefix of 8+ characters) names."""
    pairs = [(g, m) for g in gpus for m in g.mig_devices]
    uuid = match_uuid(ident, [m.uuid for _, m in pairs])
    if uuid is None:
        return None
    for g, m in pairs:
        if m.uuid == uuid:
            return g, m
    return None


def parse_mig_ref(text: str) -> tuple[int, int] | None:
    """``"0:1"`` -> (0, 1); None when the text is not of that form."""
    head, sep, tail = text.strip().partition(":")
    if not sep or not head.isdigit() or not tail.isdigit():
        return None
    return int(head), int(tail)


def resolve_mig(gpus: Iterable[Gpu], ref: str) -> tuple[Gpu, MigDevice] | None:
    """The MIG device ``ref`` names: ``GPU:instance`` or a ``MIG-`` UUID; None when it names none."""
    gpus = tuple(gpus)
    pair = parse_mig_ref(ref)
    if pair is not None:
        for g in gpus:
            if g.index == pair[0]:
                m = g.mig_device(pair[1])
                return (g, m) if m is not None else None
        return None
    return find_mig_uuid(gpus, ref)
