"""``gputui fleet``: every server's GPUs, owners and containers, read from Prometheus.

``gputui fleet --prometheus URL`` opens the fleet screen; ``--json`` prints one
document (the schema is :meth:`FleetSnapshot.to_json`, documented in the README).
The URL comes from ``--prometheus`` or ``prometheus_url`` in config.toml; ``gputui
--prometheus URL`` with no subcommand means the same as ``gputui fleet``.
Prometheus unreachable, or not Prometheus: one sentence, exit 3.
"""

from __future__ import annotations

import argparse
import gc
import json
import urllib.parse

from gputui.context import EXIT_NO, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, UsageError, interval_arg
from gputui.core.fleet.prom import DEFAULT_TIMEOUT, PromClient, PrometheusError, check_url
from gputui.core.safe_text import clean

__all__ = ["EXIT_NO", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE", "add_parser", "add_prometheus_options", "run"]



def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout needs a number of seconds, not {text!r}") from None
    if not 0.1 <= value <= 300:
        raise argparse.ArgumentTypeError("--timeout must be between 0.1 and 300 seconds")
    return value


def add_prometheus_options(p: argparse.ArgumentParser) -> None:
    """--prometheus, --prometheus-user, --prometheus-password-file and --timeout, shared with ``gputui pick``."""
    p.add_argument("--prometheus", metavar="URL", default=argparse.SUPPRESS,
                   help="the Prometheus server that scrapes the hosts' exporters, e.g. http://prometheus:9090 "
                        "(default: prometheus_url in config.toml)")
    p.add_argument("--prometheus-user", metavar="NAME", default=None,
                   help="user for HTTP basic auth to Prometheus (a user:password@ in the URL works too)")
    p.add_argument("--prometheus-password-file", metavar="FILE", default=None,
                   help="file holding the basic-auth password (its first line), so it is not on the command line")
    p.add_argument("--timeout", type=_timeout, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"seconds each Prometheus request may take, answer included (default {DEFAULT_TIMEOUT:g})")


def add_parser(sub, common):
    p = sub.add_parser(
        "fleet",
        help="every server's GPUs, owners and containers, from Prometheus",
        description="Show every host that Prometheus scrapes a gputui exporter (or dcgm-exporter) on: GPUs busy "
                    "and idle, memory, temperature, imbalance, stale memory, alerts and containers with findings. "
                    "Enter opens a host's GPUs and processes. With --json, print one document and exit. "
                    "Exit 3 when Prometheus cannot be read.",
    )
    common(p, machine=False)  # --demo, --gpu, --read-only, --no-docker are about this machine: not offered
    add_prometheus_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON document and exit")
    p.add_argument("--interval", type=interval_arg, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="refresh period of the fleet screen (default: interval in config.toml)")
    return p


def prometheus_url(ctx) -> str:
    """The URL from --prometheus or the config file; UsageError when there is none or it is malformed."""
    url = getattr(ctx.args, "prometheus", None) or getattr(ctx.settings, "prometheus_url", None)
    if not url:
        raise UsageError("Which Prometheus? Give --prometheus URL (e.g. http://prometheus:9090) or set "
                         "prometheus_url in config.toml.")
    try:
        return check_url(url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


#: The largest password file read.
PASSWORD_FILE_LIMIT = 4096


def _password(path: str) -> str:
    """The first line of ``path``: a regular file (a FIFO or device would block or never end), small."""
    from gputui.core.statefile import read_regular

    try:
        raw = read_regular(path, limit=PASSWORD_FILE_LIMIT, follow=True)  # secrets are often symlinks
    except OSError as exc:
        reason = (exc.strerror or str(exc)).rstrip(".")
        raise UsageError(f"Cannot read the Prometheus password file {clean(path)}: {clean(reason)}.") from None
    lines = raw.decode("utf-8", "replace").splitlines()
    return lines[0] if lines else ""


def open_reader(ctx):
    from gputui.core.fleet.queries import FleetReader

    args = ctx.args
    user = getattr(args, "prometheus_user", None)
    password_file = getattr(args, "prometheus_password_file", None)
    password = _password(password_file) if password_file else None
    url = prometheus_url(ctx)
    if password is not None and user is None:
        user = urllib.parse.unquote(urllib.parse.urlsplit(url).username or "") or None  # http://user@host
        if user is None:
            raise UsageError("--prometheus-password-file needs --prometheus-user NAME (or http://NAME@host/).")
    return FleetReader(PromClient(url, timeout=getattr(args, "timeout", DEFAULT_TIMEOUT), user=user,
                                  password=password))


def run(ctx) -> int:
    # On a terminal without --json, cli.py opens the fleet screen (gputui.ui.fleet_app). Like the local
    # dashboard, a pipe or a file gets the one-shot output: here, the JSON document.
    reader = open_reader(ctx)
    # ~110,000 series over 2,000 hosts become dicts and tuples, none of them in a cycle, and the process
    # exits after printing: the cyclic collector, run every 700 new containers, was a third of its CPU
    gc.disable()
    try:
        snap = reader.read()
    except PrometheusError as exc:
        print(f"gputui: {exc}", file=ctx.stderr)
        return EXIT_UNAVAILABLE
    finally:
        reader.close()
    ctx.stdout.write(document(snap.to_json()))
    return EXIT_OK


#: json.dumps's encoder without its cycle check (a dict of every container it enters): the document
#: is built from records, never cyclic.
_encode = json.JSONEncoder(check_circular=False).encode


def document(doc: dict) -> str:
    """The fleet document as text: one host a line (json's C encoder runs only without ``indent``:
    indented, 2,000 hosts took half a second to write), still one JSON document."""
    head = {k: v for k, v in doc.items() if k != "hosts"}
    hosts = ",\n".join(_encode(h) for h in doc["hosts"])
    parts = [f"{_encode(k)}: {_encode(v)}" for k, v in head.items()]
    at = list(doc).index("hosts")
    parts.insert(at, '"hosts": [' + (f"\n{hosts}\n" if hosts else "") + "]")
    return "{" + ",\n".join(parts) + "}\n"
