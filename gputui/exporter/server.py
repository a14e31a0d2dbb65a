"""The exporter's two moving parts: a poll loop and an HTTP server that never waits on it.

* :class:`PollLoop` runs ``Poller.poll()`` on its own thread once per interval
  (polls never overlap; a slow poll skips ticks instead of piling up) and
  publishes a :class:`~gputui.exporter.metrics.PollStatus` by swapping one
  reference. Docker is read by the poller's own ``ContainerWatcher`` thread, so a
  hung daemon only turns ``gputui_source_up{source="docker"}`` to 0.
* :class:`SnapshotCollector` builds the metric families from the newest status at
  scrape time: a scrape costs a few hundred microseconds of Python and no I/O.
* :func:`bind_server` binds the listening socket (TLS when given a certificate) and
  routes ``/metrics`` to :class:`~gputui.exporter.exposition.MetricsApp` (prometheus-client's
  encoders, each family's bytes kept while it does not change); every other path is 404.
* :class:`_Connections` bounds what clients can hold: at most ``max_connections`` at once
  (``--max-connections``), each with a deadline — its request header within
  ``header_timeout`` seconds, its answer within :data:`ANSWER_TIMEOUT` — enforced by one
  watchdog thread that sleeps until the next deadline. A new connection beyond the cap
  drops the one that has waited longest without sending its header, so a thousand idle
  sockets cost the exporter 64 descriptors and a scrape is still answered at once.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import socket
import ssl
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gputui.core import bugs
from gputui.core.machine import Machine
from gputui.core.metric_names import POLL_DURATION
from gputui.core.poller import Poller
from gputui.core.record import record
from gputui.core.safe_text import clean
from gputui.core.sources.nvml import NvmlSource
from gputui.core.sources.processes import HostProcessSource
from gputui.core.statefile import open_regular
from gputui.exporter.exposition import MetricsApp
from gputui.exporter.metrics import ExportOptions, PollStatus, build_families

#: What the exporter says while it runs (a poll failing, polling working again); ``gputui exporter``
#: sends it to stderr (journald under systemd).
LOG = logging.getLogger("gputui.exporter")
#: Buckets of gputui_poll_duration_seconds: a poll of 8 GPUs × 64 processes costs a few ms.
POLL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: How long the exporter reuses a living process's /proc/PID/stat figures (seconds). It exports no
#: per-process CPU or RSS; an exit or a reused PID is still seen on the poll it happens.
PROC_STAT_REFRESH = 5.0
#: Connections held at once (``--max-connections``): Prometheus servers scrape one at a time each.
MAX_CONNECTIONS = 64
#: Seconds a client has to send its whole request header (``--header-timeout``); Prometheus sends
#: it at once.
HEADER_TIMEOUT = 10.0
#: Seconds a client has to take its answer once its header is in (one that stops reading).
ANSWER_TIMEOUT = 30.0
#: The listen backlog: a burst of connections waits here while the accept loop drops idle ones.
LISTEN_BACKLOG = 128


def tune_sources(machine: Machine, dcgm_names: bool = False) -> None:
    """Set the machine's sources up for exporting (the dashboard keeps its per-poll figures): each
    GPU process's /proc/PID/stat is read every :data:`PROC_STAT_REFRESH` seconds, not every poll,
    while a pidfd per process checks on every poll that it is still the process it was; and NVML is
    not asked for what no exported series carries (the P-state; the memory clock, which only
    ``--dcgm-names`` exports)."""
    if isinstance(machine.processes, HostProcessSource):
        machine.processes.refresh_every(PROC_STAT_REFRESH)
    if isinstance(machine.gpu, NvmlSource):
        machine.gpu.leave_unread({"pstate"} if dcgm_names else {"pstate", "clock_memory"})


class ListenError(Exception):
    """The exporter cannot listen as asked; ``str(exc)`` is one sentence (exit 2)."""


class PollLoop:
    """Polls on its own daemon thread; ``status()`` never blocks."""

    def __init__(self, poller: Poller, interval: float, histogram: Histogram, first: PollStatus,
                 stale_after: float | None = None, log: Callable[[str], None] | None = None) -> None:
        self.poller = poller
        self.interval = interval
        self.histogram = histogram
        #: a poll running longer than this turns nvml down until it returns (a hung driver)
        self.stale_after = stale_after if stale_after is not None else max(5.0, 3 * interval)
        self._log = log or LOG.warning
        self._status = first
        self._poll_started: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gputui-exporter-poll", daemon=True)
        self._last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: float = 0.5) -> bool:
        """Stop polling; False when a poll is still stuck (in the driver) after ``wait`` seconds."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(wait)  # a poll stuck in the driver must not hold up SIGTERM
        return not self._thread.is_alive()

    def status(self) -> PollStatus:
        status, started = self._status, self._poll_started
        if started is not None and time.monotonic() - started > self.stale_after:
            return PollStatus(None, False, status.last_poll)
        return status

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self._poll_once()
            due += self.interval
            now = time.monotonic()
            if due <= now:  # the poll took longer than the interval: skip the missed ticks
                due = now + self.interval

    def _poll_once(self) -> None:
        self._poll_started = t0 = time.monotonic()
        try:
            snap = self.poller.poll()
        except Exception as exc:  # a lost driver changes the data, never the availability of /metrics
            self._status = PollStatus(None, False, self._status.last_poll)
            # the driver's fault in its words; a bug as a pointer to its traceback in gputui.log
            message = (clean(str(exc)) or type(exc).__name__) if bugs.expected(exc) else bugs.report(
                exc, "polling for the exporter")
            if message != self._last_error:
                self._log(f"gputui exporter: poll failed: {message}")
            self._last_error = message
        else:
            self._status = PollStatus(snap, True, time.time())
            if self._last_error is not None:
                self._log("gputui exporter: polling works again.")
            self._last_error = None
        finally:
            self.histogram.observe(time.monotonic() - t0)
            self._poll_started = None


class SnapshotCollector(Collector):
    """The contract's families, built from the newest poll at scrape time."""

    def __init__(self, status: Callable[[], PollStatus], options: ExportOptions) -> None:
        self._status = status
        self.options = options
        #: the families of the last status built: a second scraper (an HA pair of Prometheus servers)
        #: within the same poll costs nothing
        self._cache: tuple[PollStatus, list[Metric]] | None = None
        #: families build_families may hand out again when their inputs did not change
        self._memo: dict[str, object] = {}

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        cache = self._cache
        if cache is not None and cache[0] is status:
            return cache[1]
        families = list(build_families(status, self.options, self._memo))
        self._cache = (status, families)
        return families

    def describe(self) -> Iterable[Metric]:
        return []  # no collect at registration


def make_registry() -> tuple[CollectorRegistry, Histogram]:
    """A private registry with the poll histogram and the exporter's own process metrics."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated; no *_created series: they double the histogram's families for nothing
    registry = CollectorRegistry(auto_describe=False)
    histogram = Histogram(POLL_DURATION.name, POLL_DURATION.help, buckets=POLL_BUCKETS, registry=registry)
    ProcessCollector(registry=registry)
    return registry, histogram


# -- HTTP ---------------------------------------------------------------------------


@record
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """``ADDR:PORT`` (``[::1]:9835`` for IPv6). Raises ValueError with one sentence."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen needs ADDR:PORT such as 127.0.0.1:9835, not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"--listen: write an IPv6 address in brackets, e.g. [::1]:9835, not {text!r}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"--listen: {port_text!r} is not a TCP port (1-65535)")
    return ListenAddress(host, int(port_text))


class _Handler(WSGIRequestHandler):
    timeout = 30  # a client that stops talking frees its thread

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:  # the header is in: the connection now has ANSWER_TIMEOUT to take its answer
            connections = getattr(self.server, "connections", None)
            if connections is not None:
                connections.answering(self.connection)
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log on stderr per scrape


class _Connections:
    """The connections the server holds, each with a deadline, at most ``limit`` at once.

    ``admit`` (the accept loop) registers a new connection; when ``limit`` are held it first drops
    the one that has waited longest for its header (a scrape sends its header at once: only an idle
    or trickling client is ever dropped) and waits for its thread to close it, so the descriptors in
    use never exceed ``limit``; when every held connection is being answered, the new one is
    refused. A dropped connection is shut down (``SHUT_RDWR``), which wakes the thread blocked on
    it; it is closed by that thread through :meth:`close`. Shutdown and close both happen under
    one lock, so a descriptor number reused by a later connection is never shut down by mistake.
    """

    HEADER, ANSWER, DROPPED = 0, 1, 2

    def __init__(self, limit: int, header_timeout: float, answer_timeout: float = ANSWER_TIMEOUT) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.answer_timeout = answer_timeout
        self._cond = threading.Condition()
        #: socket -> [state, deadline] in the order they came (the first HEADER one waited longest)
        self._held: dict[Any, list[Any]] = {}
        self._closing = False
        #: when the watchdog wakes next (None: it sleeps until told), and how many admits wait for room:
        #: a connection coming or going wakes a thread only when one needs it
        self._due: float | None = None
        self._waiting = 0
        self._watchdog = threading.Thread(target=self._watch, name="gputui-exporter-deadlines", daemon=True)
        self._watchdog.start()

    def __len__(self) -> int:
        return len(self._held)

    def admit(self, sock: Any) -> bool:
        """Hold ``sock`` (True), or False when every held connection is being answered."""
        with self._cond:
            end = time.monotonic() + 1.0
            while len(self._held) >= self.limit:
                oldest = next((s for s, e in self._held.items() if e[0] == self.HEADER), None)
                if oldest is not None:
                    self._drop(oldest)
                elif not any(e[0] == self.DROPPED for e in self._held.values()):
                    return False
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._waiting += 1
                try:
                    self._cond.wait(left)  # for the dropped one's thread to close it
                finally:
                    self._waiting -= 1
            deadline = time.monotonic() + self.header_timeout
            self._held[sock] = [self.HEADER, deadline]
            if self._due is None or deadline < self._due:
                self._cond.notify_all()  # the watchdog sleeps past this deadline
        return True

    def answering(self, sock: Any) -> None:
        with self._cond:
            entry = self._held.get(sock)
            if entry is not None and entry[0] == self.HEADER:
                entry[:] = [self.ANSWER, time.monotonic() + self.answer_timeout]

    def close(self, sock: Any) -> None:
        with self._cond:
            self._held.pop(sock, None)
            sock.close()
            if self._waiting:
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            for sock, entry in list(self._held.items()):
                if entry[0] != self.DROPPED:
                    self._drop(sock)
            self._cond.notify_all()

    def _drop(self, sock: Any) -> None:
        """Wake the thread serving ``sock`` (it closes it). The base class's shutdown: an SSLSocket's
        own would also discard its TLS state under the thread still using it."""
        self._held[sock][0] = self.DROPPED
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already reset by the client

    def _watch(self) -> None:
        with self._cond:
            while not self._closing:
                now = time.monotonic()
                due: float | None = None
                for sock, (state, deadline) in list(self._held.items()):
                    if state == self.DROPPED:
                        continue
                    if deadline <= now:
                        self._drop(sock)
                    elif due is None or deadline < due:
                        due = deadline
                self._due = due
                self._cond.wait(None if due is None else due - now)


class _Workers:
    """Daemon threads that serve connections one after another, so that a scrape every few seconds
    reuses a thread instead of starting one (starting and ending a thread cost a small scrape about
    as much as its answer). A connection never waits for a busy thread: with none idle, a new one
    starts, as ``ThreadingMixIn`` would start it; threads beyond :attr:`KEEP` idle ones end. There are
    never more threads than the connections :class:`_Connections` holds."""

    KEEP = 2

    def __init__(self, serve: Callable[[Any, Any], None]) -> None:
        self._serve = serve
        self._lock = threading.Lock()
        self._idle = 0
        self._queue: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()

    def submit(self, request: Any, client_address: Any) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that idle thread takes this connection (each one queued has its thread)
        self._queue.put((request, client_address))
        if start:
            threading.Thread(target=self._run, name="gputui-exporter-scrape", daemon=True).start()

    def _run(self) -> None:
        while True:
            request, client_address = self._queue.get()
            self._serve(request, client_address)
            with self._lock:
                if self._idle >= self.KEEP:
                    return
                self._idle += 1


def _make_server_class(family: socket.AddressFamily) -> type[WSGIServer]:
    class _Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = family
        allow_reuse_address = True
        request_queue_size = LISTEN_BACKLOG
        _workers: _Workers | None = None
        connections: _Connections | None = None

        def get_request(self) -> tuple[Any, Any]:
            try:
                return super().get_request()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors (something else holds them): the listening socket stays
                    # readable, so retrying at once would spin. Wait a little instead.
                    time.sleep(0.1)
                raise

        def process_request(self, request: Any, client_address: Any) -> None:
            """Serve the connection on a kept worker thread (``process_request_thread`` does the
            work and the error handling, as with one thread per connection), once it is held
            within the connection cap."""
            if self.connections is not None and not self.connections.admit(request):
                request.close()  # every held connection is being answered: this one waits its turn elsewhere
                return
            workers = self._workers
            if workers is None:
                workers = self._workers = _Workers(self.process_request_thread)
            workers.submit(request, client_address)

        def close_request(self, request: Any) -> None:
            if self.connections is not None:
                self.connections.close(request)
            else:
                request.close()

        def server_close(self) -> None:
            super().server_close()
            if self.connections is not None:
                self.connections.stop()

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that hung up or spoke plain HTTP to the TLS port: its problem, no traceback

    return _Server


def _route(metrics_app: Callable[..., Any]) -> Callable[..., Any]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") == "/metrics":
            return metrics_app(environ, start_response)
        body = b"Not found: gputui exporter serves /metrics only.\n"
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8"),
                                         ("Content-Length", str(len(body)))])
        return [body]

    return app


def tls_context(certfile: str, keyfile: str, warn: Callable[[str], None] | None = None) -> ssl.SSLContext:
    """A server TLS context; ListenError naming the file when it cannot be used.

    Both files are opened with ``O_NONBLOCK`` and must be regular files (a FIFO named as the key
    would otherwise hang the start), and OpenSSL reads the very files checked (through
    ``/proc/self/fd``), not whatever the names point at a moment later. A key that its group or
    other users may read is served, with one sentence to ``warn``."""
    fds: list[int] = []
    try:
        for path in (certfile, keyfile):
            try:
                fds.append(open_regular(path, os.O_RDONLY, follow=True))
            except OSError as exc:
                raise ListenError(f"Cannot read {path}: {exc.strerror or exc}.") from None
        mode = stat.S_IMODE(os.fstat(fds[1]).st_mode)
        cert, key = ((f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}") if os.path.isdir("/proc/self/fd")
                     else (certfile, keyfile))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise ListenError(f"Cannot use the certificate {certfile} with the key {keyfile}: "
                              f"{getattr(exc, 'reason', None) or exc}.") from None
        if mode & 0o077 and warn is not None:  # said of a key that is used, once it is
            warn(f"the key {keyfile} may be read by {'other users' if mode & 0o007 else 'its group'} "
                 f"(mode {mode:o}); run 'chmod 600 {keyfile}'.")
        return ctx
    finally:
        for fd in fds:
            os.close(fd)


def bind_server(address: ListenAddress, registry: CollectorRegistry,
                tls: ssl.SSLContext | None = None, max_connections: int = MAX_CONNECTIONS,
                header_timeout: float = HEADER_TIMEOUT) -> WSGIServer:
    """Bind (but do not yet serve), holding at most ``max_connections`` connections at once.
    Raises ListenError with one sentence."""
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"Cannot listen on {address}: {exc.strerror}.") from None
    family, _, _, _, sockaddr = infos[0]
    server_class = _make_server_class(family)
    try:
        server = server_class((str(sockaddr[0]), int(sockaddr[1])), _Handler)
    except OSError as exc:
        raise ListenError(f"Cannot listen on {address}: {exc.strerror or exc}.") from None
    server.set_app(_route(MetricsApp(registry)))
    server.connections = _Connections(max_connections, header_timeout)  # type: ignore[attr-defined]
    if tls is not None:
        # The handshake happens in the request's own thread: a slow client never stalls accept().
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


#: How long the accept loop sleeps between checks for a stop request. On Linux :func:`stop_server`
#: wakes it at once, so it need not wake twice a second for nothing; elsewhere it must poll.
SERVE_POLL_S = 30.0 if sys.platform.startswith("linux") else 0.5


def serve_in_thread(server: WSGIServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SERVE_POLL_S},
                              name="gputui-exporter-http", daemon=True)
    thread.start()
    return thread


def stop_server(server: WSGIServer, wait: float = 2.0) -> None:
    """Stop :func:`serve_in_thread`'s loop now: ask it to stop, then shut the listening socket down,
    which wakes its select() on Linux (it then sees the request and returns)."""
    stopper = threading.Thread(target=server.shutdown, name="gputui-exporter-stop", daemon=True)
    stopper.start()
    try:
        server.socket.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected/supported here: the loop notices within SERVE_POLL_S
    stopper.join(wait)

