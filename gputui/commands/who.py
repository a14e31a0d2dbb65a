"""``gputui who``: every holder of the GPU(s) at a moment or over a period, from the history
database (``gputui record``) or from Prometheus (``--prometheus``): user, container or job,
executable, PID, GPU, from, to (or "still running"), peak memory and mean SM %, oldest first.

Exit status: 0 · 1 nobody held those GPUs then · 2 bad options, no readable database, Prometheus
unreachable.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.commands.history_args import add_backend, dump, gpu_indices, iso, open_db, period

if TYPE_CHECKING:
    from gputui.context import Context
    from gputui.core.sources.history_store import Holding


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("who", help="who held which GPU at a time or over a period (from the history)",
                       description="Every process that held memory on the GPU(s) at --at TIME or between --since "
                                   "and --until (default: the last 24 hours), one row each, oldest first. TIME is "
                                   "ISO 8601 (2026-12-01T22:00, local time unless an offset is given), epoch "
                                   "seconds, or a relative 30m, 8h, 7d (that long ago).")
    common(p)
    p.add_argument("--at", metavar="TIME", help="one moment")
    p.add_argument("--since", metavar="TIME", help="start of the period (default 24h)")
    p.add_argument("--until", metavar="TIME", help="end of the period (default now)")
    add_backend(p)


def run(ctx: Context) -> int:
    from gputui.context import EXIT_NO, EXIT_OK

    since, until = period(ctx, "24h")
    gpus = gpu_indices(ctx)
    items = _read(ctx, since, until, gpus)
    if ctx.args.json:
        ctx.stdout.write(dump({"since": iso(since), "until": iso(until), "gpus": gpus,
                               "holders": [_json(h) for h in items]}))
    elif not items:
        ctx.stdout.write("Nobody held " + (f"GPU {', '.join(map(str, gpus))}" if gpus else "a GPU") + " then.\n")
    else:
        ctx.stdout.write(render(items))
    return EXIT_OK if items else EXIT_NO


def _read(ctx: Context, since: float, until: float, gpus: list[int]) -> list[Holding]:
    if ctx.args.prometheus:
        from gputui.commands.history_prom import prom_holdings

        return prom_holdings(ctx, since, until, gpus)
    from gputui.core.sources.history_store import holdings

    conn = open_db(ctx)
    try:
        return holdings(conn, since, until, gpus)
    finally:
        conn.close()


def _json(h: Holding) -> dict[str, Any]:
    doc = h.to_json()
    doc["from"] = iso(h.first_seen)
    doc["to"] = None if h.running else iso(h.last_seen)
    doc["last_seen"] = iso(h.last_seen)
    return doc


def render(items: list[Holding]) -> str:
    from gputui.core.history_text import holders_table

    return holders_table(items)
