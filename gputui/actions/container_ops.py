"""Docker facts and calls a migration, its rollback and ``--recover`` share.

* :func:`effective_command` — what a container actually runs, computed from a
  create body and its image the way dockerd merges them, so a plan can show (and
  the executor can refuse) any change of entrypoint or command, e.g. an
  ``--entrypoint ""`` that Docker stores as ``Entrypoint: null``.
* :func:`wait_stopped` — Docker keeps executing a stop after the client that asked
  for it gives up or dies. Undo and recover wait it out before they start the
  original again; otherwise the stop lands *after* "it's back" and the container
  stays down (Docker counts it as a manual stop, so ``unless-stopped`` never
  restarts it).
* :func:`connect_networks` — joins the extra networks with their static
  addresses, aliases, links and driver options.
* :func:`daemon_would_start` — whether dockerd would start a stopped container at
  its next start (a ``created`` copy it would not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

#: Seconds dockerd may take after a stop's timeout (SIGKILL, reaping) before the container counts as stopped.
STOP_GRACE = 10.0


def effective_command(config: dict[str, Any], image_config: dict[str, Any] | None) -> list[str] | None:
    """argv the container runs: dockerd's merge of the body's Entrypoint/Cmd with the image's.

    None when the image is unknown and the body relies on it. ``[""]`` (the
    API form of ``--entrypoint ""``) means "no entrypoint".
    """
    entrypoint = config.get("Entrypoint")
    cmd = config.get("Cmd")
    if not entrypoint:
        if not cmd:
            if image_config is None:
                return None
            cmd = image_config.get("Cmd")
        if entrypoint is None:
            if image_config is None:
                return None
            entrypoint = image_config.get("Entrypoint")
    argv = [] if entrypoint == [""] else list(entrypoint or [])
    return argv + list(cmd or [])


def running_command(attrs: dict[str, Any]) -> list[str] | None:
    """argv an existing container runs (inspect's Path and Args)."""
    path = attrs.get("Path")
    return [path, *(attrs.get("Args") or [])] if path else None


def wait_stopped(inspect: Callable[[str], dict[str, Any] | None], cid: str, deadline: float,
                 sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until the container is not running or ``deadline`` (wall clock) passes. True if it stopped."""
    while True:
        state = (inspect(cid) or {}).get("State") or {}
        if not state.get("Running"):
            return True
        if time.time() >= deadline:
            return False
        sleep(0.1)


def connect_networks(api: Any, cid: str, connect: Iterable[tuple[str, dict[str, Any]] | list[Any]]) -> None:
    """Join every extra network with what the endpoint was configured with.

    The endpoint is create-body shaped (links as ``"other:alias"``); docker-py takes links as
    (container, alias) pairs, so they are split here (a string there fails with "too many values
    to unpack"). A MAC address is passed only when the endpoint has one (API >= 1.44 bodies).
    """
    for net, endpoint in connect:
        ipam = endpoint.get("IPAMConfig") or {}
        extra = {"mac_address": endpoint["MacAddress"]} if endpoint.get("MacAddress") else {}
        api.connect_container_to_network(
            cid, net, aliases=endpoint.get("Aliases"), links=link_pairs(endpoint.get("Links")),
            ipv4_address=ipam.get("IPv4Address") or None, ipv6_address=ipam.get("IPv6Address") or None,
            link_local_ips=ipam.get("LinkLocalIPs") or None, driver_opt=endpoint.get("DriverOpts"), **extra,
        )


def link_pairs(links: Iterable[str] | None) -> list[tuple[str, str]] | None:
    """``["other:alias", "plain"]`` (the API's form) -> ``[("other", "alias"), ("plain", "")]`` (docker-py's)."""
    if not links:
        return None
    out = []
    for link in links:
        target, _, alias = str(link).partition(":")
        out.append((target.lstrip("/"), alias.rsplit("/", 1)[-1]))
    return out


def daemon_would_start(attrs: dict[str, Any]) -> bool:
    """Would dockerd start this stopped container when the daemon starts next?

    dockerd restores a container that has run before when its restart policy says
    so: ``always`` even after a manual stop. (An exited ``unless-stopped``
    container was stopped by hand, or it would have been restarted already.)
    A container that was only created has never run, and is never started.
    """
    policy = ((attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
    state = attrs.get("State") or {}
    return policy == "always" and not state.get("Running") and state.get("Status") == "exited"
