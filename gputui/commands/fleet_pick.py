"""``gputui pick --prometheus URL``: the best GPUs across the fleet (see :mod:`gputui.core.fleet.pick`)."""

from __future__ import annotations

from gputui.commands.fleet import open_reader
from gputui.context import EXIT_NO, EXIT_OK, EXIT_UNAVAILABLE, UsageError
from gputui.core.fleet.pick import FORMATS, format_fleet_pick, pick_fleet
from gputui.core.fleet.prom import PrometheusError


def run(ctx) -> int:
    from gputui.core.judges.rules import invoking_user

    args = ctx.args
    fmt = args.format or "host-index"
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt} prints a local GPU; across the fleet use one of: {', '.join(FORMATS)}.")
    if getattr(args, "gpu", None):
        raise UsageError("--gpu names local GPUs; with --prometheus the whole fleet is considered.")
    reader = open_reader(ctx)
    try:
        _, result = pick_fleet(reader, count=args.count, min_free=args.min_free, max_util=args.max_util,
                               window=args.prom_window if args.prom_window is not None else 60.0,
                               include_allocated=bool(getattr(args, "include_allocated", False)),
                               user=invoking_user())
    except PrometheusError as exc:
        print(f"gputui: {exc}", file=ctx.stderr)
        return EXIT_UNAVAILABLE
    finally:
        reader.close()
    if result.host is None:
        print(f"gputui: {result.problem}", file=ctx.stderr)
        return EXIT_NO
    try:
        line = format_fleet_pick(result.host, result.chosen, fmt)
    except ValueError as exc:  # a GPU UUID no command may carry
        print(f"gputui: {exc}", file=ctx.stderr)
        return EXIT_NO
    for why in result.skipped:  # hosts never offered: their names cannot be put in a command
        print(f"gputui: {why}", file=ctx.stderr)
    print(line, file=ctx.stdout)
    return EXIT_OK
