"""What ``gputui who`` and ``gputui usage`` share: the period options, the backend (the SQLite
history database or a Prometheus server) and how times read."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

    from gputui.context import Context


def add_backend(p: argparse.ArgumentParser) -> None:
    from gputui.core.sources.history_store import default_db_path

    group = p.add_mutually_exclusive_group()
    group.add_argument("--db", metavar="PATH", default=None,
                       help=f"the history database 'gputui record' writes (default {default_db_path()})")
    group.add_argument("--prometheus", metavar="URL", default=None,
                       help="read every host's history from this Prometheus server instead")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def period(ctx: Context, default_since: str | None) -> tuple[float, float]:
    """(since, until) from --at, or --since/--until; UsageError with one sentence."""
    from gputui.context import UsageError
    from gputui.core.timespec import parse_time

    args = ctx.args
    now = time.time()

    def read(option: str, text: str) -> float:
        try:
            return parse_time(text, now)
        except ValueError as exc:
            raise UsageError(f"{option}: {exc}.") from None

    at = getattr(args, "at", None)
    if at is not None:
        if args.since is not None or args.until is not None:
            raise UsageError("--at names one moment: give it without --since and --until.")
        t = read("--at", at)
        return t, t
    since_text = args.since if args.since is not None else default_since
    since = read("--since", since_text) if since_text is not None else 0.0
    until = read("--until", args.until) if args.until is not None else now
    if until < since:
        raise UsageError("--until is before --since.")
    return since, until


def gpu_indices(ctx: Context) -> list[int]:
    from gputui.context import UsageError, parse_gpu_list

    out = []
    for item in parse_gpu_list(getattr(ctx.args, "gpu", None)):
        if not item.isdigit() or int(item) > 4096:
            raise UsageError(f"--gpu {item!r}: the history names GPUs by index (e.g. --gpu 0).")
        out.append(int(item))
    return out


def open_db(ctx: Context) -> sqlite3.Connection:
    from gputui.context import UsageError
    from gputui.core.sources.history_store import HistoryError, default_db_path, open_reader

    try:
        return open_reader(ctx.args.db or default_db_path())
    except HistoryError as exc:
        raise UsageError(str(exc)) from None


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def dump(doc: Any) -> str:
    import json

    return json.dumps(doc, indent=2) + "\n"
