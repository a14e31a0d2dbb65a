"""Move a container to another GPU: plan it, do it step by step, put everything back if a step fails.

Docker cannot change a running container's devices (``docker update`` cannot;
moby #47704), so a migration *recreates* the container with the same
configuration and a rewritten GPU grant. Operators will only use that if it can
never lose a container or its data, which shapes everything here:

* **The planner is pure.** :func:`plan_migration` turns the container's inspect
  data (``container.attrs``) into the create body of its successor. Everything is
  copied except what Docker generates (hostname = short id, endpoint ids, IPs,
  MACs, the short-id alias; static addresses are kept); anonymous volumes stay
  volume mounts of the *same* volume (a naive copy would mount new empty ones);
  an ``--entrypoint ""`` stays empty; the image is pinned by id if its tag has
  moved. The grant (read by the one grant model, :mod:`gputui.core.grants`) is
  rewritten entry by entry in the form the container used. The human diff is
  computed by comparing that body with the same body *without* the grant change,
  plus the effective command (what the copy would run), so any other change shows.
* **The executor is locked and journaled.** It holds the container's lock
  (:mod:`gputui.actions.locks`) and re-checks that the container is still the
  one planned. Before anything changes, the original inspect data goes to a
  journal (:mod:`gputui.actions.journal`). Then: restart policy
  ``no`` (so nothing revives the old one mid-swap), stop, rename to a backup
  name, create under the original name, start, verify, and only then remove the
  old container — never its volumes. Any failure undoes what was done, in
  reverse, and says what failed in one sentence; a stop Docker is still carrying
  out is waited for before the original is started again. A journal left by a
  crash is found by :func:`gputui.actions.journal.pending_journals` and finished
  or undone by :meth:`DockerMigrationEngine.recover`.
* **Engines.** :class:`DockerMigrationEngine` acts on a Docker daemon;
  :class:`DemoMigrationEngine` acts on the simulated server of ``--demo`` with
  the same planner, so the CLI and the UI run one code path.

Tests inject faults through :class:`MigrationHooks` (called before every step),
never by patching internals.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gputui.actions.container_ops import (
    STOP_GRACE,
    connect_networks,
    daemon_would_start,
    effective_command,
    running_command,
    wait_stopped,
)
from gputui.actions.journal import Journal, JournalError, PendingJournal, pending_journals
from gputui.actions.locks import ContainerLock, LockHeld
from gputui.core.errors import clause, sentence
from gputui.core.grants import Grant, GrantEntry, GrantForm, HostGpu, HostGpus, read_grant, rewrite_grant
from gputui.core.mig import parse_mig_ref, resolve_mig
from gputui.core.model import Gpu, MigDevice, Snapshot
from gputui.core.safe_text import clean as clean_text
from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    from gputui.core.config import Settings
    from gputui.core.demo import DemoMachine
    from gputui.core.machine import Machine

#: The executor's steps, in order. Progress callbacks and hooks receive these names.
STEPS: tuple[str, ...] = ("journal", "restart-policy", "stop", "rename", "create", "start", "verify", "remove-old")

STEP_TEXT = {
    "journal": "write the journal",
    "restart-policy": "set the old container's restart policy to 'no'",
    "stop": "stop the old container",
    "rename": "rename the old container to its backup name",
    "create": "create the new container",
    "start": "start the new container",
    "verify": "verify the new container",
    "remove-old": "remove the old container (keeping its volumes)",
}

#: The infix of backup names: ``<name>-gputui-old-<timestamp>``.
BACKUP_INFIX = "-gputui-old-"
#: The one sentence every read-only refusal of a migration gives (plan, execute, the CLI, the demo).
READ_ONLY = "Migration is disabled: gputui runs read-only (--read-only or read_only in the config file)."

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


# -- errors ---------------------------------------------------------------------------


class MigrationRefused(Exception):
    """Preflight said no. ``str(exc)`` is one sentence; ``kind`` is machine-readable."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MigrationNotFound(Exception):
    """The container (or GPU) the user named does not exist. One sentence."""


class MigrationUnavailable(Exception):
    """The container engine cannot be reached. One sentence."""


# -- the plan -------------------------------------------------------------------------


@dataclass(frozen=True)
class MigrationPlan:
    """Everything the executor needs and everything a person should see before saying yes."""

    container_id: str
    container_name: str
    #: The image as the user knows it (the tag), and what the new container is created from.
    image: str
    image_ref: str
    grant_form: GrantForm
    grant_before: str
    grant_after: str
    #: Host GPU indices the container leaves ("all" when it was granted every GPU).
    from_gpus: tuple[int, ...]
    from_all: bool
    to_gpu: int
    to_uuid: str
    backup_name: str
    stop_timeout: int
    stop_signal: str
    restart_policy: dict[str, Any] = field(hash=False, compare=False, repr=False)
    was_running: bool = True
    #: Stopped, but dockerd would start it at its next start (restart policy always): the copy is
    #: started, verified and stopped again, so Docker treats it the same.
    start_stopped: bool = False
    has_healthcheck: bool = False
    #: argv the container runs now; the copy must run the same (checked after create).
    command: tuple[str, ...] | None = None
    #: The create body (inspect-shaped Config + HostConfig + NetworkingConfig) of the new container.
    body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    #: The same body with the original grant: what recreates the original if all else is lost.
    original_body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    #: Networks joined after create (the API takes one at create time): (network, endpoint config).
    connect: tuple[tuple[str, dict[str, Any]], ...] = field(default=(), hash=False, compare=False, repr=False)
    #: "- path = old" / "+ path = new" lines: the grant change and nothing else.
    diff: tuple[str, ...] = ()
    #: What is carried over that a person may want to double-check (volumes, image pin, ...).
    keeps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: For compose-managed containers: the compose-file change that makes the move stick.
    compose_change: str | None = None
    peak_memory: int | None = None
    forced: bool = False
    demo: bool = False
    #: The target MIG device's index on GPU ``to_gpu`` (``to_uuid`` is then its MIG- UUID), None for a whole GPU.
    to_mig: int | None = None
    #: The MIG devices the container leaves ("5:0"), when it held MIG devices.
    from_migs: tuple[str, ...] = ()
    #: The original inspect data, written to the journal before anything changes.
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def from_label(self) -> str:
        if self.from_all:
            return "all GPUs"
        if self.from_migs:
            return "MIG device " + ", ".join(self.from_migs)
        if not self.from_gpus:
            return "an unknown GPU"
        return "GPU " + ", ".join(str(i) for i in self.from_gpus)

    @property
    def to_label(self) -> str:
        """"GPU 6", or "MIG device 5:2" for a MIG device."""
        return f"GPU {self.to_gpu}" if self.to_mig is None else f"MIG device {self.to_gpu}:{self.to_mig}"

    def summary(self) -> str:
        """One line: "bert-finetune: all GPUs -> GPU 6"."""
        return f"{self.container_name}: {self.from_label} -> {self.to_label}"

    def describe(self) -> str:
        """The multi-line plan printed by ``--dry-run`` and shown by the dialog."""
        lines = [
            f"Migrate container {self.container_name} ({self.container_id[:12]}) "
            f"from {self.from_label} to {self.to_label} ({self.to_uuid}).",
            f"  grant now:   {self.grant_before}",
            f"  grant after: {self.grant_after}",
        ]
        if self.peak_memory:
            lines.append(f"  observed peak GPU memory: {fmt_bytes(self.peak_memory)}")
        lines.append("Configuration change (everything else is copied as it is):")
        lines.extend(f"  {d}" for d in self.diff)
        if self.keeps:
            lines.append("Carried over:")
            lines.extend(f"  {k}" for k in self.keeps)
        lines.append("Steps:")
        for n, step in enumerate(STEPS, 1):
            text = STEP_TEXT[step]
            if step == "stop":
                text += f" ({self.stop_signal}, up to {self.stop_timeout} s)"
            if step == "rename":
                text += f" {self.backup_name}"
            if step == "restart-policy" and self.restart_policy.get("Name") in (None, "", "no"):
                text += " (already 'no')"
            if step == "stop" and not self.was_running or \
                    step in ("start", "verify") and not (self.was_running or self.start_stopped):
                text += " (skipped: the container is not running)"
            elif step == "verify" and self.start_stopped:
                text += ", then stop it again (the original was stopped)"
            lines.append(f"  {n}. {text}")
        lines.append(f"Logs: 'docker logs' of the copy starts empty; the old container's logs are deleted with "
                     f"it at step {len(STEPS)} (save them first: docker logs {self.container_name} > FILE).")
        for w in self.warnings:
            lines.append(f"Warning: {w}")
        if self.compose_change:
            lines.append("To make the move survive the next 'docker compose up', change the compose file:")
            lines.extend(f"  {ln}" for ln in self.compose_change.splitlines())
        # names, labels and env values are other people's text: one rule before any terminal sees them
        return "\n".join(clean_text(ln) for ln in lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container_name,
            "container_id": self.container_id,
            "from_gpus": "all" if self.from_all else list(self.from_gpus),
            "to_gpu": self.to_gpu,
            "to_mig": self.to_mig,
            "to_uuid": self.to_uuid,
            "grant_before": self.grant_before,
            "grant_after": self.grant_after,
            "diff": list(self.diff),
            "warnings": list(self.warnings),
            "compose_change": self.compose_change,
            "demo": self.demo,
        }


def resolve_target(gpus: tuple[Gpu, ...], text: str) -> Gpu:
    """GPU index or UUID (or a unique UUID prefix) -> the GPU. Raises MigrationNotFound / MigrationRefused."""
    t = str(text).strip()
    if t.lower().startswith("mig-"):
        raise MigrationRefused("mig", f"{t} is a MIG instance; gputui migrates containers between whole GPUs only.")
    key = HostGpus.of(gpus).resolve(t, "")[0] if (t.isdigit() or t.lower().startswith("gpu-")) else None
    idx = next((g.index for g in gpus if g.uuid == key), None)
    if idx is None:
        present = ", ".join(str(g.index) for g in gpus) or "none"
        raise MigrationNotFound(f"There is no GPU {t!r} on this machine (GPUs present: {present}).")
    return next(g for g in gpus if g.index == idx)


def resolve_destination(gpus: tuple[Gpu, ...], text: str) -> tuple[Gpu, MigDevice | None]:
    """``--to``: a whole GPU (index, UUID) or a MIG device (``GPU:instance``, ``MIG-`` UUID) -> (card, MIG
    device or None). A card in MIG mode is not a whole-GPU target: CUDA can use only its MIG devices."""
    t = str(text).strip()
    hit = resolve_mig(gpus, t)
    if hit is not None:
        return hit
    if parse_mig_ref(t) is not None or t.lower().startswith("mig-"):
        present = ", ".join(f"{g.index}:{m.index}" for g in gpus for m in g.mig_devices) or "none"
        raise MigrationNotFound(f"There is no MIG device {t!r} on this machine (MIG devices present: {present}).")
    g = resolve_target(gpus, t)
    if g.mig_enabled:
        choices = ", ".join(f"{g.index}:{m.index} ({m.profile or '?'})" for m in g.mig_devices) or \
            "none exist yet"
        raise MigrationRefused("mig-card", f"GPU {g.index} is split into MIG devices, so no container can be "
                                           f"given the whole card; choose one of them with --to: {choices}.")
    return g, None


def mig_target_refusal(card: Gpu, mig: MigDevice, peak_memory: int | None, force: bool = False,
                       name: str = "the container") -> str | None:
    """Why MIG device ``mig`` of ``card`` cannot take the container (one sentence), or None."""
    label = f"MIG device {card.index}:{mig.index} ({mig.profile or 'unknown profile'})"
    if card.lost:
        return f"GPU {card.index} is lost (it fell off the bus or stopped answering)."
    free = mig.memory_free
    if force or not peak_memory or free is None:
        return None
    if peak_memory > free:
        return (f"{label} has {fmt_bytes(free)} free but {name} has used up to {fmt_bytes(peak_memory)}; "
                f"use --force to move it anyway.")
    return None


def _name(attrs: dict[str, Any]) -> str:
    return (attrs.get("Name") or "").lstrip("/") or attrs.get("Id", "")[:12]


def _refers_to(ref: str, attrs: dict[str, Any]) -> bool:
    """Does a ``container:<ref>`` / VolumesFrom reference name this container?"""
    ref = ref.lstrip("/")
    if not ref:
        return False
    cid = attrs.get("Id", "")
    return ref == _name(attrs) or ref == cid or (len(ref) >= 3 and re.fullmatch(r"[0-9a-f]+", ref) is not None
                                                 and cid.startswith(ref))


def _preflight(attrs: dict[str, Any], others: Iterable[dict[str, Any]]) -> None:
    name = _name(attrs)
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    state = attrs.get("State") or {}
    hc = attrs.get("HostConfig") or {}
    if any(k.startswith("com.docker.swarm.") for k in labels):
        raise MigrationRefused("swarm", f"{name} is a Swarm task; change the service's placement with "
                                        "'docker service update' instead, or Swarm will replace the copy.")
    if any(k.startswith(("io.kubernetes.", "annotation.io.kubernetes.")) for k in labels):
        raise MigrationRefused("kubernetes", f"{name} is managed by Kubernetes; change the pod's GPU request "
                                             "instead, or the kubelet will undo the move.")
    if state.get("Paused"):
        raise MigrationRefused("paused", f"{name} is paused; unpause it before moving it.")
    if state.get("Restarting"):
        raise MigrationRefused("restarting", f"{name} is restarting over and over; fix it before moving it.")
    if state.get("Dead") or state.get("Status") in ("removing", "dead"):
        raise MigrationRefused("dead", f"{name} is {state.get('Status') or 'dead'}; there is nothing to move.")
    if hc.get("AutoRemove"):
        raise MigrationRefused("autoremove", f"{name} was started with --rm: stopping it deletes it and its "
                                             "anonymous volumes, so gputui could not put it back if the move failed.")
    for other in others:
        if other.get("Id") == attrs.get("Id"):
            continue
        ohc = other.get("HostConfig") or {}
        for key, what, flag in (("NetworkMode", "network", "--network"), ("PidMode", "PID", "--pid"),
                                ("IpcMode", "IPC", "--ipc")):
            value = ohc.get(key) or ""
            if value.startswith("container:") and _refers_to(value.split(":", 1)[1], attrs):
                raise MigrationRefused(
                    "shared-namespace",
                    f"Container {_name(other)} shares {name}'s {what} namespace ({flag} container:{name}); "
                    f"recreating {name} would cut it off.")
        for vf in ohc.get("VolumesFrom") or []:
            if _refers_to(vf.split(":", 1)[0], attrs):
                raise MigrationRefused(
                    "shared-volumes",
                    f"Container {_name(other)} mounts {name}'s volumes (--volumes-from {name}); "
                    f"recreating {name} would leave it pointing at a removed container.")


def _split_bind(bind: str) -> tuple[str, str, str]:
    parts = bind.split(":")
    if len(parts) >= 3:
        return parts[0], parts[1], ":".join(parts[2:])
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return "", parts[0], ""


def _create_body(
    attrs: dict[str, Any], image_ref: str, image_config: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[str]]:
    """The inspect data turned back into a create body, minus what Docker generates.

    Returns (body, extra network connections, human notes on what is carried over).
    """
    cid = attrs.get("Id", "")
    cfg = copy.deepcopy(attrs.get("Config") or {})
    hc = copy.deepcopy(attrs.get("HostConfig") or {})
    notes: list[str] = []
    net_mode = hc.get("NetworkMode") or "default"

    if net_mode.startswith("container:"):
        # The hostname comes from the other container's namespace (watchtower #188).
        cfg.pop("Hostname", None)
        cfg.pop("Domainname", None)
    elif cfg.get("Hostname") == cid[:12]:
        cfg.pop("Hostname", None)  # generated from the old id; the new container gets its own
    cfg["Image"] = image_ref
    if cfg.get("Entrypoint") is None and (image_config or {}).get("Entrypoint"):
        # `--entrypoint ""`: Docker stores null; posted back, null means "the image's entrypoint".
        cfg["Entrypoint"] = [""]
        notes.append("the empty entrypoint (--entrypoint \"\") instead of the image's")

    # Volumes: every volume mounted now stays mounted, by name; anonymous ones as volume mounts.
    by_dest = {m.get("Destination"): m for m in attrs.get("Mounts") or []}
    binds, mounts = [], list(hc.get("Mounts") or [])
    for b in hc.get("Binds") or []:
        src, dest, opts = _split_bind(b)
        live = by_dest.get(dest)
        if not src and live and live.get("Type") == "volume" and live.get("Name"):
            mounts.append(_volume_mount(live, notes))  # "-v /dest" written as a bind with no source
            continue
        binds.append(b)
    covered = {_split_bind(b)[1] for b in binds} | {m.get("Target") for m in mounts}
    for m in mounts:
        live = by_dest.get(m.get("Target"))
        if m.get("Type") == "volume" and not m.get("Source") and live and live.get("Name"):
            m["Source"] = live["Name"]
            notes.append(_anon_note(live))
    for m in attrs.get("Mounts") or []:
        dest = m.get("Destination")
        if m.get("Type") != "volume" or not m.get("Name"):
            continue
        if dest in covered:
            if not _HEX64.match(m["Name"]):
                notes.append(f"volume {m['Name']} at {dest}")
            continue
        covered.add(dest)
        if _HEX64.match(m["Name"]):
            mounts.append(_volume_mount(m, notes))
        else:
            binds.append(f"{m['Name']}:{dest}" + ("" if m.get("RW", True) else ":ro"))
            notes.append(f"volume {m['Name']} at {dest} re-attached by name")
    for m in attrs.get("Mounts") or []:
        if m.get("Type") == "bind":
            notes.append(f"bind mount {m.get('Source')} at {m.get('Destination')}")
    if binds or hc.get("Binds") is not None:
        hc["Binds"] = binds
    if mounts:
        hc["Mounts"] = mounts

    # Links are stored as "/other:/this/alias"; the API takes "other:alias".
    if hc.get("Links"):
        hc["Links"] = [_link(link) for link in hc["Links"]]

    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    connect: list[tuple[str, dict[str, Any]]] = []
    if net_mode in ("host", "none") or net_mode.startswith("container:"):
        body_net = None
    else:
        primary = "bridge" if net_mode == "default" else net_mode
        endpoints: dict[str, Any] = {}
        for net, ep in networks.items():
            clean = _endpoint(ep or {}, cid)
            if net == primary or (primary not in networks and not endpoints):
                endpoints[net] = clean
            else:
                connect.append((net, clean))
        body_net = {"EndpointsConfig": endpoints} if endpoints else None
        if networks:
            notes.append("networks " + ", ".join(_network_note(net, ep or {}) for net, ep in sorted(networks.items())))
    body = dict(cfg)
    body["HostConfig"] = hc
    if body_net is not None:
        body["NetworkingConfig"] = body_net
    rp = hc.get("RestartPolicy") or {}
    if rp.get("Name") not in (None, "", "no"):
        notes.append(f"restart policy {_policy_text(rp)}")
    if cfg.get("Healthcheck") and (cfg["Healthcheck"].get("Test") or ["NONE"])[0] != "NONE":
        notes.append("healthcheck " + " ".join(cfg["Healthcheck"].get("Test") or []))
    return body, connect, notes


def _network_note(net: str, ep: dict[str, Any]) -> str:
    ipam = ep.get("IPAMConfig") or {}
    static = [a for a in (ipam.get("IPv4Address"), ipam.get("IPv6Address")) if a]
    how = f"static address {', '.join(static)} kept" if static else "address assigned by Docker"
    return f"{net} (aliases kept, {how})"


def _policy_text(policy: dict[str, Any]) -> str:
    """A restart policy as the docker CLI writes it: "on-failure:5", "unless-stopped", "no"."""
    name = policy.get("Name") or "no"
    retries = policy.get("MaximumRetryCount") or 0
    return f"{name}:{retries}" if name == "on-failure" and retries else name


def _anon_note(live: dict[str, Any]) -> str:
    return (f"anonymous volume {live['Name'][:12]} at {live.get('Destination')} kept as a volume mount "
            f"(Docker now counts it as named: 'docker rm -v' leaves it; 'docker volume rm' removes it)")


def _volume_mount(live: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """An anonymous volume, re-attached as a volume mount (a copy would mount a new, empty one)."""
    notes.append(_anon_note(live))
    return {"Type": "volume", "Source": live["Name"], "Target": live.get("Destination"),
            "ReadOnly": not live.get("RW", True)}


def _link(link: str) -> str:
    if ":" not in link:
        return link.lstrip("/")
    target, alias = link.split(":", 1)
    return f"{target.lstrip('/')}:{alias.rsplit('/', 1)[-1]}"


def _endpoint(ep: dict[str, Any], cid: str) -> dict[str, Any]:
    """An endpoint as the user configured it: no generated ids, addresses, MACs or the short-id alias."""
    out: dict[str, Any] = {}
    if ep.get("IPAMConfig"):
        out["IPAMConfig"] = ep["IPAMConfig"]
    aliases = [a for a in ep.get("Aliases") or [] if a != cid[:12]]
    if aliases:
        out["Aliases"] = aliases
    if ep.get("Links"):
        out["Links"] = [_link(link) for link in ep["Links"]]
    if ep.get("DriverOpts"):
        out["DriverOpts"] = ep["DriverOpts"]
    return out


def _rewrite_cuda_visible(body: dict[str, Any], from_uuids: set[str], target_uuid: str,
                          visible_after: int, name: str) -> list[str]:
    """Rewrite host UUIDs in CUDA_VISIBLE_DEVICES; container-relative indices stay. Returns warnings."""
    warnings: list[str] = []
    env = list(body.get("Env") or [])
    for i, item in enumerate(env):
        if not item.startswith("CUDA_VISIBLE_DEVICES="):
            continue
        value = item.split("=", 1)[1]
        out: list[str] = []
        for v in [v.strip() for v in value.split(",")]:
            low = v.lower()
            if low.startswith(("gpu-", "mig-")) and any(
                    u.lower() == low or (len(low) > 8 and u.lower().startswith(low)) for u in from_uuids):
                v = target_uuid
            elif v.isdigit() and int(v) >= visible_after:
                warnings.append(
                    f"CUDA_VISIBLE_DEVICES={value} selects the container's GPU {v}, but after the move {name} "
                    f"sees {visible_after} GPU{'s' if visible_after != 1 else ''} (numbered from 0 inside the "
                    f"container); set it to 0 or remove it.")
            if v not in out:
                out.append(v)
        env[i] = "CUDA_VISIBLE_DEVICES=" + ",".join(out)
    body["Env"] = env
    return warnings


def _flatten(obj: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = json.dumps(obj)


def _diffable(body: dict[str, Any]) -> dict[str, Any]:
    """A view of a body where Env is keyed by variable, so a changed variable is one line."""
    view = copy.deepcopy(body)
    env = view.pop("Env", None)
    out = {"Config": {k: v for k, v in view.items() if k not in ("HostConfig", "NetworkingConfig")}}
    if env is not None:
        out["Config"]["Env"] = {k: v for k, v in (item.partition("=")[::2] for item in env)}
    out["HostConfig"] = view.get("HostConfig") or {}
    if "NetworkingConfig" in view:
        out["NetworkingConfig"] = view["NetworkingConfig"]
    return out


def body_diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    """``- path = old`` / ``+ path = new`` lines for every leaf that differs."""
    a: dict[str, str] = {}
    b: dict[str, str] = {}
    _flatten(_diffable(before), "", a)
    _flatten(_diffable(after), "", b)
    lines: list[str] = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) == b.get(path):
            continue
        if path in a:
            lines.append(f"- {path} = {a[path]}")
        if path in b:
            lines.append(f"+ {path} = {b[path]}")
    return tuple(lines)


def compose_change(service: str, uuid: str) -> str:
    """The compose-file fragment that pins a service to one GPU (what ``compose up`` would otherwise revert)."""
    return "\n".join([
        "services:",
        f"  {service}:",
        "    deploy:",
        "      resources:",
        "        reservations:",
        "          devices:",
        "            - driver: nvidia",
        f'              device_ids: ["{uuid}"]',
        "              capabilities: [gpu]",
    ])


def target_refusal(target: Gpu, peak_memory: int | None, usage_on_target: int = 0,
                   force: bool = False, name: str = "the container") -> str | None:
    """Why ``target`` cannot take the container (one sentence), or None. The UI lists targets with this."""
    if target.lost:
        return f"GPU {target.index} is lost (it fell off the bus or stopped answering)."
    if force or not peak_memory:
        return None
    free = target.memory_free
    if free is None:
        return None
    room = free + usage_on_target
    if peak_memory > room:
        return (f"GPU {target.index} has {fmt_bytes(room)} free but {name} has used up to "
                f"{fmt_bytes(peak_memory)}; use --force to move it anyway.")
    return None


def _moving(grant: Grant, host: HostGpus, gpus: tuple[Gpu, ...], tgt: Gpu, from_gpu: str | int | None,
            name: str) -> tuple[list[GrantEntry], bool, tuple[int, ...]]:
    """Which grant entries move to ``tgt``: (entries, granted all GPUs?, host indices they leave)."""
    src = resolve_target(gpus, str(from_gpu)) if from_gpu is not None else None
    whole = [e for e in grant.entries if e.kind != "id"]
    if whole:
        if grant.all:
            from_idx = tuple(sorted(g.index for g in gpus))
        else:
            from_idx = tuple(i for i in (host.index_of(e.key) for e in whole) if i is not None)
        if src is not None and src.index not in from_idx:
            raise MigrationRefused("not-held", f"{name} does not hold GPU {src.index}.")
        if not grant.all and len(set(from_idx)) == 1 and from_idx[0] == tgt.index:
            raise MigrationRefused("same-gpu", f"{name} is already on GPU {tgt.index}.")
        return whole, grant.all, tuple(dict.fromkeys(from_idx))
    held = tuple(i for i in (host.index_of(k) for k in grant.keys) if i is not None)
    if tgt.index in held:
        raise MigrationRefused("same-gpu", f"{name} is already on GPU {tgt.index}." if len(held) == 1
                               else f"{name} already holds GPU {tgt.index}.")
    if src is not None:
        moving = [e for e in grant.entries if e.key == src.uuid]
        if not moving:
            holds = f" (it holds GPU {', '.join(map(str, held))})" if held else ""
            raise MigrationRefused("not-held", f"{name} does not hold GPU {src.index}{holds}.")
    elif len(held) > 1:
        raise MigrationRefused("ambiguous", f"{name} holds GPUs {', '.join(map(str, held))}; say which one to "
                                            f"move with --from.")
    elif held:
        moving = [e for e in grant.entries if host.index_of(e.key) == held[0]]
    else:
        moving = list(grant.entries)  # names only GPUs this host lacks: moving it makes it usable again
    return moving, False, tuple(dict.fromkeys(i for i in (host.index_of(e.key) for e in moving) if i is not None))


def _moving_mig(grant: Grant, host: HostGpus, gpus: tuple[Gpu, ...], target_key: str, target_label: str,
                from_gpu: str | int | None, name: str
                ) -> tuple[list[GrantEntry], bool, tuple[int, ...], tuple[str, ...]]:
    """:func:`_moving` by target key, for moves that involve MIG devices (to one, from one, or both):
    (entries, granted all GPUs?, card indices they leave, MIG devices they leave)."""
    whole = [e for e in grant.entries if e.kind != "id"]
    if whole:
        from_idx = tuple(sorted(g.index for g in gpus)) if grant.all else \
            tuple(i for i in (host.index_of(e.key) for e in whole) if i is not None)
        return whole, grant.all, tuple(dict.fromkeys(from_idx)), ()

    def label(key: str) -> str:
        m = host.mig(key)
        return f"MIG device {m.label}" if m is not None else f"GPU {host.index_of(key)}"

    keys = grant.keys
    if target_key in keys:
        raise MigrationRefused("same-gpu", f"{name} is already on {target_label}." if len(keys) == 1
                               else f"{name} already holds {target_label}.")
    if from_gpu is not None:
        src = str(from_gpu).strip()
        hit = resolve_mig(gpus, src)
        src_key = hit[1].uuid if hit is not None else resolve_target(gpus, src).uuid
        moving = [e for e in grant.entries if e.key == src_key]
        if not moving:
            held = ", ".join(label(k) for k in keys)
            raise MigrationRefused("not-held", f"{name} does not hold {label(src_key)}"
                                               f"{f' (it holds {held})' if held else ''}.")
    elif len(keys) > 1:
        raise MigrationRefused("ambiguous", f"{name} holds {', '.join(label(k) for k in keys)}; say which one to "
                                            f"move with --from.")
    elif keys:
        moving = [e for e in grant.entries if e.key == keys[0]]
    else:
        moving = list(grant.entries)  # names only devices this host lacks: moving it makes it usable again
    moved_keys = [e.key for e in moving if e.key is not None]
    from_idx = tuple(dict.fromkeys(i for i in (host.index_of(k) for k in moved_keys) if i is not None))
    from_migs = tuple(dict.fromkeys(m.label for m in (host.mig(k) for k in moved_keys) if m is not None))
    return moving, False, from_idx, from_migs


def _command_diff(before: list[str] | None, after: list[str] | None) -> tuple[str, ...]:
    """The effective command as a diff line pair when the copy would run something else."""
    if before is None or after is None or before == after:
        return ()
    return (f"- (runs) = {json.dumps(before)}", f"+ (runs) = {json.dumps(after)}")


def _stopped_note(name: str, start_once: bool) -> str:
    if start_once:
        return (f"{name} is stopped with restart policy 'always', so Docker would start it at its next start; "
                f"the copy is started once, verified and stopped again, so Docker does the same with it.")
    return (f"{name} is not running: the copy is created but not started, so nothing is verified (it may "
            f"fail when it is started).")


def plan_migration(
    attrs: dict[str, Any],
    gpus: tuple[Gpu, ...],
    target: str | int,
    *,
    others: Iterable[dict[str, Any]] = (),
    image_tag_id: str | None = None,
    image_config: dict[str, Any] | None = None,
    peak_memory: int | None = None,
    usage: dict[int, int] | None = None,
    force: bool = False,
    from_gpu: str | int | None = None,
    read_only: bool = False,
    now: float | None = None,
    demo: bool = False,
) -> MigrationPlan:
    """The pure planner: inspect data + this host's GPUs + the target -> a plan, or MigrationRefused.

    ``image_tag_id`` is the id the container's image *tag* points to now
    (``images.get(Config.Image).id``; None if the tag is gone). ``usage`` is the
    container's current GPU memory per GPU index (from the snapshot) and
    ``peak_memory`` the most it has held at once (from the history).
    """
    name = _name(attrs)
    if read_only:
        raise MigrationRefused("read-only", READ_ONLY)
    _preflight(attrs, others)
    tgt, tmig = resolve_destination(gpus, str(target))
    host = HostGpus.of(gpus)
    grant = read_grant(attrs, host)
    if not grant:
        raise MigrationRefused("no-grant", f"{name} has no GPU grant to move; give it one with "
                                           f"--gpus when you create it.")
    if tgt.lost:
        raise MigrationRefused("target-lost", target_refusal(tgt, None) or "")
    to_uuid = tmig.uuid if tmig is not None else tgt.uuid
    to_label = f"GPU {tgt.index}" if tmig is None else f"MIG device {tgt.index}:{tmig.index}"
    from_migs: tuple[str, ...] = ()
    if tmig is not None or any(host.mig(k) is not None for k in grant.keys):
        moving, from_all, from_idx, from_migs = _moving_mig(grant, host, gpus, to_uuid, to_label, from_gpu, name)
    else:
        moving, from_all, from_idx = _moving(grant, host, gpus, tgt, from_gpu, name)
    if any(e.form == "devices" for e in moving) and (tgt.minor_number is None or tmig is not None):
        raise MigrationRefused("target-minor", f"{name} is given GPUs as /dev/nvidiaN nodes, which cannot name a "
                                               f"MIG device." if tmig is not None else
                               f"{name} is given GPUs as /dev/nvidiaN nodes and the device "
                               f"node of GPU {tgt.index} is not known.")

    usage = usage or {}
    refusal = (mig_target_refusal(tgt, tmig, peak_memory, force, name) if tmig is not None
               else target_refusal(tgt, peak_memory, usage.get(tgt.index, 0), force, name))
    if refusal:
        raise MigrationRefused("no-fit", refusal)

    cfg = attrs.get("Config") or {}
    image = cfg.get("Image") or attrs.get("Image", "")
    warnings: list[str] = []
    image_ref = image
    if attrs.get("Image") and image_tag_id != attrs["Image"]:
        image_ref = attrs["Image"]
        if image_tag_id is None:
            warnings.append(f"The image tag {image} no longer exists; the new container uses the same image "
                            f"by id ({image_ref[:19]}).")
        else:
            warnings.append(f"The image tag {image} now points to another image; the new container keeps "
                            f"the one {name} runs, by id ({image_ref[:19]}).")

    base, connect, keeps = _create_body(attrs, image_ref, image_config)
    new = copy.deepcopy(base)
    rewrite_grant(new, grant, moving, HostGpu(tgt.index, to_uuid, tgt.minor_number if tmig is None else None,
                                              mig=tmig.index if tmig is not None else None))
    after_grant = read_grant(new, host)
    visible_after = 1 if after_grant.all else max(1, len(after_grant.keys))
    from_uuids = {g.uuid for g in gpus if g.index in from_idx} | {e.key for e in moving if host.mig(e.key)}
    warnings += _rewrite_cuda_visible(new, {u for u in from_uuids if u}, to_uuid, visible_after, name)
    if from_all or grant.count > 1:
        only = f"{to_label} only" if after_grant.keys == (to_uuid,) else after_grant.describe(host)
        warnings.append(f"{name} was granted {grant.describe(host).split(' (')[0]}; after the move it is "
                        f"granted {only}.")
    hc = attrs.get("HostConfig") or {}
    for port, bindings in (hc.get("PortBindings") or {}).items():
        for b in bindings or []:
            if not (b or {}).get("HostPort"):
                warnings.append(f"Port {port} is published on a random host port; the new container gets a "
                                f"new one.")
    room = tmig.memory_free if tmig is not None else (
        None if tgt.memory_free is None else tgt.memory_free + usage.get(tgt.index, 0))
    if peak_memory and room is not None and peak_memory > room:
        warnings.append(f"Forced: {to_label} has {fmt_bytes(room)} free, less than the "
                        f"{fmt_bytes(peak_memory)} {name} has used.")
    labels = cfg.get("Labels") or {}
    change = None
    if "com.docker.compose.project" in labels or "com.docker.compose.service" in labels:
        service = labels.get("com.docker.compose.service") or name
        project = labels.get("com.docker.compose.project") or "?"
        where = labels.get("com.docker.compose.project.config_files")
        warnings.append(f"{name} belongs to compose project {project}: the next 'docker compose up' that "
                        f"recreates service {service} puts it back on its old GPU unless the compose file "
                        f"changes{f' ({where})' if where else ''}.")
        change = compose_change(clean_text(service), to_uuid)  # display text: one line per YAML line
    state = attrs.get("State") or {}
    health = cfg.get("Healthcheck") or {}
    command = running_command(attrs)
    after = effective_command(new, image_config)
    if command is not None and after is not None and after != command:
        warnings.append(f"The copy would run {json.dumps(after)} instead of {json.dumps(command)}; the migration "
                        f"will be rolled back at the create step.")
    if not state.get("Running"):
        warnings.append(_stopped_note(name, daemon_would_start(attrs)))
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now if now is not None else time.time()))
    return MigrationPlan(
        container_id=attrs.get("Id", ""),
        container_name=name,
        image=image,
        image_ref=image_ref,
        grant_form=moving[0].form,
        grant_before=grant.describe(host),
        grant_after=after_grant.describe(host),
        from_gpus=from_idx,
        from_all=from_all,
        to_gpu=tgt.index,
        to_uuid=to_uuid,
        to_mig=tmig.index if tmig is not None else None,
        from_migs=from_migs,
        backup_name=f"{name}{BACKUP_INFIX}{stamp}",
        stop_timeout=int(cfg.get("StopTimeout") or 10),
        stop_signal=str(cfg.get("StopSignal") or "SIGTERM"),
        restart_policy=dict(hc.get("RestartPolicy") or {"Name": "no", "MaximumRetryCount": 0}),
        was_running=bool(state.get("Running")),
        start_stopped=daemon_would_start(attrs),
        command=tuple(command) if command is not None else None,
        has_healthcheck=bool(health.get("Test")) and health["Test"][0] != "NONE",
        body=new,
        original_body=base,
        connect=tuple(connect),
        diff=body_diff(base, new) + _command_diff(command, effective_command(new, image_config)),
        keeps=tuple(keeps),
        warnings=tuple(warnings),
        compose_change=change,
        peak_memory=peak_memory or None,
        forced=force,
        demo=demo,
        attrs=copy.deepcopy(attrs),
    )


def container_usage(snapshot: Snapshot | None, container_id: str) -> dict[int, int]:
    """GPU memory per GPU index held now by the container's processes."""
    out: dict[int, int] = {}
    if snapshot is None:
        return out
    for g in snapshot.gpus:
        for p in g.processes:
            if p.container is not None and p.container.id == container_id:
                out[g.index] = out.get(g.index, 0) + (p.gpu_memory or 0)
    return out


def observed_peak(snapshot: Snapshot | None, container_id: str, history: Any = None) -> int | None:
    """The most GPU memory the container held at once: from the history when there is one, else now."""
    now = sum(container_usage(snapshot, container_id).values())
    past = 0
    if history is not None:
        try:
            past = int(history.container_peak_memory(container_id))
        except Exception:
            past = 0
    peak = max(now, past)
    return peak or None


@dataclass(frozen=True)
class TargetOption:
    """One row of the dialog's target chooser."""

    index: int
    uuid: str
    memory_free: int | None
    utilization: int | None
    refusal: str | None
    suggested: bool = False
    current: bool = False
    #: a MIG device of GPU ``index`` (its index and profile), None for a whole GPU
    mig: int | None = None
    profile: str | None = None

    @property
    def ref(self) -> str:
        """What ``--to`` takes for it: "6", or "5:1" for a MIG device."""
        return str(self.index) if self.mig is None else f"{self.index}:{self.mig}"


def target_options(snapshot: Snapshot, container_id: str, peak_memory: int | None, force: bool = False,
                   current: tuple[int, ...] = ()) -> list[TargetOption]:
    """Every GPU as a target for this container: the suggested one first, then by free memory."""
    usage = container_usage(snapshot, container_id)
    sug = snapshot.imbalance.suggestion
    name = next((c.name for c in snapshot.containers if c.id == container_id), None) or next(
        (p.container.name for p in snapshot.processes
         if p.container is not None and p.container.id == container_id and p.container.name), "the container")
    suggested = None
    if sug is not None and sug.container is not None and sug.container in (container_id, name):
        suggested = sug.to_gpu
    out = []
    on_migs = {(p.gpu_index, p.mig_device) for p in snapshot.processes
               if p.container is not None and p.container.id == container_id and p.mig_device is not None}
    for g in snapshot.gpus:
        if g.mig_enabled and not g.lost:  # not a whole GPU: each of its MIG devices is a target
            for m in g.mig_devices:
                now = (g.index, m.index) in on_migs
                refusal = f"{name} is already on MIG device {g.index}:{m.index}." if now and len(on_migs) == 1 \
                    else mig_target_refusal(g, m, peak_memory, force, name)
                out.append(TargetOption(g.index, m.uuid, m.memory_free, None, refusal, current=now, mig=m.index,
                                        profile=m.profile))
            continue
        refusal = target_refusal(g, peak_memory, usage.get(g.index, 0), force, name)
        if g.index in current and len(current) == 1:
            refusal = f"{name} is already on GPU {g.index}."
        out.append(TargetOption(g.index, g.uuid, g.memory_free, g.utilization_gpu, refusal,
                                suggested=g.index == suggested, current=g.index in current))
    out.sort(key=lambda o: (not o.suggested, o.refusal is not None, -(o.memory_free or 0), o.index, o.mig or 0))
    return out


# -- execution ------------------------------------------------------------------------

ProgressState = Literal["running", "done", "skipped", "failed", "undoing", "undone", "info"]


@dataclass(frozen=True)
class Progress:
    """One step's state, posted to the progress callback (the UI shows these as a checklist)."""

    step: str
    number: int
    total: int
    state: ProgressState
    message: str

    def line(self) -> str:
        mark = {"running": "..", "done": "ok", "skipped": "--", "failed": "!!", "undoing": "<-", "undone": "<-",
                "info": "  "}[self.state]
        return f"[{mark}] {self.number}/{self.total} {self.message}"


ProgressFn = Callable[[Progress], object]  # what it returns is ignored


@dataclass(frozen=True)
class MigrationResult:
    ok: bool
    #: "ok", "rolled-back" (failed, original restored), "failed" (failed and not fully restored: see journal),
    #: "finished" / "undone" (by --recover), "refused" (locked or changed since the plan),
    #: "busy" (--recover: another gputui holds the container's lock)
    result: str
    message: str
    plan: MigrationPlan | None = None
    new_id: str | None = None
    failed_step: str | None = None
    journal: str | None = None
    demo: bool = False


class MigrationHooks:
    """The test seam: called before every step with the step name and the run's state.

    A hook that raises makes that step fail (the executor rolls back). Tests use it
    to fail create, start or verify, or to kill the process between two steps.
    """

    def before(self, step: str, run: MigrationRun) -> None:
        return None


@dataclass
class MigrationRun:
    """Mutable state of one execution (what has been done, so what to undo)."""

    plan: MigrationPlan
    client: Any = None
    new_id: str | None = None
    policy_changed: bool = False
    stopped: bool = False
    renamed: bool = False
    verified: bool = False
    stop_issued_at: float | None = None


class MigrationEngine(Protocol):
    """What the CLI and the UI migrate through: Docker on a real machine, the simulation in --demo."""

    demo: bool

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None) -> MigrationPlan: ...

    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult: ...

    def close(self) -> None: ...


def _notify(progress: ProgressFn | None, step: str, state: ProgressState, message: str) -> None:
    if progress is None:
        return
    number = STEPS.index(step) + 1 if step in STEPS else 0
    try:
        progress(Progress(step, number, len(STEPS), state, message))
    except Exception:
        pass  # a broken progress display must never break a migration half-way


def _audit(result: str, plan: MigrationPlan | None, **details: Any) -> None:
    from gputui.actions.audit import audit

    info: dict[str, Any] = {}
    if plan is not None:
        info = {
            "container": plan.container_name,
            "container_id": plan.container_id,
            "from_gpus": "all" if plan.from_all else list(plan.from_gpus),
            "to_gpu": plan.to_gpu,
            "to_uuid": plan.to_uuid,
            "forced": plan.forced,
            "demo": plan.demo,
        }
    info.update({k: v for k, v in details.items() if v is not None})
    try:
        audit("migrate", result, **info)
    except OSError:
        pass  # the state directory is unwritable: the action itself already happened or was undone


def _audit_intent(plan: MigrationPlan) -> str | None:
    """Record the intent before the first step; one sentence when the audit log cannot take it."""
    from gputui.actions.audit import audit

    try:
        audit("migrate", "intent", container=plan.container_name, container_id=plan.container_id,
              from_gpus="all" if plan.from_all else list(plan.from_gpus), to_gpu=plan.to_gpu,
              to_uuid=plan.to_uuid, forced=plan.forced, demo=plan.demo)
    except OSError as exc:
        return f"cannot write the audit log ({exc.strerror or exc}); gputui changes nothing it cannot record."
    return None


def audit_refusal(container: str, target: str | int | None, reason: str, demo: bool = False) -> None:
    """Record that a migration the user asked for was refused (and why)."""
    _audit("refused", None, container=container, to_gpu=target, reason=reason, demo=demo)


def _err(exc: BaseException) -> str:
    """An exception as a clause without a trailing period (:func:`gputui.core.errors.clause`)."""
    return clause(exc)


class DockerMigrationEngine:
    """Migrates containers through the Docker Engine API (docker SDK, low-level client)."""

    demo = False

    def __init__(self, client: Any, hooks: MigrationHooks | None = None, read_only: bool = False,
                 poll_interval: float = 0.25, sleep: Callable[[float], None] = time.sleep) -> None:
        #: a ``docker.DockerClient``; its ``.api`` is used
        self.client = client
        self.api = client.api
        self.hooks = hooks or MigrationHooks()
        self.read_only = read_only
        self.poll_interval = poll_interval
        self._sleep = sleep

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass

    # -- planning ----------------------------------------------------------------
    def inspect(self, container: str) -> dict[str, Any]:
        import docker

        try:
            attrs: dict[str, Any] = self.api.inspect_container(container)
            return attrs
        except docker.errors.NotFound:
            raise MigrationNotFound(f"There is no container named {container!r}.") from None
        except docker.errors.APIError as exc:
            # An id prefix that fits several containers (Docker 20.10 answers 500, later 400): the user's
            # words, not the daemon, are at fault.
            if 400 <= (exc.status_code or 0) < 500 or "multiple ids found" in _err(exc).lower():
                raise MigrationNotFound(f"Docker cannot tell which container {container!r} is: "
                                        f"{_err(exc)}.") from None
            raise MigrationUnavailable(f"Docker could not inspect {container}: {_err(exc)}.") from None
        except Exception as exc:
            raise MigrationUnavailable(_unreachable(exc)) from None

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None) -> MigrationPlan:
        import docker

        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        attrs = self.inspect(container)
        try:
            others = []
            for c in self.api.containers(all=True):
                if c.get("Id") == attrs["Id"]:
                    continue
                try:
                    others.append(self.api.inspect_container(c["Id"]))
                except docker.errors.NotFound:
                    continue
            try:
                tag_id = self.api.inspect_image((attrs.get("Config") or {}).get("Image") or "")["Id"]
            except docker.errors.NotFound:
                tag_id = None
            try:
                image_config = self.api.inspect_image(attrs.get("Image") or "").get("Config") or {}
            except docker.errors.NotFound:
                image_config = None
        except Exception as exc:
            raise MigrationUnavailable(_unreachable(exc)) from None
        gpus = snapshot.gpus if snapshot is not None else ()
        peak = max(peak_memory or 0, observed_peak(snapshot, attrs["Id"]) or 0) or None
        return plan_migration(attrs, gpus, target, others=others, image_tag_id=tag_id, image_config=image_config,
                              peak_memory=peak,
                              usage=container_usage(snapshot, attrs["Id"]), force=force, from_gpu=from_gpu)

    # -- execution ---------------------------------------------------------------
    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult:
        """Run the plan under the container's lock. Always returns; on failure the original container is
        back (or the journal says why not)."""
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        try:
            lock = ContainerLock.acquire("migrate", [plan.container_id, plan.container_name], plan.container_name)
        except LockHeld as exc:
            return self._refused(plan, str(exc), progress)
        except OSError as exc:
            return self._refused(plan, f"Cannot take the migration lock for {plan.container_name}: "
                                       f"{exc.strerror or exc}.", progress)
        try:
            refusal = self._changed_since(plan)
            if refusal:
                return self._refused(plan, refusal, progress)
            return self._execute(plan, progress, timeout)
        finally:
            lock.release()

    def _refused(self, plan: MigrationPlan, message: str, progress: ProgressFn | None) -> MigrationResult:
        _notify(progress, "journal", "failed", message)
        _audit("refused", plan, reason=message)
        return MigrationResult(False, "refused", message, plan)

    def _changed_since(self, plan: MigrationPlan) -> str | None:
        """Why the plan no longer fits (checked under the lock: another migration may have just run)."""
        name = plan.container_name
        for pending in pending_journals("migrate"):
            if {plan.container_id, name} & set(pending.lock_keys):
                return f"{name} has an interrupted migration; run 'gputui migrate --recover' first."
        now = self._safe_inspect(name)
        if now is None or now.get("Id") != plan.container_id:
            return f"{name} changed since the plan (it was recreated or removed); plan the migration again."
        if bool((now.get("State") or {}).get("Running")) != plan.was_running:
            return f"{name} was started or stopped since the plan; plan the migration again."
        return None

    def _execute(self, plan: MigrationPlan, progress: ProgressFn | None, timeout: float) -> MigrationResult:
        run = MigrationRun(plan=plan, client=self.client)
        step = "journal"
        _notify(progress, step, "running", STEP_TEXT[step])
        try:
            self.hooks.before(step, run)
            journal = Journal.create("migrate", plan.container_name, {
                "summary": f"{plan.summary()} (backup {plan.backup_name})",
                "container": {"id": plan.container_id, "name": plan.container_name},
                "backup_name": plan.backup_name,
                "to_gpu": plan.to_gpu,
                "to_uuid": plan.to_uuid,
                "restart_policy": plan.restart_policy,
                "was_running": plan.was_running,
                "stop_timeout": plan.stop_timeout,
                "stop_issued_at": None,
                "new_id": None,
                "verified": False,
                "original_body": plan.original_body,
                "body": plan.body,
                "connect": [list(c) for c in plan.connect],
                "plan": plan.to_json(),
                "original": plan.attrs,
            })
            journal.update(step="journal")
        except (Exception, KeyboardInterrupt) as exc:
            message = f"Migration of {plan.container_name} did not start: could not {STEP_TEXT[step]} ({_err(exc)})."
            _notify(progress, step, "failed", message)
            _audit("failed", plan, step=step, error=_err(exc))
            return MigrationResult(False, "failed", message, plan, failed_step=step)
        problem = _audit_intent(plan)  # on disk before the container is touched: nothing acts without a record
        if problem is not None:
            journal.finish()
            message = f"Migration of {plan.container_name} did not start: {problem}"
            _notify(progress, step, "failed", message)
            return MigrationResult(False, "failed", message, plan, failed_step=step)
        _notify(progress, step, "done", STEP_TEXT[step])

        runs = plan.was_running or plan.start_stopped
        try:
            for step in STEPS[1:-1]:
                skip = (step == "stop" and not plan.was_running) or (step in ("start", "verify") and not runs)
                if step == "restart-policy" and plan.restart_policy.get("Name") in (None, "", "no"):
                    _notify(progress, step, "skipped", "the old container's restart policy is already 'no'")
                    continue
                if skip:
                    _notify(progress, step, "skipped", f"{STEP_TEXT[step]}: skipped, it was not running")
                    run.verified = run.verified or step == "verify"
                    journal.update(step=step, verified=run.verified)
                    continue
                _notify(progress, step, "running", self._step_text(step, plan, timeout))
                self.hooks.before(step, run)
                getattr(self, "_do_" + step.replace("-", "_"))(run, journal, timeout)
                journal.update(step=step, new_id=run.new_id, verified=run.verified)
                _notify(progress, step, "done", self._step_text(step, plan, timeout))
        except (Exception, KeyboardInterrupt) as exc:
            return self._fail(run, journal, step, exc, progress)

        # Verified: from here on the new container stays, whatever happens to the old one.
        step = "remove-old"
        _notify(progress, step, "running", STEP_TEXT[step])
        try:
            self.hooks.before(step, run)
            self.api.remove_container(plan.container_id, v=False, force=True)
        except (Exception, KeyboardInterrupt) as exc:
            message = (f"{plan.container_name} now runs on {plan.to_label}, but its backup "
                       f"{plan.backup_name} could not be removed ({_err(exc)}); 'gputui migrate --recover' "
                       f"removes it (keeping its volumes).")
            journal.release()
            _notify(progress, step, "failed", message)
            _audit("ok", plan, new_id=run.new_id, warning=message)
            return MigrationResult(True, "ok", message, plan, run.new_id, journal=str(journal.path))
        journal.finish()
        _notify(progress, step, "done", STEP_TEXT[step])
        message = f"{plan.container_name} moved from {plan.from_label} to {plan.to_label} ({plan.to_uuid})."
        if not runs:
            message += " It was not running, so the copy was not started and nothing was verified."
        elif plan.start_stopped:
            message += " The copy was started, verified and stopped again, as the original was stopped."
        _audit("ok", plan, new_id=run.new_id)
        return MigrationResult(True, "ok", message, plan, run.new_id)

    @staticmethod
    def _step_text(step: str, plan: MigrationPlan, timeout: float) -> str:
        if step == "verify":
            extra = ""
            if plan.has_healthcheck:
                every = ((plan.body.get("Healthcheck") or {}).get("Interval") or 30_000_000_000) / 1e9
                extra = f" and healthy (its healthcheck runs every {every:g} s)"
            again = ", then stop it again" if plan.start_stopped and not plan.was_running else ""
            return f"{STEP_TEXT[step]}: still running after {timeout:g} s{extra}, not restarting{again}"
        if step == "stop":
            return (f"{STEP_TEXT[step]}: {plan.stop_signal}, waiting up to {plan.stop_timeout} s for it to exit "
                    f"before Docker kills it")
        if step == "rename":
            return f"{STEP_TEXT[step]} {plan.backup_name}"
        return STEP_TEXT[step]

    def _safe_inspect(self, cid: str) -> dict[str, Any] | None:
        try:
            attrs: dict[str, Any] = self.api.inspect_container(cid)
            return attrs
        except Exception:
            return None

    # The steps. Each records what it did on ``run`` so a rollback undoes exactly that.
    def _do_restart_policy(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.update_container(run.plan.container_id, restart_policy={"Name": "no", "MaximumRetryCount": 0})
        run.policy_changed = True

    def _do_stop(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        # dockerd sends the container's own StopSignal; the timeout is its StopTimeout (default 10 s).
        # Docker goes on with a stop after we give up or die: undo and recover wait for it (stop_issued_at).
        run.stopped = True  # set first: a stop that fails half-way must still be undone by a start
        run.stop_issued_at = time.time()
        journal.update(stop_issued_at=run.stop_issued_at)
        self.api.stop(run.plan.container_id, timeout=run.plan.stop_timeout)

    def _do_rename(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.rename(run.plan.container_id, run.plan.backup_name)
        run.renamed = True

    def _do_create(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        plan = run.plan
        created = self.api.create_container_from_config(copy.deepcopy(plan.body), plan.container_name)
        run.new_id = created["Id"]
        journal.update(new_id=run.new_id)
        connect_networks(self.api, run.new_id, plan.connect)
        runs = running_command(self.api.inspect_container(run.new_id))
        if plan.command is not None and runs is not None and tuple(runs) != plan.command:
            raise RuntimeError(f"the new container would run {json.dumps(runs)} instead of "
                               f"{json.dumps(list(plan.command))}")

    def _do_start(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.start(run.new_id)

    def _do_verify(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        assert run.new_id is not None, "verify follows create, which sets new_id"
        verify_container(self.api, run.new_id, run.plan, timeout, self.poll_interval, self._sleep)
        if not run.plan.was_running:
            self.api.stop(run.new_id, timeout=run.plan.stop_timeout)  # it was stopped: so is the copy
        run.verified = True

    def _fail(self, run: MigrationRun, journal: Journal, step: str, exc: BaseException,
              progress: ProgressFn | None) -> MigrationResult:
        plan = run.plan
        cause = f"could not {STEP_TEXT[step]} ({_err(exc)})"
        if isinstance(exc, KeyboardInterrupt):
            cause = f"was interrupted during '{step}'"
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else _err(exc)
        _notify(progress, step, "failed", f"{STEP_TEXT[step]}: {what}")
        problems = self._undo(run, progress)
        if not problems:
            journal.finish()
            state = "running" if plan.was_running else "stopped"
            message = (f"Migration of {plan.container_name} failed: it {cause}; the original container is back "
                       f"({state}, restart policy {_policy_text(plan.restart_policy)}).")
            _audit("rolled-back", plan, step=step, error=_err(exc))
            return MigrationResult(False, "rolled-back", message, plan, failed_step=step)
        journal.release()
        message = (f"Migration of {plan.container_name} failed: it {cause}, and putting the original back "
                   f"also failed ({'; '.join(problems)}); run 'gputui migrate --recover'.")
        _audit("failed", plan, step=step, error=_err(exc), rollback_errors=problems, journal=str(journal.path))
        return MigrationResult(False, "failed", message, plan, run.new_id, failed_step=step,
                               journal=str(journal.path))

    def _undo(self, run: MigrationRun, progress: ProgressFn | None) -> list[str]:
        """Undo what ``run`` did, newest first. Returns what could not be undone (empty = all good)."""
        plan = run.plan
        problems: list[str] = []
        if run.new_id:
            _notify(progress, "create", "undoing", "remove the new container")
            try:
                self.api.remove_container(run.new_id, v=False, force=True)
            except Exception as exc:
                if "No such container" not in _err(exc):
                    problems.append(f"removing the new container: {_err(exc)}")
        if run.renamed:
            _notify(progress, "rename", "undoing", f"rename the old container back to {plan.container_name}")
            try:
                self.api.rename(plan.container_id, plan.container_name)
            except Exception as exc:
                problems.append(f"renaming it back: {_err(exc)}")
        if run.policy_changed:
            _notify(progress, "restart-policy", "undoing", "restore the restart policy")
            try:
                self.api.update_container(plan.container_id, restart_policy=plan.restart_policy)
            except Exception as exc:
                problems.append(f"restoring its restart policy: {_err(exc)}")
        if run.stopped and plan.was_running:
            problem = self._start_again(plan.container_id, plan.container_name, run.stop_issued_at,
                                        plan.stop_timeout, progress)
            if problem:
                problems.append(problem)
        return problems

    def _start_again(self, cid: str, name: str, stop_issued_at: float | None, stop_timeout: float,
                     progress: ProgressFn | None) -> str | None:
        """Start the original again once any stop still in flight has finished; None if it runs."""
        try:
            state = (self._safe_inspect(cid) or {}).get("State") or {}
            if stop_issued_at is not None and state.get("Running"):
                deadline = stop_issued_at + stop_timeout + STOP_GRACE
                left = max(0.0, deadline - time.time())
                if left > 0:
                    _notify(progress, "stop", "undoing", f"wait for the stop Docker is still carrying out "
                                                         f"(up to {left:.0f} s) before starting {name} again")
                    wait_stopped(self._safe_inspect, cid, deadline, self._sleep)
            _notify(progress, "stop", "undoing", f"start {name} again")
            self.api.start(cid)
            if not self._wait_running(cid):
                return f"starting {name} again: it does not stay running"
        except Exception as exc:
            return f"starting {name} again: {_err(exc)}"
        return None

    def _wait_running(self, cid: str, seconds: float = 2.0) -> bool:
        """Running now and still running ``seconds`` later (a stop landing late would show)."""
        deadline = time.monotonic() + seconds
        while True:
            state = (self._safe_inspect(cid) or {}).get("State") or {}
            if not state.get("Running") or state.get("Restarting"):
                return False
            if time.monotonic() >= deadline:
                return True
            self._sleep(0.1)

    # -- recovery ----------------------------------------------------------------
    def recover(self, pending: PendingJournal, progress: ProgressFn | None = None) -> MigrationResult:
        """Finish or undo an interrupted migration, judged from what Docker shows now (under its lock).

        Finish only when the journal says the new container passed verification and
        it still runs; otherwise undo: remove the new container, give the old one its
        name, restart policy and running state back (recreating it from the journal,
        networks and static addresses included, if it is gone). The journal is kept
        until the original verifiably runs.
        """
        try:
            lock = ContainerLock.acquire("migrate", pending.lock_keys, str(pending.lock_keys[-1:] or "?"))
        except LockHeld as exc:
            return MigrationResult(False, "busy", str(exc), journal=str(pending.path))
        except OSError as exc:
            return MigrationResult(False, "failed", f"Cannot take the migration lock: {exc.strerror or exc}.",
                                   journal=str(pending.path))
        try:
            return self._recover(Journal.take(pending), pending, progress)
        finally:
            lock.release()

    def _recover(self, journal: Journal, pending: PendingJournal, progress: ProgressFn | None) -> MigrationResult:
        d = journal.data
        name = (d.get("container") or {}).get("name") or "?"
        orig_id = (d.get("container") or {}).get("id") or ""
        summary = d.get("summary") or name
        try:
            old = self._safe_inspect(orig_id) if orig_id else None
            new = self._find_new(d, name, orig_id)
            new_running = bool(new and (new.get("State") or {}).get("Running"))
            if d.get("verified") and new is not None and (new_running or not d.get("was_running", True)):
                if old is not None:
                    _notify(progress, "remove-old", "running", f"remove the backup {_name(old)} (keeping volumes)")
                    self.api.remove_container(orig_id, v=False, force=True)
                journal.finish()
                message = f"Finished the interrupted migration: {summary}; the new container was verified."
                _audit("finished", None, container=name, container_id=orig_id, new_id=new.get("Id"),
                       recovered=True)
                return MigrationResult(True, "finished", message, new_id=new.get("Id"), journal=str(pending.path))
            if new is not None and new.get("Id") != orig_id:
                _notify(progress, "create", "undoing", "remove the new container")
                self.api.remove_container(new["Id"], v=False, force=True)
            if old is None:
                orig_id = self._recreate(d, name, progress)
            else:
                if _name(old) != name:
                    _notify(progress, "rename", "undoing", f"rename {_name(old)} back to {name}")
                    self.api.rename(orig_id, name)
                policy = d.get("restart_policy") or {"Name": "no"}
                current = ((old.get("HostConfig") or {}).get("RestartPolicy") or {})
                if (current.get("Name"), current.get("MaximumRetryCount") or 0) != \
                        (policy.get("Name"), policy.get("MaximumRetryCount") or 0):
                    _notify(progress, "restart-policy", "undoing", "restore the restart policy")
                    self.api.update_container(orig_id, restart_policy=policy)
            if d.get("was_running", True):
                problem = self._start_again(orig_id, name, d.get("stop_issued_at") if old is not None else None,
                                            float(d.get("stop_timeout") or 10), progress)
                if problem:
                    raise RuntimeError(problem)
        except Exception as exc:  # Docker's errors, requests' connection errors, ours
            journal.release()
            message = (f"Could not recover the interrupted migration of {name}: {_err(exc)}; "
                       f"the journal is kept at {pending.path}.")
            _audit("failed", None, container=name, container_id=orig_id, recovered=True, error=_err(exc))
            return MigrationResult(False, "failed", message, journal=str(pending.path))
        journal.finish()
        state = "running" if d.get("was_running", True) else "stopped"
        message = f"Undid the interrupted migration of {name}: the original container is back ({state})."
        _audit("undone", None, container=name, container_id=orig_id, recovered=True)
        return MigrationResult(True, "undone", message, journal=str(pending.path))

    def _find_new(self, d: dict[str, Any], name: str, orig_id: str) -> dict[str, Any] | None:
        """The copy the interrupted run created, if any."""
        if d.get("new_id"):
            return self._safe_inspect(d["new_id"])
        if d.get("step") != "rename":
            return None
        # Created, but the process died before journaling its id: the container under the
        # name is ours only if it is the body we posted (same image and labels).
        holder = self._safe_inspect(name)
        body = d.get("body") or {}
        cfg = (holder or {}).get("Config") or {}
        if holder is not None and holder.get("Id") != orig_id and cfg.get("Image") == body.get("Image") and \
                (cfg.get("Labels") or {}) == (body.get("Labels") or {}):
            return holder
        return None

    def _recreate(self, d: dict[str, Any], name: str, progress: ProgressFn | None) -> str:
        """The original is gone (its backup was removed): create it again from the journal."""
        holder = self._safe_inspect(name)
        if holder is not None:
            raise RuntimeError(f"the original container is gone and the name {name} is taken by container "
                               f"{holder.get('Id', '')[:12]}; rename or remove that one and run --recover again")
        _notify(progress, "create", "undoing", f"recreate {name} from the journal")
        created = self.api.create_container_from_config(copy.deepcopy(d.get("original_body") or {}), name)
        connect_networks(self.api, created["Id"], d.get("connect") or [])
        return str(created["Id"])


def verify_container(api: Any, cid: str, plan: MigrationPlan, timeout: float, interval: float = 0.25,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Raise RuntimeError unless the container stays running for ``timeout`` s, does not restart,
    and (with a healthcheck) reports healthy. A healthcheck gets the time its own settings need."""
    start = time.monotonic()
    deadline = start + timeout
    health_deadline = deadline
    if plan.has_healthcheck:
        hc = (plan.body.get("Healthcheck") or {})
        every = (hc.get("Interval") or 30_000_000_000) / 1e9
        grace = (hc.get("StartPeriod") or 0) / 1e9 + every * ((hc.get("Retries") or 3) + 1)
        health_deadline = start + max(timeout, grace)
    first_restarts: int | None = None
    healthy = not plan.has_healthcheck
    while True:
        attrs = api.inspect_container(cid)
        state = attrs.get("State") or {}
        restarts = int(attrs.get("RestartCount") or 0)
        if first_restarts is None:
            first_restarts = restarts
        if state.get("Restarting") or restarts > first_restarts:
            raise RuntimeError("the new container is restarting")
        if not state.get("Running"):
            code = state.get("ExitCode")
            raise RuntimeError(f"the new container stopped (exit code {code})" if code is not None
                               else "the new container stopped")
        status = (state.get("Health") or {}).get("Status")
        if plan.has_healthcheck:
            if status == "unhealthy":
                raise RuntimeError("the new container's healthcheck reports unhealthy")
            if status == "healthy":
                healthy = True
        now = time.monotonic()
        if now >= deadline and healthy:
            return
        if now >= health_deadline:
            raise RuntimeError(f"the new container did not become healthy within {health_deadline - start:.0f} s")
        sleep(min(interval, max(0.01, (deadline if not healthy or now < deadline else health_deadline) - now)))


# -- the demo engine ------------------------------------------------------------------


def demo_attrs(sim: DemoMachine, name_or_id: str) -> dict[str, Any]:
    """Inspect-shaped data for a simulated container, so the demo runs the real planner."""
    c = sim.container_by_name(name_or_id)
    if c is None:
        raise MigrationNotFound(f"There is no container named {name_or_id!r} on the demo server.")
    env = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"]
    if c.cuda_visible_devices is not None:
        env.append(f"CUDA_VISIBLE_DEVICES={c.cuda_visible_devices}")
    hc: dict[str, Any] = {"NetworkMode": "bridge", "RestartPolicy": {"Name": c.restart_policy,
                                                                      "MaximumRetryCount": 0},
                          "Binds": None, "DeviceRequests": None}
    grant = c.grant
    if c.grant_source == "nvidia_runtime_env":
        hc["Runtime"] = "nvidia"
        env.append("NVIDIA_VISIBLE_DEVICES=" + ("all" if grant == "all" else ",".join(grant)))
    else:
        hc["Runtime"] = "runc"
        hc["DeviceRequests"] = [{"Driver": "", "Count": -1 if grant == "all" else 0,
                                 "DeviceIDs": None if grant == "all" else list(grant),
                                 "Capabilities": [["gpu"]], "Options": {}}]
    labels = dict(c.labels)
    if c.compose_project:
        labels.setdefault("com.docker.compose.project", c.compose_project)
        labels.setdefault("com.docker.compose.service", c.compose_service or c.name)
    image_id = "sha256:" + hashlib.sha256(c.image.encode()).hexdigest()
    return {
        "Id": c.id,
        "Name": "/" + c.name,
        "Image": image_id,
        "State": {"Status": c.state, "Running": c.state == "running", "Paused": c.state == "paused",
                  "Restarting": False, "Dead": False},
        "Config": {"Hostname": c.id[:12], "Image": c.image, "Env": env, "Labels": labels},
        "HostConfig": hc,
        "Mounts": [],
        "NetworkSettings": {"Networks": {"bridge": {"Aliases": None}}},
        "RestartCount": 0,
    }


class DemoMigrationEngine:
    """Migrates containers of the simulated server: same planner, same steps, nothing real changes."""

    demo = True

    def __init__(self, sim: DemoMachine, read_only: bool = False, step_delay: float = 0.05,
                 hooks: MigrationHooks | None = None) -> None:
        self.sim = sim
        self.read_only = read_only
        self.step_delay = step_delay
        self.hooks = hooks or MigrationHooks()
        self._lock = threading.Lock()

    def close(self) -> None:
        pass

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None) -> MigrationPlan:
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        attrs = demo_attrs(self.sim, container)
        gpus = snapshot.gpus if snapshot is not None else self.sim.read().gpus
        peak = max(peak_memory or 0, observed_peak(snapshot, attrs["Id"]) or 0) or None
        return plan_migration(attrs, gpus, target, image_tag_id=attrs["Image"], peak_memory=peak,
                              usage=container_usage(snapshot, attrs["Id"]), force=force, from_gpu=from_gpu,
                              demo=True)

    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult:
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        run = MigrationRun(plan=plan)
        with self._lock:
            for step in STEPS:
                text = f"{STEP_TEXT[step]} (simulated)"
                _notify(progress, step, "running", text)
                try:
                    self.hooks.before(step, run)
                    if step == "create":
                        self.sim.move_container(plan.container_id, plan.to_gpu, plan.to_mig)
                        run.new_id = plan.container_id
                except Exception as exc:
                    message = (f"Migration of {plan.container_name} failed: it could not {STEP_TEXT[step]} "
                               f"({_err(exc)}); the simulated container was left as it was.")
                    _notify(progress, step, "failed", message)
                    _audit("rolled-back", plan, step=step, error=_err(exc))
                    return MigrationResult(False, "rolled-back", message, plan, failed_step=step, demo=True)
                if self.step_delay:
                    time.sleep(self.step_delay)
                _notify(progress, step, "done", text)
        message = (f"{plan.container_name} moved from {plan.from_label} to {plan.to_label} on the simulated "
                   f"server (demo: nothing real changed).")
        _audit("ok", plan, new_id=run.new_id)
        return MigrationResult(True, "ok", message, plan, run.new_id, demo=True)


# -- choosing an engine ---------------------------------------------------------------


def docker_client(timeout: float = 5.0) -> Any:
    """A connected Docker client for the daemon the container view reads (same address rules).

    Migration calls take longer than an inventory read (stop waits for the
    container's StopTimeout), so the HTTP timeout is generous. Raises
    MigrationUnavailable with one sentence when the daemon cannot be reached.
    """
    from gputui.core.docker_source import describe_error
    from gputui.core.docker_source import docker_client as connect

    try:
        return connect(timeout=max(timeout, 60.0), ping=True)
    except Exception as exc:  # SourceUnavailable, requests' connection errors and the like
        raise MigrationUnavailable(_sentence(describe_error(exc))) from None


def _unreachable(exc: BaseException) -> str:
    """A failure talking to the daemon as one sentence (never Python's exception text)."""
    from gputui.core.docker_source import describe_error

    return _sentence(describe_error(exc))


def _sentence(text: str) -> str:
    return sentence(text)


def engine_for(machine: Machine, settings: Settings, hooks: MigrationHooks | None = None,
               client: Any = None) -> MigrationEngine:
    """The demo engine on the simulated server, the Docker engine otherwise."""
    if machine.demo is not None:
        return DemoMigrationEngine(machine.demo, read_only=settings.read_only, hooks=hooks)
    return DockerMigrationEngine(client or docker_client(settings.docker_timeout), hooks=hooks,
                                 read_only=settings.read_only)


def leftover_backups(client: Any) -> list[str]:
    """Names of ``*-gputui-old-*`` containers (backups a migration may have left), for --recover to report."""
    try:
        return sorted(c["Names"][0].lstrip("/") for c in client.api.containers(all=True)
                      if any(BACKUP_INFIX in n for n in c.get("Names") or []))
    except Exception:
        return []


__all__ = [
    "STEPS", "READ_ONLY", "MigrationPlan", "MigrationRefused", "MigrationNotFound", "MigrationUnavailable",
    "MigrationHooks",
    "MigrationRun", "MigrationResult", "MigrationEngine", "DockerMigrationEngine", "DemoMigrationEngine",
    "Progress", "plan_migration", "body_diff", "target_options", "target_refusal",
    "observed_peak", "container_usage", "engine_for", "docker_client", "pending_journals", "audit_refusal",
    "JournalError", "leftover_backups", "compose_change", "resolve_target", "verify_container",
]
