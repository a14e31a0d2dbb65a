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
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from typing import Any, NamedTuple

from gputui.core.record import record
from gputui.core.safe_text import clean

#: Seconds any one request may take (connect plus answer).
DEFAULT_TIMEOUT = 5.0
#: Bigger answers are refused rather than read into memory.
MAX_BODY = 256 * 1024**2


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


@record
class RangeSeries:
    """One series of a range query: its labels and (time, value) points, oldest first."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


def check_url(url: str) -> str:
    """``url`` normalised (no trailing slash), or ValueError with one sentence."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{clean(url)!r} is not a Prometheus URL such as http://prometheus:9090.")
    if parts.query or parts.fragment:
        raise ValueError(f"The Prometheus URL {clean(url)!r} must not have a query string or fragment.")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class PromClient:
    """Queries one Prometheus server. Safe to share between threads."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._queries = 0
        self._path = urllib.parse.urlsplit(self.url).path
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
                if type(labels) is not dict:  # JSON objects are exactly dict
                    continue
                append(Sample(labels, float(item["value"][1])))
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
            conn = kind(parts.netloc.rsplit("@", 1)[-1], timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _send(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST on this thread's kept-alive connection (a refresh every few seconds would otherwise pay
        a TCP handshake per query); a connection the server closed meanwhile is replaced once."""
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                   "User-Agent": "gputui-fleet"}
        for attempt in (0, 1):
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                conn.request("POST", self._path + path, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read(MAX_BODY + 1)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if attempt == 0 and reused:
                    continue
                raise
            except BaseException:
                self._drop()
                raise
            if response.will_close or len(raw) > MAX_BODY:
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
        if len(raw) > MAX_BODY:
            raise QueryFailed(f"{where} sent more than {MAX_BODY // 1024**2} MiB for one query.")
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
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
