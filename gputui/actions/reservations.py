"""Writing GPU reservations: ``reservations.json`` beside the rules file, changed under a lock, atomically.

The folder must belong to root and be writable by nobody else (created 0755 when missing); the file is
replaced through :func:`gputui.actions.atomic.write_atomic` (never truncated in place) with mode 0644:
it holds no secret, only each token's SHA-256. Every change is audited.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gputui.actions.atomic import write_atomic
from gputui.actions.audit import audit
from gputui.core.rules import (
    MAX_RESERVATION_S,
    MAX_RESERVATIONS,
    NOTE_LIMIT,
    RESERVATIONS_NAME,
    Reservation,
    RulesError,
    check_name,
    parse_reservations,
    rules_dir,
    token_digest,
    trusted_read,
)
from gputui.core.safe_text import clean


def _folder(rules_path: str | None) -> str:
    folder = rules_dir(rules_path)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise RulesError(f"cannot create {folder}: {exc.strerror}.") from None
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise RulesError(f"{folder} is not a folder.")
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RulesError(f"gputui does not write reservations into {folder}: it must belong to root and be "
                         f"writable by nobody else (mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}).")
    return folder


@contextmanager
def _locked(folder: str) -> Iterator[None]:
    path = os.path.join(folder, ".reservations.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise RulesError(f"{path} is not gputui's lock file.")
        deadline = time.monotonic() + 10
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise RulesError("another gputui reserve is changing the reservations; try again.") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _read(folder: str) -> list[Reservation]:
    path = os.path.join(folder, RESERVATIONS_NAME)
    data = trusted_read(path)
    return list(parse_reservations(data, path)) if data is not None else []


def _write(folder: str, items: list[Reservation]) -> None:
    doc = {"version": 1, "reservations": [
        {**r.to_json(), "token_sha256": r.token_sha256} for r in items]}
    write_atomic(Path(folder) / RESERVATIONS_NAME, (json.dumps(doc, indent=1) + "\n").encode(), mode=0o644)


def add_reservation(rules_path: str | None, uuids: tuple[str, ...], indices: tuple[int, ...], holder: str,
                    until: float, note: str, created_by: str, now: float | None = None,
                    ) -> tuple[Reservation, str]:
    """Store a reservation; returns it and its token (shown once, kept only as a digest)."""
    now = time.time() if now is None else now
    check_name(holder)
    if not now < until <= now + MAX_RESERVATION_S:
        raise RulesError("a reservation must end in the future and within a year.")
    note = clean(note)[:NOTE_LIMIT]
    folder = _folder(rules_path)
    token = secrets.token_urlsafe(18)
    with _locked(folder):
        items = [r for r in _read(folder) if r.until > now]  # expired ones vanish on every write
        clash = [r for r in items if set(r.uuids) & set(uuids) and r.active(now)]
        if clash:
            r = clash[0]
            raise RulesError(f"GPU {', '.join(str(i) for i in r.indices)} is already reserved for {r.holder} "
                             f"(reservation {r.id}); release it first with gputui reserve --release {r.id}.")
        if len(items) >= MAX_RESERVATIONS:
            raise RulesError(f"there are already {len(items)} reservations; release some first.")
        ids = {r.id for r in items}
        rid = secrets.token_hex(4)
        while rid in ids:
            rid = secrets.token_hex(4)
        res = Reservation(id=rid, uuids=uuids, indices=indices, holder=holder, until=until, created=now,
                          created_by=created_by, token_sha256=token_digest(token), note=note)
        _write(folder, [*items, res])
    audit("reserve", "ok", reservation=rid, gpus=list(indices), uuids=list(uuids), holder=holder, until=until,
          note=note)
    return res, token


def release_reservation(rules_path: str | None, rid: str, user: str | None, root: bool) -> Reservation:
    folder = _folder(rules_path)
    with _locked(folder):
        items = _read(folder)
        hit = next((r for r in items if r.id == rid), None)
        if hit is None:
            raise RulesError(f"there is no reservation {rid[:16]!r} (gputui reserve --list shows them).")
        if not root and hit.created_by != user:
            raise RulesError(f"reservation {rid} was made by {hit.created_by}; only they or root may release it.")
        _write(folder, [r for r in items if r.id != rid and r.until > time.time()])
    audit("reserve-release", "ok", reservation=rid, gpus=list(hit.indices), holder=hit.holder)
    return hit
