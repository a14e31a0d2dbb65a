"""A small Prometheus HTTP API client: instant and range queries, each with a timeout.

Standard library only (``http.client``, one kept-alive connection per thread), so a one-shot
``gputui fleet --json`` pays for
no extra import. Every failure is one :class:`PrometheusError` whose ``str`` is a
sentence fit for a terminal (Prometheus's own error text is cleaned):

* :class:`PrometheusUnreachable` — connection refused, DNS failure, timeout;
* :class:`NotPrometheus` — something answered, but not the Prometheus HTTP API;
* :class:`QueryFailed` — Prometheus answered a query with an error.

``queries`` counts the requests sent, so tests and benchmarks can hold a refresh
to its fixed number of queries.

Whatever the server sends, a request ends: ``timeout`` bounds the whole request
(connect, headers and body; a watchdog closes the socket at the deadline, so a
server that drips one byte a second cannot hold it), the body is read in chunks up
to :data:`MAX_BODY` and refused beyond, and JSON nested deeper than the parser
allows is refused with one sentence. Every label of a series is a string, or the
series is left out. A password in the URL is sent as HTTP basic auth (as is one
given to the client) and never printed: :attr:`PromClient.url` shows it as ``***``.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any, NamedTuple

from gputui.core.record import record
from gputui.core.safe_text import clean

#: Seconds any one request may take (connect plus answer).
DEFAULT_TIMEOUT = 5.0
#: Bigger answers are refused rather than read into memory (parsed, an answer takes ~10x its size).
MAX_BODY = 64 * 1024**2
#: Bytes read from the socket at a time.
CHUNK = 256 * 1024


class PrometheusError(Exception):
    """Prometheus could not answer; ``str(exc)`` is one sentence."""


class PrometheusUnreachable(PrometheusError):
    """No answer at all (refused, unknown host, timed out)."""


class NotPrometheus(PrometheusError):
    """Something answered, but not as the Prometheus HTTP API does."""


class QueryFailed(PrometheusError):
    """Prometheus rejected or failed a query."""


class Sample(NamedTuple):
    """One series of an instant vector: its labels and its value at the query time.

    A named tuple, not a dataclass: a fleet refresh builds thousands of them."""

    labels: dict[str, str]
    value: float


_new_tuple = tuple.__new__


@record
class RangeSeries:
    """One series of a range query: its labels and (time, value) points, oldest first."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


def mask_url(url: str) -> str:
    """``url`` with the password of its user part shown as ``***`` (``http://admin:***@host``)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or "@" not in parts.netloc:
        if "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]:  # not parseable: mask all before @
            head, tail = url.split("@", 1)
            return head.rsplit(":", 1)[0] + ":***@" + tail
        return url
    userinfo, hostport = parts.netloc.rsplit("@", 1)
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return urllib.parse.urlunsplit((parts.scheme, f"{userinfo}@{hostport}", parts.path, parts.query, parts.fragment))


def check_url(url: str) -> str:
    """``url`` normalised (no trailing slash), or ValueError with one sentence (the password masked)."""
    shown = clean(mask_url(url))
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise ValueError(f"{shown!r} is not a Prometheus URL such as http://prometheus:9090.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not a Prometheus URL such as http://prometheus:9090.")
    if parts.query or parts.fragment:
        raise ValueError(f"The Prometheus URL {shown!r} must not have a query string or fragment.")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def basic_auth(user: str, password: str) -> str:
    """The ``Authorization`` header value for HTTP basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class PromClient:
    """Queries one Prometheus server. Safe to share between threads.

    ``user``/``password`` (or the URL's ``user:password@``) are sent as HTTP basic auth;
    ``url`` is the URL to show, its password masked."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT, *, user: str | None = None,
                 password: str | None = None) -> None:
        real = check_url(url)
        parts = urllib.parse.urlsplit(real)
        if parts.username is not None and user is None:
            user = urllib.parse.unquote(parts.username)
        if parts.password is not None and password is None:
            password = urllib.parse.unquote(parts.password)
        #: The URL as printed: the password, if any, is ``***``.
        self.url = mask_url(real)
        self._netloc = parts.netloc.rsplit("@", 1)[-1]
        self._auth = basic_auth(user, password or "") if user is not None else None
        self.timeout = timeout
        self._lock = threading.Lock()
        self._queries = 0
        self._path = parts.path
        self._local = threading.local()
        self._connections: list[http.client.HTTPConnection] = []

    @property
    def queries(self) -> int:
        """Requests sent so far."""
        return self._queries

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """The instant vector of ``promql`` (at ``at``, a POSIX time, or now)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._call("/api/v1/query", params)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar" and isinstance(result, list):
            return [Sample({}, _number(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise QueryFailed(f"Prometheus answered {clean(promql)!r} with a {clean(kind)} instead of a vector.")
        out: list[Sample] = []
        append = out.append
        for item in result:
            try:
                labels = item["metric"]
                if type(labels) is not dict:  # noqa: E721 - JSON objects are exactly dict
                    continue
                "".join(labels.values())  # TypeError unless every label value is a string: one C call
                # Sample(labels, value) without its Python-level __new__: a third of this loop's time
                append(_new_tuple(Sample, (labels, float(item["value"][1]))))
            except (KeyError, IndexError, TypeError, ValueError):
                continue  # one malformed series is left out, not the whole answer
        return out

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """The range query ``promql`` from ``start`` to ``end`` every ``step`` seconds."""
        data = self._call("/api/v1/query_range", {
            "query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{max(step, 0.001):g}"})
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise QueryFailed(f"Prometheus answered the range query {clean(promql)!r} without a matrix.")
        out: list[RangeSeries] = []
        for item in data["result"]:
            try:
                points = tuple((float(t), _number(v)) for t, v in item["values"])
                out.append(RangeSeries(_labels(item["metric"]), points))
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def close(self) -> None:
        """Close every kept-alive connection."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    # -- transport ----------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            parts = urllib.parse.urlsplit(self.url)
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = kind(self._netloc, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _send(self, path: str, body: bytes) -> tuple[int, bytes | None]:
        """POST on this thread's kept-alive connection (a refresh every few seconds would otherwise pay
        a TCP handshake per query); a connection the server closed meanwhile is replaced once. The
        whole exchange ends by ``timeout`` (TimeoutError), whatever the server sends."""
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                   "User-Agent": "gputui-fleet"}
        if self._auth is not None:
            headers["Authorization"] = self._auth
        deadline = time.monotonic() + self.timeout
        for attempt in (0, 1):
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            watchdog = _Watchdog(conn, deadline)
            try:
                conn.request("POST", self._path + path, body=body, headers=headers)
                # the socket itself: with a close-delimited answer, getresponse hands it to the response
                # and the connection forgets it
                watchdog.sock = conn.sock
                if watchdog.fired:  # it fired while connecting, before there was a socket to close
                    raise TimeoutError
                response = conn.getresponse()
                raw = _read_body(response)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if watchdog.fired:
                    raise TimeoutError from None
                if attempt == 0 and reused:
                    continue
                raise
            except BaseException:
                self._drop()
                if watchdog.fired:
                    raise TimeoutError from None
                raise
            finally:
                watchdog.cancel()
            if watchdog.fired:
                self._drop()
                raise TimeoutError
            if response.will_close or raw is None:
                self._drop()
            return response.status, raw
        raise AssertionError("unreachable")

    def _call(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            self._queries += 1
        body = urllib.parse.urlencode(params).encode()
        where = f"Prometheus at {clean(self.url)}"
        try:
            status, raw = self._send(path, body)
        except TimeoutError:  # socket.timeout is TimeoutError
            raise PrometheusUnreachable(f"{where} did not answer within {self.timeout:g} s.") from None
        except (OSError, http.client.HTTPException) as exc:  # refused, unknown host, reset, bad status line
            raise PrometheusUnreachable(f"Cannot reach {where}: {_reason(exc)}.") from None
        if raw is None:
            raise QueryFailed(f"{where} sent more than {MAX_BODY // 1024**2} MiB for one query.")
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise NotPrometheus(f"{where} answered with JSON nested deeper than any Prometheus answer: "
                                f"it was not read.") from None
        except ValueError:
            doc = None
        if status in (401, 403) and not (isinstance(doc, dict) and doc.get("status") == "error"):
            how = "wrong credentials" if self._auth is not None else "no credentials"
            raise QueryFailed(f"{where} refused the request (HTTP {status}, {how}): give a user and password in "
                              f"the URL or with --prometheus-user and --prometheus-password-file.")
        if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
            raise NotPrometheus(f"{clean(self.url)} answered (HTTP {status}) but not as Prometheus does: "
                                f"is it the Prometheus server's URL (e.g. http://prometheus:9090)?")
        if doc["status"] == "error":
            kind = clean(doc.get("errorType") or "error")
            text = clean(str(doc.get("error") or "no reason given")).rstrip(".")
            raise QueryFailed(f"{where} refused a query ({kind}): {text}.")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise NotPrometheus(f"{clean(self.url)} answered without data: is it a Prometheus server?")
        return data


class _Watchdog:
    """Shuts ``sock`` down at ``deadline`` (a blocked read then returns at once)."""

    def __init__(self, conn: http.client.HTTPConnection, deadline: float) -> None:
        self.fired = False
        #: the request's socket, once connected (a kept-alive connection has it already)
        self.sock: socket.socket | None = conn.sock
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def _read_body(response: http.client.HTTPResponse) -> bytes | None:
    """The body, read in chunks; None when it is bigger than MAX_BODY (a declared bigger one is not read,
    an undeclared one is read no further than one chunk past the cap)."""
    declared = response.getheader("Content-Length")
    if declared and declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > MAX_BODY):
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)


def _labels(metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict):
        raise TypeError("labels")
    return {str(k): str(v) for k, v in metric.items()}


def _number(text: Any) -> float:
    return float(text)  # Prometheus writes "NaN", "+Inf", "-Inf": float() reads all three


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return clean(reason.strerror).rstrip(".").lower()
    if isinstance(reason, http.client.RemoteDisconnected):
        return "it closed the connection without answering"
    return clean(str(reason) or type(reason).__name__).rstrip(".")
