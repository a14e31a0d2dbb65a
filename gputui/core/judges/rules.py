"""House rules judged on one snapshot: who breaks which rule now, since when, and the command that fixes it.

Rules (``gputui.core.rules``), each a :class:`~gputui.core.model.RuleViolation`:

* ``max_gpus_per_user`` — a user holds memory on more GPUs than the limit: one violation per GPU over
  it, the GPUs where the user holds least memory first (the cheapest to free).
* ``max_idle_hold`` — a user has held memory on a GPU for longer than the limit while that GPU stayed
  idle (utilization at most :data:`IDLE_UTIL` %) in every poll. The run is kept poll to poll by
  :class:`RuleJudge`; a one-shot sees one poll and never claims it.
* ``all_gpus`` — a container granted every GPU while ``allow_all_gpus = false``.
* ``reserved`` — a process of someone else holds memory on a GPU reserved for another user or group.

The judge is pure apart from the runs it keeps: no source, no file, no clock of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timezone

from gputui.core.judges.text import duration, gib
from gputui.core.model import Container, Gpu, Process, ReservationView, RuleViolation
from gputui.core.rules import HouseRules, Members, describe_until, reserved_for_other

#: A GPU at or below this utilization (%) counts as idle for ``max_idle_hold``.
IDLE_UTIL = 5


def _stamp(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc).astimezone()


def _holders(gpus: Iterable[Gpu]) -> dict[tuple[str, int], list[Process]]:
    """(user, GPU index) -> the user's processes holding memory there."""
    out: dict[tuple[str, int], list[Process]] = {}
    for g in gpus:
        for p in g.processes:
            if p.user and p.gpu_memory:
                out.setdefault((p.user, g.index), []).append(p)
    return out


def _pids(procs: Iterable[Process]) -> str:
    return " ".join(str(p.pid) for p in sorted(procs, key=lambda p: p.pid)[:8])


def _names(procs: Iterable[Process]) -> str | None:
    names = sorted({p.container.label for p in procs if p.container is not None})
    return ",".join(names) if names else None


def _free_gpu(gpus: Iterable[Gpu], busy: set[int]) -> int | None:
    """A GPU nobody holds memory on, for the suggested move."""
    for g in sorted(gpus, key=lambda g: g.index):
        if g.index not in busy and not any(p.gpu_memory for p in g.processes) and not g.lost:
            return g.index
    return None


class RuleJudge:
    """Judges the house rules poll after poll, keeping when each idle hold began."""

    def __init__(self) -> None:
        #: (user, GPU index) -> when the current idle hold began
        self._idle_since: dict[tuple[str, int], float] = {}
        #: (rule, user, gpu, container) -> when the violation was first seen in a row of polls
        self._since: dict[tuple[str, str | None, int | None, str | None], float] = {}

    def update(self, rules: HouseRules, gpus: tuple[Gpu, ...], containers: tuple[Container, ...],
               now: float) -> tuple[tuple[RuleViolation, ...], tuple[ReservationView, ...]]:
        members = Members()
        live = rules.active(now)
        views = tuple(
            ReservationView(id=r.id, gpu=g.index, uuid=g.uuid, holder=r.holder, until=_stamp(r.until), note=r.note)
            for r in live for g in gpus if g.uuid in r.uuids
        )
        found: list[tuple[str, str | None, int | None, str | None, str]] = []
        holders = _holders(gpus)
        busy = {gpu for (_, gpu) in holders}
        limits = rules.limits

        if limits.max_gpus_per_user is not None:
            per_user: dict[str, list[tuple[int, list[Process]]]] = {}
            for (user, gpu), procs in holders.items():
                per_user.setdefault(user, []).append((gpu, procs))
            for user, held in per_user.items():
                if len(held) <= limits.max_gpus_per_user:
                    continue
                held.sort(key=lambda item: (sum(p.gpu_memory or 0 for p in item[1]), -item[0]))
                over = held[:len(held) - limits.max_gpus_per_user]
                all_idx = ", ".join(str(g) for g, _ in sorted(held))
                for gpu, procs in over:
                    found.append(("max_gpus_per_user", user, gpu, _names(procs),
                                  f"{user} holds memory on {len(held)} GPUs ({all_idx}); the house limit is "
                                  f"{limits.max_gpus_per_user}: free GPU {gpu} with gputui kill {_pids(procs)}."))

        idle_now: set[tuple[str, int]] = set()
        if limits.max_idle_hold is not None:
            util = {g.index: g.utilization_gpu for g in gpus}
            for key, procs in holders.items():
                u = util.get(key[1])
                if u is None or u > IDLE_UTIL:
                    continue
                idle_now.add(key)
                began = self._idle_since.setdefault(key, now)
                if now < began:  # the clock stepped back: start the run again rather than go negative
                    began = self._idle_since[key] = now
                if now - began >= limits.max_idle_hold:
                    amount = sum(p.gpu_memory or 0 for p in procs)
                    found.append(("max_idle_hold", key[0], key[1], _names(procs),
                                  f"{key[0]} has held {gib(amount)} on idle GPU {key[1]} for {duration(now - began)} "
                                  f"(house limit {duration(limits.max_idle_hold)}): free it with "
                                  f"gputui kill {_pids(procs)}."))
        for key in [k for k in self._idle_since if k not in idle_now]:
            del self._idle_since[key]

        if not limits.allow_all_gpus:
            for c in containers:
                if c.gpus != "all":
                    continue
                users = sorted({p.user for g in gpus for p in g.processes if p.pid in c.pids and p.user})
                used = sorted(set(c.used_gpus))
                target = used[0] if len(used) == 1 else _free_gpu(gpus, busy)
                fix = (f"gputui migrate {c.name} --to {target}" if target is not None
                       else "recreate it with --gpus device=N (gputui pick)")
                found.append(("all_gpus", users[0] if users else None, None, c.name,
                              f"container {c.name} is granted every GPU, which the house rules forbid "
                              f"(allow_all_gpus = false): {fix}."))

        if live:
            by_uuid = {g.uuid: g for g in gpus}
            for (user, gpu), procs in holders.items():
                g = next((x for x in gpus if x.index == gpu), None)
                if g is None or g.uuid not in by_uuid:
                    continue
                r = reserved_for_other(g.uuid, user, live, now, members)
                if r is None:
                    continue
                free = _free_gpu([x for x in gpus if reserved_for_other(x.uuid, user, live, now, members) is None],
                                 busy)
                names = _names(procs)
                move = (f"gputui migrate {names.split(',')[0]} --to {free}" if names and free is not None
                        else f"gputui kill {_pids(procs)}")
                found.append(("reserved", user, gpu, names,
                              f"GPU {gpu} is reserved for {r.holder} until {describe_until(r.until, now)}; "
                              f"{user} holds {gib(sum(p.gpu_memory or 0 for p in procs))} there: {move}."))

        seen: set[tuple[str, str | None, int | None, str | None]] = set()
        out = []
        for rule, who, index, container, message in found:
            vkey = (rule, who, index, container)
            seen.add(vkey)
            since = self._since.setdefault(vkey, now)
            if rule == "max_idle_hold":
                since = self._idle_since.get((who or "", index if index is not None else -1), since)
            out.append(RuleViolation(rule=rule, user=who, gpu=index, container=container, since=_stamp(since),
                                     message=message))
        for vkey in [k for k in self._since if k not in seen]:
            del self._since[vkey]
        out.sort(key=lambda v: (v.gpu if v.gpu is not None else -1, v.rule, v.user or ""))
        return tuple(out), views


def house_holds(reservations: Iterable[ReservationView], user: str | None, now: datetime | None = None,
                ) -> tuple[dict[int, str], set[int]]:
    """For ``pick``: GPU index -> why it is held for someone else, and the GPUs reserved for ``user``."""
    members = Members()
    held: dict[int, str] = {}
    mine: set[int] = set()
    for r in reservations:
        if now is not None and r.until <= now:
            continue
        if members.holds(r.holder, user):
            mine.add(r.gpu)
        else:
            held.setdefault(r.gpu, f"reserved for {r.holder} until {describe_until(r.until.timestamp(), time.time())}")
    for gpu in mine:
        held.pop(gpu, None)
    return held, mine


def invoking_user() -> str | None:
    """Who asked: the user behind sudo, else the user running gputui."""
    import os
    import pwd

    name = os.environ.get("SUDO_USER") if os.geteuid() == 0 else None
    if name:
        return name
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None
