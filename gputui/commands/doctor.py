"""``gputui doctor``: the troubleshooting checklist for shared GPU servers, in one command.

It walks what people check by hand when "the GPU is occupied" or a container
cannot see its GPU: driver and NVML, device nodes, where gputui runs (PID and
cgroup namespaces), Docker and its NVIDIA set-up, containers that see every GPU
or carry conflicting environment, and GPU health. Facts are gathered by the
probes of :mod:`gputui.core.doctor` and judged there; this module parses the
arguments and prints.

NVML failing is a *finding* here, not an error: doctor still reports everything
else. Exit status: 0 when nothing failed (warnings allowed), 1 when a check
failed, 2 when doctor itself could not run (bad usage included).
"""

from __future__ import annotations

import json

from gputui.context import EXIT_NO, EXIT_OK, EXIT_USAGE, UsageError
from gputui.core.doctor import checks as C
from gputui.core.doctor.gather import gather


def add_parser(sub, common):
    p = sub.add_parser(
        "doctor",
        help="check driver, NVML, device nodes, Docker's GPU set-up, containers and GPU health",
        description=(
            "Walk the troubleshooting checklist: every check prints pass, warn, fail or skip (it could not run: "
            "no driver, Docker not asked or not reachable) with one sentence, and the fix after a warning or a "
            f"failure. Every run lists the same {len(C.ALL_CHECKS)} checks. Exit 0 when nothing failed, 1 when a "
            "check failed, 2 when doctor could not run."
        ),
    )
    common(p)
    p.add_argument("--json", action="store_true", help='print {"checks": [{"name", "status", "message", "fix"}]}')
    return p


def run(ctx) -> int:
    try:
        docker_on = not getattr(ctx.args, "no_docker", False)
        facts = gather(lambda: ctx.polling(docker=docker_on, container_wait=2.0 if ctx.demo else None),
                       docker_on=docker_on, docker_timeout=ctx.settings.docker_timeout, demo=ctx.demo,
                       containerd=ctx.settings.containerd_address, kubelet=ctx.settings.kubelet_socket)
        checks = C.judge(facts)
    except UsageError:
        raise
    except Exception as exc:  # doctor must never show a traceback: it is what people run when things break
        print(f"gputui: doctor could not run: {type(exc).__name__}: {exc}.", file=ctx.stderr)
        return EXIT_USAGE
    if getattr(ctx.args, "json", False):
        doc = {"checks": [c.to_json() for c in checks], "host": facts.host, "demo": facts.demo}
        json.dump(doc, ctx.stdout, indent=2)
        ctx.stdout.write("\n")
    else:
        if facts.demo:
            header = (f"gputui doctor (demo): checks run against the simulated server {facts.host}, not this "
                      "machine.")
        else:
            header = f"gputui doctor on {facts.host}"
        ctx.stdout.write(C.render(checks, header))
    return EXIT_NO if C.exit_status(checks) else EXIT_OK
