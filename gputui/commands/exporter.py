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
_max_connections = flag_type("--max-connections", 1, 4096, integer=True)
_header_timeout = flag_type("--header-timeout", 0.5, 300.0, unit="seconds")
#: descriptors the exporter needs beside its connections (NVML, /proc, Docker, its own files)
FD_RESERVE = 128


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
    p.add_argument("--max-connections", type=_max_connections, metavar="N", default=None,
                   help="most connections held at once (default 64); beyond it the client idle longest is dropped")
    p.add_argument("--header-timeout", type=_header_timeout, metavar="SECONDS", default=None,
                   help="seconds a client has to send its request header before it is dropped (default 10)")
    p.add_argument("--certfile", metavar="F", help="serve HTTPS with this PEM certificate (needs --keyfile)")
    p.add_argument("--keyfile", metavar="F", help="the certificate's PEM private key")
    p.add_argument("--print-systemd-unit", action="store_true",
                   help="print a systemd unit that runs this gputui with these options, and exit "
                        "(gputui exporter --print-systemd-unit > /etc/systemd/system/gputui-exporter.service)")


def _print_unit(ctx: Context) -> int:
    """``--print-systemd-unit``: the unit for this gputui and the options given (nothing is bound or read)."""
    import os

    from gputui.context import UsageError
    from gputui.exporter.metrics import DEFAULT_MAX_PROCESSES
    from gputui.exporter.systemd import UnitError, gputui_command, unit

    args = ctx.args
    options = ["--listen", args.listen, "--interval", f"{ctx.settings.interval:g}"]
    if args.hostname:
        options += ["--hostname", args.hostname]
    if args.dcgm_names:
        options.append("--dcgm-names")
    if args.max_processes != DEFAULT_MAX_PROCESSES:
        options += ["--max-processes", str(args.max_processes)]
    for flag, path in (("--certfile", args.certfile), ("--keyfile", args.keyfile),
                       ("--config", getattr(args, "config", None))):
        if path:
            options += [flag, os.path.abspath(path)]  # the service starts in /
    if getattr(args, "no_docker", False):
        options.append("--no-docker")
    try:
        ctx.stdout.write(unit(gputui_command(), options))
    except UnitError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def _bind(ctx: Context) -> Any:
    from gputui.context import UsageError
    from gputui.exporter.server import (
        HEADER_TIMEOUT,
        MAX_CONNECTIONS,
        ListenError,
        bind_server,
        make_registry,
        parse_listen,
        tls_context,
    )

    args = ctx.args
    if bool(args.certfile) != bool(args.keyfile):
        raise UsageError("--certfile and --keyfile go together: give both to serve HTTPS.")
    max_connections = int(args.max_connections or MAX_CONNECTIONS)
    _ensure_descriptors(max_connections)
    try:
        address = parse_listen(args.listen)
        tls = tls_context(args.certfile, args.keyfile, warn=lambda line: print(
            f"gputui exporter: warning: {line}", file=ctx.stderr, flush=True)) if args.certfile else None
        registry, histogram = make_registry()
        server = bind_server(address, registry, tls, max_connections=max_connections,
                             header_timeout=args.header_timeout or HEADER_TIMEOUT)
    except (ValueError, ListenError) as exc:
        raise UsageError(str(exc)) from None
    scheme = "https" if tls else "http"
    return server, registry, histogram, f"{scheme}://{address}/metrics"


def _ensure_descriptors(max_connections: int) -> None:
    """Raise the soft descriptor limit toward the hard one when the connection cap needs it;
    UsageError when even the hard limit is too low."""
    import resource

    from gputui.context import UsageError

    need = max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise UsageError(f"--max-connections {max_connections} needs {need} open files but this process may open "
                         f"only {hard}: lower --max-connections or raise the limit (LimitNOFILE= in the unit).")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def run(ctx: Context) -> int:
    from gputui.exporter.metrics import ExportOptions, PollStatus
    from gputui.exporter.server import PollLoop, SnapshotCollector, serve_in_thread, stop_server, tune_sources

    args = ctx.args
    if args.print_systemd_unit:
        return _print_unit(ctx)
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

        _log_to(ctx.stderr)
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


def _log_to(stream) -> None:
    """The exporter's log lines (:data:`gputui.exporter.server.LOG`) as plain lines on ``stream``."""
    import logging

    from gputui.exporter.server import LOG

    for old in list(LOG.handlers):
        LOG.removeHandler(old)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOG.addHandler(handler)
    LOG.propagate = False
