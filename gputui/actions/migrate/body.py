"""The create body of the successor container: everything of ``container.attrs`` copied except what
Docker generates, the grant rewritten, and :func:`body_diff`, the human diff of two bodies.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gputui.actions.migrate.model import HEX64, MigrationRefused

if TYPE_CHECKING:
    pass


def name_of(attrs: dict[str, Any]) -> str:
    return (attrs.get("Name") or "").lstrip("/") or attrs.get("Id", "")[:12]


def _refers_to(ref: str, attrs: dict[str, Any]) -> bool:
    """Does a ``container:<ref>`` / VolumesFrom reference name this container?"""
    ref = ref.lstrip("/")
    if not ref:
        return False
    cid = attrs.get("Id", "")
    return ref == name_of(attrs) or ref == cid or (len(ref) >= 3 and re.fullmatch(r"[0-9a-f]+", ref) is not None
                                                 and cid.startswith(ref))


def preflight(attrs: dict[str, Any], others: Iterable[dict[str, Any]]) -> None:
    name = name_of(attrs)
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
                    f"Container {name_of(other)} shares {name}'s {what} namespace ({flag} container:{name}); "
                    f"recreating {name} would cut it off.")
        for vf in ohc.get("VolumesFrom") or []:
            if _refers_to(vf.split(":", 1)[0], attrs):
                raise MigrationRefused(
                    "shared-volumes",
                    f"Container {name_of(other)} mounts {name}'s volumes (--volumes-from {name}); "
                    f"recreating {name} would leave it pointing at a removed container.")


def _split_bind(bind: str) -> tuple[str, str, str]:
    parts = bind.split(":")
    if len(parts) >= 3:
        return parts[0], parts[1], ":".join(parts[2:])
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return "", parts[0], ""


def create_body(
    attrs: dict[str, Any], image_ref: str, image_config: dict[str, Any] | None = None,
    api_version: str | None = None,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[str]]:
    """The inspect data turned back into a create body, minus what Docker generates.

    Returns (body, extra network connections, human notes on what is carried over). Long on
    purpose: one line per create field Docker's inspect output carries, in the order of the API, so
    a reviewer can check it field by field against ``docker inspect``. ``api_version`` is the API the
    inspect data was read with: from 1.44 a MAC address the user set lives in the endpoint settings.
    """
    cid = attrs.get("Id", "")
    cfg = copy.deepcopy(attrs.get("Config") or {})
    hc = copy.deepcopy(attrs.get("HostConfig") or {})
    notes: list[str] = []
    net_mode = hc.get("NetworkMode") or "default"

    if net_mode.startswith("container:") or hc.get("UTSMode") == "host":
        # The hostname comes from the other container's namespace (watchtower #188) or the host's
        # (--uts host: Docker refuses a create that names one, "conflicting options: hostname and the UTS mode").
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
            if not HEX64.match(m["Name"]):
                notes.append(f"volume {m['Name']} at {dest}")
            continue
        covered.add(dest)
        if HEX64.match(m["Name"]):
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
        running = bool((attrs.get("State") or {}).get("Running"))
        for net, ep in networks.items():
            clean = _endpoint(ep or {}, cid, endpoint_mac=not running and endpoint_macs(api_version))
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
        notes.append(f"restart policy {policy_text(rp)}")
    if cfg.get("Healthcheck") and (cfg["Healthcheck"].get("Test") or ["NONE"])[0] != "NONE":
        notes.append("healthcheck " + " ".join(cfg["Healthcheck"].get("Test") or []))
    return body, connect, notes


def _network_note(net: str, ep: dict[str, Any]) -> str:
    ipam = ep.get("IPAMConfig") or {}
    static = [a for a in (ipam.get("IPv4Address"), ipam.get("IPv6Address")) if a]
    how = f"static address {', '.join(static)} kept" if static else "address assigned by Docker"
    return f"{net} (aliases kept, {how})"


def policy_text(policy: dict[str, Any]) -> str:
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


def endpoint_macs(api_version: str | None) -> bool:
    """Does this API keep a MAC address the user set in the endpoint settings (API >= 1.44, Docker 25)?

    Below 1.44 it is ``Config.MacAddress`` (copied with the rest of Config). From 1.44 a stopped
    container's endpoint shows only the MAC that was asked for ("" when Docker generates one); a
    running one shows the address in use, so the executor reads it again once the container stopped.
    """
    try:
        major, minor = (int(p) for p in (api_version or "0.0").split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (1, 44)


def keep_endpoint_macs(body: dict[str, Any], connect: Iterable[tuple[str, dict[str, Any]] | list[Any]],
                       stopped: dict[str, Any]) -> list[str]:
    """Put the MACs a stopped container's endpoints were configured with (API >= 1.44) into ``body`` and
    the ``connect`` endpoints, in place. Returns "network MAC" for each one kept."""
    kept: list[str] = []
    networks = (stopped.get("NetworkSettings") or {}).get("Networks") or {}
    endpoints = dict((body.get("NetworkingConfig") or {}).get("EndpointsConfig") or {})
    endpoints.update({net: ep for net, ep in connect})
    for net, ep in sorted(networks.items()):
        mac = (ep or {}).get("MacAddress")
        if mac and net in endpoints and _MAC.fullmatch(str(mac)):
            endpoints[net]["MacAddress"] = mac
            kept.append(f"{net} {mac}")
    return kept


_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def _endpoint(ep: dict[str, Any], cid: str, endpoint_mac: bool = False) -> dict[str, Any]:
    """An endpoint as the user configured it: no generated ids, addresses, MACs or the short-id alias
    (``endpoint_mac``: the endpoint's MAC is the one the user set, API >= 1.44 on a stopped container)."""
    out: dict[str, Any] = {}
    if endpoint_mac and ep.get("MacAddress") and _MAC.fullmatch(str(ep["MacAddress"])):
        out["MacAddress"] = ep["MacAddress"]
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


def rewrite_cuda_visible(body: dict[str, Any], from_uuids: set[str], target_uuid: str,
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
