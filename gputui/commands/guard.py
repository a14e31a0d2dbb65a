"""``gputui guard``: the house rules enforced where containers start, as a Docker authorization plugin.

    gputui guard --listen unix:///run/docker/plugins/gputui.sock [--rules PATH]
    dockerd --authorization-plugin=gputui            # or "authorization-plugins": ["gputui"] in daemon.json

dockerd finds the plugin by its socket in ``/run/docker/plugins`` (or a spec file in
``/etc/docker/plugins/NAME.spec`` naming the socket) and asks it about **every** API request:
``/Plugin.Activate`` answers ``{"Implements": ["authz"]}``, ``/AuthZPlugin.AuthZReq`` decides
(:func:`gputui.core.judges.authz.decide`) and ``/AuthZPlugin.AuthZRes`` allows every response.

The trade-off: while the plugin is unreachable dockerd refuses every request, and dockerd 20.10 does not
start when the plugin does not answer then. The shipped unit (``contrib/systemd/gputui-guard.service``)
runs it with ``Restart=always`` before docker.service; the way out is to remove the flag and restart
dockerd. ``gputui doctor`` checks that the plugin answers.

Decisions read only the last snapshot (polled on a thread of its own every ``--interval`` seconds) and
the rules read with it: no NVML or Docker call on the request path. Every refusal is audited.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import socketserver
import stat
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler
from typing import Any

from gputui.context import EXIT_NO, EXIT_OK, UsageError, interval_arg

#: an AuthZReq wraps a body of at most 1 MiB (base64) with the request's headers
REQUEST_LIMIT = 4 << 20
#: a connection silent this long is closed
IDLE_TIMEOUT = 30.0
#: at most this many connections are served at once (dockerd keeps a few)
MAX_CONNECTIONS = 64
#: the socket any local user may reach to reserve GPUs for themselves (apart from dockerd's)
SELF_SERVICE_SOCKET = "/run/gputui/reserve.sock"


def add_parser(sub, common):
    p = sub.add_parser("guard", help="enforce the house rules where containers start (Docker authorization plugin)",
                       description="Serve a Docker authorization plugin that refuses container creates breaking "
                                   "the house rules (allow_all_gpus, reservations).")
    common(p)
    p.add_argument("--listen", default="unix:///run/docker/plugins/gputui.sock", metavar="unix:///PATH",
                   help="the plugin socket (default unix:///run/docker/plugins/gputui.sock)")
    p.add_argument("--interval", type=interval_arg, default=2.0, metavar="SECONDS",
                   help="how often the GPUs and the rules are read (default 2)")
    p.add_argument("--self-service", default=SELF_SERVICE_SOCKET, metavar="unix:///PATH",
                   help="where users reserve GPUs for themselves when the rules allow it "
                        f"([reservations] self_service = true; default unix://{SELF_SERVICE_SOCKET})")


class GuardState:
    """What a decision reads: swapped whole by the poll thread, read without a lock by requests."""

    def __init__(self) -> None:
        from gputui.core.grants import HostGpus
        from gputui.core.rules import NO_RULES

        self.view: tuple[Any, Any, int | None] = (HostGpus(), NO_RULES, None)
        self.latencies: deque[float] = deque(maxlen=10_000)
        self.decisions = 0
        self.refusals = 0

    def update(self, snap: Any, rules: Any) -> None:
        from gputui.core.grants import HostGpus
        from gputui.core.judges.rules import house_holds

        held, _ = house_holds(snap.reservations, None)
        quiet = sorted((g for g in snap.gpus if not g.lost and g.index not in held and not g.mig_enabled),
                       key=lambda g: (len(g.processes), g.utilization_gpu or 0, g.index))
        self.view = (HostGpus.of(snap.gpus), rules, quiet[0].index if quiet else None)


def _handler(state: GuardState, audit: Any) -> type[BaseHTTPRequestHandler]:
    from gputui.core.judges.authz import decide

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = IDLE_TIMEOUT

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
            pass

        def _reply(self, doc: dict[str, Any], code: int = 200) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/vnd.docker.plugins.v1.2+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/gputui/stats":
                lat = sorted(state.latencies)

                def ms(q: float) -> float | None:
                    return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else None

                self._reply({"decisions": state.decisions, "refusals": state.refusals,
                             "p50_ms": ms(0.50), "p99_ms": ms(0.99), "max_ms": ms(1.0)})
            else:
                self._reply({"Err": "not found"}, 404)

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > REQUEST_LIMIT:
                self.close_connection = True
                self._reply({"Allow": False, "Msg": "gputui guard refuses a request it cannot read (too large)."})
                return
            raw = self.rfile.read(length) if length else b""
            if self.path == "/Plugin.Activate":
                self._reply({"Implements": ["authz"]})
            elif self.path == "/AuthZPlugin.AuthZRes":
                self._reply({"Allow": True})
            elif self.path == "/AuthZPlugin.AuthZReq":
                self._reply(self._decide(raw))
            else:
                self._reply({"Err": f"gputui guard does not implement {self.path[:80]}"}, 404)

        def _decide(self, raw: bytes) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                req = json.loads(raw) if raw else {}
                if not isinstance(req, dict):
                    raise ValueError
                method = str(req.get("RequestMethod") or "")[:16]
                uri = str(req.get("RequestUri") or req.get("RequestURI") or "")[:4096]  # Docker spells it "Uri"
                body_b64 = req.get("RequestBody")
                body = base64.b64decode(body_b64, validate=True) if isinstance(body_b64, str) and body_b64 else None
            except (ValueError, RecursionError):
                state.refusals += 1
                return {"Allow": False, "Msg": "gputui guard refuses a request it cannot read (not JSON)."}
            gpus, rules, suggest = state.view
            decision = decide(method, uri, body, gpus, rules, time.time(), suggest)
            state.latencies.append(time.perf_counter() - t0)
            state.decisions += 1
            if decision.allow:
                return {"Allow": True}
            state.refusals += 1
            try:
                audit("guard", "refused", rule=decision.rule, request=f"{method} {uri[:200]}",
                      gpus=list(decision.gpus), message=decision.message)
            except OSError as exc:
                print(f"gputui guard: cannot write the audit record: {exc.strerror}", file=sys.stderr, flush=True)
            return {"Allow": False, "Msg": decision.message}

    return Handler


def _self_service_handler(state: GuardState, rules_path: str | None) -> type[BaseHTTPRequestHandler]:
    """``POST /reserve`` from a local user: who asks is the kernel's word (``SO_PEERCRED``), never the body's."""
    import pwd
    import struct

    from gputui.actions.reservations import add_reservation
    from gputui.core.rules import MAX_RESERVATION_S, RulesError

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10.0

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
            pass

        def _reply(self, code: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            self.close_connection = True
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if self.path != "/reserve" or not 0 < length <= 4096:
                self._reply(400, {"error": "gputui guard takes POST /reserve with a small JSON body."})
                return
            creds = self.connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._reply(403, {"error": f"uid {uid} has no user name."})
                return
            _, rules, _ = state.view
            if not rules.limits.self_service:
                self._reply(403, {"error": "the house rules do not allow self-service reservations "
                                           "([reservations] self_service = true)."})
                return
            try:
                req = json.loads(self.rfile.read(length))
                gpus = [int(i) for i in req["gpus"]][:64]
                until = float(req["until"])
                note = str(req.get("note", ""))[:200]
            except (ValueError, KeyError, TypeError, RecursionError):
                self._reply(400, {"error": "the request is not a reservation gputui understands."})
                return
            host = state.view[0]
            chosen = [g for g in host.gpus if g.index in set(gpus) and g.mig is None]
            if len(chosen) != len(set(gpus)) or not chosen:
                self._reply(400, {"error": f"there is no GPU {sorted(set(gpus) - {g.index for g in chosen})} here."})
                return
            now = time.time()
            if not now < until <= now + MAX_RESERVATION_S:
                self._reply(400, {"error": "a reservation must end in the future and within a year."})
                return
            try:
                res, token = add_reservation(rules_path, tuple(g.uuid for g in chosen), tuple(g.index for g in chosen),
                                             user, until, note, created_by=user, now=now)
            except RulesError as exc:
                self._reply(409, {"error": str(exc)})
                return
            self._reply(200, {"id": res.id, "token": token, "for": user, "gpus": list(res.indices),
                              "uuids": list(res.uuids), "until": res.until})

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler]) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(path, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the cap: dropped, dockerd retries on a new connection
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _socket_path(listen: str) -> str:
    if not listen.startswith("unix://"):
        raise UsageError("--listen must be unix:///PATH (Docker finds authorization plugins by a unix socket).")
    path = listen[len("unix://"):]
    if not path.startswith("/") or len(path.encode()) > 100 or "\0" in path:
        raise UsageError("--listen needs an absolute socket path of at most 100 bytes.")
    return path


def _prepare(path: str) -> None:
    """Make the socket's folder (0755) and remove a stale socket of ours; never anything else."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    st = os.lstat(folder)
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise UsageError(f"gputui guard does not listen in {folder}: another user may replace its socket there.")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise UsageError(f"{path} exists and is not a socket of this user's; gputui guard leaves it alone.")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody answers: a socket left by a guard that died
        return
    finally:
        probe.close()
    raise UsageError(f"another gputui guard already answers on {path}.")


def run(ctx) -> int:
    from gputui.actions.audit import audit
    from gputui.core.sources import NvmlUnavailable

    args = ctx.args
    path = _socket_path(args.listen)
    _prepare(path)
    state = GuardState()
    try:
        machine = ctx.open_machine()
    except NvmlUnavailable as exc:
        print(f"gputui guard: {exc}", file=ctx.stderr)
        return EXIT_NO
    poller = machine.poller(ctx.settings, container_wait=min(3.0, ctx.settings.docker_timeout))
    # The containers the rules judge live in Docker, whose requests wait on this plugin: the guard judges
    # grants from the request itself, so it never asks Docker (which could deadlock on its own request).
    if poller.watcher is not None:
        poller.watcher.stop()
        poller.watcher = None
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                snap = poller.poll()
                rules = poller.house_rules.read(time.time()) if poller.house_rules is not None else None
                if rules is not None:
                    state.update(snap, rules)
            except Exception as exc:  # noqa: BLE001 (a failing poll keeps the last view; requests go on)
                print(f"gputui guard: reading the GPUs failed: {exc}", file=sys.stderr, flush=True)
            stop.wait(args.interval)

    try:
        snap = poller.poll()
        if poller.house_rules is not None:
            rules = poller.house_rules.read(time.time())
            state.update(snap, rules)
            if rules.error:
                print(f"gputui guard: {rules.error}", file=ctx.stderr, flush=True)
        server = _Server(path, _handler(state, audit))
        os.chmod(path, 0o600)  # dockerd's, and root's: the decisions' socket is nobody else's to fill
        service: _Server | None = None
        if state.view[1].limits.self_service:
            spath = _socket_path(args.self_service)
            _prepare(spath)
            service = _Server(spath, _self_service_handler(state, ctx.settings.rules_path))
            os.chmod(spath, 0o666)  # any local user; who they are comes from SO_PEERCRED
            threading.Thread(target=service.serve_forever, name="gputui-guard-self-service", daemon=True).start()
        threading.Thread(target=poll, name="gputui-guard-poll", daemon=True).start()
        print(f"gputui guard: answering Docker's authorization requests on unix://{path}", file=ctx.stderr,
              flush=True)
        import signal

        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
        try:
            server.serve_forever(poll_interval=0.5)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
            for srv in (server, service):
                if srv is None:
                    continue
                if srv is service:
                    srv.shutdown()
                    srv.server_close()
                try:
                    os.unlink(srv.server_address)  # type: ignore[arg-type]  # a unix server's address is its path
                except OSError:
                    pass
    finally:
        stop.set()
        poller.close()
        machine.close()
    return EXIT_OK
