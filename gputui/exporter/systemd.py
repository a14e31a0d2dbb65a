"""The exporter's systemd unit: ``gputui exporter --print-systemd-unit`` writes it with the path of the
gputui that runs the command, so ``systemd-analyze verify`` passes wherever gputui is installed.

``contrib/systemd/gputui-exporter.service`` is this unit for ``/usr/local/bin/gputui``
(``tests/test_exporter_contrib.py`` keeps the two the same).
"""

from __future__ import annotations

import os
import re
import sys

#: What a path or an argument in ExecStart may hold: systemd splits on spaces and expands ``$`` and ``%``,
#: so anything else is refused rather than quoted.
_SAFE = re.compile(r"[A-Za-z0-9_./:+@=,\[\]-]+")

HEADER = """\
# gputui exporter as a systemd service (see README, "Many servers").
#
# Install:
#   useradd --system --no-create-home --shell /usr/sbin/nologin gputui
#   usermod -aG docker gputui     # read access to /var/run/docker.sock for container names (see below)
#   gputui exporter --print-systemd-unit > /etc/systemd/system/gputui-exporter.service
#   systemctl daemon-reload && systemctl enable --now gputui-exporter
#
# Docker socket: membership of the docker group is what lets the exporter read the container
# inventory, and it is root-equivalent on that host (the socket has no read-only mode). The exporter
# only reads (GET requests: list, inspect); if that is too much trust, drop the group and add
# --no-docker: GPUs and processes are still exported, container labels are then empty.
# NVML needs read access to /dev/nvidia* (world-readable on a default driver install).
# The exporter listens on loopback unless --listen says otherwise; to let a Prometheus on another
# host scrape it, listen on the host's address and firewall the port (or add --certfile/--keyfile).
"""

BODY = """\
[Unit]
Description=gputui exporter: Prometheus metrics for GPUs, processes, containers and imbalance
Documentation=https://github.com/gputui/gputui#many-servers
After=network-online.target docker.service
Wants=network-online.target

[Service]
Type=simple
User=gputui
Group=gputui
SupplementaryGroups=docker
ExecStart={exec_start}
Restart=on-failure
RestartSec=5s
TimeoutStopSec=5s
# Every scrape and every silent client holds a descriptor: room for many.
LimitNOFILE=65536
# It writes nothing but its own state under $XDG_STATE_HOME.
Environment=XDG_STATE_HOME=/var/lib/gputui-exporter
StateDirectory=gputui-exporter
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
CapabilityBoundingSet=
AmbientCapabilities=
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallArchitectures=native
UMask=0077

[Install]
WantedBy=multi-user.target
"""


class UnitError(ValueError):
    """A path or an option cannot be written into ExecStart; ``str(exc)`` is one sentence."""


def gputui_command() -> list[str]:
    """How this gputui is started: its console script when that is what runs, else ``python -m gputui``."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "gputui" and os.access(script, os.X_OK):
        return [os.path.abspath(script)]
    return [os.path.abspath(sys.executable), "-m", "gputui"]


def unit(command: list[str], options: list[str]) -> str:
    """The unit running ``command exporter options``; every word checked for what systemd would expand."""
    words = [*command, "exporter", *options]
    for word in words:
        if not _SAFE.fullmatch(word):
            raise UnitError(f"Cannot write {word!r} into the unit's ExecStart: systemd would split or expand "
                            f"it (paths and values of letters, digits and ./_-:@ only; or edit the unit by "
                            f"hand).")
    if not os.path.isabs(words[0]):
        raise UnitError(f"The unit needs an absolute path to gputui, not {words[0]!r}.")
    return HEADER + "\n" + BODY.format(exec_start=" ".join(words))
