"""Commands built from fleet data: validated first, then quoted for both shells they cross.

A hostname, a container name or a GPU UUID in a Prometheus label is chosen by
whoever runs that host's exporter. Quoting alone does not make such text safe in
a command line: ``shlex.quote('-oProxyCommand=…')`` leaves it as an ssh option,
and ssh joins the words after the host into one line for the *remote* shell,
where one level of local quoting is gone. So:

* a host must be a hostname (RFC 1123 labels, underscores tolerated), an IPv4 or an
  IPv6 address, at most :data:`HOST_MAX` bytes — no leading ``-``, no spaces, no
  shell or ssh metacharacters (``@``, ``%``, ``:`` outside IPv6, quotes, ``$``…);
  otherwise :func:`ssh_host` gives no target but one sentence why;
* a container name must be a Docker name (``[A-Za-z0-9][A-Za-z0-9_.-]*``), a GPU UUID
  ``GPU-`` followed by letters, digits and dashes;
* :func:`ssh_command` writes ``ssh [-t] -- HOST 'remote words'``: ``--`` ends ssh's
  options, and the remote words are quoted for the remote shell, then the line for
  the local one (parsing the result with ``shlex.split`` twice gives the words back).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import shlex
from collections.abc import Sequence

from gputui.core.fleet.model import FleetHost
from gputui.core.safe_text import clean

#: The longest hostname DNS allows (bytes); longer host labels are cut and flagged.
HOST_MAX = 253
#: The longest other text label kept whole (names, users, images, kinds).
NAME_MAX = 256

_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_CONTAINER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,255}")
_GPU_UUID = re.compile(r"GPU-[0-9A-Za-z-]{1,80}")


@functools.lru_cache(maxsize=4096)  # pure; asked for every host at every refresh of the fleet screen
def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be handed to ssh as a host name, or None when it can."""
    if not host:
        return "it is empty"
    if len(host.encode("utf-8", "surrogateescape")) > HOST_MAX:
        return f"it is longer than {HOST_MAX} bytes"
    if host.isascii() and "%" not in host:
        name = host[:-1] if host.endswith(".") else host
        if name and all(_HOST_LABEL.fullmatch(part) for part in name.split(".")):
            return None  # first: a fleet's names are host names, and ipaddress's ValueError costs ~20 µs
        try:
            ipaddress.ip_address(host)
            return None
        except ValueError:
            pass
    if host.startswith("-"):
        return "it starts with '-', which ssh would read as an option"
    return "it is not a host name or IP address, which hold only letters, digits, '-', '_', '.' and ':'"


def ssh_host(host: FleetHost) -> tuple[str | None, str]:
    """(the host to give ssh, "") or (None, one sentence why no command is offered)."""
    target = host.ssh_target
    why = host_problem(target)
    if why is None:
        return target, ""
    return None, (f"No command is offered for {clean(host.shown)[:80]}: its name from Prometheus "
                  f"({clean(target)[:60]!r}{'…' if len(target) > 60 else ''}) cannot be used in one safely: {why}.")


def container_problem(name: str) -> str | None:
    """Why ``name`` is not a container name a command may carry, or None."""
    if _CONTAINER.fullmatch(name):
        return None
    return "it is not a container name (letters, digits, '_', '.' and '-', at most 256)"


def gpu_uuid_ok(uuid: str) -> bool:
    return _GPU_UUID.fullmatch(uuid) is not None


def remote_line(words: Sequence[str]) -> str:
    """``words`` as one line the remote shell splits back into exactly those words."""
    return " ".join(shlex.quote(w) for w in words)


def ssh_command(target: str, words: Sequence[str], *, tty: bool = False) -> str:
    """``ssh [-t] -- TARGET 'words…'`` for a target :func:`host_problem` accepted."""
    if host_problem(target) is not None:
        raise ValueError(f"not a host name: {clean(target)[:80]!r}")
    head = "ssh -t --" if tty else "ssh --"
    return f"{head} {shlex.quote(target)} {shlex.quote(remote_line(words))}"


def url_host(target: str) -> str:
    """``target`` as the host part of an ``ssh://`` URL (an IPv6 address in brackets)."""
    return f"[{target}]" if ":" in target else target
