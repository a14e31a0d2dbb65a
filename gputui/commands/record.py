"""``gputui record``: poll the machine every ``--interval`` seconds through the same ``Poller``
as the dashboard and write the history database that ``gputui who``/``usage`` read.

It runs until SIGTERM or SIGINT. When the database cannot be written (another recorder holds
it, it is not SQLite, it comes from a newer gputui, the disk is full) it says so in one log
line on stderr and in ``gputui doctor``, keeps polling, and writes again once it can; it never
truncates or overwrites a file it did not create.

Exit status: 0 after SIGTERM/SIGINT · 2 bad options · 3 NVML unavailable at start.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from gputui.core.limits import flag_type

if TYPE_CHECKING:
    from gputui.context import Context

EXIT_OK = 0
DEFAULT_INTERVAL = 10.0
DEFAULT_RETENTION = 90.0

_interval = flag_type("the value", 0.25, 3600.0, unit="seconds")
_retention = flag_type("the value", 0.01, 36500.0, unit="days")


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    from gputui.core.sources.history_store import default_db_path

    p = sub.add_parser("record", help="record who held which GPU, for 'gputui who' and 'gputui usage'",
                       description="Poll every --interval seconds and keep the history in an SQLite database: one "
                                   "row per process per GPU while it lives (user, container, job, executable, "
                                   "memory, SM %) and per GPU one row a minute (utilization, memory, temperature, "
                                   "power). Command lines and environments are never stored.")
    common(p)
    p.add_argument("--db", metavar="PATH", default=None, help=f"the database (default {default_db_path()})")
    p.add_argument("--interval", type=_interval, metavar="SECONDS", default=argparse.SUPPRESS,
                   help=f"poll period (default {DEFAULT_INTERVAL:g})")
    p.add_argument("--retention", type=_retention, metavar="DAYS", default=DEFAULT_RETENTION,
                   help=f"forget what ended longer ago than this (default {DEFAULT_RETENTION:g} days)")


def run(ctx: Context) -> int:
    from gputui.core.record import replace
    from gputui.core.recorder import Recorder
    from gputui.core.sources.history_store import default_db_path
    from gputui.core.status_file import write_recorder_status

    args = ctx.args
    interval = getattr(args, "interval", None) or DEFAULT_INTERVAL
    ctx.settings = replace(ctx.settings, interval=interval)
    path = args.db or default_db_path()
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def log(line: str) -> None:
        print(f"gputui record: {line}", file=ctx.stderr, flush=True)

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    recorder = Recorder(path, interval, args.retention, log=log)
    machine = poller = None
    try:
        machine = ctx.open_machine()
        poller, snap, _ = ctx.start_polling(machine)
        if recorder.open():
            log(f"writing {path} every {interval:g} s (retention {args.retention:g} days)")
        said: tuple[str | None] | None = None
        while True:
            recorder.record(snap)
            if said != (recorder.problem,):  # doctor reads it; rewritten only when it changes
                write_recorder_status(path, recorder.problem, interval)
                said = (recorder.problem,)
            deadline = time.monotonic() + interval
            if stop.wait(max(0.0, deadline - time.monotonic())):
                break
            snap = poller.poll()
        return EXIT_OK
    finally:
        recorder.close()
        if poller is not None:
            poller.close()
        if machine is not None:
            machine.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.stderr.flush()
