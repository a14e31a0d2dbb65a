"""``gputui doctor``'s MIG checks (A100/H100/H200 partitions), pure like :mod:`gputui.core.checks`, which runs them.

* MIG mode on but no MIG devices: CUDA sees no device on that card at all.
* MIG mode pending ≠ current: the change waits for a GPU reset.
* A container granted a ``MIG-`` UUID that no longer exists (instances are
  destroyed and recreated with new UUIDs; the container's grant is then dead).
"""

from __future__ import annotations

from typing import Literal

from gputui.core.judges.text import gpus_phrase
from gputui.core.mig import parse_mig_ref
from gputui.core.model import Container, Gpu, Snapshot, match_uuid
from gputui.core.record import record

Status = Literal["pass", "warn", "fail", "skip"]
#: (name, status, message, fix): :mod:`gputui.core.checks` turns these into its Checks (it imports this module).
Verdict = tuple[str, Status, str, str | None]


def _pass(name: str, message: str) -> Verdict:
    return (name, "pass", message, None)


def _warn(name: str, message: str, fix: str) -> Verdict:
    return (name, "warn", message, fix)


def _skip(name: str, message: str) -> Verdict:
    return (name, "skip", message, None)


@record
class MigFacts:
    """The GPUs (with MIG mode and devices) and the MIG UUIDs each live container was granted."""

    gpus: tuple[Gpu, ...] = ()
    #: (container name, MIG UUIDs its grant names)
    grants: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, snapshot: Snapshot) -> MigFacts:
        return cls(snapshot.gpus, tuple((c.name, _mig_ids(c)) for c in snapshot.containers if _mig_ids(c)))


def _mig_ids(c: Container) -> tuple[str, ...]:
    if c.gpus == "all":
        return ()
    return tuple(u for u in c.gpus if u.upper().startswith("MIG-") or parse_mig_ref(u) is not None)


def check_mig(f: MigFacts | None, containers_checked: bool = True, containers_error: str | None = None
              ) -> list[Verdict]:
    """The three MIG checks (``mig-devices``, ``mig-mode-change``, ``mig-grants``); the grants check is a skip
    when containers were not read."""
    if f is None:
        return []
    capable = [g for g in f.gpus if g.mig_mode is not None and not g.lost]
    out: list[Verdict] = []
    if not capable:
        out.append(_pass("mig-devices", "No GPU here reports MIG mode (none is MIG-capable, or the driver "
                                        "cannot say)."))
        out.append(_pass("mig-mode-change", "No MIG mode change is waiting for a GPU reset."))
        out += _grants(f, containers_checked, containers_error)
        return out
    empty = [g.index for g in capable if g.mig_enabled and not g.mig_devices]
    if empty:
        first = empty[0]
        out.append(_warn(
            "mig-devices",
            f"MIG mode is on for {gpus_phrase(empty)} but no MIG devices exist there, so CUDA sees no device on "
            f"{'it' if len(empty) == 1 else 'them'}.",
            f"Create GPU and compute instances, e.g. `sudo nvidia-smi mig -i {first} -cgi 9,9 -C` (profile ids "
            f"from `nvidia-smi mig -i {first} -lgip`), or turn MIG off with `sudo nvidia-smi -i {first} -mig 0`.",
        ))
    else:
        on = [g for g in capable if g.mig_enabled]
        n = sum(len(g.mig_devices) for g in on)
        out.append(_pass("mig-devices", f"{gpus_phrase(g.index for g in on)} in MIG mode with {n} MIG device"
                                        f"{'s' if n != 1 else ''}." if on else "No GPU is in MIG mode."))
    pending = [g for g in capable if g.mig_reset_pending]
    if pending:
        g = pending[0]
        change = "on" if g.mig_mode is not None and g.mig_mode.pending else "off"
        out.append(_warn(
            "mig-mode-change",
            f"MIG mode of {gpus_phrase(x.index for x in pending)} turns {change} only after a GPU reset "
            "(pending ≠ current); until then the GPU keeps its current mode.",
            f"Stop the GPU's processes, then `sudo nvidia-smi -i {g.index} -r` (or reboot).",
        ))
    else:
        out.append(_pass("mig-mode-change", "No MIG mode change is waiting for a GPU reset."))
    out += _grants(f, containers_checked, containers_error)
    return out


def _grants(f: MigFacts, containers_checked: bool, containers_error: str | None) -> list[Verdict]:
    if not containers_checked:
        return [_skip("mig-grants", f"Not checked: {containers_error or 'container information is not available'}.")]
    out: list[Verdict] = []
    existing = [m.uuid for g in f.gpus for m in g.mig_devices]
    dead = [(name, u) for name, uuids in f.grants for u in uuids if match_uuid(u, existing) is None]
    if dead:
        name, uuid = dead[0]
        more = f" ({len(dead) - 1} more)" if len(dead) > 1 else ""
        out.append(_warn(
            "mig-grants",
            f"{name} is granted MIG device {uuid}, which no longer exists (it was destroyed or recreated with a "
            f"new UUID){more}; the container gets no GPU from it.",
            "List the MIG devices with `nvidia-smi -L` and migrate the container to one of them "
            f"(`gputui migrate {name} --to MIG-…`), or recreate it with the new UUID.",
        ))
    elif f.grants:
        out.append(_pass("mig-grants", "Every MIG device granted to a container exists."))
    else:
        out.append(_pass("mig-grants", "No container is granted a MIG device."))
    return out
