"""Readings that do not add up: load with nothing to explain it.

Two cases a card header must not call ``idle``:

* **busy with no visible process** — utilisation well above zero while NVML lists
  no process. Real work whose processes this PID namespace cannot list (gputui in a
  container, a hidden MPS server) reads like this; the memory in use says so.
* **suspect** — a card reporting (nearly) full utilisation with no process *and*
  next to no memory in use. Nothing can keep a GPU 100% busy without memory: this
  is how a failing GPU or a driver fault reads (``nvidia-smi`` shows ``ERR!`` in
  some of its fields). Such a card is no evidence of a pile-up, so the imbalance
  judge leaves it out, and an alert points at ``gputui doctor`` instead.
"""

from __future__ import annotations

from gputui.core.model import Gpu, Snapshot
from gputui.core.plausible import uuid_problems

#: Utilisation (%) at or above which a GPU with no process is "busy", not "idle".
BUSY_UTIL = 5
#: Utilisation (%) at or above which a GPU with no process and no memory is suspect.
SUSPECT_UTIL = 90
#: Memory in use (bytes) under which a card holds "next to nothing": the driver's own reservation.
SUSPECT_MEMORY = 1024**3


def busy_without_process(g: Gpu) -> bool:
    """Load with no process listed (either kind above)."""
    return (not g.lost and not g.processes and g.utilization_gpu is not None
            and g.utilization_gpu >= BUSY_UTIL)


def suspect(g: Gpu) -> bool:
    """Near-full load, no process and next to no memory (or memory N/A): the reading looks broken."""
    if not busy_without_process(g) or g.utilization_gpu is None or g.utilization_gpu < SUSPECT_UTIL:
        return False
    return g.memory_used is None or g.memory_used < SUSPECT_MEMORY


def suspect_indices(snapshot: Snapshot) -> frozenset[int]:
    """Cards whose reading looks broken, and cards whose UUID cannot name them (empty or shared:
    :func:`gputui.core.plausible.uuid_problems`): neither is evidence of a pile-up nor a place to
    suggest moving a job to (a grant names a card by its UUID)."""
    broken = [g.index for g in snapshot.gpus if not g.processes and suspect(g)]  # (a process: not suspect)
    return frozenset(broken).union(uuid_problems(snapshot.gpus))


def activity(g: Gpu) -> str:
    """What a card with no listed process is doing, in two or three words."""
    if suspect(g):
        return "suspect: busy, no process"
    if busy_without_process(g):
        return "busy, no visible process"
    return "idle"


def suspect_message(g: Gpu) -> str:
    mem = "N/A" if g.memory_used is None else f"{g.memory_used // 1024**2} MiB"
    return (f"GPU {g.index} reports {g.utilization_gpu}% utilization with no process and {mem} of memory in use: "
            f"the reading looks broken, not busy (a failing GPU or a driver fault); run 'gputui doctor' and "
            f"check 'dmesg' for Xid errors.")
