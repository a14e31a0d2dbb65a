"""The command line: ``gputui`` and its subcommands.

One function per subcommand; the dashboard is imported (with textual) only when
it is started. Every error reaches the user as one sentence on stderr and a
non-zero exit: 1 for "it ran and the answer is no", 2 for bad usage, 3 for
"gputui could not read the machine".
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, cast

from gputui import __version__
from gputui.context import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Context,
    UsageError,
    celsius_arg,
    interval_arg,
    seconds_arg,
    socket_arg,
    window_arg,
)
from gputui.core.config import DRIVERS, MIN_INTERVAL, ConfigError, config_path, load_settings
from gputui.core.safe_text import clean
from gputui.core.sources import SourceUnavailable

if TYPE_CHECKING:
    import argparse

    from gputui.core.model import Snapshot

#: The exit statuses of every gputui command, as ``gputui --help`` lists them.
EXIT_CODES_HELP = """exit status (every command):
  0  done
  1  ran, and the answer is "no": nothing fits, a check failed, an action was refused, declined or failed
  2  bad usage or config, including an argument that names nothing here (no such PID, container or GPU)
  3  the machine could not be read (no NVIDIA driver, Docker unreachable for migrate)"""

__all__ = ["build_parser", "load_context", "main"]

# -- parsing ----------------------------------------------------------------------


def _parser_class() -> type[argparse.ArgumentParser]:
    """gputui's ArgumentParser; argparse is imported here, not at module load, so that the
    one-shot commands recognised by :func:`_fast_args` never pay for it."""
    import argparse

    class _Formatter(argparse.HelpFormatter):
        """Wraps descriptions as usual but keeps the exit-status table as written."""

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            if text.startswith("exit status"):
                return "".join(indent + line for line in text.splitlines(keepends=True))
            return super()._fill_text(text, width, indent)

    class _Parser(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("formatter_class", _Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message: str) -> NoReturn:  # one sentence, exit 2, no usage dump
            raise UsageError(f"{message[0].upper()}{message[1:]} (see 'gputui --help').")

    return _Parser


def _common(p: argparse.ArgumentParser, top: bool, machine: bool = True) -> None:
    """Options every subcommand accepts too. Sub-parsers use SUPPRESS so a value given
    before the subcommand is not overwritten by the subcommand's default. ``machine=False``: a
    subcommand that never reads this machine (the fleet) takes only --config and --debug."""
    import argparse

    d = None if top else argparse.SUPPRESS
    if machine:
        _machine_options(p, top, d)
    p.add_argument("--config", metavar="PATH", default=d, help=f"config file (default {config_path()})")
    p.add_argument("--debug", action="store_true", default=d if not top else False,
                   help="also write the traceback of a bug in gputui to stderr (as GPUTUI_DEBUG=1 does)")


def _machine_options(p: argparse.ArgumentParser, top: bool, d: object) -> None:
    p.add_argument("--demo", action="store_true", default=d if not top else False,
                   help="run on the built-in simulated 8-GPU server (no GPU needed)")
    p.add_argument("--gpu", action="append", metavar="N", default=d,
                   help="only these GPUs: index or UUID, repeatable or comma-separated")
    p.add_argument("--read-only", action="store_true", default=d if not top else False,
                   help="disable every action that changes the machine (migrate, kill)")
    p.add_argument("--no-docker", action="store_true", default=d if not top else False,
                   help="do not ask the container runtimes (Docker, podman, containerd) about containers")
    p.add_argument("--rules", metavar="PATH", default=d,
                   help="house rules file (default $GPUTUI_RULES, else /etc/gputui/rules.toml)")
    p.add_argument("--containerd", metavar="ADDR", type=socket_arg, default=d,
                   help="containerd's socket (default /run/containerd/containerd.sock where it exists)")
    p.add_argument("--kubelet-socket", metavar="PATH", type=socket_arg, default=d,
                   help="the kubelet's pod-resources socket (default "
                        "/var/lib/kubelet/pod-resources/kubelet.sock where it exists)")


#: Subcommands implemented in gputui.commands, with their one-line help. Their modules
#: are imported only when chosen (or for --help): a one-shot command pays for nothing else.
SUBCOMMANDS = {
    "pick": "print the best GPUs for a new job",
    "migrate": "recreate a container on another GPU, with rollback",
    "kill": "stop GPU processes safely",
    "doctor": "walk the troubleshooting checklist",
    "exporter": "serve Prometheus metrics on /metrics",
    "fleet": "every server's GPUs, owners and containers, from Prometheus",
    "reserve": "reserve GPUs for a user or group until a time",
    "guard": "enforce the house rules where containers start (Docker authorization plugin)",
    "record": "record who held which GPU, for 'gputui who' and 'gputui usage'",
    "who": "who held which GPU at a time or over a period (from the history)",
    "usage": "GPU-hours per user, container, image, compose project, job, GPU or host",
}


def _chosen_command(argv: list[str]) -> str | None:
    for token in argv:
        if token in SUBCOMMANDS or token == "snapshot":
            return token
    if any(t == "--prometheus" or t.startswith("--prometheus=") for t in argv):
        return "fleet"  # `gputui --prometheus URL` is the fleet screen
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given the command line about to be parsed, only the chosen
    subcommand's module is imported."""
    import argparse

    _Parser = _parser_class()
    parser = _Parser(
        prog="gputui",
        description="Who is on which GPU, in which container, what is imbalanced, and what to do about it.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"gputui {__version__}")
    _common(parser, top=True)
    parser.add_argument("--once", action="store_true", help="print one table and exit (the default when not a tty)")
    parser.add_argument("--interval", type=interval_arg, metavar="SECONDS",
                        help=f"refresh period of the dashboard (default 1.0, minimum {MIN_INTERVAL})")
    parser.add_argument("--theme", metavar="NAME", help="Textual theme of the dashboard")
    parser.add_argument("--slow-link", action="store_true", default=None,
                        help="for the slowest ssh links: graphs in one colour, redrawn every few seconds")
    parser.add_argument("--bell", action="store_true", default=None, help="ring the terminal bell on new alerts")
    parser.add_argument("--imbalance-window", dest="window", type=window_arg, metavar="SECONDS",
                        help="the window the imbalance judge averages over, in seconds (default 60)")
    # The older name, kept for scripts; hidden because under 'snapshot' --window meant something else.
    parser.add_argument("--window", dest="window", type=window_arg, help=argparse.SUPPRESS)
    parser.add_argument("--temp-warning", type=celsius_arg, metavar="C",
                        help="temperature warning threshold (default 83)")
    parser.add_argument("--temp-critical", type=celsius_arg, metavar="C",
                        help="temperature critical threshold (default 90)")
    parser.add_argument("--prometheus", metavar="URL", default=None,
                        help="show the fleet Prometheus scrapes instead of this machine (same as 'gputui fleet')")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    snap = sub.add_parser(
        "snapshot", help="print one snapshot of the machine (JSON with --json)",
        description="Read every GPU, its processes and their containers once (or for --observe seconds), judge "
                    "them (imbalance, alerts, stale processes, container grants) and print the result: the "
                    "table of 'gputui --once', or with --json one JSON document (the schema is in the README). "
                    "Verdicts judged on less observation than their documented window are marked provisional.",
        epilog=EXIT_CODES_HELP)
    _common(snap, top=False)
    snap.add_argument("--json", action="store_true", help="print one JSON document")
    snap.add_argument("--window", dest="observe", type=seconds_arg, help=argparse.SUPPRESS)  # the older name
    snap.add_argument("--observe", dest="observe", type=seconds_arg, metavar="SECONDS", default=0.0,
                      help="keep polling for this long before judging, so windowed verdicts (imbalance, idle "
                           "holders, idle grants) rest on more than one sample (default 0: one poll)")

    import importlib

    chosen = _chosen_command(argv) if argv is not None else None
    load_all = argv is None or any(t in ("-h", "--help") for t in argv)
    for name, summary in SUBCOMMANDS.items():
        if name == chosen or load_all:
            module = importlib.import_module(f"gputui.commands.{name}")
            module.add_parser(sub, lambda p, machine=True: _common(p, top=False, machine=machine))
        else:
            sub.add_parser(name, help=summary)
    return parser


#: The one-shot command lines that :func:`_fast_args` reads without argparse: option -> (dest, how its
#: value is read: None for a flag, "append" for --gpu, else the same converter argparse is given).
_FAST_COMMON: dict[str, tuple[str, Any]] = {
    "--demo": ("demo", None), "--read-only": ("read_only", None), "--no-docker": ("no_docker", None),
    "--gpu": ("gpu", "append"), "--config": ("config", str), "--rules": ("rules", str), "--debug": ("debug", None),
    "--containerd": ("containerd", socket_arg), "--kubelet-socket": ("kubelet_socket", socket_arg),
}
_FAST_TOP: dict[str, tuple[str, Any]] = {
    **_FAST_COMMON, "--once": ("once", None), "--slow-link": ("slow_link", None), "--bell": ("bell", None),
    "--interval": ("interval", interval_arg), "--theme": ("theme", str),
    "--imbalance-window": ("window", window_arg), "--window": ("window", window_arg),
    "--temp-warning": ("temp_warning", celsius_arg), "--temp-critical": ("temp_critical", celsius_arg),
}
_FAST_SNAPSHOT: dict[str, tuple[str, Any]] = {
    **_FAST_COMMON, "--json": ("json", None), "--window": ("observe", seconds_arg),
    "--observe": ("observe", seconds_arg),
}
#: What argparse leaves in the namespace when an option is not given (top level, then snapshot's).
_TOP_DEFAULTS: dict[str, Any] = {
    "demo": False, "gpu": None, "read_only": False, "no_docker": False, "config": None, "rules": None,
    "debug": False, "once": False,
    "interval": None, "theme": None, "slow_link": None, "bell": None, "window": None, "temp_warning": None,
    "temp_critical": None, "prometheus": None, "command": None, "containerd": None, "kubelet_socket": None,
}
_SNAPSHOT_DEFAULTS: dict[str, Any] = {"json": False, "observe": None}


def _fast_args(argv: list[str]) -> argparse.Namespace | None:
    """The namespace ``build_parser(argv).parse_args(argv)`` returns, for the plain one-shot command
    lines (``snapshot [--json] ...``, ``--once ...``, full option names, each value its own word), read
    without importing argparse or building the parser: that is a quarter of a one-shot's start-up.
    None for anything else — help, --version, abbreviations, ``--opt=value``, a value that looks like
    an option or that its converter refuses, any other subcommand — which argparse then reads, so
    every message and exit status stays argparse's own."""
    top: dict[str, Any] = {}
    sub: dict[str, Any] | None = None
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if sub is None and token == "snapshot":
            sub = {}
            continue
        spec = (_FAST_TOP if sub is None else _FAST_SNAPSHOT).get(token)
        if spec is None:
            return None
        values = top if sub is None else sub
        dest, convert = spec
        if convert is None:
            values[dest] = True
            continue
        if i >= len(argv) or argv[i].startswith("-"):
            return None
        raw = argv[i]
        i += 1
        if convert == "append":
            values[dest] = [*values.get(dest, []), raw]
            continue
        try:
            values[dest] = convert(raw)
        except Exception:  # argparse says what is wrong, in its words
            return None
    from types import SimpleNamespace

    merged = {**_TOP_DEFAULTS, **top}
    if sub is not None:
        # as argparse does: what the subcommand was given replaces the top level's value
        merged.update(_SNAPSHOT_DEFAULTS, command="snapshot")
        merged.update(sub)
    # SimpleNamespace reads like argparse.Namespace (attributes, vars()) without importing argparse
    return cast("argparse.Namespace", SimpleNamespace(**merged))


# -- commands ---------------------------------------------------------------------


def _poll_once(ctx: Context, observe: float = 0.0) -> Snapshot:
    """Poll the machine once (or for `observe` seconds), --gpu applied; the last snapshot."""
    with ctx.polling(watch=observe > 0) as polled:
        if observe > 0:
            polled.observe(observe, step=min(1.0, max(0.25, observe / 10)))
        return polled.snapshot


def cmd_snapshot(ctx: Context) -> int:
    snap = _poll_once(ctx, observe=getattr(ctx.args, "observe", 0.0) or 0.0)
    if getattr(ctx.args, "json", False):
        # one write: json.dump would issue thousands of small ones
        ctx.stdout.write(json.dumps(snap.to_json(), indent=2) + "\n")
    else:
        from gputui.core.render import render_text

        ctx.stdout.write(render_text(snap))
    return EXIT_OK


def cmd_once(ctx: Context) -> int:
    from gputui.core.render import render_text

    ctx.stdout.write(render_text(_poll_once(ctx)))
    return EXIT_OK


def cmd_dashboard(ctx: Context) -> int:
    from gputui.ui.app import run_app

    return run_app(ctx)


def cmd_fleet_screen(ctx: Context) -> int:
    """`gputui fleet` on a terminal: the fleet screen (commands/ never import the UI)."""
    from gputui.commands.fleet import open_reader
    from gputui.ui.fleet_app import run_fleet_app

    return run_fleet_app(ctx, open_reader(ctx))


def report_pending_journals(ctx: Context) -> None:
    """Say once, at start, that an interrupted migration needs ``--recover``
    (the dashboard shows it in its status line; ``gputui migrate`` handles it itself): a few lines at most,
    however many journals there are."""
    if not _journal_files_exist():
        return  # the usual case: no journal module (and its imports) for a one-shot
    from gputui.actions.journal import scan_journals

    scan = scan_journals()
    for journal in scan.pending[:JOURNAL_LINES]:
        print(clean(f"gputui: {journal.describe()}"), file=ctx.stderr)
    more = len(scan.pending) - JOURNAL_LINES + scan.unread
    if more > 0:
        print(f"gputui: {more} more interrupted or untrusted journals; run 'gputui migrate --recover' to see them.",
              file=ctx.stderr)


#: Journal lines a command prints at start before "N more".
JOURNAL_LINES = 3


def _journal_files_exist() -> bool:
    """Whether any folder :func:`gputui.actions.journal.journal_dirs` searches holds a ``*.json``
    file, with a few directory listings (tests/test_cli_fast.py keeps the two lists the same): the
    system-wide folder, and a non-root user's own (root never reads home folders)."""
    from gputui.core.config import state_home

    dirs = [os.environ.get("GPUTUI_JOURNAL_DIR") or "/var/lib/gputui/journal"]
    if os.geteuid() != 0:
        dirs.append(os.path.join(state_home(), "journal"))
    for directory in dirs:
        try:
            with os.scandir(directory) as entries:
                if any(e.name.endswith(".json") for e in entries):
                    return True
        except OSError:
            continue
    return False


def load_context(args: argparse.Namespace) -> Context:
    path: str | None = getattr(args, "config", None) or None
    if path is not None and not os.path.exists(path):
        raise UsageError(f"Config file {path} does not exist.")
    settings = load_settings(path)
    settings = settings.with_overrides(
        interval=getattr(args, "interval", None),
        theme=getattr(args, "theme", None),
        bell=getattr(args, "bell", None),
        imbalance_window=getattr(args, "window", None),
        temp_warning=getattr(args, "temp_warning", None),
        temp_critical=getattr(args, "temp_critical", None),
        read_only=True if getattr(args, "read_only", False) else None,
        driver=_driver_from_env(),
        slow_link=getattr(args, "slow_link", None),
        rules_path=getattr(args, "rules", None),
        containerd_address=getattr(args, "containerd", None),
        kubelet_socket=getattr(args, "kubelet_socket", None),
    )
    problem = settings.order_problem()
    if problem is not None:  # the flags against each other or against the config file
        raise UsageError(f"Thresholds out of order: {problem[1]} (check --temp-warning, --temp-critical "
                         "and the config file).")
    return Context(args=args, settings=settings)


def _driver_from_env() -> str | None:
    """``GPUTUI_DRIVER`` (overrides the config file's ``driver``); None when unset."""
    value = os.environ.get("GPUTUI_DRIVER", "").strip().lower()
    if not value:
        return None
    if value not in DRIVERS:
        from gputui.core.safe_text import clean

        value = clean(value)
        raise UsageError(f"GPUTUI_DRIVER must be one of {', '.join(DRIVERS)}, not {value!r}.")
    return value


#: A bug in gputui (its traceback in the state folder's gputui.log): the status an uncaught exception had.
EXIT_BUG = 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _fast_args(argv)
        if args is None:
            args = build_parser(argv).parse_args(argv)
        if getattr(args, "debug", False):
            os.environ["GPUTUI_DEBUG"] = "1"  # read where a bug is reported (gputui.core.bugs)
        ctx = load_context(args)
        command = args.command
        if command is None and getattr(args, "prometheus", None):
            command = "fleet"  # --prometheus implies fleet mode
            for name, value in (("json", False), ("timeout", 5.0)):
                if not hasattr(args, name):
                    setattr(args, name, value)
        # migrate reports journals itself; the dashboard shows them in its status line.
        if command != "migrate" and (command is not None or getattr(args, "once", False)
                                     or not sys.stdout.isatty()):
            report_pending_journals(ctx)
        if command is None:
            if args.once or not sys.stdout.isatty():
                return cmd_once(ctx)
            return cmd_dashboard(ctx)
        if command == "snapshot":
            return cmd_snapshot(ctx)
        if command == "fleet" and not args.json and sys.stdout.isatty():
            return cmd_fleet_screen(ctx)
        import importlib

        return importlib.import_module(f"gputui.commands.{command}").run(ctx)
    except UsageError as exc:
        print(f"gputui: {clean(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"gputui: {clean(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except SourceUnavailable as exc:
        hint = "" if "--demo" in str(exc) else " Try 'gputui --demo' to see gputui on a simulated server."
        print(f"gputui: {clean(exc)}{hint}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        print("gputui: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:
        from gputui.core import bugs  # loaded only now: a run without a failure never imports logging

        if bugs.expected(exc):
            raise  # the outside world failing where no command says it in its words yet
        doing = f"running gputui {_chosen_command(argv) or ''}".rstrip()  # no arguments: they may hold secrets
        print(f"gputui: {bugs.report(exc, doing)}", file=sys.stderr)
        return EXIT_BUG
