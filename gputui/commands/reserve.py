"""``gputui reserve``: say "GPU 3 is alice's until Friday", list and release such reservations.

    gputui reserve 3 --for alice --until 2026-12-04T18:00 [--note "paper deadline"]
    gputui reserve 2,5 --for @vision --hours 8
    gputui reserve --list [--json]
    gputui reserve --release ID

A reservation is stored in ``reservations.json`` beside the rules file (root only; see
:mod:`gputui.actions.reservations`). It prints the reservation's id and a token: ``gputui guard`` lets a
container start on a reserved GPU only with ``--label gputui.reservation=TOKEN``; ``pick`` never offers a
GPU reserved for someone else and offers the holder's own first; the dashboard, ``--once``, JSON and the
exporter flag anyone else holding memory there.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

from gputui.context import EXIT_NO, EXIT_OK, UsageError, parse_gpu_list


def add_parser(sub, common):
    p = sub.add_parser("reserve", help="reserve GPUs for a user or group until a time",
                       description="Reserve GPUs for a user or @group until a time; list or release reservations.")
    common(p)
    p.add_argument("gpus", nargs="*", metavar="GPU", help="GPU indices or UUIDs (comma-separated or repeated)")
    p.add_argument("--for", dest="holder", metavar="USER|@GROUP", help="who the GPUs are for")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--until", metavar="TIME",
                      help="end: ISO 8601 (local time unless an offset is given), epoch seconds, or 8h/2d from now")
    when.add_argument("--hours", type=float, metavar="H", help="end: this many hours from now")
    p.add_argument("--note", default="", metavar="TEXT", help="why (shown with the reservation)")
    p.add_argument("--list", action="store_true", help="list the live reservations")
    p.add_argument("--json", action="store_true", help="with --list: one JSON document")
    p.add_argument("--release", metavar="ID", help="release a reservation")
    p.add_argument("--guard", default=None, metavar="unix:///PATH",
                   help="the guard's self-service socket, for users reserving for themselves "
                        "(default unix:///run/gputui/reserve.sock)")


def parse_until(text: str, now: float) -> float:
    """An end time: ISO 8601 (local unless it has an offset), epoch seconds, or ``8h``/``2d`` from now."""
    from gputui.core.rules import parse_duration

    t = text.strip()[:64]
    if t.isdigit() and len(t) >= 9:
        return float(t)
    if t and t[-1] in "smhdw" and t[:-1].replace(".", "", 1).isdigit():
        return now + parse_duration(t.lstrip("+"), "--until")
    try:
        when = datetime.fromisoformat(t)
    except ValueError:
        raise UsageError(f"--until {t!r} is not a time: give ISO 8601 (2026-12-04T18:00), epoch seconds, "
                         "or a span from now like 8h or 2d.") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return when.timestamp()


def run(ctx) -> int:
    from gputui.core.rules import RulesError, load_house_rules

    args = ctx.args
    rules_path = ctx.settings.rules_path
    try:
        if args.list:
            return _list(ctx, load_house_rules(rules_path))
        if args.release:
            return _release(ctx, rules_path, args.release)
        return _reserve(ctx, rules_path)
    except RulesError as exc:
        print(f"gputui: {exc}", file=ctx.stderr)
        return EXIT_NO


def _list(ctx, rules) -> int:
    from gputui.core.rules import describe_until

    if rules.error:
        print(f"gputui: {rules.error}", file=ctx.stderr)
    now = time.time()
    live = rules.active(now)
    if ctx.args.json:
        ctx.stdout.write(json.dumps({"reservations": [r.to_json() for r in live], "error": rules.error},
                                    indent=2) + "\n")
        return EXIT_OK
    if not live:
        print("No GPU is reserved.", file=ctx.stdout)
        return EXIT_OK
    print(f"{'ID':<9} {'GPUS':<8} {'FOR':<16} {'UNTIL':<26} NOTE", file=ctx.stdout)
    for r in sorted(live, key=lambda r: (r.indices, r.until)):
        gpus = ",".join(str(i) for i in r.indices)
        print(f"{r.id:<9} {gpus:<8} {r.holder:<16} {describe_until(r.until, now):<26} {r.note}", file=ctx.stdout)
    return EXIT_OK


def _release(ctx, rules_path: str | None, rid: str) -> int:
    from gputui.actions.reservations import release_reservation
    from gputui.core.judges.rules import invoking_user

    if os.geteuid() != 0:
        raise UsageError("Only root may release reservations (they live in a root-owned file); run it with sudo.")
    hit = release_reservation(rules_path, rid.strip(), invoking_user(), root=True)
    print(f"Released reservation {hit.id} (GPU {','.join(str(i) for i in hit.indices)} for {hit.holder}).",
          file=ctx.stdout)
    return EXIT_OK


def _reserve(ctx, rules_path: str | None) -> int:
    from gputui.actions.reservations import add_reservation
    from gputui.core.judges.placement import format_pick
    from gputui.core.judges.rules import invoking_user
    from gputui.core.model import resolve_gpu
    from gputui.core.rules import check_name, describe_until

    args = ctx.args
    wanted = parse_gpu_list(args.gpus)
    if not wanted:
        raise UsageError("Name the GPUs to reserve, e.g. gputui reserve 3 --for alice --hours 8.")
    if not args.holder:
        raise UsageError("Say who the GPUs are for: --for USER or --for @GROUP.")
    try:
        holder = check_name(args.holder.strip())
    except ValueError as exc:
        raise UsageError(f"--for {exc}.") from None
    now = time.time()
    if args.hours is not None:
        if not 0 < args.hours <= 366 * 24:
            raise UsageError("--hours must be more than 0 and at most a year.")
        until = now + args.hours * 3600
    elif args.until:
        until = parse_until(args.until, now)
    else:
        raise UsageError("Say until when: --until TIME or --hours H.")
    me = invoking_user()
    if os.geteuid() != 0:  # the root-run guard decides, from the rules it reads and who the kernel says asks
        if holder != me:
            raise UsageError(f"You may reserve GPUs only for yourself ({me}), not for {holder}.")
        return _self_service(ctx, wanted, until, args.note or "", now)
    with ctx.polling(docker=False, apply_gpu=False) as polled:
        gpus = polled.all_gpus
    chosen = []
    for item in wanted:
        g = resolve_gpu(item, gpus)
        if g is None:
            present = ", ".join(str(x.index) for x in gpus) or "none"
            raise UsageError(f"There is no GPU {item!r} on this machine (GPUs present: {present}).")
        if g not in chosen:
            chosen.append(g)
    res, token = add_reservation(rules_path, tuple(g.uuid for g in chosen), tuple(g.index for g in chosen), holder,
                                 until, args.note or "", created_by=me or str(os.geteuid()), now=now)
    gpus_text = ",".join(str(i) for i in res.indices)
    print(f"Reserved GPU {gpus_text} for {holder} until {describe_until(res.until, now)}: reservation {res.id}.",
          file=ctx.stdout)
    print(f"token: {token}", file=ctx.stdout)
    grant = format_pick(res.indices, {g.index: g.uuid for g in chosen}, "docker")
    print(f"Start containers on it with: docker run --label gputui.reservation={token} {grant} ...",
          file=ctx.stdout)
    return EXIT_OK


def _self_service(ctx, wanted: list[str], until: float, note: str, now: float) -> int:
    """A user's own reservation, made by the root-run guard (which learns who asks from the kernel)."""
    import http.client
    import socket

    from gputui.commands.guard import SELF_SERVICE_SOCKET
    from gputui.core.rules import describe_until

    if not all(w.isdigit() for w in wanted):
        raise UsageError("Self-service reservations name GPUs by index, e.g. gputui reserve 3 --for me --hours 8.")
    target = ctx.args.guard or f"unix://{SELF_SERVICE_SOCKET}"
    if not target.startswith("unix:///"):
        raise UsageError("--guard must be unix:///PATH.")
    path = target[len("unix://"):]

    class _Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(10)
            self.sock.connect(path)

    body = json.dumps({"gpus": [int(w) for w in wanted], "until": until, "note": note})
    conn = _Conn("gputui-guard", timeout=10)
    try:
        conn.request("POST", "/reserve", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        doc = json.loads(resp.read(65536) or b"{}")
    except (OSError, ValueError) as exc:
        print(f"gputui: cannot reach the guard at {path} ({exc.__class__.__name__}): only root reserves GPUs "
              "here, unless the house rules allow self-service ([reservations] self_service = true) and "
              "gputui guard runs.", file=ctx.stderr)
        return EXIT_NO
    finally:
        conn.close()
    if resp.status != 200:
        print(f"gputui: {doc.get('error', 'the guard refused the reservation')}", file=ctx.stderr)
        return EXIT_NO
    gpus_text = ",".join(str(i) for i in doc["gpus"])
    print(f"Reserved GPU {gpus_text} for {doc['for']} until {describe_until(float(doc['until']), now)}: "
          f"reservation {doc['id']}.", file=ctx.stdout)
    print(f"token: {doc['token']}", file=ctx.stdout)
    return EXIT_OK
