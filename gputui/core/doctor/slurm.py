"""Doctor on a Slurm node: its facts and their judgements (pure; ``probes.probe_slurm`` gathers them).

Reported only where Slurm runs (a slurm.conf and a live slurmd): slurmd and slurmctld
reachable, the cgroup plugins that confine a job to its GPUs, ``ConstrainDevices``, and
gres.conf's GPU device files against the GPUs NVML lists.
"""

from __future__ import annotations

from gputui.core.record import record

#: The Slurm checks, in order (listed after the checklist of every run, on Slurm nodes only).
SLURM_CHECKS = ("slurm-daemons", "slurm-cgroup", "slurm-constrain-devices", "slurm-gres")


@record
class SlurmFacts:
    node: str
    conf_path: str
    slurmd_pid: int
    #: whether `scontrol ping` said the controller is UP, and what it said otherwise
    controller_up: bool
    controller_error: str | None = None
    proctrack: str | None = None
    task_plugin: str | None = None
    #: cgroup.conf's ConstrainDevices (None: no cgroup.conf or not set)
    constrain_devices: bool | None = None
    #: gres.conf's GPU device files for this node and their minors (None: not a /dev/nvidiaN device)
    gres_files: tuple[str, ...] = ()
    gres_minors: tuple[int | None, ...] = ()
    #: (NVML index, minor) of every GPU NVML lists
    nvml_minors: tuple[tuple[int, int | None], ...] = ()


def check_slurm(f: SlurmFacts) -> list[tuple[str, str, str, str | None]]:
    """(name, status, message, fix) for each Slurm check."""
    out: list[tuple[str, str, str, str | None]] = []
    if f.controller_up:
        out.append(("slurm-daemons", "pass", f"slurmd runs (PID {f.slurmd_pid}, node {f.node}) and slurmctld "
                                             "answers.", None))
    else:
        out.append(("slurm-daemons", "warn", f"slurmd runs (PID {f.slurmd_pid}, node {f.node}) but slurmctld does "
                                             f"not answer ({f.controller_error or 'no reply'}): jobs' owners, names "
                                             "and GPUs are unknown until it does.",
                    "Check the controller (`scontrol ping`, `systemctl status slurmctld` on its host) and the "
                    "network between them."))
    cgroup = f.proctrack == "proctrack/cgroup" and "task/cgroup" in (f.task_plugin or "")
    if cgroup:
        out.append(("slurm-cgroup", "pass", "Slurm tracks and confines jobs with its cgroup plugins, so each GPU "
                                            "process's job is read from its cgroup.", None))
    else:
        out.append(("slurm-cgroup", "warn", f"Slurm runs {f.proctrack or 'its default process tracking'} with "
                                            f"{f.task_plugin or 'no task plugin'}: jobs are not confined to their "
                                            "GPUs, and gputui finds a process's job through `scontrol listpids`.",
                    "Set ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity in slurm.conf "
                    "(and a cgroup.conf), then restart slurmd."))
    if f.constrain_devices:
        out.append(("slurm-constrain-devices", "pass", "ConstrainDevices=yes: a job can open only the GPUs it "
                                                       "was allocated.", None))
    else:
        out.append(("slurm-constrain-devices", "warn", "ConstrainDevices is not set: a job can open GPUs outside "
                                                       "its allocation (gputui reports them as "
                                                       "outside_allocation).",
                    "Set ConstrainDevices=yes in cgroup.conf (with TaskPlugin=task/cgroup), then restart slurmd."))
    out.append(_check_gres(f))
    return out


def _check_gres(f: SlurmFacts) -> tuple[str, str, str, str | None]:
    nvml = {m: i for i, m in f.nvml_minors if m is not None}
    if not f.gres_files:
        return ("slurm-gres", "warn", f"gres.conf names no GPU device files for node {f.node}: gputui takes GRES "
                                      "index N to be /dev/nvidiaN.",
                "List the GPUs in gres.conf (`Name=gpu File=/dev/nvidia[0-N]`) or use AutoDetect=nvml.")
    bad = [p for p, m in zip(f.gres_files, f.gres_minors, strict=False) if m is None]
    if bad:
        return ("slurm-gres", "fail", f"gres.conf lists {', '.join(bad[:4])}, which "
                                      f"{'is' if len(bad) == 1 else 'are'} not an NVIDIA device node, so Slurm "
                                      "gives jobs no GPU settings.",
                "Point File= at the /dev/nvidiaN character devices.")
    listed = {m for m in f.gres_minors if m is not None}
    unknown = sorted(listed - set(nvml))
    missing = sorted(set(nvml) - listed)
    if unknown:
        return ("slurm-gres", "fail", f"gres.conf lists /dev/nvidia minors {', '.join(map(str, unknown))}, which "
                                      "NVML does not list: Slurm allocates GPUs that are not there.",
                "Make gres.conf's File= lines match the GPUs `nvidia-smi -L` lists, then restart slurmd.")
    if missing:
        gpus = ", ".join(f"GPU {nvml[m]}" for m in missing)
        return ("slurm-gres", "warn", f"{gpus} {'is' if len(missing) == 1 else 'are'} not in gres.conf: Slurm "
                                      "never allocates it, and jobs cannot be confined away from it.",
                "Add the GPU's /dev/nvidiaN to gres.conf, or leave it out on purpose for non-Slurm use.")
    return ("slurm-gres", "pass", f"gres.conf's {len(listed)} GPU device"
                                  f"{'s' if len(listed) != 1 else ''} match the GPUs NVML lists.", None)
