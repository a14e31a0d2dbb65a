"""The guard's decision on one Docker API request: allow it, or refuse it with one sentence and the fix.

Only container creates (``POST /containers/create``) and updates (``POST /containers/{id}/update``) are
judged; every other request is allowed untouched. A create or update is read through the one grant model
(:func:`gputui.core.grants.read_grant`: device requests with a count or ids, CDI devices, an ``nvidia``
runtime with ``NVIDIA_VISIBLE_DEVICES``, ``/dev/nvidiaN`` nodes) and refused when

* it grants every GPU while the house rules say ``allow_all_gpus = false``, or
* it grants a GPU reserved for someone, unless it carries ``--label gputui.reservation=TOKEN`` of that
  reservation (the guard cannot tell who sends a request over Docker's socket, so the token is the proof).

Bodies it cannot judge follow a fixed rule: a create or update whose body is absent, not JSON, nested too
deep or larger than :data:`BODY_LIMIT` is **refused** (it could carry any grant); anything else is allowed.
The decision reads only its arguments — the last snapshot's GPUs and the rules read with it — and never
NVML or Docker, so it takes microseconds.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gputui.core.grants import HostGpus, read_grant
from gputui.core.record import record
from gputui.core.rules import HouseRules, Reservation, describe_until, token_digest

#: Docker forwards bodies up to 1 MiB to authorization plugins; larger ones are not judged.
BODY_LIMIT = 1 << 20
#: JSON nested deeper than this is refused before parsing.
DEPTH_LIMIT = 64
RESERVATION_LABEL = "gputui.reservation"
_CREATE = re.compile(r"^(?:/v[0-9.]{1,8})?/containers/create(?:\?.*)?$")
_UPDATE = re.compile(r"^(?:/v[0-9.]{1,8})?/containers/[^/?]{1,256}/update(?:\?.*)?$")


@record
class Decision:
    allow: bool
    #: one sentence for the person at the docker command line (refusals only)
    message: str | None = None
    #: what was judged: "create", "update", or None for requests the guard does not judge
    kind: str | None = None
    #: the rule that refused it: "all_gpus", "reserved" or "unreadable"
    rule: str | None = None
    gpus: tuple[int, ...] = ()


ALLOW = Decision(True)


def _depth_ok(data: bytes) -> bool:
    depth = 0
    in_str = esc = False
    for b in data:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > DEPTH_LIMIT:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def decide(method: str, uri: str, body: bytes | None, gpus: HostGpus, rules: HouseRules, now: float,
           suggest: int | None = None) -> Decision:
    """The decision for one request (``suggest``: a GPU ``gputui pick`` would choose, for the message)."""
    if method.upper() != "POST":
        return ALLOW
    path = uri[:2048]
    kind = "create" if _CREATE.match(path) else "update" if _UPDATE.match(path) else None
    if kind is None:
        return ALLOW
    if not rules.limits.any and not rules.reservations:
        return Decision(True, kind=kind)
    if body is None or len(body) > BODY_LIMIT or not _depth_ok(body):
        return Decision(False, "gputui guard refuses a container request whose settings it cannot read "
                               "(no body, or one over 1 MiB or nested too deep).", kind, "unreadable")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return Decision(False, "gputui guard refuses a container request whose settings are not JSON.", kind,
                        "unreadable")
    if not isinstance(doc, dict):
        return Decision(False, "gputui guard refuses a container request whose settings are not a JSON object.",
                        kind, "unreadable")
    attrs: dict[str, Any]
    if kind == "create":
        hc = doc.get("HostConfig")
        if not isinstance(hc, dict):
            hc = {}
        attrs = {"Config": {"Env": doc.get("Env") if isinstance(doc.get("Env"), list) else []},
                 "HostConfig": hc}
    else:  # an update's body is the resources themselves
        attrs = {"Config": {"Env": []}, "HostConfig": doc}
    try:
        grant = read_grant(attrs, gpus)
    except (TypeError, ValueError, AttributeError, KeyError):
        return Decision(False, "gputui guard refuses a container request whose GPU settings it cannot read.",
                        kind, "unreadable")
    if not grant:
        return Decision(True, kind=kind)
    every = grant.all or (grant.count > 0 and grant.count >= len(gpus.gpus))
    if grant.count > 0 and not every:
        indices = tuple(range(grant.count))
    elif every:
        indices = tuple(g.index for g in gpus.gpus)
    else:
        indices = tuple(sorted({i for i in (gpus.index_of(k) for k in grant.keys) if i is not None}))
    fix = f"use --gpus device={suggest} (gputui pick)" if suggest is not None else "use --gpus device=N (gputui pick)"
    if every and not rules.limits.allow_all_gpus:
        return Decision(False, f"gputui guard: the house rules forbid granting every GPU to one container "
                               f"(allow_all_gpus = false); {fix}.", kind, "all_gpus", indices)
    labels = doc.get("Labels")
    raw_token = labels.get(RESERVATION_LABEL) if kind == "create" and isinstance(labels, dict) else None
    token = raw_token if isinstance(raw_token, str) else None
    digest = token_digest(token) if token else None
    uuids = {g.index: g.uuid for g in gpus.gpus}
    for index in indices:
        r = _reservation(uuids.get(index), rules.reservations, now)
        if r is not None and r.token_sha256 != digest:
            return Decision(False, f"gputui guard: GPU {index} is reserved for {r.holder} until "
                                   f"{describe_until(r.until, now)} (reservation {r.id}); its holder starts "
                                   f"containers there with --label {RESERVATION_LABEL}=TOKEN, others {fix}.",
                            kind, "reserved", indices)
    return Decision(True, kind=kind, gpus=indices)


def _reservation(uuid: str | None, reservations: tuple[Reservation, ...], now: float) -> Reservation | None:
    if uuid is None:
        return None
    return next((r for r in reservations if uuid in r.uuids and r.active(now)), None)
