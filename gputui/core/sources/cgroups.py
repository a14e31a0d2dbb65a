"""Which container a host process runs in, from the text of ``/proc/PID/cgroup``.

NVML reports host PIDs and nothing else; the only cheap, permission-free link
from a PID to a container is the cgroup path the runtime put it in. Every engine
encodes the container id in one path component, each in its own spelling:

=============================  ==============================================================
Docker, cgroupfs driver        ``/docker/<id>``
Docker, systemd driver         ``/system.slice/docker-<id>.scope``
                               (rootless: ``…/user@1000.service/…/docker-<id>.scope``)
docker-in-docker               ``/docker/<outer>/docker/<inner>``: the *outermost* id is the host's container
Podman                         ``/machine.slice/libpod-<id>.scope[/container]``; ``libpod-conmon-<id>`` is its monitor
containerd CRI (Kubernetes)    ``/kubepods.slice/…-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope``
                               or, cgroupfs driver, ``/kubepods/<qos>/pod<uid>/<id>``
CRI-O (Kubernetes)             ``…/crio-<id>.scope``; ``crio-conmon-<id>`` is its monitor
nerdctl (plain containerd)     ``…/nerdctl-<id>.scope`` (rootless: under ``user@UID.service``)
containerd, cgroupfs (ctr)     ``/<namespace>/<id>``, ids need not be hex: *tentative* (any two-level
                               path reads so), kept only when containerd confirms the id
=============================  ==============================================================

cgroup v1 has one ``N:controllers:path`` line per hierarchy, cgroup v2 a single
``0::path`` line; both are read. When gputui itself runs in a container with a
private cgroup namespace, paths of processes outside it are shown relative to its
own cgroup, with leading ``/..`` components, and the parent ``docker`` component may
be cut off: those are tolerated (a bare id right after the ``..`` is taken for a
Docker id, which the Docker API then confirms or not).

Parsing is pure (text in, :class:`CgroupMatch` out) so it is tested on recorded
files. Kubernetes pod names are not in the cgroup path: :func:`name_pod` fills them
from the kubelet's ``/var/log/pods/<namespace>_<name>_<uid>`` directories where
those are readable, and leaves them ``None`` otherwise (the pod UID and container id
are still shown).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable

from gputui.core.model import Runtime
from gputui.core.record import record, replace

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: A pod UID as the kubelet writes it in cgroup names: a UUID with '-' or '_' separators,
#: or (static and mirror pods) 32 hex digits of a config hash.
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?$"
)
#: (prefix, runtime) for ``<prefix><id>[.scope]`` components. The conmon monitors of
#: podman and CRI-O sit in ``<prefix>conmon-<id>`` and are *not* the container.
_PREFIXED = (
    ("docker-", "docker"),
    ("libpod-", "podman"),
    ("cri-containerd-", "containerd"),
    ("crio-", "crio"),
    ("nerdctl-", "containerd"),
)
#: The runtimes a CgroupMatch names; CRI-O containers outside Kubernetes are "other".
_RUNTIMES: dict[str, Runtime] = {"docker": "docker", "podman": "podman", "containerd": "containerd"}
#: A containerd namespace and a container id as containerd allows them (``/<namespace>/<id>``).
_NAMESPACE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)*")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,75}")
#: First components of two-level cgroup paths that are not containerd namespaces.
_NOT_NAMESPACES = frozenset({"docker", "libpod_parent", "machine", "lxc", "kubepods", "system", "user", "init"})


@record
class CgroupMatch:
    """A container found in a cgroup path.

    ``runtime`` is "docker", "podman", "containerd", "kubernetes" or "other". For
    Kubernetes, ``pod_uid`` comes from the path; ``pod`` and ``namespace`` are names
    filled in by :func:`name_pod` when the kubelet's log directories tell them. A
    ``tentative`` match (containerd's ``/<namespace>/<id>``) names a container only
    when containerd confirms the id.
    """

    runtime: Runtime
    id: str
    pod: str | None = None
    namespace: str | None = None
    pod_uid: str | None = None
    tentative: bool = False
    #: Kubernetes: the container's name in its pod, where the kubelet's log links tell it
    name: str | None = None


def parse_cgroup(text: str | None) -> CgroupMatch | None:
    """The (outermost) container of a process, from ``/proc/PID/cgroup`` contents; None if on the host."""
    if not text:
        return None
    best: CgroupMatch | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        match = parse_path(parts[2])
        if match is None:
            continue
        # Hierarchies normally agree; prefer a sure match, and the line that also tells the pod.
        if best is None or (best.tentative and not match.tentative) or \
                (best.pod_uid is None and match.pod_uid is not None and not match.tentative):
            best = match
    return best


def parse_path(path: str) -> CgroupMatch | None:
    """The outermost container named by one cgroup path, or None."""
    comps = [c for c in path.strip().split("/") if c]
    relative = bool(comps) and comps[0] == ".."
    while comps and comps[0] == "..":
        comps.pop(0)
    kube = any(c == "kubepods" or c.startswith("kubepods.") or c.startswith("kubepods-") for c in comps)
    pod_uid: str | None = None
    prev: str | None = None
    for i, comp in enumerate(comps):
        pod = _POD.search(comp)
        if pod is not None and (kube or comp.startswith("pod") or "-pod" in comp):
            pod_uid = _uid(pod.group(1))
            prev = comp
            continue
        found = _container_component(comp, prev, pod_uid is not None, relative and i == 0)
        if found is not None:
            runtime, cid = found
            if kube or pod_uid is not None:
                return CgroupMatch("kubernetes", cid, pod_uid=pod_uid)
            return CgroupMatch(_RUNTIMES.get(runtime, "other"), cid)
        prev = comp
    if len(comps) == 2 and not relative and not kube and _containerd_pair(comps[0], comps[1]):
        return CgroupMatch("containerd", comps[1], namespace=comps[0], tentative=True)
    return None


def _containerd_pair(namespace: str, cid: str) -> bool:
    """Whether ``/<namespace>/<id>`` can be a containerd container's cgroupfs path."""
    if namespace in _NOT_NAMESPACES or namespace.endswith((".slice", ".scope", ".service")):
        return False
    if cid.endswith((".slice", ".scope", ".service")):
        return False
    return len(namespace) <= 76 and _NAMESPACE.fullmatch(namespace) is not None and _ID.fullmatch(cid) is not None


def _container_component(comp: str, prev: str | None, under_pod: bool, first_relative: bool) -> tuple[str, str] | None:
    """(runtime, id) if this path component is a container's own cgroup."""
    name = comp[:-len(".scope")] if comp.endswith(".scope") else comp
    for prefix, runtime in _PREFIXED:
        if name.startswith(prefix):
            rest = name[len(prefix):]
            if rest.startswith("conmon-"):
                return None
            if _HEX64.fullmatch(rest):
                return runtime, rest
            return None
    if _HEX64.fullmatch(name):
        if prev == "docker":
            return "docker", name
        if under_pod:
            return "containerd", name
        if first_relative:
            # Under a private cgroup namespace "/docker/<id>" of a sibling reads "/../<id>".
            return "docker", name
    return None


def _uid(raw: str) -> str:
    """The pod UID as the API spells it: dashes, not the underscores systemd slice names need."""
    uid = raw.replace("_", "-")
    return uid


# -- Kubernetes pod names ---------------------------------------------------------

#: Where the kubelet keeps one directory per pod, named ``<namespace>_<pod name>_<uid>``.
POD_LOG_DIR = "/var/log/pods"


class PodDirectory:
    """Pod UID -> (namespace, name), read from the kubelet's pod log directories.

    Pod and namespace names are DNS labels (no underscores), so the directory name
    splits unambiguously. The listing is re-read only when the directory's mtime
    changes, so a lookup per process per poll is cheap. A missing or unreadable
    directory (no Kubernetes, no permission) simply yields no names.
    """

    def __init__(self, root: str = POD_LOG_DIR) -> None:
        self.root = root
        self._mtime: float | None = None
        self._names: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def lookup(self, pod_uid: str) -> tuple[str, str] | None:
        """(namespace, pod name) for a pod UID, or None when unknown."""
        with self._lock:
            self._refresh()
            return self._names.get(pod_uid)

    def _refresh(self) -> None:
        try:
            mtime = os.stat(self.root).st_mtime
        except OSError:
            self._mtime, self._names = None, {}
            return
        if mtime == self._mtime:
            return
        names: dict[str, tuple[str, str]] = {}
        try:
            entries = os.listdir(self.root)
        except OSError:
            entries = []
        for entry in entries:
            parts = entry.split("_")
            if len(parts) == 3 and all(parts):
                names[parts[2]] = (parts[0], parts[1])
        self._mtime, self._names = mtime, names


_default_pods = PodDirectory()

#: Where the kubelet links every container's log as ``<pod>_<namespace>_<container>-<container id>.log``.
CONTAINER_LOG_DIR = "/var/log/containers"
_LOG_LINK = re.compile(r"([a-z0-9][-a-z0-9.]*)_([a-z0-9][-a-z0-9]*)_([a-z0-9][-a-z0-9]*)-([0-9a-f]{64})\.log")


class ContainerLogs:
    """Container id -> (namespace, pod, container name), from the kubelet's ``/var/log/containers`` links.

    The kubelet makes them for every CRI (containerd, CRI-O), so they name a container whose
    id a cgroup path gives even where no runtime API is readable. Pod, namespace and container
    names are DNS labels (no underscores), so a link name splits unambiguously; anything else is
    ignored. Re-read only when the directory's mtime changes.
    """

    def __init__(self, root: str = CONTAINER_LOG_DIR) -> None:
        self.root = root
        self._mtime: float | None = None
        self._names: dict[str, tuple[str, str, str]] = {}
        self._lock = threading.Lock()

    def lookup(self, container_id: str) -> tuple[str, str, str] | None:
        with self._lock:
            try:
                mtime = os.stat(self.root).st_mtime
            except OSError:
                self._mtime, self._names = None, {}
                return None
            if mtime != self._mtime:
                names: dict[str, tuple[str, str, str]] = {}
                try:
                    entries = os.listdir(self.root)[:100_000]
                except OSError:
                    entries = []
                for entry in entries:
                    m = _LOG_LINK.fullmatch(entry)
                    if m is not None and len(entry) < 600:
                        names[m.group(4)] = (m.group(2), m.group(1), m.group(3))
                self._mtime, self._names = mtime, names
            return self._names.get(container_id)


_default_logs = ContainerLogs()


def name_pod(match: CgroupMatch | None,
             lookup: Callable[[str], tuple[str, str] | None] | None = None,
             containers: Callable[[str], tuple[str, str, str] | None] | None = None) -> CgroupMatch | None:
    """Fill a Kubernetes match's pod name, namespace (and container name) where they can be found.

    ``containers`` maps a container id to (namespace, pod, container) and ``lookup`` a pod
    UID to (namespace, pod); the defaults read the kubelet's ``/var/log/containers`` links and
    pod log directories (a caller giving ``lookup`` alone reads no links). Another resolver
    (kubelet PodResources, crictl) can be passed the same way.
    """
    if match is None or match.runtime != "kubernetes" or match.pod is not None:
        return match
    by_id = containers or (_default_logs.lookup if lookup is None else None)
    named = by_id(match.id) if by_id is not None else None
    if named is not None:
        return replace(match, namespace=named[0], pod=named[1], name=named[2])
    if match.pod_uid is None:
        return match
    found = (lookup or _default_pods.lookup)(match.pod_uid)
    if found is None:
        return match
    namespace, name = found
    return replace(match, pod=name, namespace=namespace)
