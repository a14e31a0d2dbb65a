"""``gputui doctor``: the troubleshooting checklist for shared GPU servers, in one command.

It walks what people check by hand when "the GPU is occupied" or a container
cannot see its GPU: driver and NVML, device nodes, where gputui runs (PID and
cgroup namespaces), Docker and its NVIDIA set-up, containers that see every GPU
or carry conflicting environment, and GPU health. Facts are gathered by the
probes in :mod:`gputui.core.doctor` and judged by :mod:`gputui.core.checks`.

NVML failing is a *finding* here, not an error: doctor still reports everything
else. Exit status: 0 when nothing failed (warnings allowed), 1 when a check
failed, 2 when doctor itself could not run (bad usage included).
"""

from __future__ import annotations

import json
import socket

from gputui.context import EXIT_NO, EXIT_OK, EXIT_USAGE, UsageError
from gputui.core import checks as C
from gputui.core import doctor as probes
from gputui.core.mig_checks import MigFacts
from gputui.core.model import Snapshot
from gputui.core.sources import NvmlUnavailable


def add_parser(sub, common):
    p = sub.add_parser(
        "doctor",
        help="check driver, NVML, device nodes, Docker's GPU set-up, containers and GPU health",
        description=(
            "Walk the troubleshooting checklist: every check prints pass, warn, fail or skip (it could not run: "
            "no driver, Docker not asked or not reachable) with one sentence, and the fix after a warning or a "
            "failure. Every run lists the same 18 checks. Exit 0 when nothing failed, 1 when a check failed, 2 "
            "when doctor could not run."
        ),
    )
    common(p)
    p.add_argument("--json", action="store_true", help='print {"checks": [{"name", "status", "message", "fix"}]}')
    return p


def run(ctx) -> int:
    try:
        facts = gather(ctx)
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


# -- gathering ---------------------------------------------------------------------------


def gather(ctx) -> C.DoctorFacts:
    docker_on = not getattr(ctx.args, "no_docker", False)
    if ctx.demo:
        return _gather_demo(ctx, docker_on)
    host = socket.gethostname()
    snapshot: Snapshot | None = None
    nvml: C.NvmlFacts
    machine = None
    try:
        try:
            machine = ctx.open_machine(docker=docker_on)
        except NvmlUnavailable as exc:
            nvml = C.NvmlFacts(ok=False, error=str(exc), error_kind=_init_error_kind(str(exc)),
                               kernel_module_version=probes.kernel_module_version(),
                               bindings_version=probes.bindings_version())
        else:
            poller, snapshot, _ = ctx.start_polling(machine)
            if poller.watcher is not None:  # NVML stays open for what follows; the machine closes below
                poller.watcher.stop()
            nvml = _nvml_facts(machine, snapshot)
    finally:
        if machine is not None:
            machine.close()

    minors = None
    if snapshot is not None:
        minors = [g.minor_number if g.minor_number is not None else g.index for g in snapshot.gpus]
    devices = probes.probe_devices(minors)
    env = probes.probe_container_env(snapshot)
    docker = (probes.probe_docker(timeout=ctx.settings.docker_timeout) if docker_on else C.DockerFacts(checked=False))
    if not docker_on:
        why: str | None = "--no-docker was given"
        findings = None
    elif snapshot is None:
        findings, why = None, "NVML is not reachable, so containers could not be matched to GPUs"
    else:
        findings, why = probes.container_findings(snapshot)
    return C.DoctorFacts(nvml=nvml, devices=devices, container_env=env, docker=docker, container_findings=findings,
                         containers_error=why, demo=False, host=host,
                         mig=MigFacts.of(snapshot) if snapshot is not None else None)


def _init_error_kind(sentence: str) -> str:
    """Which of the NVML source's init sentences this is (it names the NVML return code's meaning)."""
    from gputui.core.nvml import init_error_sentence

    for kind, code in (("library-not-found", 12), ("driver-not-loaded", 9), ("no-permission", 4),
                       ("mismatch", 18)):
        if sentence == init_error_sentence(code):
            return kind
    return "other"


def _nvml_facts(machine, snapshot: Snapshot) -> C.NvmlFacts:
    """Join the snapshot's GPU values (ECC, throttling, lost) with the NVML source's health facts."""
    info = machine.gpu.library_info()
    health = {d.index: d for d in info.devices}
    gpus = []
    for g in snapshot.gpus:
        h = health.get(g.index)
        gpus.append(C.GpuHealth(
            index=g.index, name=g.name, uuid=g.uuid, lost=g.lost or bool(h and h.lost),
            minor_number=g.minor_number,
            persistence_mode=h.persistence_mode if h is not None and h.persistence_mode is not None
            else g.persistence_mode,
            ecc_errors=g.ecc_errors,
            retired_pages_sbe=h.retired_pages_single_bit if h else None,
            retired_pages_dbe=h.retired_pages_double_bit if h else None,
            retired_pages_pending=h.retired_pages_pending if h else None,
            remapped_rows_correctable=h.remapped_rows_correctable if h else None,
            remapped_rows_uncorrectable=h.remapped_rows_uncorrectable if h else None,
            remapped_rows_pending=h.remapped_rows_pending if h else None,
            remapped_rows_failure=h.remapped_rows_failure if h else None,
            throttle_reasons=g.throttle_reasons, temperature=g.temperature, power_draw=g.power_draw,
            power_limit=g.power_limit,
        ))
    return C.NvmlFacts(
        ok=True, library_path=info.library_path, driver_version=info.driver_version,
        cuda_driver_version=info.cuda_driver_version, nvml_version=info.nvml_version,
        bindings_version=info.nvidia_ml_py_version, kernel_module_version=probes.kernel_module_version(),
        gpus=tuple(gpus), missing_functions=info.missing_functions, foreign_bound=probes.foreign_bound_gpus(),
    )


def _gather_demo(ctx, docker_on: bool) -> C.DoctorFacts:
    """Facts of the simulated server: the checks that make sense run against it, the rest say it is the demo."""
    machine = ctx.open_machine(docker=docker_on)
    try:
        poller, snap, _ = ctx.start_polling(machine, container_wait=2.0)
        if poller.watcher is not None:  # NVML stays open for what follows; the machine closes below
            poller.watcher.stop()
    finally:
        machine.close()
    gpus = tuple(C.GpuHealth(
        index=g.index, name=g.name, uuid=g.uuid, lost=g.lost, minor_number=g.minor_number,
        persistence_mode=g.persistence_mode, ecc_errors=g.ecc_errors, throttle_reasons=g.throttle_reasons,
        temperature=g.temperature, power_draw=g.power_draw, power_limit=g.power_limit,
    ) for g in snap.gpus)
    nvml = C.NvmlFacts(ok=True, driver_version=snap.driver_version, cuda_driver_version=snap.cuda_driver_version,
                       nvml_version=snap.nvml_version, bindings_version=probes.bindings_version(), gpus=gpus,
                       demo=True)
    findings, why = probes.container_findings(snap) if docker_on else (None, "--no-docker was given")
    return C.DoctorFacts(
        nvml=nvml,
        devices=C.DeviceFacts((), user=probes.current_user(), demo=True),
        container_env=C.ContainerEnvFacts(in_container=False, demo=True),
        docker=C.DockerFacts(checked=docker_on, demo=True),
        container_findings=findings, containers_error=why, demo=True, host=snap.host, mig=MigFacts.of(snap),
    )
