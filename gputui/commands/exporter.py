"""``gputui exporter``: serve the judged snapshot as Prometheus metrics on ``/metrics``.

It polls once per ``--interval`` through the same ``Poller`` as the dashboard and
serves the newest judged snapshot; a scrape never waits on NVML or Docker. It
listens on ``127.0.0.1:9835`` unless ``--listen`` says otherwise, speaks TLS with
``--certfile``/``--keyfile``, and stops cleanly on SIGTERM or SIGINT. It reads the
machine only: it never kills, migrates or writes anything.

Exit status: 0 after SIGTERM/SIGINT · 2 a port in use, an address that cannot be
bound, an unreadable certificate, bad options · 3 NVML unavailable at start.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from gputui.core.limits import RANGES, flag_type
from gputui.core.metric_names import DCGM_HOST_LABELS

if TYPE_CHECKING:
    from gputui.context import Context

EXIT_OK, EXIT_USAGE = 0, 2
DEFAULT_LISTEN = "127.0.0.1:9835"


#: the one rule for numbers from flags (gputui.core.limits): finite, and as the dashboard's --interval
_interval = flag_type("the value", *RANGES["interval"], unit="seconds")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-processes needs a whole number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("--max-processes cannot be negative")
    return value


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    from gputui.exporter.metrics import DEFAULT_MAX_PROCESSES

    p = sub.add_parser("exporter", help="serve Prometheus metrics on /metrics",
                       description="Serve GPUs, processes, containers, imbalance, stale memory and alerts as "
                                   "Prometheus metrics (see README, 'Many servers').")
    common(p)
    p.add_argument("--listen", metavar="ADDR:PORT", default=DEFAULT_LISTEN,
                   help=f"address to listen on (default {DEFAULT_LISTEN}; use 0.0.0.0:9835 to serve other hosts)")
    p.add_argument("--interval", type=_interval, metavar="SECONDS", default=argparse.SUPPRESS,
                   help="poll period, independent of how often Prometheus scrapes (default 1.0)")
    p.add_argument("--hostname", metavar="NAME", help="hostname label of the series (default: this host's name)")
    p.add_argument("--dcgm-names", action="store_true",
                   help="also export dcgm-exporter's DCGM_FI_DEV_* names so dcgm dashboards work unchanged")
    p.add_argument("--dcgm-hostname-label", choices=DCGM_HOST_LABELS, default="Hostname",
                   help="the host label of the DCGM_* series: Hostname (released dcgm-exporter, the default) "
                        "or hostname (dcgm-exporter's main branch)")
    p.add_argument("--max-processes", type=_positive_int, metavar="N", default=DEFAULT_MAX_PROCESSES,
                   help=f"most process series per scrape, largest GPU memory first (default {DEFAULT_MAX_PROCESSES})")
    p.add_argument("--certfile", metavar="F", help="serve HTTPS with this PEM certificate (needs --keyfile)")
    p.add_argument("--keyfile", metavar="F", help="the certificate's PEM private key")


def _bind(ctx: Context) -> Any:
    from gputui.context import UsageError
    from gputui.exporter.server import ListenError, bind_server, make_registry, parse_listen, tls_context

    args = ctx.args
    if bool(args.certfile) != bool(args.keyfile):
        raise UsageError("--certfile and --keyfile go together: give both to serve HTTPS.")
    try:
        address = parse_listen(args.listen)
        tls = tls_context(args.certfile, args.keyfile) if args.certfile else None
        registry, histogram = make_registry()
        server = bind_server(address, registry, tls)
    except (ValueError, ListenError) as exc:
        raise UsageError(str(exc)) from None
    scheme = "https" if tls else "http"
    return server, registry, histogram, f"{scheme}://{address}/metrics"


def run(ctx: Context) -> int:
    from gputui.exporter.metrics import ExportOptions, PollStatus
    from gputui.exporter.server import PollLoop, SnapshotCollector, serve_in_thread, stop_server, tune_sources

    args = ctx.args
    server, registry, histogram, url = _bind(ctx)  # exit 2 before touching the machine
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    machine = None
    poller = None
    loop = None
    serving = False
    try:
        machine = ctx.open_machine()
        tune_sources(machine, dcgm_names=args.dcgm_names)
        poller, snap, _ = ctx.start_polling(machine)
        docker = machine.containers is not None
        options = ExportOptions(hostname=args.hostname, dcgm_names=args.dcgm_names,
                                dcgm_host_label=args.dcgm_hostname_label,
                                max_processes=args.max_processes, docker=docker)
        import time

        loop = PollLoop(poller, ctx.settings.interval, histogram, PollStatus(snap, True, time.time()))
        # Everything imported and built so far lives as long as the process: keep it out of the
        # collector's full passes, which would otherwise rescan it every few polls.
        gc.collect()
        gc.freeze()
        registry.register(SnapshotCollector(loop.status, options))
        loop.start()
        serve_in_thread(server)
        serving = True
        print(f"gputui exporter: serving {url} (polling every {ctx.settings.interval:g} s)",
              file=ctx.stderr, flush=True)
        stop.wait()
        return EXIT_OK
    finally:
        if serving:
            stop_server(server)  # wakes the accept loop at once
        server.server_close()
        # A poll stuck in the driver would make closing NVML wait too: then leave it to the exit.
        finished = loop.stop() if loop is not None else True
        if finished and poller is not None:
            poller.close()
        if finished and machine is not None:
            machine.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.stderr.flush()
