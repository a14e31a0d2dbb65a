"""The probes of ``gputui doctor``: gather facts, judge nothing.

Each probe reads one part of the machine and returns a frozen facts object from
:mod:`gputui.core.doctor.facts`; :mod:`gputui.core.doctor.checks` judges them. Probes never raise for a
problem on the machine (that is what they report); paths are parameters so the
tests can point them at a prepared tree.

NVML is reached only through the GPU source (:mod:`gputui.core.sources.nvml`), as
everywhere else in gputui.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import socket
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.core.doctor.facts import (
    ContainerEnvFacts,
    ContainerFinding,
    DeviceFacts,
    DeviceNode,
    DockerFacts,
    RulesFacts,
    RuntimeFacts,
    RuntimeProbe,
)
from gputui.core.doctor.slurm import SlurmFacts
from gputui.core.model import Snapshot
from gputui.core.sources.processes import INIT_PID_NS_INODE, ns_inode

if TYPE_CHECKING:
    from gputui.core.rules import Limits

#: Inode number of the initial (host) cgroup namespace, fixed by the kernel (PROC_CGROUP_INIT_INO);
#: the PID namespace's is processes.INIT_PID_NS_INODE.
INIT_CGROUP_NS = 0xEFFFFFFB

#: systemd's default PATH for services, used when dockerd's own environment cannot be read.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOOK = "nvidia-container-runtime-hook"
CDI_HOOK = "nvidia-cdi-hook"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
_NVIDIA_VENDOR = "0x10de"


# -- who am I ------------------------------------------------------------------------


def current_user() -> str:
    """The name of the effective user (what permission messages talk about)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _groups_now() -> tuple[str, ...]:
    names = []
    for gid in sorted({os.getegid(), *os.getgroups()}):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return tuple(names)


def _groups_listed(user: str) -> tuple[str, ...]:
    """Groups /etc/group (NSS) lists the user in: what a fresh login would get."""
    names = set()
    try:
        names.add(grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name)
    except KeyError:
        pass
    try:
        names.update(g.gr_name for g in grp.getgrall() if user in g.gr_mem)
    except OSError:
        pass
    return tuple(sorted(names))


def _owner(st: os.stat_result) -> tuple[str, str | None]:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group: str | None = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} {stat.S_IMODE(st.st_mode):04o}", group


# -- device nodes --------------------------------------------------------------------


def probe_devices(minors: list[int] | None, dev: str = "/dev") -> DeviceFacts:
    """/dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidiaN for every GPU's minor number.

    Without NVML (``minors`` None) the GPU nodes that exist are checked.
    """
    base = Path(dev)
    if minors is None:
        minors = sorted(int(p.name[len("nvidia"):]) for p in base.glob("nvidia[0-9]*")
                        if p.name[len("nvidia"):].isdigit())
    paths = [base / "nvidiactl", base / "nvidia-uvm", *(base / f"nvidia{m}" for m in minors)]
    nodes = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            nodes.append(DeviceNode(str(path), exists=False))
            continue
        owner, group = _owner(st)
        group_grants = bool(st.st_mode & stat.S_IRGRP and st.st_mode & stat.S_IWGRP)
        nodes.append(DeviceNode(
            str(path), exists=True, is_char_device=stat.S_ISCHR(st.st_mode),
            usable=os.access(path, os.R_OK | os.W_OK), owner=owner, group=group if group_grants else None,
        ))
    user = current_user()
    return DeviceFacts(tuple(nodes), user=user, groups=_groups_now(), listed_groups=_groups_listed(user))


# -- where gputui runs ----------------------------------------------------------------


def probe_container_env(snapshot: Snapshot | None = None, proc: str = "/proc", root: str = "/") -> ContainerEnvFacts:
    """Inside a container? In the host's PID and cgroup namespaces?"""
    procp, rootp = Path(proc), Path(root)
    evidence = None
    if (rootp / ".dockerenv").exists():
        evidence = "/.dockerenv exists"
    elif (rootp / "run" / ".containerenv").exists():
        evidence = "/run/.containerenv exists"
    else:
        try:
            env = (procp / "1" / "environ").read_bytes().split(b"\0")
            for item in env:
                if item.startswith(b"container="):
                    evidence = f"container={item[10:].decode(errors='replace')}"
                    break
        except OSError:
            pass
        if evidence is None:
            try:
                cg = (procp / "self" / "cgroup").read_text()
                if re.search(r"/(docker|kubepods|libpod|lxc|containerd)[/-]", cg):
                    evidence = "its cgroup path names a container"
            except OSError:
                pass
    pid_ns = ns_inode(str(procp / "self" / "ns" / "pid"))
    cg_ns = ns_inode(str(procp / "self" / "ns" / "cgroup"))
    invisible = False
    if snapshot is not None:
        procs = snapshot.processes
        invisible = bool(procs) and all(not p.visible and p.invisible_reason == "other-namespace" for p in procs)
    return ContainerEnvFacts(
        in_container=evidence is not None or (pid_ns is not None and pid_ns != INIT_PID_NS_INODE),
        evidence=evidence,
        host_pid_namespace=None if pid_ns is None else pid_ns == INIT_PID_NS_INODE,
        host_cgroup_namespace=None if cg_ns is None else cg_ns == INIT_CGROUP_NS,
        gpu_pids_invisible=invisible,
    )


# -- Docker ------------------------------------------------------------------------------


def _peer_pid(path: str, timeout: float) -> int | None:
    """The PID that listens on a unix socket (SO_PEERCRED); pid 1 when systemd holds it (socket activation)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
        raw = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", raw)
        return pid or None
    except OSError:
        return None
    finally:
        s.close()


def _comm(proc: Path, pid: int) -> str:
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def find_dockerd(socket_path: str | None, proc: str = "/proc", timeout: float = 2.0) -> int | None:
    """dockerd's PID: the socket's listener, else the only dockerd process (or the one naming the socket)."""
    procp = Path(proc)
    if socket_path:
        pid = _peer_pid(socket_path, timeout)
        if pid and _comm(procp, pid) == "dockerd":
            return pid
    found = []
    for entry in procp.iterdir():
        if entry.name.isdigit() and _comm(procp, int(entry.name)) == "dockerd":
            found.append(int(entry.name))
    if len(found) == 1:
        return found[0]
    if socket_path:
        for pid in found:
            try:
                cmdline = (procp / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if socket_path in cmdline:
                return pid
    return None


def _environ_path(proc: Path, pid: int) -> str | None:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"PATH="):
            return item[5:].decode(errors="replace")
    return ""  # readable, but no PATH: Go's exec.LookPath then finds nothing


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:
        return None


def _which(name: str, path: str) -> str | None:
    for d in path.split(":"):
        if not d:
            continue
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _cdi_specs(dirs: tuple[str, ...]) -> tuple[str, ...]:
    """NVIDIA CDI spec files (kind nvidia.com/gpu) in the given directories."""
    found = []
    for d in dirs:
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        for name in entries:
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            path = os.path.join(d, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    if "nvidia.com/gpu" in fh.read(65536):
                        found.append(path)
            except OSError:
                continue
    return tuple(found)


def probe_docker(timeout: float = 5.0, environ: Mapping[str, str] | None = None, proc: str = "/proc",
                 cdi_dirs: tuple[str, ...] = CDI_DIRS) -> DockerFacts:
    """The socket, the daemon and its NVIDIA set-up, as this user can see them."""
    from gputui.core.sources import SourceUnavailable
    from gputui.core.sources.docker_source import describe_error, docker_client, docker_host, socket_path

    env = dict(os.environ if environ is None else environ)
    host = docker_host(env)
    path = socket_path(host)
    user = current_user()
    base: dict[str, Any] = {"endpoint": host, "socket_path": path, "user": user}
    if path is not None:
        try:
            st = os.stat(path)
        except PermissionError:
            # A directory on the way is closed to this user: the socket may exist, it is not usable.
            return DockerFacts(socket_exists=True, socket_accessible=False,
                               socket_owner="in a directory this user cannot enter", **base)
        except OSError:
            return DockerFacts(socket_exists=False, **base)
        owner, group = _owner(st)
        groups_now = _groups_now()
        listed = _groups_listed(user)
        base.update(socket_exists=True, socket_accessible=os.access(path, os.R_OK | os.W_OK), socket_owner=owner,
                    socket_group=group, in_group_now=group in groups_now, in_group_listed=group in listed)
        if not base["socket_accessible"]:
            return DockerFacts(**base)
    try:
        client = docker_client(timeout=timeout, environ=env)
    except SourceUnavailable as exc:
        return DockerFacts(reachable=False, error=str(exc), **base)
    try:
        try:
            version = client.version()
            info = client.info()
        except Exception as exc:
            return DockerFacts(reachable=False, error=describe_error(exc, host, timeout), **base)
    finally:
        try:
            client.close()
        except Exception:
            pass
    runtimes = tuple(sorted((info.get("Runtimes") or {}).keys()))
    spec_dirs = info.get("CDISpecDirs")
    cdi_spec_dirs = tuple(spec_dirs) if isinstance(spec_dirs, list) else None
    procp = Path(proc)
    pid = find_dockerd(path, proc) if path is not None else None
    searched = "dockerd's PATH"
    dpath = _environ_path(procp, pid) if pid is not None else None
    if dpath is None:
        dpath = DEFAULT_PATH
        searched = ("the default PATH (dockerd's environment cannot be read)" if pid is not None
                    else "the default PATH (dockerd's process was not found)")
    hook = _which(HOOK, dpath)
    cdi_hook = _which(CDI_HOOK, dpath)
    newer = False
    if hook is not None and pid is not None:
        started = _start_time(pid)
        try:
            changed = os.stat(hook).st_ctime
        except OSError:
            changed = None
        newer = started is not None and changed is not None and changed > started + 1.0
    return DockerFacts(
        reachable=True,
        server_version=version.get("Version"),
        api_version=version.get("ApiVersion"),
        runtimes=runtimes,
        default_runtime=info.get("DefaultRuntime"),
        authz_plugins=tuple(str(n)[:64] for n in ((info.get("Plugins") or {}).get("Authorization") or ())[:16]),
        cdi_spec_dirs=cdi_spec_dirs,
        cdi_specs=_cdi_specs(cdi_spec_dirs or cdi_dirs),
        hook_path=hook,
        hook_searched=searched,
        hook_newer_than_daemon=newer,
        cdi_hook_path=cdi_hook,
        dockerd_pid=pid,
        **base,
    )


# -- containers -----------------------------------------------------------------------------


def container_findings(snapshot: Snapshot) -> tuple[tuple[ContainerFinding, ...] | None, str | None]:
    """The containers judge's findings in a snapshot, or None and why."""
    if not snapshot.docker.available:
        return None, snapshot.docker.error or "Docker is not available"
    out = []
    for c in snapshot.containers:
        for f in c.findings:
            out.append(ContainerFinding(c.name, f.kind, f.message))
    return tuple(out), None


# -- NVML --------------------------------------------------------------------------------------


def kernel_module_version(path: str = "/proc/driver/nvidia/version") -> str | None:
    """The loaded NVIDIA kernel module's version, from /proc/driver/nvidia/version."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9][0-9.]*)", text)
    return m.group(1) if m else None


def bindings_version() -> str | None:
    from importlib import metadata

    for dist in ("nvidia-ml-py", "pynvml"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def foreign_bound_gpus(sysfs: str = "/sys/bus/pci/devices") -> tuple[tuple[str, str | None], ...]:
    """NVIDIA display/3D controllers on the PCI bus whose kernel driver is not ``nvidia``."""
    out = []
    try:
        entries = sorted(os.listdir(sysfs))
    except OSError:
        return ()
    for name in entries:
        dev = Path(sysfs) / name
        try:
            vendor = (dev / "vendor").read_text().strip().lower()
            klass = (dev / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor != _NVIDIA_VENDOR or not klass.startswith("0x03"):
            continue
        try:
            driver: str | None = os.path.basename(os.readlink(dev / "driver"))
        except OSError:
            driver = None
        if driver != "nvidia":
            out.append((name, driver))
    return tuple(out)


def named_limits(limits: Limits) -> tuple[str, ...]:
    """The limits a rules file sets, as it spells them."""
    named = []
    if limits.max_gpus_per_user is not None:
        named.append(f"max_gpus_per_user = {limits.max_gpus_per_user}")
    if limits.max_idle_hold is not None:
        named.append(f"max_idle_hold = {limits.max_idle_hold:g} s")
    if not limits.allow_all_gpus:
        named.append("allow_all_gpus = false")
    if limits.self_service:
        named.append("self_service = true")
    return tuple(named)


def probe_rules(docker: DockerFacts) -> RulesFacts:
    """The house rules as every face reads them, and whether dockerd's authorization plugins answer."""
    from gputui.core.rules import load_house_rules, rules_file

    rules = load_house_rules()
    named = named_limits(rules.limits)
    plugins: tuple[str, ...] | None = docker.authz_plugins if docker.reachable else None
    if not docker.reachable and docker.checked:
        # dockerd waits on an absent plugin, so it may not answer doctor either: read its flags instead
        pid = find_dockerd(docker.socket_path, timeout=1.0)
        if pid is not None:
            plugins = _authz_flags(pid)
    answers = tuple((name, _plugin_answers(name)) for name in plugins or ())
    return RulesFacts(path=rules_file(None), present=os.path.exists(rules_file(None)), error=rules.error,
                      limits=named, reservations=len(rules.reservations),
                      authz_plugins=plugins, plugin_answers=answers,
                      docker_error=None if docker.reachable or not docker.checked else docker.error,
                      docker_checked=docker.checked)


def _authz_flags(pid: int) -> tuple[str, ...] | None:
    """The authorization plugins named on dockerd's command line (daemon.json's are not read here)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    names = []
    for i, arg in enumerate(argv):
        text = arg.decode(errors="replace")
        if text.startswith("--authorization-plugin="):
            names.append(text.split("=", 1)[1])
        elif text == "--authorization-plugin" and i + 1 < len(argv):
            names.append(argv[i + 1].decode(errors="replace"))
    return tuple(n[:64] for n in names[:16])


def _plugin_answers(name: str) -> str | None:
    """None when the plugin ``name`` answers ``/Plugin.Activate`` as an authorization plugin, else why not."""
    import json
    import socket as _socket

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        return "its name is not one gputui looks up"
    path = f"/run/docker/plugins/{name}.sock"
    if not os.path.exists(path):
        try:
            with open(f"/etc/docker/plugins/{name}.spec", encoding="utf-8", errors="replace") as f:
                spec = f.read(4096).strip()
        except OSError:
            return f"neither /run/docker/plugins/{name}.sock nor /etc/docker/plugins/{name}.spec exists"
        if not spec.startswith("unix://"):
            return f"its spec file names {spec[:60]!r}, not a unix socket gputui can ask"
        path = spec[len("unix://"):]
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(path)
        s.sendall(b"POST /Plugin.Activate HTTP/1.1\r\nHost: plugin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        data = b""
        while len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        return f"{path} does not answer ({exc.strerror or exc.__class__.__name__})"
    finally:
        s.close()
    try:
        doc = json.loads(data.split(b"\r\n\r\n", 1)[1])
    except (ValueError, IndexError):
        return f"{path} answered something that is not a plugin's activation"
    return None if "authz" in (doc.get("Implements") or []) else f"{path} does not implement authz"


def probe_slurm(source: Any, snapshot: Snapshot | None) -> SlurmFacts:
    """This Slurm node's facts: ``scontrol ping``, slurm.conf's plugins, cgroup.conf, gres.conf's devices."""
    from gputui.core.sources.slurm import SlurmError, gres_minor, read_conf

    node = source.node
    up, why = False, None
    try:
        text = source.call(["scontrol", "ping"]).decode("utf-8", "replace")
        up = " is UP" in text
        why = None if up else (text.strip().splitlines() or ["no reply"])[0][:200]
    except SlurmError as exc:
        why = str(exc).rstrip(".")
    constrain = None
    try:
        cgroup = read_conf(os.path.join(os.path.dirname(node.conf_path), "cgroup.conf"))
        if "constraindevices" in cgroup:
            constrain = cgroup["constraindevices"].lower() in ("yes", "true", "1")
    except (OSError, UnicodeDecodeError):
        pass
    nvml = tuple((g.index, g.minor_number) for g in snapshot.gpus) if snapshot is not None else ()
    return SlurmFacts(node=node.name, conf_path=node.conf_path, slurmd_pid=node.slurmd_pid, controller_up=up,
                      controller_error=why, proctrack=node.conf.get("proctracktype"),
                      task_plugin=node.conf.get("taskplugin"), constrain_devices=constrain,
                      gres_files=node.gres_files, gres_minors=tuple(gres_minor(f) for f in node.gres_files),
                      nvml_minors=nvml)


# -- container runtimes -------------------------------------------------------------------------


def probe_runtimes(snapshot: Snapshot | None, *, timeout: float, containerd: str | None = None,
                   kubelet: str | None = None) -> RuntimeFacts:
    """Ask every container runtime gputui would read (Docker's and podman's sockets, containerd, the
    kubelet) whether it answers, each once with ``timeout``; the configured sockets are always asked,
    the default ones where they exist."""
    from gputui.core.sources.containerd_source import DEFAULT_ADDRESS, ContainerdSource
    from gputui.core.sources.docker_source import DockerSource, engine_hosts
    from gputui.core.sources.kubelet_source import DEFAULT_SOCKET, KubeletReader

    found: list[RuntimeProbe] = []
    for host in engine_hosts():
        src = DockerSource(timeout=timeout, host=host)
        try:
            inv = src.inventory((), {})
        finally:
            src.close()
        name = "podman" if src.engine == "podman" or "podman" in host else "Docker"
        found.append(RuntimeProbe(name, host, inv.available, inv.error,
                                  f"{len(inv.containers)} running" if inv.available else None))
    address = containerd or (DEFAULT_ADDRESS if os.path.exists(DEFAULT_ADDRESS) else None)
    if address is not None:
        ctd = ContainerdSource(address, timeout=timeout)
        try:
            inv = ctd.inventory((), {})
        finally:
            ctd.close()
        found.append(RuntimeProbe("containerd", address, inv.available, inv.error,
                                  f"namespaces {', '.join(ctd.namespaces) or 'none'}" if inv.available else None))
    socket_path = kubelet or (DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None)
    if socket_path is not None:
        reader = KubeletReader(socket_path, timeout=timeout)
        try:
            grants = reader.grants()
        finally:
            reader.close()
        found.append(RuntimeProbe("kubelet", socket_path, grants is not None, reader.error,
                                  f"{reader.pods} pods" if grants is not None else None))
    unnamed: list[str] = []
    for p in snapshot.processes if snapshot is not None else ():
        c = p.container
        if c is not None and c.runtime == "kubernetes" and not c.pod:
            label = f"pod UID {c.pod_uid}" if c.pod_uid else f"container {c.id[:12]}"
            if label not in unnamed:
                unnamed.append(label)
    return RuntimeFacts(checked=True, probes=tuple(found), unnamed_pods=tuple(unnamed))
