"""A simulated 8-GPU server, shaped like the field's story of a shared box.

It implements the GPU, process and container source protocols, so ``--demo``
runs the real poller, judges, CLI and app. What it simulates:

* GPU 0 carries a pile-up: a pinned trainer, a ``--gpus all`` container that
  landed there by default, and a bare host job, near 95 % busy and warm.
* GPUs 1-3 and 5-7 are mostly idle (~5-20 %).
* GPU 4's memory is almost full at ~0 % compute (a cache warmer).
* A notebook on GPU 3 has held 30 GiB with no compute for hours, and an orphaned
  dataloader worker (its trainer died) holds 3 GiB on GPU 0.
* One container's CUDA_VISIBLE_DEVICES conflicts with its device request; one
  container was granted GPU 7 and never used it.
* GPU 5 is in MIG mode, split into three instances (3g.40gb, 2g.20gb, 2g.20gb)
  used by the ``inference-api`` container (granted its instance by ``MIG-``
  UUID), bob's evaluation and alice's distillation; like a real driver it
  reports no load for the card, only per-instance memory.
* Processes belong to alice, bob, carol and root.
* Slurm runs here too: carol's sweep on GPU 6 is job 81734, which holds GPU 6
  through its GRES (so ``pick`` never offers it); ``kill --job 81734`` cancels
  it on the simulation. The demo's containers run outside Slurm by design, so
  the ``no_job`` finding is not judged here.
* House rules: at most three GPUs per user, GPU 7 reserved for ``@vision`` and
  GPU 2 for bob, where root's eval-server still runs (a ``reserved`` violation).
* Every GPU reports the dcgm-exporter parity readings (reserved memory, HBM
  temperature, energy, PCIe replays, encoder/decoder load, remapped rows, XID).

Values are smooth functions of the clock, so a frozen clock gives a frozen
machine (snapshot tests) and a running clock gives moving graphs. Migration and
kill act on the simulation.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from gputui.core.model import (
    ContainerInventory,
    ContainerRecord,
    Gpu,
    GpuReading,
    GrantSource,
    MigDevice,
    MigMode,
    ProcessFacts,
    ProcessType,
    RawProcess,
)
from gputui.core.plausible import plausible_reading
from gputui.core.record import field, record, replace

if TYPE_CHECKING:
    from gputui.core.rules import HouseRules
    from gputui.core.sources.slurm import SlurmReading

GIB = 1024**3
MIB = 1024**2

#: A fixed "now" used when a frozen demo is asked for (screenshots, snapshot tests).
FROZEN_EPOCH = 1_780_000_000.0  # 2026-05-28T20:26:40Z
#: the demo's one Slurm job (carol's sweep on GPU 6)
DEMO_JOB = "81734"


def _cid(name: str) -> str:
    return hashlib.sha256(f"gputui-demo:{name}".encode()).hexdigest()


def _uuid(index: int) -> str:
    h = hashlib.md5(f"demo-gpu-{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def mig_uuid(gpu: int, mig: int) -> str:
    """The ``MIG-`` UUID of the demo's MIG device ``gpu:mig``."""
    h = hashlib.md5(f"demo-mig-{gpu}-{mig}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@record
class SimMig:
    """One MIG device of a simulated card in MIG mode."""

    index: int
    gpu_instance_id: int
    profile: str
    memory_total: int
    sm_count: int


@record(frozen=False)
class SimProcess:
    pid: int
    gpu: int
    user: str
    uid: int
    command: str
    memory: int
    #: mean SM utilisation and its wobble amplitude
    sm: float
    wobble: float = 4.0
    cpu: float = 50.0
    host_memory: int = 4 * GIB
    age: float = 3600.0
    container: str | None = None
    ppid: int = 1000
    orphaned: bool = False
    status: str = "running"
    ptype: ProcessType = "compute"
    #: the MIG device it runs on (index within its GPU), None on a whole GPU
    mig: int | None = None
    #: the Slurm job it runs in (its cgroup says so), None outside Slurm
    job: str | None = None


@record(frozen=False)
class SimContainer:
    name: str
    image: str
    grant: tuple[str, ...] | str  # device ids as written, or "all"
    grant_source: GrantSource = "device_request"
    cuda_visible_devices: str | None = None
    compose_project: str | None = None
    compose_service: str | None = None
    state: str = "running"
    restart_policy: str = "unless-stopped"
    main_pid: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return _cid(self.name)


class DemoMachine:
    """The simulated server. Thread-safe: actions may run while a poll reads."""

    host = "gpu-node-07"
    driver_version = "550.127.05"
    cuda_driver_version = "12.4"
    gpu_name = "NVIDIA A100-SXM4-80GB"
    memory_total = 80 * GIB

    def __init__(self, clock: Callable[[], float] | None = None, n_gpus: int = 8) -> None:
        self.clock: Callable[[], float] = clock or time.time
        self.n_gpus = n_gpus
        self._lock = threading.Lock()
        self._t0 = self.clock()
        self.containers: dict[str, SimContainer] = {}
        self.procs: dict[int, SimProcess] = {}
        #: GPUs in MIG mode and their MIG devices
        self.migs: dict[int, tuple[SimMig, ...]] = {}
        self._build()
        self._initial = tuple(self.procs.values())
        #: the demo's Slurm and house rules, read by the poller like the real ones
        self.slurm = DemoSlurm(self)
        self.house_rules = DemoHouseRules(self._t0, self.n_gpus)

    # -- the scenario --------------------------------------------------------
    def _build(self) -> None:
        C = SimContainer
        for c in (
            C("llama-train", "registry.local/research/llama-train:2.3", ("0",),
              compose_project="research", compose_service="trainer", main_pid=4101),
            C("bert-finetune", "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", "all", main_pid=4201),
            C("worker-2", "deep-learning-image:latest", "all", cuda_visible_devices="1", main_pid=4301),
            C("eval-server", "registry.local/eval/server:1.8", ("2",), cuda_visible_devices="3",
              compose_project="eval", compose_service="api", main_pid=4401),
            C("jupyter-alice", "jupyter/pytorch-notebook:cuda12", ("3",), main_pid=4501,
              restart_policy="no"),
            C("vllm-cache", "vllm/vllm-openai:v0.6.3", ("4",), compose_project="serving",
              compose_service="cache", main_pid=4601),
            C("inference-api", "registry.local/serving/api:5.1", (mig_uuid(5, 0),), compose_project="serving",
              compose_service="api", main_pid=4701),
            C("batch-reserve", "registry.local/batch/runner:0.9", ("7",), main_pid=4801),
        ):
            self.containers[c.id] = c
        cid = {c.name: c.id for c in self.containers.values()}
        P = SimProcess
        for p in (
            P(4101, 0, "alice", 1001, "python -m torch.distributed.run --nproc_per_node=1 train_llama.py --bf16",
              34 * GIB, 56, 4, cpu=98, host_memory=22 * GIB, age=5 * 3600 + 1200, container=cid["llama-train"]),
            P(4201, 0, "bob", 1002, "python finetune.py --model bert-large --epochs 20",
              18 * GIB, 32, 4, cpu=85, host_memory=9 * GIB, age=2 * 3600 + 300, container=cid["bert-finetune"]),
            P(5120, 0, "bob", 1002, "python train.py --config configs/resnet152.yaml",
              9 * GIB, 8, 2, cpu=64, host_memory=6 * GIB, age=40 * 60, ppid=5100),
            P(5388, 0, "carol", 1003, "python -c from torch.utils.data import DataLoader  # worker 3",
              3 * GIB, 0, 0, cpu=0.0, host_memory=2 * GIB, age=9 * 3600, ppid=1, orphaned=True,
              status="sleeping"),
            P(4301, 1, "carol", 1003, "python worker.py --queue embeddings",
              11 * GIB, 14, 5, cpu=40, host_memory=5 * GIB, age=7200, container=cid["worker-2"]),
            P(4401, 2, "root", 0, "python serve_eval.py --port 8080",
              7 * GIB, 12, 6, cpu=22, host_memory=3 * GIB, age=26 * 3600, container=cid["eval-server"]),
            P(4501, 3, "alice", 1001, "/opt/conda/bin/python -m ipykernel_launcher -f kernel-7f3a.json",
              30 * GIB, 0, 0, cpu=0.1, host_memory=6 * GIB, age=19 * 3600, container=cid["jupyter-alice"],
              status="sleeping"),
            P(4601, 4, "root", 0, "python -m vllm.entrypoints.openai.api_server --gpu-memory-utilization 0.95",
              int(77.5 * GIB), 0, 1, cpu=1.5, host_memory=12 * GIB, age=3 * 86400,
              container=cid["vllm-cache"]),
            P(4701, 5, "root", 0, "gunicorn api:app -w 2 -k uvicorn.workers.UvicornWorker",
              6 * GIB, 16, 8, cpu=30, host_memory=4 * GIB, age=4 * 86400, container=cid["inference-api"], mig=0),
            P(6010, 6, "carol", 1003, "python sweep.py --trial 17",
              2 * GIB, 9, 6, cpu=35, host_memory=3 * GIB, age=900, ppid=6000, job=DEMO_JOB),
            P(6120, 5, "bob", 1002, "python eval_small.py --shard 2",
              int(8.5 * GIB), 30, 8, cpu=60, host_memory=4 * GIB, age=1800, ppid=6100, mig=1),
            P(6230, 5, "alice", 1001, "python distill.py --student tiny --teacher llama-8b",
              5 * GIB, 20, 5, cpu=45, host_memory=5 * GIB, age=3 * 3600, ppid=6200, mig=2),
        ):
            self.procs[p.pid] = p
        if self.n_gpus > 5:
            self.migs[5] = (
                SimMig(0, 1, "3g.40gb", 40192 * MIB, 42),
                SimMig(1, 5, "2g.20gb", 19968 * MIB, 28),
                SimMig(2, 6, "2g.20gb", 19968 * MIB, 28),
            )

    # -- helpers -------------------------------------------------------------
    def _wave(self, t: float, seed: int, period: float = 47.0) -> float:
        """A smooth, deterministic wobble in [-1, 1]."""
        return 0.6 * math.sin(t / period + seed) + 0.4 * math.sin(t / (period * 0.37) + 2 * seed)

    def _energy(self, index: int, t: float) -> int:
        """mJ since the driver loaded (six days before the demo started), at the GPU's usual draw:
        it only grows, whatever the simulation does."""
        watts = 58 + 3.45 * min(98, sum(p.sm for p in self._initial if p.gpu == index) * 0.95)
        return int((6 * 86400 + max(0.0, t - self._t0)) * watts * 1000)

    def _sm(self, p: SimProcess, t: float) -> int:
        return int(max(0.0, min(100.0, p.sm + p.wobble * self._wave(t, p.pid))))

    def gpu_uuids(self) -> tuple[str, ...]:
        return tuple(_uuid(i) for i in range(self.n_gpus))

    # -- GpuSource -----------------------------------------------------------
    def read(self) -> GpuReading:
        t = self.clock()
        with self._lock:
            procs = list(self.procs.values())
        by_gpu: dict[int, list[SimProcess]] = {i: [] for i in range(self.n_gpus)}
        for p in procs:
            by_gpu.setdefault(p.gpu, []).append(p)
        gpus, raw = [], {}
        for i in range(self.n_gpus):
            plist = by_gpu.get(i, [])
            sms = [self._sm(p, t) for p in plist]
            # NVML utilization is "share of time a kernel ran": jobs sharing a card saturate it short of 100.
            util = min(98, round(sum(sms) * 0.95) + (2 if plist else 0))
            used = sum(p.memory for p in plist) + (600 * MIB if plist else 4 * MIB)
            temp = int(31 + 0.55 * util + 2 * self._wave(t, 100 + i, 90))
            power_limit = 400.0
            power = round(min(power_limit, 58 + 3.45 * util + 6 * self._wave(t, 200 + i, 30)), 1)
            throttle: tuple[str, ...] = ()
            if util >= 90:
                throttle = ("sw_power_cap",)
            elif not plist:
                throttle = ("gpu_idle",)
            migs = self.migs.get(i)
            g = Gpu(
                index=i, uuid=_uuid(i), name=self.gpu_name, pci_bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
                utilization_gpu=int(util), utilization_memory=int(util * 0.45),
                memory_used=min(used, self.memory_total), memory_total=self.memory_total,
                temperature=temp, power_draw=power, power_limit=power_limit,
                fan_speed=None,  # SXM boards have no fan: shown as N/A, as on the real thing
                clock_sm=1410 if util > 5 else 210, clock_memory=1593, clock_sm_max=1410, clock_memory_max=1593,
                pstate=0 if util > 5 else 7 if not plist else 0, throttle_reasons=throttle, ecc_errors=0,
                persistence_mode=True, minor_number=i,
                mig_mode=MigMode(False, False),  # an A100 can do MIG; only GPU 5 is split
                # the dcgm-exporter parity readings (exporter --dcgm-names, the detail screen, JSON)
                memory_reserved=637 * MIB, memory_temperature=temp + 4,
                total_energy_consumption=self._energy(i, t), pcie_replay_counter=3 if i == 2 else 0,
                encoder_utilization=0, decoder_utilization=7 if i == 2 and plist else 0,
                remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remapped_rows_failure=False,
                xid_last=0,
            )
            if migs is not None:
                g = self._mig_card(g, migs, plist)
                sms = [None] * len(plist)  # type: ignore[list-item]  # no per-process load in MIG mode
            gpus.append(g)
            raw[i] = tuple(RawProcess(p.pid, p.ptype, p.memory, s, p.mig)
                           for p, s in zip(plist, sms, strict=True))
        # the same plausibility rule as NVML's readings, so every source is judged alike
        return plausible_reading(GpuReading(self.driver_version, self.cuda_driver_version, tuple(gpus), raw,
                                            nvml_version="12.550.127.05"))

    def _mig_card(self, g: Gpu, migs: tuple[SimMig, ...], plist: list[SimProcess]) -> Gpu:
        """A card in MIG mode as a real driver reports it: no load of its own, memory per instance."""
        devices = []
        for m in migs:
            on = [p for p in plist if p.mig == m.index]
            devices.append(MigDevice(
                index=m.index, uuid=mig_uuid(g.index, m.index), gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=0, profile=m.profile,
                memory_used=min(m.memory_total, sum(p.memory for p in on) + 13 * MIB), memory_total=m.memory_total,
                sm_count=m.sm_count, processes=tuple(p.pid for p in on),
            ))
        used = sum(d.memory_used or 0 for d in devices) + 600 * MIB
        return replace(g, utilization_gpu=None, utilization_memory=None, memory_used=used,
                       encoder_utilization=None, decoder_utilization=None,
                       mig_mode=MigMode(True, True), mig_devices=tuple(devices))

    def close(self) -> None:
        pass

    # -- ProcessSource -------------------------------------------------------
    def facts(self, pids: Iterable[int]) -> dict[int, ProcessFacts]:
        t = self.clock()
        out: dict[int, ProcessFacts] = {}
        with self._lock:
            procs = dict(self.procs)
        for pid in pids:
            p = procs.get(pid)
            if p is None:
                out[pid] = ProcessFacts(pid=pid, visible=False, invisible_reason="vanished")
                continue
            cgroup = f"0::/system.slice/docker-{p.container}.scope\n" if p.container else \
                f"0::/system.slice/slurmstepd.scope/job_{p.job}/step_0/user/task_0\n" if p.job else \
                f"0::/user.slice/user-{p.uid}.slice/session-{p.uid % 97}.scope\n"
            cpu = max(0.0, p.cpu + (p.cpu * 0.08) * self._wave(t, p.pid + 7, 13)) if p.cpu else 0.0
            out[pid] = ProcessFacts(
                pid=pid, visible=True, user=p.user, uid=p.uid, command=p.command,
                exe=p.command.split(" ", 1)[0].rsplit("/", 1)[-1], cpu_percent=round(cpu, 1),
                host_memory=p.host_memory, create_time=self._t0 - p.age, ppid=p.ppid, status=p.status,
                cgroup=cgroup, orphaned=p.orphaned,
            )
        return out

    # -- ContainerSource -----------------------------------------------------
    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        with self._lock:
            containers = list(self.containers.values())
        records = []
        for c in containers:
            if c.grant == "all":
                gpus: tuple[str, ...] | Literal["all"] = "all"
                raw: tuple[str, ...] = ("all",)
            else:
                raw = tuple(c.grant)
                gpus = tuple(d if d.startswith(("GPU-", "MIG-")) else gpu_uuids[int(d)] for d in c.grant
                             if d.startswith(("GPU-", "MIG-")) or int(d) < len(gpu_uuids))
            labels = dict(c.labels)
            if c.compose_project:
                labels.setdefault("com.docker.compose.project", c.compose_project)
                labels.setdefault("com.docker.compose.service", c.compose_service or c.name)
            records.append(ContainerRecord(
                id=c.id, name=c.name, image=c.image, state=c.state, compose_project=c.compose_project,
                compose_service=c.compose_service, gpus=gpus, grant_source=c.grant_source,
                cuda_visible_devices=c.cuda_visible_devices, grant_raw=raw, main_pid=c.main_pid,
                restart_policy=c.restart_policy, labels=labels,
            ))
        return ContainerInventory(True, None, tuple(records))

    def resolve(self, container_id: str) -> ContainerInventory:
        """The simulated container with this id, as ContainerSource promises (no PID-to-container lookup
        reaches the simulation today, but a demo machine must be a complete ContainerSource)."""
        inv = self.inventory(self.gpu_uuids(), {})
        return replace(inv, containers=tuple(r for r in inv.containers if r.id == container_id))

    # -- actions on the simulation ------------------------------------------
    def container_by_name(self, name_or_id: str) -> SimContainer | None:
        with self._lock:
            for c in self.containers.values():
                if name_or_id in (c.name, c.id) or (len(name_or_id) >= 4 and c.id.startswith(name_or_id)):
                    return c
        return None

    def move_container(self, name_or_id: str, to_gpu: int, to_mig: int | None = None) -> None:
        """Recreate the simulated container on another GPU (or MIG device ``to_gpu:to_mig``): its grant
        names the target's UUID and its processes move there (new PIDs, as a restart gives)."""
        c = self.container_by_name(name_or_id)
        if c is None:
            raise KeyError(f"no container named {name_or_id!r} on the demo server")
        if not 0 <= to_gpu < self.n_gpus:
            raise ValueError(f"the demo server has no GPU {to_gpu}")
        if (to_mig is None) != (to_gpu not in self.migs) or \
                to_mig is not None and not any(m.index == to_mig for m in self.migs[to_gpu]):
            raise ValueError(f"the demo server has no {'MIG device' if to_mig is not None else 'whole GPU'} "
                             f"{to_gpu}{'' if to_mig is None else f':{to_mig}'}")
        with self._lock:
            c.grant = (_uuid(to_gpu) if to_mig is None else mig_uuid(to_gpu, to_mig),)
            c.grant_source = "device_request"
            c.cuda_visible_devices = None if c.cuda_visible_devices not in (None, "0") else c.cuda_visible_devices
            moved = [p for p in self.procs.values() if p.container == c.id]
            next_pid = max(self.procs) + 1
            for p in moved:
                del self.procs[p.pid]
                p.pid, p.gpu, p.age, p.mig = next_pid, to_gpu, 0.0, to_mig
                self.procs[next_pid] = p
                next_pid += 1
            if moved:
                c.main_pid = moved[0].pid

    def kill_process(self, pid: int) -> int:
        """Remove a simulated process; returns the GPU memory it held."""
        with self._lock:
            p = self.procs.pop(pid, None)
        if p is None:
            raise ProcessLookupError(pid)
        return p.memory


class DemoSlurm:
    """The demo server's Slurm, a SlurmSource: job 81734 (carol's sweep) holds GPU 6 through its GRES
    until it is cancelled (``kill --job``), which ends its processes as scancel would."""

    def __init__(self, sim: DemoMachine) -> None:
        from gputui.core.sources.slurm import SlurmNode

        self.sim = sim
        self.node = SlurmNode(name=sim.host, conf_path="(demo)", slurmd_pid=0)
        #: the job's time limit ends two hours after its process started
        self._end = int(sim._t0 - 900 + 2 * 3600)
        self.cancelled = False

    def read(self, on_pids: Callable[[dict[int, tuple[str, str | None]]], object] | None = None) -> SlurmReading:
        from gputui.core.jobs_model import SchedulerJob
        from gputui.core.sources.slurm import SlurmReading

        with self.sim._lock:
            pids: dict[int, tuple[str, str | None]] = {p.pid: (p.job, "0") for p in self.sim.procs.values()
                                                       if p.job is not None}
        if on_pids is not None:
            on_pids(dict(pids))
        jobs = () if self.cancelled or self.sim.n_gpus <= 6 else (SchedulerJob(
            id=DEMO_JOB, user="carol", name="sweep", state="RUNNING", end_time=self._end, gres_indices=(6,)),)
        return SlurmReading(True, jobs=jobs, pids=pids)

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        from gputui.core.sources.slurm import SlurmError

        if job_id != DEMO_JOB or self.cancelled:
            raise SlurmError(f"the demo's Slurm has no job {job_id}.")
        with self.sim._lock:
            self.cancelled = True
            for pid in [p.pid for p in self.sim.procs.values() if p.job == job_id]:
                del self.sim.procs[pid]

    def close(self) -> None:
        pass


class DemoHouseRules:
    """The demo server's house rules, a HouseRulesSource: at most three GPUs per user, GPU 7 reserved
    for @vision for eight hours and GPU 2 for bob for two days (root's eval-server still runs there:
    a ``reserved`` violation)."""

    def __init__(self, t0: float, n_gpus: int) -> None:
        from gputui.core.rules import HouseRules, Limits, Reservation

        token = hashlib.sha256(b"gputui-demo").hexdigest()
        reservations = tuple(Reservation(id=rid, uuids=(_uuid(i),), indices=(i,), holder=holder,
                                         until=t0 + hours * 3600, created=t0 - 3600, created_by="root",
                                         token_sha256=token, note=note)
                             for rid, i, holder, hours, note in (("d3e00007", 7, "@vision", 8, "nightly eval"),
                                                                  ("d3e00002", 2, "bob", 48, "paper deadline"))
                             if i < n_gpus)
        self.rules = HouseRules(limits=Limits(max_gpus_per_user=3), reservations=reservations,
                                path="(demo house rules)")

    def read(self, now: float) -> HouseRules:
        return self.rules

    def close(self) -> None:
        pass
