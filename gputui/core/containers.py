"""Containers in a snapshot: what each was granted against what it really uses.

The field's first root cause of "everything lands on GPU 0" is containers asking
for GPUs independently and blindly. This judge puts each container's grant (from
:mod:`gputui.core.sources.docker_source`) next to the GPUs its processes run on (from the
cgroup attribution in the poller) and names what is wrong, one sentence each:

``unpinned``
    It can use every GPU (``--gpus all``, ``NVIDIA_VISIBLE_DEVICES=all`` with the
    nvidia runtime, CDI ``nvidia.com/gpu=all``) and no ``CUDA_VISIBLE_DEVICES``
    narrows it: CUDA then starts on device 0, which is how such jobs pile up on GPU 0.
``misplaced``
    Its processes run on a GPU outside its grant, or all of them on the first of
    several GPUs it was given (the others wait for it in vain). A container granted
    MIG devices (``MIG-…``) is judged per instance: a process on another instance of
    the same card is misplaced too.
``env-conflict``
    ``CUDA_VISIBLE_DEVICES`` or ``NVIDIA_VISIBLE_DEVICES`` disagree with the grant,
    or the grant names a GPU that does not exist. ``CUDA_VISIBLE_DEVICES`` indices
    are *container-relative*: with ``--gpus device=2`` the container sees one GPU,
    its device 0, so ``CUDA_VISIBLE_DEVICES=3`` names nothing.
``idle-grant``
    It holds a GPU on which none of its processes ran during the observed window
    (``settings.idle_grant_window``). A container that started less than a minute
    ago is not judged yet (CUDA may still be initialising), and when gputui has
    watched for less than the window the sentence says how long it looked (a single
    ``gputui snapshot`` sees one sample) instead of claiming more.

The function is pure: records, GPUs, history and clock in, containers out.
Containers that the engine's API does not describe (Kubernetes pods, podman, or
Docker while its daemon is unavailable) are listed from their processes alone,
without findings, since their grant is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.text import duration, gpus_phrase
from gputui.core.mig import parse_mig_ref
from gputui.core.model import Container, ContainerRecord, ContainerRef, Finding, Gpu, Process, match_uuid
from gputui.core.record import replace

#: A container younger than this (seconds) is not judged for idle grants yet.
IDLE_GRACE = 60.0


def build_containers(records: Sequence[ContainerRecord], gpus: Sequence[Gpu], history: History | None,
                     settings: Settings, now: float) -> tuple[Container, ...]:
    """Every live container that has a GPU grant or a GPU process, judged. Sorted by name."""
    procs_by_cid: dict[str, list[Process]] = {}
    refs: dict[str, ContainerRef] = {}
    for g in gpus:
        for p in g.processes:
            if p.container is not None:
                procs_by_cid.setdefault(p.container.id, []).append(p)
                refs.setdefault(p.container.id, p.container)
    host = _Host(gpus)
    out: list[Container] = []
    known: set[str] = set()
    for r in records:
        known.add(r.id)
        procs = procs_by_cid.get(r.id, [])
        has_grant = r.gpus == "all" or bool(r.gpus) or r.grant_source != "none" or bool(r.grant_problems)
        if not has_grant and not procs:
            continue
        out.append(_judge(r, procs, host, history, settings, now))
    for cid, procs in procs_by_cid.items():
        if cid not in known:
            out.append(_unmanaged(refs[cid], procs))
    return tuple(sorted(out, key=lambda c: (c.name, c.id)))


class _Host:
    """This host's GPUs, for resolving UUIDs and indices (a MIG device's UUID resolves to its card)."""

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        self.indices = tuple(sorted(g.index for g in gpus))
        self.by_uuid = {g.uuid.lower(): g.index for g in gpus}
        self.mig_by_uuid = {m.uuid.lower(): (g.index, m.index) for g in gpus for m in g.mig_devices}
        self.mig_uuid = {(g.index, m.index): m.uuid for g in gpus for m in g.mig_devices}

    def index_of(self, ident: str) -> int | None:
        """A GPU or MIG UUID (or unique UUID prefix, as CUDA accepts) -> host index of the card."""
        uuid = match_uuid(ident, self.by_uuid)
        if uuid is not None:
            return self.by_uuid[uuid]
        mig = self.mig_of(ident)
        return None if mig is None else mig[0]

    def mig_of(self, ident: str) -> tuple[int, int] | None:
        """A MIG UUID (or unique prefix) or ``GPU:instance`` -> (card index, MIG device index)."""
        ref = parse_mig_ref(ident)
        if ref is not None:
            return ref if ref in self.mig_uuid else None
        uuid = match_uuid(ident, self.mig_by_uuid)
        return None if uuid is None else self.mig_by_uuid[uuid]

    def mig_problem(self, ident: str) -> str | None:
        """Why a MIG reference in a grant names nothing on this host, or None."""
        ref = parse_mig_ref(ident)
        if ref is None and not ident.strip().upper().startswith("MIG-"):
            return None
        if self.mig_of(ident) is not None:
            return None
        if ref is not None:
            return (f"its grant names MIG device {ident}, but GPU {ref[0]} has no MIG device {ref[1]}"
                    if ref[0] in self.indices else f"its grant names MIG device {ident}, but there is no GPU {ref[0]}")
        return f"its grant names MIG device {ident}, which does not exist on this host (destroyed or recreated?)"

    def normalize(self, ident: str) -> str:
        """A MIG reference as its ``MIG-`` UUID where it exists (the JSON lists UUIDs)."""
        mig = self.mig_of(ident)
        return self.mig_uuid[mig] if mig is not None else ident


def _usage(procs: Iterable[Process]) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    procs = list(procs)
    used = tuple(sorted({p.gpu_index for p in procs}))
    memory = sum(p.gpu_memory or 0 for p in procs)
    pids = tuple(sorted({p.pid for p in procs}))
    return used, memory, pids


def _unmanaged(ref: ContainerRef, procs: list[Process]) -> Container:
    used, memory, pids = _usage(procs)
    return Container(
        id=ref.id, name=ref.label, image=ref.image, state="running", gpus=(), grant_source="none",
        cuda_visible_devices=None, gpu_memory=memory, pids=pids, findings=(),
        compose_project=ref.compose_project, compose_service=ref.compose_service, runtime=ref.runtime,
        used_gpus=used, granted_gpus=(), grant_known=False,
        namespace=ref.namespace, pod=ref.pod, pod_uid=ref.pod_uid,
    )


def _judge(r: ContainerRecord, procs: list[Process], host: _Host, history: History | None,
           settings: Settings, now: float) -> Container:
    used, memory, pids = _usage(procs)
    mig_problems: list[str] = []
    if r.gpus == "all":
        granted = host.indices
        granted_migs: set[tuple[int, int]] = set()
    else:
        granted = tuple(sorted({i for i in (host.index_of(u) for u in r.gpus) if i is not None}))
        granted_migs = {m for m in (host.mig_of(u) for u in r.gpus) if m is not None}
        mig_problems = [p for p in (host.mig_problem(u) for u in r.gpus) if p is not None]
        r = replace(r, gpus=tuple(dict.fromkeys(host.normalize(u) for u in r.gpus)))
    findings: list[Finding] = []
    grant = grant_phrase(r)
    name = r.name

    # What CUDA inside the container is allowed to see: the grant, narrowed by CUDA_VISIBLE_DEVICES.
    narrowed, cvd_problem = _cuda_visible(r.cuda_visible_devices, granted, host, grant, granted_migs)
    effective = narrowed if narrowed is not None else granted

    # unpinned
    if r.gpus == "all" and len(host.indices) > 1 and (narrowed is None or set(narrowed) == set(host.indices)):
        where = f"its processes landed on {gpus_phrase(used)}" if used else "it runs nothing on a GPU yet"
        findings.append(Finding(
            "unpinned",
            f"{name} can use all {len(host.indices)} GPUs ({grant}) and nothing narrows it; {where}.",
        ))

    # misplaced
    first_only = False
    has_grant = r.gpus == "all" or bool(r.gpus)
    outside = [i for i in used if i not in granted]
    if outside and has_grant:
        findings.append(Finding(
            "misplaced",
            f"{name} runs on {gpus_phrase(outside)}, outside its grant ({grant} = {gpus_phrase(granted)})."
            if granted else f"{name} runs on {gpus_phrase(outside)}, outside its grant ({grant}).",
        ))
    elif outside and not r.grant_problems:
        findings.append(Finding(
            "misplaced",
            f"{name} runs on {gpus_phrase(outside)} although Docker gave it no GPU "
            "(a privileged container or a device mounted by hand).",
        ))
    elif (wrong := _other_instances(procs, granted_migs)):
        findings.append(Finding(
            "misplaced",
            f"{name} runs on MIG device {', '.join(wrong)}, outside its grant ({grant} = MIG device "
            f"{', '.join(f'{g}:{m}' for g, m in sorted(granted_migs))}).",
        ))
    elif used and len(effective) >= 2 and (r.gpus != "all" or narrowed is not None) \
            and set(used) == {min(effective)}:
        first_only = True
        findings.append(Finding(
            "misplaced",
            f"{name} was given {gpus_phrase(effective)} but all its processes run on GPU {min(effective)}, "
            "the first of them; the others sit unused.",
        ))

    # env-conflict
    for problem in (*r.grant_problems, *mig_problems):
        findings.append(Finding("env-conflict", f"{name}: {problem}."))
    if cvd_problem is not None:
        findings.append(Finding("env-conflict", f"{name}: {cvd_problem}."))
    nvd_problem = _nvidia_visible_conflict(r, granted, host, grant)
    if nvd_problem is not None:
        findings.append(Finding("env-conflict", f"{name}: {nvd_problem}."))

    # idle-grant
    if r.gpus != "all" and granted and not first_only:
        idle = _idle_grant(r, granted, used, history, settings, now, granted_migs)
        if idle is not None:
            findings.append(Finding("idle-grant", idle[0], provisional=idle[1]))

    return Container(
        id=r.id, name=r.name, image=r.image, state=r.state, gpus=r.gpus, grant_source=r.grant_source,
        cuda_visible_devices=r.cuda_visible_devices, gpu_memory=memory, pids=pids, findings=tuple(findings),
        compose_project=r.compose_project, compose_service=r.compose_service, runtime=r.runtime,
        used_gpus=used, granted_gpus=granted, restart_policy=r.restart_policy,
        namespace=r.namespace, pod=r.pod, pod_uid=r.pod_uid,
    )


def _other_instances(procs: Iterable[Process], granted_migs: set[tuple[int, int]]) -> list[str]:
    """MIG devices (``g:m``) its processes run on that its MIG grant does not name, on cards it holds by instance."""
    cards = {g for g, _ in granted_migs}
    return sorted({f"{p.gpu_index}:{p.mig_device}" for p in procs
                   if p.mig_device is not None and p.gpu_index in cards
                   and (p.gpu_index, p.mig_device) not in granted_migs})


def _cuda_visible(value: str | None, granted: tuple[int, ...], host: _Host, grant: str,
                  granted_migs: set[tuple[int, int]] | None = None) -> tuple[tuple[int, ...] | None, str | None]:
    """(host GPUs CUDA may use, problem) for a container's CUDA_VISIBLE_DEVICES.

    Integers index the GPUs *inside* the container (its grant, in host order);
    UUIDs (or unique prefixes) name GPUs directly. CUDA stops at the first entry
    that names no device and uses only the ones before it. ``None`` means "not
    set": no narrowing.
    """
    if value is None:
        return None, None
    tokens = [t.strip() for t in value.split(",")]
    if value.strip() == "":
        return (), ("CUDA_VISIBLE_DEVICES is empty, which hides " +
                    (f"its granted {gpus_phrase(granted)} from CUDA" if granted else "every GPU from CUDA"))
    picked: list[int] = []
    for tok in tokens:
        if re.fullmatch(r"-?\d+", tok):
            i = int(tok)
            if 0 <= i < len(granted):
                if granted[i] not in picked:
                    picked.append(granted[i])
                continue
            inside = (f"only device 0 (host GPU {granted[0]})" if len(granted) == 1 else
                      f"only devices 0-{len(granted) - 1} ({gpus_phrase(granted)})" if granted else "no GPU")
            return tuple(picked), (f"CUDA_VISIBLE_DEVICES={value} names device {tok}, but inside the container "
                                   f"{grant} leaves {inside}, so that GPU does not exist there")
        index = host.index_of(tok)
        if index is None:
            return tuple(picked), f"CUDA_VISIBLE_DEVICES={value} names {_short(tok)}, which is not a GPU on this host"
        mig = host.mig_of(tok)
        if mig is not None and granted_migs and mig not in granted_migs:
            return tuple(picked), (f"CUDA_VISIBLE_DEVICES={value} names MIG device {mig[0]}:{mig[1]}, which is not "
                                   f"granted to it ({grant} = MIG device "
                                   f"{', '.join(f'{g}:{m}' for g, m in sorted(granted_migs))})")
        if index not in granted:
            return tuple(picked), (f"CUDA_VISIBLE_DEVICES={value} names GPU {index}, which is not granted to it "
                                   f"({grant} = {gpus_phrase(granted) if granted else 'no GPU'})")
        if index not in picked:
            picked.append(index)
    return tuple(picked), None


def _nvidia_visible_conflict(r: ContainerRecord, granted: tuple[int, ...], host: _Host, grant: str) -> str | None:
    """An explicit NVIDIA_VISIBLE_DEVICES that says something else than the grant Docker applies."""
    value = r.nvidia_visible_devices
    if value is None or r.grant_source == "nvidia_runtime_env":
        return None  # with the nvidia runtime the variable *is* the grant
    text = value.strip()
    if r.grant_source == "none":
        return (f"NVIDIA_VISIBLE_DEVICES={text} has no effect: the container was started without --gpus "
                "or the nvidia runtime")
    wanted: set[int] = set()
    if text.lower() == "all":
        wanted = set(host.indices)
    elif text.lower() not in ("", "none", "void"):
        for tok in (t.strip() for t in text.split(",") if t.strip()):
            if tok.isdigit():
                if int(tok) not in host.indices:
                    return f"NVIDIA_VISIBLE_DEVICES={text} names GPU {tok}, which does not exist on this host"
                wanted.add(int(tok))
            else:
                index = host.index_of(tok)
                if index is None:
                    return f"NVIDIA_VISIBLE_DEVICES={text} names {_short(tok)}, which is not a GPU on this host"
                wanted.add(index)
    if wanted == set(granted):
        return None
    got = gpus_phrase(granted) if granted else "no GPU"
    return f"NVIDIA_VISIBLE_DEVICES={text} disagrees with {grant}; Docker's grant wins, so it gets {got}"


def _idle_grant(r: ContainerRecord, granted: tuple[int, ...], used_now: tuple[int, ...],
                history: History | None, settings: Settings, now: float,
                granted_migs: set[tuple[int, int]] | None = None) -> tuple[str, bool] | None:
    """(message, provisional) when a granted GPU saw none of the container's processes; provisional
    while gputui has watched for less than the idle window."""
    window = settings.idle_grant_window
    if r.started_at is not None and now - r.started_at < min(IDLE_GRACE, window):
        return None  # just started: its CUDA context may not exist yet
    samples = history.container(r.id, window=window) if history is not None else ()
    ran: set[int] = set(used_now)
    for _, per_gpu in samples:
        ran.update(per_gpu)
    idle = [i for i in granted if i not in ran]
    if not idle:
        return None
    paused = " (it is paused)" if r.state == "paused" else ""
    migs = sorted(m for m in granted_migs or () if m[0] in idle)
    whole = [i for i in idle if i not in {g for g, _ in migs}]
    what = gpus_phrase(whole)
    if migs:  # a card held by instance is named by its instances
        inst = "MIG device " + ", ".join(f"{g}:{m}" for g, m in migs)
        what = f"{what} and {inst}" if whole else inst
    held = f"{r.name} holds {what}{paused}"
    observed = (samples[-1][0] - samples[0][0]) if len(samples) > 1 else 0.0
    if observed >= window * 0.98:
        return f"{held} but ran nothing there during the last {duration(window)}.", False
    if observed <= 0:
        message = f"Provisional: {held} but runs nothing there in one sample (the idle window is {duration(window)})."
        return message, True
    message = (f"Provisional: {held} but ran nothing there in the {duration(observed)} watched so far (the idle "
               f"window is {duration(window)}).")
    return message, True


# -- wording ----------------------------------------------------------------------

def _short(ident: str) -> str:
    return ident if len(ident) <= 16 else ident[:12] + "…"


def grant_phrase(r: ContainerRecord) -> str:
    """The grant as the user wrote it: "--gpus device=2", "--gpus all", "NVIDIA_VISIBLE_DEVICES=1 (nvidia runtime)"."""
    raw = [_short(x) for x in r.grant_raw]
    if r.grant_source == "device_request":
        if r.gpus == "all" and (not raw or raw == ["all"]):
            return "--gpus all"
        if len(raw) == 1 and raw[0].startswith("count="):
            return f"--gpus {raw[0][len('count='):]}"
        return "--gpus device=" + ",".join(raw) if raw else "a device request"
    if r.grant_source == "nvidia_runtime_env":
        how = "the NVIDIA hook" if r.runtime == "podman" else "the nvidia runtime"
        return f"NVIDIA_VISIBLE_DEVICES={','.join(raw) or 'all'} with {how}"
    if r.grant_source in ("cdi", "devices"):
        return "--device " + ",".join(raw)
    if r.grant_source == "kubelet":
        return "nvidia.com/gpu " + ",".join(raw) + " (the kubelet's allocation)"
    return "no GPU grant"
