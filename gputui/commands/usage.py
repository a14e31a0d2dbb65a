"""``gputui usage``: GPU-hours per user, container, image, compose project, job, GPU or host over
a period, from the history database (``gputui record``) or Prometheus (``--prometheus``).

Per key: ``gpu_hours_held`` (time x GPUs on which the key held memory), ``busy_gpu_hours``
(that time weighted by the GPU's utilization), ``memory_gib_hours``, ``idle_hold_hours`` (held
while the GPU was below 5 % utilization) and ``peak_gpus`` (the most GPUs held at once); a totals
line; sorted by GPU-hours held.

Exit status: 0 · 2 bad options, no readable database, Prometheus unreachable.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.commands.history_args import add_backend, dump, iso, open_db, period
from gputui.commands.history_prom import RECORDED_NOTE
from gputui.core.history_text import table

if TYPE_CHECKING:
    from gputui.context import Context
    from gputui.core.sources.history_store import Usage


COLUMNS = ("gpu_hours_held", "busy_gpu_hours", "memory_gib_hours", "idle_hold_hours", "peak_gpus")


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    from gputui.core.sources.history_store import BY_KEYS

    p = sub.add_parser("usage", help="GPU-hours per user, container, image, compose project, job, GPU or host",
                       description="GPU-hours held, busy GPU-hours, memory GiB-hours, hours held on an idle GPU "
                                   "and the most GPUs held at once, per key, over --since .. --until (default: the "
                                   "last 7 days). TIME is ISO 8601 (local time unless an offset is given), epoch "
                                   "seconds, or a relative 30m, 8h, 7d (that long ago). With --prometheus, "
                                   "--by user, gpu or host sum the series of the recording rules "
                                   "(contrib/prometheus/gputui-history-rules.yml) where they cover the period, "
                                   "else the raw series are read; a last line (\"note\" in --json, stderr with "
                                   "--csv) says which.")
    common(p)
    p.add_argument("--since", metavar="TIME", help="start of the period (default 7d)")
    p.add_argument("--until", metavar="TIME", help="end of the period (default now)")
    p.add_argument("--by", choices=BY_KEYS, default="user", help="what to add up per (default user)")
    add_backend(p)
    p.add_argument("--csv", action="store_true", help="print CSV (a header, one line per key, then the totals)")


def run(ctx: Context) -> int:
    from gputui.context import EXIT_OK, UsageError

    args = ctx.args
    if args.json and args.csv:
        raise UsageError("Choose one of --json and --csv.")
    since, until = period(ctx, "7d")
    rows, total, note = _read(ctx, since, until, args.by)
    if args.json:
        doc = {"since": iso(since), "until": iso(until), "by": args.by,
               "rows": [u.to_json() for u in rows], "total": total.to_json()}
        if note is not None:
            doc["series"] = "recorded" if note == RECORDED_NOTE else "raw"
            doc["note"] = note
        ctx.stdout.write(dump(doc))
    elif args.csv:
        ctx.stdout.write(csv_text(args.by, rows, total))
        if note is not None:
            ctx.stderr.write(f"Read {note}.\n")  # stdout stays CSV
    else:
        ctx.stdout.write(render(args.by, rows, total))
        if note is not None:
            ctx.stdout.write(f"Read {note}.\n")
    return EXIT_OK


def _read(ctx: Context, since: float, until: float, by: str) -> tuple[list[Usage], Usage, str | None]:
    """The figures and, from Prometheus, which series they were read from."""
    if ctx.args.prometheus:
        from gputui.commands.history_prom import prom_usage

        return prom_usage(ctx, since, until, by)
    from gputui.core.sources.history_store import usage

    conn = open_db(ctx)
    try:
        return (*usage(conn, since, until, by), None)
    finally:
        conn.close()


def _cells(u: Usage) -> list[str]:
    return [u.key, f"{u.gpu_hours_held:.2f}", f"{u.busy_gpu_hours:.2f}", f"{u.memory_gib_hours:.2f}",
            f"{u.idle_hold_hours:.2f}", str(u.peak_gpus)]


def render(by: str, rows: list[Usage], total: Usage) -> str:
    header = [by.upper(), "GPU-H HELD", "BUSY GPU-H", "MEM GIB-H", "IDLE HOLD-H", "PEAK GPUS"]
    return table(header, [_cells(u) for u in rows] + [_cells(total)], {1, 2, 3, 4, 5})


def csv_text(by: str, rows: list[Usage], total: Usage) -> str:
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([by, *COLUMNS])
    for u in [*rows, total]:
        # a key from outside (a user or container name) never reads as a spreadsheet formula
        key = f"'{u.key}" if u.key[:1] in ("=", "+", "-", "@") else u.key
        w.writerow([key, round(u.gpu_hours_held, 4), round(u.busy_gpu_hours, 4), round(u.memory_gib_hours, 4),
                    round(u.idle_hold_hours, 4), u.peak_gpus])
    return out.getvalue()
