"""``gputui pick``: print the best GPU(s) for a new job, for scripts.

Replaces the shell loop around ``nvidia-smi --query-gpu=index,utilization.gpu``:
it samples every GPU for ``--sample`` seconds (default 1) through the same poller
as the dashboard, then ranks them with :mod:`gputui.core.judges.placement` —
lowest windowed load (utilisation + memory used) first, enough free memory
(the least seen during the sample), GPUs granted to running containers counted as
taken and never printed, lost GPUs never printed.

Output is one line on stdout, best GPU first:

* ``index``  ``3`` or ``3,5``
* ``env``    ``CUDA_VISIBLE_DEVICES=3`` — indices in NVML (PCI bus) order; CUDA
  uses the same order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set, and on
  servers with identical cards in any case
* ``uuid``   ``GPU-…`` (comma-separated), immune to any ordering question
* ``docker`` ``--gpus device=GPU-…``; several as ``--gpus '"device=GPU-a,GPU-b"'``,
  the quoting docker's CSV parser needs, ready for ``eval docker run $(gputui pick
  --format docker) …``

When nothing qualifies it prints one sentence naming the constraint that failed
on stderr and exits 1.

A card in MIG mode (A100/H100/H200 split into MIG devices) is never offered as a
whole GPU. ``--mig`` picks MIG devices instead, by free memory (they report no
utilization): ``index`` prints ``6:0``, ``uuid``/``env``/``docker`` the ``MIG-``
UUID, the only name CUDA accepts for a MIG device.
"""

from __future__ import annotations

from gputui.commands.fleet import add_prometheus_options
from gputui.context import EXIT_NO, EXIT_OK, EXIT_USAGE, UsageError, count_arg, percent_arg, sample_arg, size_arg
from gputui.core.fleet.pick import FORMATS as FLEET_FORMATS
from gputui.core.judges.mig_placement import format_mig_pick, mig_loads, mig_reservations, pick_mig, whole_gpus
from gputui.core.judges.placement import FORMATS, allocations, format_pick, gpu_loads, pick, reservations
from gputui.core.judges.rules import house_holds, invoking_user
from gputui.core.plausible import uuid_problems


def add_parser(sub, common):
    p = sub.add_parser(
        "pick",
        help="print the best GPU(s) for a new job (index, UUID, CUDA_VISIBLE_DEVICES or docker --gpus)",
        description="Sample the GPUs briefly and print the least loaded ones (mean utilization plus memory "
                    "used, over the sample) that meet the constraints, best first. GPUs granted to running "
                    "containers count as taken; lost GPUs are never picked. Indices are NVML's (PCI bus order): "
                    "set CUDA_DEVICE_ORDER=PCI_BUS_ID for CUDA to agree, or use --format uuid. "
                    "Exit 1 with one sentence when nothing qualifies.",
    )
    common(p)
    p.add_argument("--count", type=count_arg, default=1, metavar="N", help="how many GPUs (default 1)")
    p.add_argument("--min-free", type=size_arg, metavar="SIZE",
                   help="free memory each GPU must have throughout the sample, e.g. 20G or 512MiB")
    p.add_argument("--max-util", type=percent_arg, metavar="PCT",
                   help="highest mean utilization allowed over the sample, in percent")
    p.add_argument("--sample", type=sample_arg, default=1.0, metavar="SECONDS",
                   help="how long to watch the GPUs before choosing (default 1; 0 = one reading)")
    p.add_argument("--format", choices=FORMATS + tuple(f for f in FLEET_FORMATS if f not in FORMATS), default=None,
                   help="index (3,5), uuid, env (CUDA_VISIBLE_DEVICES=3,5) or docker (--gpus device=GPU-...); "
                        "with --prometheus: host-index (gpu-node-03 5), docker (DOCKER_HOST=ssh://... docker run "
                        "--gpus device=GPU-...) or ssh (ssh -- gpu-node-03 CUDA_VISIBLE_DEVICES=5)")
    # Across the fleet (gputui.commands.fleet_pick): Prometheus's windowed averages instead of a sample.
    add_prometheus_options(p)
    p.add_argument("--window", dest="prom_window", type=sample_arg, default=None, metavar="SECONDS",
                   help="with --prometheus: average over this many seconds (default 60)")
    p.add_argument("--include-allocated", action="store_true",
                   help="on a Slurm node, also offer GPUs Slurm has allocated to jobs (never offered otherwise, "
                        "even when idle)")
    p.add_argument("--mig", action="store_true",
                   help="pick MIG devices (A100/H100/H200 in MIG mode) by free memory instead of whole GPUs; "
                        "prints GPU:instance or the MIG-... UUID")
    return p


def run(ctx) -> int:
    args = ctx.args
    if getattr(args, "prometheus", None):
        if args.mig:
            raise UsageError("--mig picks MIG devices on this machine; with --prometheus whole GPUs are picked.")
        from gputui.commands.fleet_pick import run as run_fleet

        return run_fleet(ctx)
    fmt = args.format or "index"
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt} names a host: it needs --prometheus URL.")
    if getattr(args, "prom_window", None) is not None:
        raise UsageError("--window averages Prometheus's data: it needs --prometheus URL (locally, use --sample).")
    if args.mig and args.max_util is not None:
        print("gputui: --max-util cannot be used with --mig: MIG devices report no utilization "
              "(they are picked by free memory).", file=ctx.stderr)
        return EXIT_USAGE
    with ctx.polling(watch=args.sample > 0) as polled:
        snap = polled.observe(args.sample, step=max(0.25, min(1.0, args.sample / 4)))
        samples, history, all_gpus = polled.samples, polled.poller.history, polled.all_gpus

    if args.mig:
        suspect = uuid_problems(all_gpus)
        every = mig_loads([*samples, snap])
        named = {u: m for u, m in every.items() if m.gpu not in suspect}
        mig = pick_mig(named, mig_reservations(snap), count=args.count, min_free=args.min_free)
        if not mig.ok:
            left_out = sorted({m.gpu for m in every.values() if m.gpu in suspect})
            why = "".join(f" {suspect[i]}: its MIG devices are never picked." for i in left_out)
            print(f"gputui: {mig.problem}{why}", file=ctx.stderr)
            return EXIT_NO
        print(format_mig_pick(mig.chosen, fmt), file=ctx.stdout)
        return EXIT_OK
    whole, split = whole_gpus(snap.gpus)
    loads = gpu_loads(history, whole, None)
    allocated = None
    if snap.slurm is not None and not args.include_allocated:
        if not snap.slurm.available and not any(g.allocated_to for g in all_gpus) and not snap.slurm.jobs:
            print(f"gputui: Slurm's allocations are unknown ({snap.slurm.error}), so no GPU can be shown to be "
                  "free of jobs; --include-allocated picks anyway.", file=ctx.stderr)
            return EXIT_NO
        allocated = allocations(all_gpus)
    held, mine = house_holds(snap.reservations, invoking_user())
    result = pick(loads, reservations(snap, all_gpus), count=args.count, min_free=args.min_free,
                  max_util=args.max_util, observed=history.span, suspect=uuid_problems(all_gpus),
                  allocated=allocated, held=held, prefer=mine)
    if not result.ok:
        note = ""
        if split:
            which = ", ".join(str(i) for i in split)
            note = (f" {'GPU' if len(split) == 1 else 'GPUs'} {which} {'is' if len(split) == 1 else 'are'} "
                    "split into MIG devices and not offered whole; 'gputui pick --mig' picks MIG devices.")
        print(f"gputui: {result.problem}{note}", file=ctx.stderr)
        return EXIT_NO
    uuids = {g.index: g.uuid for g in snap.gpus}
    print(format_pick(result.chosen, uuids, fmt), file=ctx.stdout)
    return EXIT_OK
