"""Containers and their GPU grants, read through the Docker Engine API.

Why this shape:

* **Never raises.** Docker missing, the socket missing or forbidden, the daemon
  down, restarting or hung: each becomes ``ContainerInventory(False, "<one
  sentence>")`` and the GPU view goes on. The client is dropped on any failure and
  rebuilt by the next call, so gputui recovers by itself when the daemon returns.
* **Cheap in steady state.** One ``GET /containers/json`` per poll. Each container
  is inspected once and cached per (id, StartedAt); it is inspected again only
  when its state changes, when its main process is gone or no longer in its
  cgroup (a restart: a new ``State.Pid``), or after ``refresh_after`` seconds
  (``docker update`` can change a restart policy without a restart). Names come
  from the list call, so a rename shows at once.
* **Every grant form, resolved to this host's GPU UUIDs** by the one grant model
  migrate also uses (:func:`gputui.core.grants.read_grant`).
* The docker SDK costs ~0.3 s to import, so it is imported on first use only.

Also exported for the migrate and kill commands: :func:`docker_client` (a client
with the same connection rules, or :class:`SourceUnavailable` with one sentence)
and :func:`describe_error` (any Docker failure as one sentence).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gputui.core.grants import HostGpus, env_dict, read_grant
from gputui.core.model import ContainerInventory, ContainerRecord
from gputui.core.record import field, record
from gputui.core.sources import SourceUnavailable
from gputui.core.sources.podman import ROOTFUL_SOCKET, is_podman, libpod_inspect, podman_grant_attrs, podman_sockets

DEFAULT_SOCKET = "/var/run/docker.sock"
#: Container states worth listing: those that can have processes.
LIVE_STATES = ("running", "paused", "restarting")
#: The same on podman, which has no "restarting" and refuses the whole list call if asked for it.
PODMAN_LIVE_STATES = ("running", "paused")


# -- connecting -------------------------------------------------------------------

def docker_host(environ: Mapping[str, str] | None = None) -> str:
    """The daemon address gputui talks to: DOCKER_HOST, else the rootful or rootless default socket."""
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST")
    if host:
        return host
    default = DEFAULT_SOCKET
    if not os.path.exists(default):
        runtime_dir = env.get("XDG_RUNTIME_DIR")
        if runtime_dir and os.path.exists(os.path.join(runtime_dir, "docker.sock")):
            return f"unix://{os.path.join(runtime_dir, 'docker.sock')}"
    return f"unix://{default}"


def engine_hosts(environ: Mapping[str, str] | None = None, podman_rootful: str = ROOTFUL_SOCKET) -> list[str]:
    """Every Docker-API daemon gputui reads: ``DOCKER_HOST`` alone when set; else Docker's socket, then
    podman's rootful and the user's own where they exist (Docker's alone when none exists, so its
    absence is what the user is told)."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_HOST"):
        return [env["DOCKER_HOST"]]
    docker = docker_host(env)
    podman = [f"unix://{p}" for p in podman_sockets(env, podman_rootful)]
    path = socket_path(docker)
    hosts = [docker] if (path is not None and os.path.exists(path)) or not podman else []
    return hosts + [h for h in podman if h not in hosts]


def socket_path(host: str) -> str | None:
    """The filesystem path of a ``unix://`` (or bare path) Docker host; None for tcp:// and the like."""
    if host.startswith("unix://"):
        return host[len("unix://"):] or None
    if host.startswith("/"):
        return host
    return None


def _precheck(host: str, environ: Mapping[str, str]) -> str | None:
    """A reason not to try connecting at all (no socket file), or None."""
    path = socket_path(host)
    if path is None:
        return None
    if os.path.exists(path):
        return None
    search = environ.get("PATH")
    if not environ.get("DOCKER_HOST") and not (shutil.which("dockerd", path=search) or
                                               shutil.which("docker", path=search)):
        return "Docker is not installed"
    where = f"{path} (DOCKER_HOST)" if environ.get("DOCKER_HOST") else path
    return f"the Docker daemon is not running (no socket at {where})"


def docker_client(timeout: float = 5.0, environ: Mapping[str, str] | None = None, ping: bool = False) -> Any:
    """A connected ``docker.DockerClient`` (API version negotiated), or SourceUnavailable with one sentence.

    The one Docker-client factory of gputui: the container view, doctor, kill and migrate all
    connect here, with the same address rules (``DOCKER_HOST``, TLS variables, the rootless
    socket), so every action acts on the daemon the user is looking at. ``ping``: also check
    that the daemon answers before returning.
    """
    env = dict(os.environ if environ is None else environ)
    host = docker_host(env)
    reason = _precheck(host, env)
    if reason:
        raise SourceUnavailable(reason)
    try:
        import docker
    except ImportError:
        raise SourceUnavailable("the docker Python package is not installed (pip install docker)") from None
    env["DOCKER_HOST"] = host
    try:
        client = docker.from_env(
            version="auto", environment=env,
            timeout=timeout)  # type: ignore[arg-type]  # requests takes fractional seconds; the stubs say int
        if ping:
            client.ping()
        return client
    except Exception as exc:
        raise SourceUnavailable(describe_error(exc, host, timeout)) from None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps (causes, contexts, urllib3/requests arguments)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 32:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        for nxt in (e.__cause__, e.__context__, getattr(e, "reason", None), getattr(e, "original_error", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
        todo.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
    return seen


def describe_error(exc: BaseException, host: str | None = None, timeout: float | None = None) -> str:
    """Any failure talking to Docker, as one short sentence for the user.

    A :class:`SourceUnavailable` (from :func:`docker_client`) already is that
    sentence and passes through unchanged, so callers need not tell the two apart.
    """
    if isinstance(exc, SourceUnavailable):
        return str(exc)
    host = host or docker_host()
    path = socket_path(host)
    where = path or host
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain).lower()
    names = {type(e).__name__ for e in chain}
    errnos = {e.errno for e in chain if isinstance(e, OSError) and e.errno is not None}

    if isinstance(exc, ImportError):
        return "the docker Python package is not installed (pip install docker)"
    if errno.EACCES in errnos or errno.EPERM in errnos or "permission denied" in text:
        fix = " (add your user to the docker group)" if path else ""
        return f"permission denied on {where}{fix}"
    if errno.ENOENT in errnos or ("no such file" in text and path):
        return f"the Docker daemon is not running (no socket at {where})"
    if errno.ECONNREFUSED in errnos or "connection refused" in text:
        return "the Docker daemon is not running" if path else f"nothing answers at {host}"
    if names & {"ReadTimeout", "ConnectTimeout", "ReadTimeoutError", "ConnectTimeoutError", "timeout",
                "TimeoutError"} or "timed out" in text:
        secs = f" within {timeout:g} s" if timeout else ""
        return f"the Docker daemon did not answer{secs}"
    if names & {"RemoteDisconnected", "ConnectionResetError", "BrokenPipeError", "IncompleteRead"} or \
            errno.ECONNRESET in errnos or "connection aborted" in text:
        return "the Docker daemon closed the connection (is it restarting?)"
    if names & {"SSLError", "TLSParameterError"}:
        return f"TLS error talking to {host}: {_short(exc)}"
    for e in chain:
        status = getattr(e, "status_code", None)
        if status is not None:
            explanation = getattr(e, "explanation", None) or str(e)
            return f"the Docker daemon answered with an error ({status}): {_short(explanation)}"
    return f"cannot talk to the Docker daemon at {host}: {_short(exc)}"


def _short(value: Any, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- reading grants ---------------------------------------------------------------
# One model for the view and migrate: gputui.core.grants.

_env = env_dict


def parse_docker_time(value: str | None) -> float | None:
    """Docker's RFC 3339 times (nanoseconds, 'Z') as a POSIX timestamp; None for the zero time."""
    if not value or value.startswith("0001-"):
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", value.strip())
    if m is None:
        return None
    base, frac, zone = m.groups()
    try:
        stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone)).timestamp()
    except ValueError:
        return None
    return stamp + (float(f"0.{frac}") if frac else 0.0)


def restart_policy(host_config: Mapping[str, Any]) -> str | None:
    policy = host_config.get("RestartPolicy") or {}
    name = policy.get("Name")
    if name is None:
        return None
    name = name or "no"
    retries = policy.get("MaximumRetryCount") or 0
    return f"{name}:{retries}" if name == "on-failure" and retries else name


# -- the source -------------------------------------------------------------------

@record(frozen=False)
class DockerStats:
    """Counters for measuring how much the source asks the daemon (tests and --debug figures)."""

    list_calls: int = 0
    inspect_calls: int = 0
    image_inspects: int = 0
    cache_hits: int = 0
    connects: int = 0
    last_inventory_seconds: float = 0.0


@record(frozen=False)
class _Cached:
    started_at: str
    state: str
    attrs: dict[str, Any]
    main_pid: int | None
    #: whether State.Pid could be checked in /proc (False: other PID namespace)
    pid_checkable: bool
    fetched: float
    image_env: dict[str, str] | None = field(default=None)


class DockerSource:
    """``ContainerSource`` over the Docker Engine API; see the module docstring."""

    def __init__(self, timeout: float = 5.0, environ: Mapping[str, str] | None = None,
                 refresh_after: float = 300.0, proc_root: str = "/proc",
                 clock: Callable[[], float] = time.monotonic, host: str | None = None) -> None:
        self.timeout = timeout
        self.environ = dict(os.environ if environ is None else environ)
        #: whether the address is the user's (DOCKER_HOST) rather than a socket gputui found
        self._user_host = bool(self.environ.get("DOCKER_HOST"))
        if host is not None and host != docker_host(self.environ):
            self.environ["DOCKER_HOST"] = host
        self.host = docker_host(self.environ)
        #: "docker" or "podman": which engine answers at ``host`` (learnt at each connect)
        self.engine = "docker"
        self.refresh_after = refresh_after
        self.proc_root = proc_root
        self.stats = DockerStats()
        self._clock = clock
        self._client: Any = None
        self._cache: dict[str, _Cached] = {}
        self._images: dict[str, dict[str, str] | None] = {}
        self._host = HostGpus()
        self._lock = threading.RLock()

    # -- ContainerSource ----------------------------------------------------
    def inventory(self, gpu_uuids: tuple[str, ...], minors: dict[int, str]) -> ContainerInventory:
        started = time.perf_counter()
        with self._lock:
            self._host = HostGpus.from_uuids(gpu_uuids, minors)
            try:
                client = self._connect()
                self.stats.list_calls += 1
                states = PODMAN_LIVE_STATES if self.engine == "podman" else LIVE_STATES
                summaries = client.api.containers(filters={"status": list(states)})
                records = []
                live = set()
                for summary in summaries:
                    cid = summary.get("Id")
                    if not cid:
                        continue
                    live.add(cid)
                    record = self._record(client, summary)
                    if record is not None:
                        records.append(record)
                for gone in [c for c in self._cache if c not in live]:
                    del self._cache[gone]
                return ContainerInventory(True, None, tuple(records))
            except Exception as exc:
                return self._fail(exc)
            finally:
                self.stats.last_inventory_seconds = time.perf_counter() - started

    def resolve(self, container_id: str) -> ContainerInventory:
        """Confirm one container id (from a cgroup path) and return its record, if Docker knows it."""
        with self._lock:
            try:
                client = self._connect()
                self.stats.inspect_calls += 1
                attrs = client.api.inspect_container(container_id)
            except Exception as exc:
                if getattr(exc, "status_code", None) == 404:
                    return ContainerInventory(True, None, ())
                return self._fail(exc)
            name = (attrs.get("Name") or "").lstrip("/") or attrs["Id"][:12]
            summary = {"Id": attrs["Id"], "Names": [f"/{name}"], "State": (attrs.get("State") or {}).get("Status"),
                       "Labels": (attrs.get("Config") or {}).get("Labels") or {}}
            self._cache.pop(attrs["Id"], None)
            try:
                record = self._record(client, summary, attrs)
            except Exception as exc:
                return self._fail(exc)
            return ContainerInventory(True, None, (record,) if record else ())

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- internals ----------------------------------------------------------
    def _connect(self) -> Any:
        if self._client is None:
            client = docker_client(self.timeout, self.environ)
            self.stats.connects += 1
            try:
                self.engine = "podman" if is_podman(client.version()) else "docker"
            except Exception:
                client.close()
                raise
            self._client = client
        return self._client

    def _socket_owners(self) -> tuple[int, ...]:
        """Who may own the files a podman container's state is kept in: root, and the socket's owner."""
        path = socket_path(self.host)
        try:
            return (0, os.stat(path).st_uid) if path else (0,)
        except OSError:
            return (0,)

    def _drop(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
        self._client = None

    def _fail(self, exc: BaseException) -> ContainerInventory:
        self._drop()
        sentence = describe_error(exc, self.host, self.timeout)
        if self.engine == "podman" or "podman" in (socket_path(self.host) or ""):
            # podman's socket found by gputui itself: say podman, not Docker and DOCKER_HOST
            sentence = sentence.replace("the Docker daemon", "podman's API service")
            if not self._user_host:
                sentence = sentence.replace(" (DOCKER_HOST)", "")
        return ContainerInventory(False, sentence)

    def _record(self, client: Any, summary: Mapping[str, Any], attrs: dict[str, Any] | None = None
                ) -> ContainerRecord | None:
        cid = summary["Id"]
        state = summary.get("State") or "unknown"
        cached = self._cache.get(cid)
        if attrs is None and cached is not None and self._still_valid(cid, cached, state):
            self.stats.cache_hits += 1
        else:
            if attrs is None:
                self.stats.inspect_calls += 1
                try:
                    attrs = client.api.inspect_container(cid)
                except Exception as exc:
                    if getattr(exc, "status_code", None) == 404:  # removed between list and inspect
                        self._cache.pop(cid, None)
                        return None
                    raise
            if self.engine == "podman":
                attrs = podman_grant_attrs(attrs, libpod_inspect(client, cid), self._socket_owners())
            st = attrs.get("State") or {}
            pid = st.get("Pid") or None
            cached = _Cached(
                started_at=st.get("StartedAt") or "", state=state, attrs=attrs, main_pid=pid,
                # Checkable only when this PID namespace shows the container's main process right now.
                pid_checkable=pid is not None and self._pid_in_container(pid, cid) is True,
                fetched=self._clock(), image_env=self._image_env(client, attrs),
            )
            self._cache[cid] = cached
        return self._build(summary, cached)

    def _still_valid(self, cid: str, cached: _Cached, state: str) -> bool:
        if cached.state != state:
            return False
        if self._clock() - cached.fetched > self.refresh_after:
            return False
        if cached.main_pid is not None and cached.pid_checkable:
            # A restart gives the container a new main PID; the old one leaves the cgroup.
            return self._pid_in_container(cached.main_pid, cid) is True
        return True

    def _pid_in_container(self, pid: int, cid: str) -> bool | None:
        """Whether /proc/PID/cgroup names the container (False: gone); None when it cannot be read."""
        try:
            with open(os.path.join(self.proc_root, str(pid), "cgroup")) as f:
                return cid in f.read()
        except (FileNotFoundError, ProcessLookupError):
            return False
        except OSError:
            return None

    def _image_env(self, client: Any, attrs: Mapping[str, Any]) -> dict[str, str] | None:
        image_id = attrs.get("Image")
        if not image_id:
            return None
        if image_id not in self._images:
            self.stats.image_inspects += 1
            try:
                self._images[image_id] = _env(((client.api.inspect_image(image_id) or {}).get("Config") or {})
                                              .get("Env"))
            except Exception as exc:
                if getattr(exc, "status_code", None) != 404:
                    raise
                self._images[image_id] = None
        return self._images[image_id]

    def _build(self, summary: Mapping[str, Any], cached: _Cached) -> ContainerRecord:
        attrs = cached.attrs
        config = attrs.get("Config") or {}
        host_config = attrs.get("HostConfig") or {}
        env = _env(config.get("Env"))
        podman = self.engine == "podman"
        grant = read_grant(attrs, self._host, env_is_grant=podman)
        labels = dict(summary.get("Labels") or config.get("Labels") or {})
        names = summary.get("Names") or []
        name = names[0].lstrip("/") if names else (attrs.get("Name") or "").lstrip("/")
        nvd = env.get("NVIDIA_VISIBLE_DEVICES")
        if nvd is not None and cached.image_env is not None and cached.image_env.get("NVIDIA_VISIBLE_DEVICES") == nvd:
            # Inherited from the image (CUDA images say "all" for everyone): not something its owner asked for.
            nvd = None
        elif nvd is not None and cached.image_env is None and nvd.strip().lower() == "all":
            nvd = None
        return ContainerRecord(
            id=summary["Id"],
            name=name or summary["Id"][:12],
            image=config.get("Image") or summary.get("Image"),
            state=cached.state,
            compose_project=labels.get("com.docker.compose.project"),
            compose_service=labels.get("com.docker.compose.service"),
            runtime="podman" if podman else "docker",
            gpus=grant.gpus,
            grant_source=grant.source,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            nvidia_visible_devices=nvd,
            grant_raw=grant.raw,
            main_pid=cached.main_pid,
            restart_policy=restart_policy(host_config),
            labels=labels,
            grant_problems=grant.problems,
            started_at=parse_docker_time(cached.started_at),
        )
