"""The checks of ``gputui doctor``, as pure functions of facts gathered elsewhere.

The field's checklist for "the GPU is occupied" and "my container cannot see its
GPU" walks the same ground every time: is the driver loaded and NVML reachable,
are the device nodes there, does gputui see the host's processes, is Docker
reachable and set up for GPUs, are containers pinned, is any GPU unhealthy. The
probes in :mod:`gputui.core.doctor.probes` gather the facts (NVML, /dev, /proc, the
Docker API); the functions here judge them. Keeping the judging pure means every
sentence and every fix can be tested without a GPU, a daemon or root.

Every check is pass, warn, fail or skip with one sentence; a warning or a failure
carries the fix. A warning never fails the run: ``doctor`` exits 1 only on a
failure. Every run lists every check of :data:`ALL_CHECKS`, in that order: one that
could not run (no driver, Docker not asked or not reachable) is ``skip`` and says
why, never a silent omission and never a pass.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from gputui.core.doctor.facts import (
    ContainerEnvFacts,
    ContainerFinding,
    DeviceFacts,
    DockerFacts,
    DoctorFacts,
    NvmlFacts,
    RecorderFacts,
    RulesFacts,
    RuntimeFacts,
)
from gputui.core.doctor.mig import check_mig
from gputui.core.doctor.slurm import check_slurm
from gputui.core.grants import is_nvidia_runtime
from gputui.core.judges.text import gpus_phrase, plural
from gputui.core.record import record
from gputui.core.safe_text import clean

Status = Literal["pass", "warn", "fail", "skip"]

#: Every check doctor knows, in checklist order: each run reports each of them exactly once.
ALL_CHECKS = (
    "nvml", "nvml-functions", "gpu-models", "gpu-drivers", "persistence-mode", "device-nodes", "container",
    "cgroup-namespace", "docker-socket", "docker-daemon", "nvidia-runtime", "docker-gpus", "containers-unpinned",
    "containers-env", "container-runtimes", "kubernetes-names", "mig-devices", "mig-mode-change", "mig-grants",
    "gpu-lost", "ecc-errors", "memory-repair", "throttling", "history", "house-rules", "guard",
)
#: Judged by :func:`gputui.core.doctor.mig.check_mig`.
MIG_CHECKS = ("mig-devices", "mig-mode-change", "mig-grants")
_NVML_CHECKS = frozenset({"nvml-functions", "gpu-models", "gpu-drivers", "persistence-mode", "gpu-lost",
                          "ecc-errors", "memory-repair", "throttling", *MIG_CHECKS})
_DOCKER_CHECKS = frozenset({"docker-daemon", "nvidia-runtime", "docker-gpus"})

#: Throttle reasons that mean "too hot" and "power" respectively (names from model.THROTTLE_REASONS).
THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")


@record
class Check:
    name: str
    status: Status
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message, "fix": self.fix}


def _pass(name: str, message: str) -> Check:
    return Check(name, "pass", message, None)


def _warn(name: str, message: str, fix: str) -> Check:
    return Check(name, "warn", message, fix)


def _fail(name: str, message: str, fix: str) -> Check:
    return Check(name, "fail", message, fix)


def _skip(name: str, message: str) -> Check:
    return Check(name, "skip", message, None)


# -- NVML and the driver ---------------------------------------------------------------------


_NVML_FIXES = {
    "library-not-found": (
        "Install the NVIDIA driver for this GPU (e.g. `sudo apt-get install nvidia-driver-550` or the "
        ".run installer); inside a container, start it with `--gpus all` (NVIDIA Container Toolkit) so "
        "libnvidia-ml.so.1 is mounted."
    ),
    "driver-not-loaded": (
        "Load the kernel module with `sudo modprobe nvidia` and check `sudo dmesg | grep -i nvidia`; after a "
        "driver or kernel upgrade, reboot (Secure Boot may block an unsigned module)."
    ),
    "mismatch": (
        "The driver was upgraded but the old kernel module is still loaded: reboot, or stop every GPU user and "
        "reload it (`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`)."
    ),
    "no-permission": (
        "Give this user access to /dev/nvidia* (usually membership of the group that owns them, then log in "
        "again) or run gputui with sudo."
    ),
    "other": "Run `nvidia-smi`; if it fails too, reinstall the driver and reboot.",
}


def check_nvml(f: NvmlFacts) -> list[Check]:
    """Driver loaded, NVML reachable, versions, library/driver mismatch, missing functions."""
    if f.demo:
        return [_pass("nvml", f"Demo: the simulated server reports driver {f.driver_version}, CUDA "
                              f"{f.cuda_driver_version}, NVML {f.nvml_version}; no real driver was asked.")]
    if not f.ok:
        kind = f.error_kind or "other"
        message = f.error or "NVML could not be initialised."
        if kind == "mismatch" and f.kernel_module_version:
            message = message.rstrip(".") + f" (the loaded kernel module is {f.kernel_module_version})."
        return [_fail("nvml", message, _NVML_FIXES.get(kind, _NVML_FIXES["other"]))]
    versions = (f"driver {f.driver_version or 'N/A'}, CUDA driver {f.cuda_driver_version or 'N/A'}, NVML "
                f"{f.nvml_version or 'N/A'}, nvidia-ml-py {f.bindings_version or 'N/A'}")
    where = f" from {f.library_path}" if f.library_path else ""
    out: list[Check] = []
    if (f.kernel_module_version and f.driver_version and f.kernel_module_version != f.driver_version):
        out.append(_fail(
            "nvml",
            f"NVML{where} reports driver {f.driver_version} but the loaded kernel module is "
            f"{f.kernel_module_version}: user-space library and kernel module do not match.",
            _NVML_FIXES["mismatch"]))
    else:
        out.append(_pass("nvml", f"NVML works{where}: {versions}; {plural(len(f.gpus), 'GPU')}."))
    if f.missing_functions:
        shown = [m.replace("_", " ") if not m.startswith("nvml") else m for m in f.missing_functions[:6]]
        names = ", ".join(shown) + (" …" if len(f.missing_functions) > 6 else "")
        out.append(_warn(
            "nvml-functions",
            f"This driver lacks the NVML functions for {plural(len(f.missing_functions), 'value')} gputui reads "
            f"({names}); {'it shows' if len(f.missing_functions) == 1 else 'they show'} as N/A.",
            "Nothing breaks; upgrade the NVIDIA driver to get those fields (gputui works with what the driver has)."))
    else:
        out.append(_pass("nvml-functions", "The driver answers every NVML function gputui uses."))
    return out


def check_gpu_models(f: NvmlFacts) -> list[Check]:
    """All GPUs of one model and bound to the one NVIDIA driver (multi-GPU jobs need both)."""
    out: list[Check] = []
    named = [g for g in f.gpus if not g.lost]
    models: dict[str, list[int]] = {}
    for g in named:
        models.setdefault(g.name, []).append(g.index)
    if len(models) <= 1:
        if models:
            name = next(iter(models))
            what = f"All {len(named)} GPUs are" if len(named) > 1 else f"GPU {named[0].index} is"
            out.append(_pass("gpu-models", f"{what} {name}; there is nothing to mismatch." if len(named) == 1
                             else f"{what} {name}."))
        else:
            out.append(_pass("gpu-models", "No GPU to compare."))
    else:
        parts = "; ".join(f"{gpus_phrase(ix)}: {name}" for name, ix in models.items())
        out.append(_warn(
            "gpu-models",
            f"The GPUs are of {len(models)} models ({parts}): a multi-GPU job runs at the pace of the slowest and "
            "may not give identical results on each.",
            "Run multi-GPU jobs on GPUs of one model: pick them with `--gpus '\"device=0,1\"'` or "
            "CUDA_VISIBLE_DEVICES (see `gputui pick`)."))
    if f.demo:
        out.append(_pass("gpu-drivers", "Demo: the simulated server has no PCI bus to check."))
    elif f.foreign_bound:
        parts = ", ".join(f"{addr} ({drv or 'no driver'})" for addr, drv in f.foreign_bound)
        out.append(_warn(
            "gpu-drivers",
            f"{plural(len(f.foreign_bound), 'NVIDIA GPU')} on the PCI bus "
            f"{'is' if len(f.foreign_bound) == 1 else 'are'}"
            f" not bound to the nvidia driver and invisible to NVML: {parts}.",
            "If they should be usable, unbind them from that driver (e.g. vfio-pci for passthrough, nouveau "
            "blacklisted with `modprobe.blacklist=nouveau`) and reboot."))
    else:
        out.append(_pass("gpu-drivers", "Every NVIDIA GPU on the PCI bus is driven by the nvidia driver."))
    return out


def check_persistence(f: NvmlFacts) -> Check:
    off = [g.index for g in f.gpus if not g.lost and g.persistence_mode is False]
    unknown = [g.index for g in f.gpus if not g.lost and g.persistence_mode is None]
    if off:
        return _warn(
            "persistence-mode",
            f"Persistence mode is off on {gpus_phrase(off)}: whenever no client holds the GPU the driver tears it "
            "down, so every nvidia-smi, gputui or CUDA start-up pays seconds of re-initialisation.",
            "Enable the persistence daemon: `sudo systemctl enable --now nvidia-persistenced` (or "
            "`sudo nvidia-smi -pm 1`, which lasts until reboot).")
    if unknown and len(unknown) == len([g for g in f.gpus if not g.lost]):
        return _pass("persistence-mode", "The driver does not report persistence mode (N/A), so there is nothing "
                                         "to check.")
    return _pass("persistence-mode", "Persistence mode is on" + (" (demo)." if f.demo else "."))


# -- device nodes ---------------------------------------------------------------------------------


def check_device_nodes(d: DeviceFacts, nvml_ok: bool) -> Check:
    if d.demo:
        return _pass("device-nodes", "Demo: the simulated server has no /dev/nvidia* nodes to check.")
    missing = [n.path for n in d.nodes if not n.exists]
    unusable = [n for n in d.nodes if n.exists and not n.usable]
    if missing:
        essential = [m for m in missing if m != "/dev/nvidia-uvm"]
        if essential:
            return _fail(
                "device-nodes",
                f"{', '.join(essential)} {'does' if len(essential) == 1 else 'do'} not exist, so CUDA and NVML "
                "cannot open the GPU" + ("" if nvml_ok else " (the driver is probably not loaded)") + ".",
                "Load the driver (`sudo modprobe nvidia`; `sudo nvidia-modprobe -c 0` creates the nodes); inside a "
                "container, start it with `--gpus` so the nodes are passed in.")
    if unusable:
        n = unusable[0]
        names = ", ".join(u.path for u in unusable)
        if n.group and n.group in d.listed_groups and n.group not in d.groups:
            fix = (f"{d.user} was added to group {n.group} after this login: log out and back in (or run "
                   f"`newgrp {n.group}`).")
        elif n.group:
            fix = f"Add {d.user} to group {n.group} (`sudo usermod -aG {n.group} {d.user}`) and log in again."
        else:
            fix = "Make the nodes readable and writable for GPU users (the NVIDIA driver's udev rules do: mode 0666)."
        return _fail(
            "device-nodes",
            f"{d.user} cannot open {names} ({n.owner or 'permissions'}), so CUDA programs run by {d.user} see no GPU.",
            fix)
    if "/dev/nvidia-uvm" in missing:
        return _warn(
            "device-nodes",
            "/dev/nvidia-uvm does not exist: NVML works but CUDA programs fail with 'no CUDA-capable device'.",
            "Load the unified-memory module: `sudo modprobe nvidia-uvm` (or `sudo nvidia-modprobe -u -c=0`).")
    count = len(d.nodes)
    return _pass("device-nodes", f"All {count} /dev/nvidia* nodes are present and usable by {d.user}.")


# -- where gputui runs -------------------------------------------------------------------------------


def check_container_env(c: ContainerEnvFacts) -> list[Check]:
    if c.demo:
        return [
            _pass("container", "Demo: the simulated server's processes are all visible."),
            _pass("cgroup-namespace", "Demo: containers are attributed from simulated cgroup paths."),
        ]
    out: list[Check] = []
    if not c.in_container and c.host_pid_namespace is not False:
        out.append(_pass("container", "gputui runs on the host, in its PID namespace."))
    elif c.host_pid_namespace is False or c.gpu_pids_invisible:
        why = ("NVML lists GPU processes by host PID and none of them is visible here"
               if c.gpu_pids_invisible else "NVML reports host PIDs, which this namespace cannot see")
        out.append(_fail(
            "container",
            f"gputui runs in a container ({c.evidence or 'own PID namespace'}) without the host's PID namespace: "
            f"{why}, so users, commands, containers and kills are unavailable.",
            "Start gputui's container with `--pid=host` (Kubernetes: `hostPID: true`), or run gputui on the host."))
    else:
        out.append(_pass(
            "container",
            f"gputui runs in a container ({c.evidence or 'detected'}) that shares the host's PID namespace, so GPU "
            "processes are visible."))
    if c.host_cgroup_namespace is False:
        out.append(_warn(
            "cgroup-namespace",
            "gputui has a private cgroup namespace: cgroup paths of other containers read as relative paths, so "
            "some processes may not be matched to their containers.",
            "Start gputui's container with `--cgroupns=host` as well as `--pid=host`."))
    else:
        out.append(_pass("cgroup-namespace", "gputui sees the host's cgroup paths, so processes are matched to "
                                             "their containers."))
    return out


# -- Docker ------------------------------------------------------------------------------------


_TOOLKIT_FIX = ("Install the NVIDIA Container Toolkit (`sudo apt-get install nvidia-container-toolkit`), run "
                "`sudo nvidia-ctk runtime configure --runtime=docker`, then restart Docker "
                "(`sudo systemctl restart docker`).")


def check_docker(d: DockerFacts) -> list[Check]:
    """Socket, daemon, NVIDIA runtime/toolkit and whether ``--gpus`` can work.

    Long on purpose: these are four checks whose sentences depend on each other (a socket that is
    not there makes the daemon check say so, the runtime check names the default runtime), so they
    are judged in one pass, in checklist order."""
    if not d.checked:
        return [_skip("docker-socket", "Not checked: --no-docker was given.")]
    if d.demo:
        return [
            _pass("docker-socket", "Demo: the simulated server's Docker answers."),
            _pass("docker-daemon", "Demo: simulated Docker daemon."),
            _pass("nvidia-runtime", "Demo: the simulated Docker grants GPUs with --gpus."),
            _pass("docker-gpus", "Demo: `docker run --gpus` works on the simulated server."),
        ]
    out: list[Check] = []
    where = d.socket_path or d.endpoint
    if d.socket_path is not None and d.socket_exists is False:
        return [_warn(
            "docker-socket",
            f"There is no Docker socket at {d.socket_path}: Docker is not installed or not running, so container "
            "checks were skipped.",
            "If this machine runs Docker, start it (`sudo systemctl start docker`); if it uses another endpoint, "
            "set DOCKER_HOST.")]
    if d.socket_path is not None and d.socket_accessible is False:
        group = d.socket_group
        if group and d.in_group_listed and not d.in_group_now:
            fix = (f"{d.user} was added to group {group} after this login: log out and back in (or run "
                   f"`newgrp {group}`).")
        elif group and group != "root":
            fix = (f"Add {d.user} to group {group} (`sudo usermod -aG {group} {d.user}`) and log in again, or run "
                   "gputui with sudo. (Membership of that group is root-equivalent.)")
        else:
            fix = "Run gputui with sudo, or ask an administrator for access to the Docker socket."
        owner = f" (owned by {d.socket_owner})" if d.socket_owner else ""
        return [_fail("docker-socket", f"{d.user or 'This user'} cannot use the Docker socket {where}{owner}.", fix)]
    if not d.reachable:
        return [
            _pass("docker-socket", f"The Docker socket {where} is present and accessible."),
            _fail("docker-daemon", f"The Docker daemon at {where} does not answer: {d.error or 'no reply'}.",
                  "Check the daemon: `sudo systemctl status docker` and `sudo journalctl -u docker`; restart it with "
                  "`sudo systemctl restart docker`."),
        ]
    out.append(_pass("docker-socket", f"The Docker socket {where} is present and accessible."))
    out.append(_pass("docker-daemon", f"Docker Engine {d.server_version or 'N/A'} (API {d.api_version or 'N/A'}) "
                                      "answers."))

    # NVIDIA runtime / toolkit
    runtimes = ", ".join(d.runtimes) or "none"
    hook = f"hook {d.hook_path}" if d.hook_path else f"no nvidia-container-runtime-hook (looked in {d.hook_searched})"
    cdi = f"CDI specs {', '.join(d.cdi_specs)}" if d.cdi_specs else "no NVIDIA CDI specs"
    summary = f"runtimes {runtimes} (default {d.default_runtime or 'N/A'}); {hook}; {cdi}"
    # Any runtime named nvidia* is the legacy form (the one grant model reads it so: core/grants.py).
    has_runtime = any(is_nvidia_runtime(r) for r in d.runtimes)
    if is_nvidia_runtime(d.default_runtime):
        out.append(_warn(
            "nvidia-runtime",
            f"Docker's default runtime is {d.default_runtime} ({summary}): every container started from a CUDA "
            "image gets NVIDIA_VISIBLE_DEVICES=all from the image and sees every GPU unless it says otherwise.",
            "Remove \"default-runtime\": \"nvidia\" from /etc/docker/daemon.json, restart Docker and grant GPUs "
            "explicitly with `--gpus '\"device=N\"'`."))
    elif has_runtime or d.hook_path or d.cdi_specs:
        out.append(_pass("nvidia-runtime", f"The NVIDIA container toolkit is set up: {summary}."))
    else:
        out.append(_fail("nvidia-runtime", f"Docker has no NVIDIA support: {summary}.", _TOOLKIT_FIX))

    # --gpus
    if not d.hook_path and d.cdi_hook_path and _version_at_least(d.server_version, (29, 2)):
        out.append(_pass(
            "docker-gpus",
            f"`docker run --gpus` can work: Docker {d.server_version} finds {d.cdi_hook_path} on its PATH and "
            "registers its NVIDIA device driver through CDI."))
    elif d.hook_path and d.hook_newer_than_daemon:
        out.append(_warn(
            "docker-gpus",
            f"{d.hook_path} changed after dockerd started; dockerd looks the hook up only at start, so if it was "
            "missing then, `--gpus` fails with 'could not select device driver'.",
            "Restart Docker so it registers the NVIDIA device driver: `sudo systemctl restart docker`."))
    elif d.hook_path:
        out.append(_pass(
            "docker-gpus",
            f"`docker run --gpus` can work: dockerd finds {d.hook_path} on its PATH and registers its NVIDIA device "
            "driver."))
    else:
        also = ""
        if has_runtime:
            also = " (the legacy `--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=…` form still works)"
        elif d.cdi_specs and d.cdi_spec_dirs:
            also = " (CDI requests such as `--device nvidia.com/gpu=0` can still work)"
        out.append(_fail(
            "docker-gpus",
            "`docker run --gpus` fails with 'could not select device driver \"\" with capabilities: [[gpu]]': "
            f"dockerd finds no nvidia-container-runtime-hook (looked in {d.hook_searched}){also}.",
            _TOOLKIT_FIX + " dockerd must find the hook on its PATH when it starts."))
    return out


def _version_at_least(version: str | None, wanted: tuple[int, int]) -> bool:
    """'29.2.1' >= (29, 2); an unparsable version is not assumed to be new."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) >= wanted


# -- containers --------------------------------------------------------------------------------------


#: Finding kinds of the containers judge that doctor reports, with the fix for each.
CONTAINER_FINDINGS = {
    "unpinned": (
        "containers-unpinned",
        "Grant each container only the GPUs it should use: recreate it with `--gpus '\"device=<UUID>\"'` (compose: "
        "`deploy.resources.reservations.devices` with `device_ids`), or move it with `gputui migrate`.",
    ),
    "env-conflict": (
        "containers-env",
        "Make one place decide: grant exactly the intended GPU with `--gpus '\"device=N\"'` and drop "
        "CUDA_VISIBLE_DEVICES from the container's environment (inside, that GPU is always device 0).",
    ),
}


def check_containers(findings: tuple[ContainerFinding, ...] | None, error: str | None, demo: bool) -> list[Check]:
    out: list[Check] = []
    for kind, (name, fix) in CONTAINER_FINDINGS.items():
        if findings is None:
            out.append(_skip(name, f"Not checked: {error or 'container information is not available'}."))
            continue
        hits = [f for f in findings if f.kind == kind]
        if not hits:
            what = "sees every GPU with nothing narrowing it" if kind == "unpinned" else \
                "has conflicting GPU environment settings"
            out.append(_pass(name, f"No container {what}."))
            continue
        first = hits[0]
        more = f" ({len(hits) - 1} more: {', '.join(h.container for h in hits[1:4])}{'…' if len(hits) > 4 else ''})" \
            if len(hits) > 1 else ""
        message = first.message if first.container in first.message else f"{first.container}: {first.message}"
        out.append(_warn(name, message.rstrip(".") + more + ".", fix))
    return out


# -- container runtimes ------------------------------------------------------------------------

_RUNTIME_FIXES = {
    "Docker": "Start Docker (`sudo systemctl start docker`) or, if it should not run here, ignore this.",
    "podman": "Start podman's API service: `sudo systemctl enable --now podman.socket` (rootless: "
              "`systemctl --user enable --now podman.socket`).",
    "containerd": "Start containerd (`sudo systemctl start containerd`), point gputui at its socket with "
                  "--containerd ADDR or containerd_address in the config, and install grpcio "
                  "(`pip install 'gputui[kubernetes]'`).",
    "kubelet": "Give gputui the kubelet's pod-resources socket: run it as root on the node (or mount "
               "/var/lib/kubelet/pod-resources into its pod) and pass --kubelet-socket PATH if it is elsewhere.",
}
_DENIED_FIX = "Run gputui as root (sudo gputui doctor), or give this user access to the socket."


def check_runtimes(r: RuntimeFacts) -> list[Check]:
    """Which container runtimes answer, which sockets could not be read and why; and whether
    Kubernetes pods could be named."""
    if not r.checked:
        return [_skip("container-runtimes", "Not checked: --no-docker was given."),
                _skip("kubernetes-names", "Not checked: --no-docker was given.")]
    up = [p for p in r.probes if p.ok]
    down = [p for p in r.probes if not p.ok]
    found = "; ".join(f"{p.name} at {p.address}" + (f" ({p.detail})" if p.detail else "") for p in up)
    out: list[Check]
    if down:
        first = down[0]
        denied = "permission denied" in (first.error or "")
        why = "; ".join(f"{p.name} at {p.address}: {p.error}" for p in down)
        message = (f"Found {found}; cannot read {why}." if up else f"No container runtime answers: {why}.")
        out = [_warn("container-runtimes", message, _DENIED_FIX if denied else _RUNTIME_FIXES[first.name])]
    elif up:
        out = [_pass("container-runtimes", f"Found {found}.")]
    else:
        out = [_skip("container-runtimes", "No container runtime socket found (Docker, podman, containerd).")]
    if r.unnamed_pods:
        more = f" and {len(r.unnamed_pods) - 3} more" if len(r.unnamed_pods) > 3 else ""
        out.append(_warn(
            "kubernetes-names",
            f"GPU processes run in Kubernetes containers that gputui can only name by {', '.join(r.unnamed_pods[:3])}"
            f"{more}: no source told their pod names.",
            "Run gputui as root on the node with containerd's socket (--containerd, default "
            "/run/containerd/containerd.sock) and the kubelet's pod-resources socket (--kubelet-socket, default "
            "/var/lib/kubelet/pod-resources/kubelet.sock) readable, and grpcio installed "
            "(`pip install 'gputui[kubernetes]'`); /var/log/pods names pods too where readable."))
    else:
        out.append(_pass("kubernetes-names", "Every Kubernetes container on a GPU is named (or none runs here)."))
    return out


# -- health --------------------------------------------------------------------------------------


def check_health(f: NvmlFacts) -> list[Check]:
    out: list[Check] = []
    lost = [g.index for g in f.gpus if g.lost]
    if lost:
        out.append(_fail(
            "gpu-lost",
            f"{gpus_phrase(lost)} {'has' if len(lost) == 1 else 'have'} fallen off the bus or stopped answering NVML.",
            "Look for Xid 79/48 in `sudo dmesg`; reset the GPU when idle (`sudo nvidia-smi -r -i N`) or reboot; if "
            "it recurs, check power, cooling and seating."))
    else:
        out.append(_pass("gpu-lost", f"All {len(f.gpus)} GPUs answer." if len(f.gpus) != 1 else "The GPU answers."))
    live = [g for g in f.gpus if not g.lost]

    ecc = [(g.index, g.ecc_errors) for g in live if g.ecc_errors]
    if ecc:
        parts = ", ".join(f"GPU {i}: {n}" for i, n in ecc)
        out.append(_warn(
            "ecc-errors",
            f"Uncorrectable ECC errors were reported ({parts}); jobs on those GPUs may have crashed or returned "
            "corrupt results.",
            "Drain the GPU and reset it (`sudo nvidia-smi -r -i N`) so the bad memory is retired or remapped; if "
            "errors keep coming, contact the vendor."))
    elif live and all(g.ecc_errors is None for g in live):
        out.append(_pass("ecc-errors", "The GPUs do not report ECC errors (ECC off or not supported)."))
    else:
        out.append(_pass("ecc-errors", "No uncorrectable ECC errors."))

    failures = [g.index for g in live if g.remapped_rows_failure]
    pending = [g.index for g in live if g.remapped_rows_pending or g.retired_pages_pending]
    dbe = [(g.index, g.retired_pages_dbe) for g in live if g.retired_pages_dbe]
    unc_rows = [(g.index, g.remapped_rows_uncorrectable) for g in live if g.remapped_rows_uncorrectable]
    counted = [g for g in live if any(v is not None for v in (
        g.retired_pages_sbe, g.retired_pages_dbe, g.remapped_rows_correctable, g.remapped_rows_uncorrectable))]
    flagged = [g for g in live if any(v is not None for v in (
        g.retired_pages_pending, g.remapped_rows_pending, g.remapped_rows_failure))]
    if failures:
        out.append(_fail(
            "memory-repair",
            f"Row remapping failed on {gpus_phrase(failures)}: the GPU has run out of spare memory rows.",
            "Take the GPU out of service and contact the vendor (RMA)."))
    elif pending:
        out.append(_warn(
            "memory-repair",
            f"{gpus_phrase(pending)} {'has' if len(pending) == 1 else 'have'} memory retirement or row remapping "
            "pending: the faulty memory stays in use until the GPU is reset.",
            "Drain the GPU, then reset it (`sudo nvidia-smi -r -i N`) or reboot."))
    elif dbe or unc_rows:
        parts = ", ".join([f"GPU {i}: {n} retired pages" for i, n in dbe] +
                          [f"GPU {i}: {n} remapped rows" for i, n in unc_rows])
        out.append(_pass("memory-repair", f"Faulty memory was retired or remapped and nothing is pending ({parts})."))
    elif counted:
        out.append(_pass("memory-repair", "No retired pages or remapped rows."))
    elif flagged:
        out.append(_pass("memory-repair", "No page retirement or row remapping is pending (the counts are N/A)."))
    else:
        out.append(_pass("memory-repair", "The GPUs do not report retired pages or remapped rows (N/A)."))

    hot = [g.index for g in live if any(r in THERMAL_REASONS for r in g.throttle_reasons or ())]
    capped = [g.index for g in live if any(r in POWER_REASONS for r in g.throttle_reasons or ())]
    if hot:
        temps = ", ".join(f"GPU {g.index} {g.temperature}°C" for g in live if g.index in hot and g.temperature)
        out.append(_warn(
            "throttling",
            f"{gpus_phrase(hot)} {'is' if len(hot) == 1 else 'are'} slowing down because of heat now"
            + (f" ({temps})" if temps else "") + ".",
            "Check cooling: fans (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`), airflow, blanking panels and the room "
            "temperature; spread hot jobs across GPUs."))
    elif capped:
        watts = ", ".join(f"GPU {g.index} {g.power_draw:.0f}/{g.power_limit:.0f} W" for g in live
                          if g.index in capped and g.power_draw is not None and g.power_limit is not None)
        out.append(_warn(
            "throttling",
            f"{gpus_phrase(capped)} {'is' if len(capped) == 1 else 'are'} held at the power limit now"
            + (f" ({watts})" if watts else "") + ".",
            "Expected under full load; if the limit was lowered, restore it (`sudo nvidia-smi -pl <W> -i N`, see "
            "`nvidia-smi -q -d POWER`), and check the power supply."))
    else:
        out.append(_pass("throttling", "No GPU is throttled by heat or power now."))
    return out


# -- history ----------------------------------------------------------------------------------


def check_recorder(r: RecorderFacts) -> Check:
    """Whether ``gputui record`` writes its history (it keeps polling when it cannot, and says why here)."""
    if not r.running:
        return _skip("history", "No 'gputui record' runs here: 'gputui who' and 'gputui usage' have no history of "
                                "this host (optional; see contrib/systemd/gputui-record.service).")
    if r.writing:
        return _pass("history", f"'gputui record' (PID {r.pid}) writes the history to {r.db}.")
    problem = r.problem or "it cannot write its database"
    if "full" in problem:
        fix = f"Free space on the disk that holds {r.db}; the recorder writes again by itself."
    elif "Another 'gputui record'" in problem or "locked" in problem:
        fix = "Stop the other recorder, or give this one a database of its own with --db."
    else:
        fix = "Give 'gputui record --db' a path of its own; gputui never writes over a file it did not create."
    return _warn("history", f"'gputui record' (PID {r.pid}) is not writing the history: {problem}", fix)


# -- all --------------------------------------------------------------------------------------


def judge(facts: DoctorFacts) -> list[Check]:
    """Every check, in checklist order."""
    checks = check_nvml(facts.nvml)
    if facts.nvml.ok:
        checks += check_gpu_models(facts.nvml)
        checks.append(check_persistence(facts.nvml))
    checks.append(check_device_nodes(facts.devices, facts.nvml.ok))
    checks += check_container_env(facts.container_env)
    checks += check_docker(facts.docker)
    checks += check_containers(facts.container_findings, facts.containers_error, facts.demo)
    if not facts.demo:
        checks += check_runtimes(facts.runtimes)
    if facts.nvml.ok:
        checks += [Check(*v) for v in check_mig(facts.mig, containers_checked=facts.container_findings is not None,
                                                containers_error=facts.containers_error)]
        checks += check_health(facts.nvml)
    checks.append(check_recorder(facts.recorder))
    checks += check_rules(facts.rules)
    if facts.slurm is not None:  # on Slurm nodes only, after the checklist every run lists
        checks += [Check(n, s, m, f) for n, s, m, f in check_slurm(facts.slurm)]  # type: ignore[arg-type]
    return complete(checks, facts)


def check_rules(r: RulesFacts) -> list[Check]:
    """The house rules file, and whether the Docker authorization plugin that enforces them answers."""
    if r.error:
        rules = _fail("house-rules", r.error, "Fix the file (root-owned, not writable by others, valid TOML), "
                      "or remove it: without it no rule applies.")
    elif not r.present:
        rules = _pass("house-rules", f"No house rules ({r.path} does not exist): nothing is limited"
                      + (f"; {r.reservations} GPU reservation(s) live." if r.reservations else "."))
    else:
        what = ", ".join(r.limits) or "no limits"
        where = "of the simulated server" if r.demo else f"from {r.path}"
        rules = _pass("house-rules", f"House rules {where}: {what}; {r.reservations} live reservation(s).")
    if r.demo:
        guard = _skip("guard", "Demo: the simulated server has no Docker daemon whose authorization plugins could "
                      "be asked; on a real server this checks that gputui guard answers dockerd.")
    elif not r.docker_checked:
        guard = _skip("guard", "Not checked: --no-docker was given.")
    elif r.authz_plugins is None:
        guard = _skip("guard", "Not checked: Docker did not answer and dockerd's flags could not be read.")
    elif not r.authz_plugins:
        guard = _pass("guard", "dockerd uses no authorization plugin: the house rules are reported, not enforced "
                      "where containers start (see gputui guard).")
    else:
        down = [(n, why) for n, why in r.plugin_answers if why is not None]
        if down:
            name, why = down[0]
            guard = _fail("guard", f"dockerd's authorization plugin {name} does not answer: {why}; while it is "
                          "away dockerd refuses (or holds) every request.",
                          "Start it (systemctl start gputui-guard), or remove the plugin from dockerd's flags or "
                          "daemon.json and restart dockerd.")
        else:
            guard = _pass("guard", f"dockerd's authorization plugin{'s' if len(r.authz_plugins) > 1 else ''} "
                          f"{', '.join(r.authz_plugins)} answer{'' if len(r.authz_plugins) > 1 else 's'}.")
    return [rules, guard]


def complete(checks: list[Check], facts: DoctorFacts) -> list[Check]:
    """Every check of :data:`ALL_CHECKS` in order, those that could not run as ``skip`` with the reason."""
    have = {c.name for c in checks}
    for name in ALL_CHECKS:
        if name in have:
            continue
        if name in _NVML_CHECKS:
            why = ("Demo: the simulated server has no real driver to ask." if facts.demo
                   else "Not checked: NVML is not reachable (see the nvml check).")
        elif name in _DOCKER_CHECKS:
            why = ("Not checked: --no-docker was given." if not facts.docker.checked
                   else "Not checked: Docker did not answer (see the docker-socket check).")
        else:
            why = "Not checked."
        checks.append(_skip(name, why))
    order = {n: i for i, n in enumerate(ALL_CHECKS)}
    return sorted(checks, key=lambda c: order.get(c.name, len(order)))


def exit_status(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 when any check failed."""
    return 1 if any(c.status == "fail" for c in checks) else 0


def render(checks: list[Check], header: str | None = None) -> str:
    """Plain text: one line per check, its fix below when it is not a pass, then a count."""
    width = max((len(c.name) for c in checks), default=10)
    lines = [header] if header else []
    for c in checks:
        lines.append(f"{c.status.upper():<4}  {c.name:<{width}}  {c.message}")
        if c.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "warn", "fail", "skip")}
    skipped = f", {counts['skip']} skipped" if counts["skip"] else ""
    lines.append(f"{plural(len(checks), 'check')}: {counts['pass']} passed, {plural(counts['warn'], 'warning')}, "
                 f"{counts['fail']} failed{skipped}.")
    # messages quote NVML, Docker and /proc text: each line through the one rule, so none can add a line
    return "\n".join(clean(line) for line in lines) + "\n"
