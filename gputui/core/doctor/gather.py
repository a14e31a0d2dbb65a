"""Gathering the facts of ``gputui doctor``: one poll of the machine (or of the demo), then the probes.

The caller supplies ``session``: a context manager that opens the machine, polls it once, stops the
watchers and closes the machine on exit (:meth:`gputui.context.Context.polling`). NVML failing is a
fact here, not an error: the rest of the facts are still gathered.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from gputui.core.doctor import probes
from gputui.core.doctor.facts import (
    ContainerEnvFacts,
    DeviceFacts,
    DockerFacts,
    DoctorFacts,
    GpuHealth,
    NvmlFacts,
    RecorderFacts,
    RulesFacts,
    RuntimeFacts,
)
from gputui.core.doctor.mig import MigFacts
from gputui.core.doctor.slurm import SlurmFacts
from gputui.core.machine import Machine
from gputui.core.model import Snapshot
from gputui.core.sources import NvmlUnavailable


class Polled(Protocol):
    """An open machine and its first snapshot."""

    @property
    def machine(self) -> Machine: ...

    @property
    def snapshot(self) -> Snapshot: ...


Session = Callable[[], AbstractContextManager[Polled]]


def gather(session: Session, *, docker_on: bool, docker_timeout: float, demo: bool,
           containerd: str | None = None, kubelet: str | None = None) -> DoctorFacts:
    """Every fact doctor judges. ``docker_on`` is False for --no-docker; ``containerd`` and ``kubelet``:
    the sockets the user configured (else the default ones, where they exist)."""
    if demo:
        return _gather_demo(session, docker_on)
    host = socket.gethostname()
    snapshot: Snapshot | None = None
    slurm: SlurmFacts | None = None
    try:
        with session() as polled:  # NVML stays open for the health facts; the session closes it
            snapshot = polled.snapshot
            slurm_source = getattr(polled.machine, "slurm", None)
            if slurm_source is not None:
                slurm = probes.probe_slurm(slurm_source, snapshot)
            nvml = nvml_facts(polled.machine, snapshot)
    except NvmlUnavailable as exc:
        nvml = NvmlFacts(ok=False, error=str(exc), error_kind=init_error_kind(str(exc)),
                         kernel_module_version=probes.kernel_module_version(),
                         bindings_version=probes.bindings_version())

    minors = None
    if snapshot is not None:
        minors = [g.minor_number if g.minor_number is not None else g.index for g in snapshot.gpus]
    devices = probes.probe_devices(minors)
    env = probes.probe_container_env(snapshot)
    docker = probes.probe_docker(timeout=docker_timeout) if docker_on else DockerFacts(checked=False)
    if not docker_on:
        why: str | None = "--no-docker was given"
        findings = None
    elif snapshot is None:
        findings, why = None, "NVML is not reachable, so containers could not be matched to GPUs"
    else:
        findings, why = probes.container_findings(snapshot)
    runtimes = probes.probe_runtimes(snapshot, timeout=docker_timeout, containerd=containerd, kubelet=kubelet) \
        if docker_on else RuntimeFacts(checked=False)
    return DoctorFacts(nvml=nvml, devices=devices, container_env=env, docker=docker, container_findings=findings,
                       containers_error=why, demo=False, host=host,
                       mig=MigFacts.of(snapshot) if snapshot is not None else None, slurm=slurm,
                       rules=probes.probe_rules(docker), runtimes=runtimes, recorder=recorder_facts())


def recorder_facts() -> RecorderFacts:
    """The history recorder's own word on whether it writes (its status file), if one runs."""
    from gputui.core.status_file import read_recorder_status

    doc = read_recorder_status()
    if doc is None:
        return RecorderFacts()
    problem = doc.get("problem")
    db = doc.get("db")
    return RecorderFacts(running=True, pid=doc["pid"], db=db if isinstance(db, str) else None,
                         writing=doc.get("writing") is True,
                         problem=problem[:500] if isinstance(problem, str) else None)


def init_error_kind(sentence: str) -> str:
    """Which of the NVML source's init sentences this is (it names the NVML return code's meaning)."""
    from gputui.core.sources.nvml import init_error_sentence

    for kind, code in (("library-not-found", 12), ("driver-not-loaded", 9), ("no-permission", 4),
                       ("mismatch", 18)):
        if sentence == init_error_sentence(code):
            return kind
    return "other"


def nvml_facts(machine: Machine, snapshot: Snapshot) -> NvmlFacts:
    """Join the snapshot's GPU values (ECC, throttling, lost) with the NVML source's health facts."""
    info = machine.gpu.library_info()  # type: ignore[attr-defined]  # a real machine's GPU source is NvmlSource
    health = {d.index: d for d in info.devices}
    gpus = []
    for g in snapshot.gpus:
        h = health.get(g.index)
        gpus.append(GpuHealth(
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
    return NvmlFacts(
        ok=True, library_path=info.library_path, driver_version=info.driver_version,
        cuda_driver_version=info.cuda_driver_version, nvml_version=info.nvml_version,
        bindings_version=info.nvidia_ml_py_version, kernel_module_version=probes.kernel_module_version(),
        gpus=tuple(gpus), missing_functions=info.missing_functions, foreign_bound=probes.foreign_bound_gpus(),
    )


def _gather_demo(session: Session, docker_on: bool) -> DoctorFacts:
    """Facts of the simulated server: the checks that make sense run against it, the rest say it is the demo."""
    with session() as polled:
        snap = polled.snapshot
        demo = polled.machine.demo
        rules = demo.house_rules.read(snap.time.timestamp()) if demo is not None else None
    gpus = tuple(GpuHealth(
        index=g.index, name=g.name, uuid=g.uuid, lost=g.lost, minor_number=g.minor_number,
        persistence_mode=g.persistence_mode, ecc_errors=g.ecc_errors, throttle_reasons=g.throttle_reasons,
        temperature=g.temperature, power_draw=g.power_draw, power_limit=g.power_limit,
    ) for g in snap.gpus)
    nvml = NvmlFacts(ok=True, driver_version=snap.driver_version, cuda_driver_version=snap.cuda_driver_version,
                     nvml_version=snap.nvml_version, bindings_version=probes.bindings_version(), gpus=gpus,
                     demo=True)
    findings, why = probes.container_findings(snap) if docker_on else (None, "--no-docker was given")
    rules_facts = RulesFacts(demo=True, docker_checked=docker_on) if rules is None else RulesFacts(
        path=rules.path, present=True, error=rules.error, limits=probes.named_limits(rules.limits),
        reservations=len(rules.reservations), docker_checked=docker_on, demo=True)
    return DoctorFacts(
        nvml=nvml,
        devices=DeviceFacts((), user=probes.current_user(), demo=True),
        container_env=ContainerEnvFacts(in_container=False, demo=True),
        docker=DockerFacts(checked=docker_on, demo=True),
        container_findings=findings, containers_error=why, demo=True, host=snap.host, mig=MigFacts.of(snap),
        rules=rules_facts,
    )
