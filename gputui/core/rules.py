"""House rules and GPU reservations: what the people sharing a machine agreed on.

Two root-owned files in one folder (``/etc/gputui`` by default, the folder of ``--rules PATH`` otherwise):

* ``rules.toml`` — the limits (absent file = no rules, nothing changes)::

      [limits]
      max_gpus_per_user = 2      # GPUs on which one user holds memory at once
      max_idle_hold = "2h"       # holding GPU memory while that GPU is idle
      allow_all_gpus = false     # containers granted every GPU
      [reservations]
      self_service = false       # may users reserve GPUs for themselves (through the guard)

* ``reservations.json`` — who has which GPUs until when, written only by ``gputui reserve`` (atomically).
  A reservation's token is kept as its SHA-256 only: the file may be world-readable.

Both files are trusted only when they are regular files owned by root (or by the user running gputui,
for a user's own test copy) and writable by nobody else; otherwise :class:`RulesError` says why in one
sentence. Every value is range-checked; a file that breaks a rule is refused whole, never half-read.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import stat
import sys
import time
from collections.abc import Iterable
from typing import Any

from gputui.core.record import record
from gputui.core.statefile import StateFileError, open_regular

DEFAULT_DIR = "/etc/gputui"
RULES_NAME = "rules.toml"
RESERVATIONS_NAME = "reservations.json"
FILE_LIMIT = 1 << 20
#: More reservations than this in one file is refused as hostile or broken.
MAX_RESERVATIONS = 4096
#: The longest reservation (a year): a longer one is a typo.
MAX_RESERVATION_S = 366 * 86400.0
NOTE_LIMIT = 200
_NAME = re.compile(r"^@?[a-z_][a-z0-9_.-]{0,31}\$?$", re.IGNORECASE)
_ID = re.compile(r"^[0-9a-f]{8}$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{1,80}$")


class RulesError(Exception):
    """A rules or reservations file gputui will not use; the message is one sentence."""


@record
class Limits:
    max_gpus_per_user: int | None = None
    #: seconds
    max_idle_hold: float | None = None
    allow_all_gpus: bool = True
    self_service: bool = False

    @property
    def any(self) -> bool:
        return self.max_gpus_per_user is not None or self.max_idle_hold is not None or not self.allow_all_gpus


@record
class Reservation:
    id: str
    #: GPU UUIDs and the indices they had when reserved (indices are for people; UUIDs decide)
    uuids: tuple[str, ...]
    indices: tuple[int, ...]
    #: a user name, or "@group"
    holder: str
    until: float
    created: float
    created_by: str
    token_sha256: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "gpus": list(self.indices), "uuids": list(self.uuids), "for": self.holder,
                "until": self.until, "created": self.created, "created_by": self.created_by, "note": self.note}

    def active(self, now: float) -> bool:
        return self.created <= now + 60 and now < self.until


@record
class HouseRules:
    """What one read of the rules folder gave: limits, live reservations, and a problem if any."""

    limits: Limits = Limits()
    reservations: tuple[Reservation, ...] = ()
    #: one sentence when a file was refused (the rules then apply as if absent, and this is shown)
    error: str | None = None
    path: str = DEFAULT_DIR

    def active(self, now: float) -> tuple[Reservation, ...]:
        return tuple(r for r in self.reservations if r.active(now))

    @property
    def present(self) -> bool:
        return self.limits.any or bool(self.reservations) or self.error is not None


NO_RULES = HouseRules()


# -- reading -------------------------------------------------------------------------------------------


def rules_file(rules_path: str | None) -> str:
    """The rules file: ``--rules``, else ``$GPUTUI_RULES``, else ``/etc/gputui/rules.toml``. Whoever
    names it, it is used only when root (or the user running gputui) owns it (:func:`trusted_read`)."""
    return rules_path or os.environ.get("GPUTUI_RULES") or os.path.join(DEFAULT_DIR, RULES_NAME)


def rules_dir(rules_path: str | None) -> str:
    """The folder of the rules file, where the reservations live too."""
    return os.path.dirname(os.path.abspath(rules_file(rules_path)))


def trusted_read(path: str) -> bytes | None:
    """The bytes of ``path``, or None when it does not exist. Raises :class:`RulesError` unless it is a
    regular file owned by root or this user, writable by nobody else, in a folder nobody else may write."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except StateFileError as exc:
        raise RulesError(f"gputui does not use {path}: {exc.strerror}.") from None
    except OSError as exc:
        raise RulesError(f"cannot read {path}: {exc.strerror}.") from None
    try:
        st = os.fstat(fd)
        _check_owner(path, st, "file")
        dst = os.stat(os.path.dirname(os.path.abspath(path)))
        _check_owner(os.path.dirname(os.path.abspath(path)), dst, "folder")
        if st.st_size > FILE_LIMIT:
            raise RulesError(f"gputui does not use {path}: it is larger than {FILE_LIMIT} bytes.")
        chunks = []
        left = FILE_LIMIT + 1
        while left > 0:
            chunk = os.read(fd, min(65536, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > FILE_LIMIT:
            raise RulesError(f"gputui does not use {path}: it is larger than {FILE_LIMIT} bytes.")
        return data
    finally:
        os.close(fd)


def _check_owner(path: str, st: os.stat_result, what: str) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise RulesError(f"gputui does not use the {what} {path}: it belongs to uid {st.st_uid}, not to root "
                         f"(run 'chown root {path}').")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RulesError(f"gputui does not use the {what} {path}: other users may write to it "
                         f"(mode {stat.S_IMODE(st.st_mode):o}; run 'chmod go-w {path}').")


def parse_duration(text: Any, name: str = "a duration") -> float:
    """``"2h"``, ``"90m"``, ``"1d"``, ``"45s"`` or a number of seconds; finite and positive."""
    if isinstance(text, bool):
        raise ValueError(f"{name} must be a duration like \"2h\", not {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*(\d{1,9}(?:\.\d{1,6})?)\s*([smhdw]?)\s*", str(text)[:64])
        if m is None:
            raise ValueError(f"{name} must be a duration like \"2h\" or \"30m\", not {str(text)[:64]!r}")
        value = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
    if not (0 < value <= MAX_RESERVATION_S):
        raise ValueError(f"{name} must be more than 0 and at most a year")
    return value


def parse_limits(text: str, path: str) -> Limits:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path} is not valid TOML: {exc}.") from None
    unknown = set(data) - {"limits", "reservations"}
    if unknown:
        raise RulesError(f"{path}: unknown section [{sorted(unknown)[0]}] (known: [limits], [reservations]).")
    limits = data.get("limits", {})
    res = data.get("reservations", {})
    if not isinstance(limits, dict) or not isinstance(res, dict):
        raise RulesError(f"{path}: [limits] and [reservations] must be tables.")
    known = {"max_gpus_per_user", "max_idle_hold", "allow_all_gpus"}
    for key in limits:
        if key not in known:
            raise RulesError(f"{path}: unknown key {key!r} in [limits] (known: {', '.join(sorted(known))}).")
    for key in res:
        if key != "self_service":
            raise RulesError(f"{path}: unknown key {key!r} in [reservations] (known: self_service).")
    out: dict[str, Any] = {}
    if "max_gpus_per_user" in limits:
        v = limits["max_gpus_per_user"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1024:
            raise RulesError(f"{path}: max_gpus_per_user must be a whole number from 1 to 1024, not {v!r}.")
        out["max_gpus_per_user"] = v
    if "max_idle_hold" in limits:
        try:
            out["max_idle_hold"] = parse_duration(limits["max_idle_hold"], "max_idle_hold")
        except ValueError as exc:
            raise RulesError(f"{path}: {exc}.") from None
    for key, table, target in (("allow_all_gpus", limits, "allow_all_gpus"),
                               ("self_service", res, "self_service")):
        if key in table:
            if not isinstance(table[key], bool):
                raise RulesError(f"{path}: {key} must be true or false, not {table[key]!r}.")
            out[target] = table[key]
    return Limits(**out)


def parse_reservations(data: bytes, path: str) -> tuple[Reservation, ...]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RulesError(f"{path} is not a reservations file gputui wrote (not JSON).") from None
    items = doc.get("reservations") if isinstance(doc, dict) else None
    if doc.get("version") != 1 or not isinstance(items, list) or len(items) > MAX_RESERVATIONS:
        raise RulesError(f"{path} is not a reservations file this gputui understands.")
    out = []
    for item in items:
        try:
            out.append(_reservation(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise RulesError(f"{path} holds a reservation gputui cannot read ({exc}).") from None
    return tuple(out)


def _reservation(item: dict[str, Any]) -> Reservation:
    uuids = tuple(str(u) for u in item["uuids"])
    indices = tuple(int(i) for i in item["gpus"])
    if not uuids or len(uuids) != len(indices) or len(uuids) > 64:
        raise ValueError("its GPUs")
    if not all(_UUID.match(u) for u in uuids) or not all(0 <= i < 1024 for i in indices):
        raise ValueError("its GPUs")
    holder = str(item["for"])
    if not _NAME.match(holder):
        raise ValueError("its holder")
    rid = str(item["id"])
    if not _ID.match(rid):
        raise ValueError("its id")
    until, created = float(item["until"]), float(item["created"])
    if not (0 < created < until < 1e11):
        raise ValueError("its times")
    digest = str(item["token_sha256"])
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError("its token")
    return Reservation(id=rid, uuids=uuids, indices=indices, holder=holder, until=until, created=created,
                       created_by=str(item.get("created_by", ""))[:64], token_sha256=digest,
                       note=str(item.get("note", ""))[:NOTE_LIMIT])


def load_house_rules(rules_path: str | None = None, now: float | None = None) -> HouseRules:
    """The rules folder read once; never raises (a refused file is the ``error`` sentence)."""
    folder = rules_dir(rules_path)
    rpath = rules_file(rules_path)
    limits: Limits = Limits()
    reservations: tuple[Reservation, ...] = ()
    error: str | None = None
    try:
        data = trusted_read(rpath)
        if data is not None:
            limits = parse_limits(data.decode("utf-8", "replace"), rpath)
    except RulesError as exc:
        error = str(exc)
    try:
        res = trusted_read(os.path.join(folder, RESERVATIONS_NAME))
        if res is not None:
            when = time.time() if now is None else now
            reservations = tuple(r for r in parse_reservations(res, os.path.join(folder, RESERVATIONS_NAME))
                                 if r.until > when)
    except RulesError as exc:
        error = error or str(exc)
    return HouseRules(limits=limits, reservations=reservations, error=error, path=folder)


# -- who a reservation is for ----------------------------------------------------------------------------


class Members:
    """Whether a user belongs to a reservation's holder (a user or ``@group``), with lookups cached."""

    def __init__(self) -> None:
        self._groups: dict[str, frozenset[str]] = {}
        self._primary: dict[str, int | None] = {}

    def holds(self, holder: str, user: str | None) -> bool:
        if user is None:
            return False
        if not holder.startswith("@"):
            return holder == user
        name = holder[1:]
        members = self._groups.get(name)
        if members is None:
            try:
                g = grp.getgrnam(name)
                members = frozenset(g.gr_mem) | frozenset({f"#gid{g.gr_gid}"})
            except KeyError:
                members = frozenset()
            self._groups[name] = members
        if user in members:
            return True
        if user not in self._primary:
            try:
                self._primary[user] = pwd.getpwnam(user).pw_gid
            except KeyError:
                self._primary[user] = None
        gid = self._primary[user]
        return gid is not None and f"#gid{gid}" in members


def token_digest(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.strip().encode("utf-8", "replace")[:256]).hexdigest()


def reserved_for_other(gpu_uuid: str, user: str | None, reservations: Iterable[Reservation], now: float,
                       members: Members | None = None) -> Reservation | None:
    """The live reservation of ``gpu_uuid`` that is not ``user``'s, if any."""
    members = members or Members()
    for r in reservations:
        if gpu_uuid in r.uuids and r.active(now) and not members.holds(r.holder, user):
            return r
    return None


def describe_until(until: float, now: float) -> str:
    left = max(0.0, until - now)
    stamp = time.strftime("%a %H:%M", time.localtime(until))
    if left >= 86400:
        return f"{stamp} ({int(left // 86400)}d {int(left % 86400 // 3600)}h left)"
    return f"{stamp} ({int(left // 3600)}h{int(left % 3600 // 60):02d}m left)"


def check_name(holder: str) -> str:
    if not _NAME.match(holder):
        raise ValueError(f"{holder[:40]!r} is not a user name or @group")
    return holder


__all__ = ["DEFAULT_DIR", "NO_RULES", "RESERVATIONS_NAME", "RULES_NAME", "HouseRules", "Limits", "Members",
           "Reservation", "RulesError", "check_name", "describe_until", "load_house_rules",
           "parse_duration", "parse_limits", "parse_reservations", "reserved_for_other", "rules_dir", "rules_file",
           "token_digest", "trusted_read"]
