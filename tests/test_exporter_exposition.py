"""/metrics keeps each family's bytes between scrapes: the body must stay what prometheus-client serves."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from gputui.exporter.exposition import MetricsApp
from gputui.exporter.metrics import ExportOptions, PollStatus
from gputui.exporter.server import SnapshotCollector, make_registry
from tests.test_exporter import _proc, _snap

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def _get(app: MetricsApp, accept: str | None = None, encoding: str | None = None,
         method: str = "GET", query: str = "") -> tuple[str, dict[str, str], bytes]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": "/metrics", "QUERY_STRING": query}
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if encoding is not None:
        environ["HTTP_ACCEPT_ENCODING"] = encoding
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app(environ, start_response))
    return got["status"], got["headers"], body


def _polls() -> list[PollStatus]:
    """Snapshots that change a little from poll to poll, as a real machine's do."""
    out = []
    for i in range(6):
        procs = [_proc(100 + p, mem=(1000 + p) * (1 if p % 3 else i + 1), sm=(p * 7 + i) % 100) for p in range(6)]
        if i == 3:
            procs = procs[:2]  # processes end
        out.append(PollStatus(_snap(*procs, utilization_gpu=10 * i, temperature=50, power_draw=100.0 + i),
                              True, 1000.0 + i))
    return out


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
def test_body_is_byte_for_byte_what_prometheus_client_formats_poll_after_poll(accept: str | None):
    current: list[PollStatus] = []
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: current[0], ExportOptions(docker=False)))
    app = MetricsApp(registry)
    reference = openmetrics_latest if accept else generate_latest
    for status in _polls():
        current[:] = [status]
        for _ in range(2):  # a second scraper of the same poll
            code, headers, body = _get(app, accept)
            assert code == "200 OK"
            assert body == reference(registry)
    assert headers["Content-Type"].startswith("application/openmetrics-text" if accept else "text/plain")
    assert body.endswith(b"# EOF\n") == bool(accept) and body.count(b"# EOF") == (1 if accept else 0)


def test_both_formats_served_side_by_side_stay_right():
    current = [_polls()[0]]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: current[0], ExportOptions(docker=False)))
    app = MetricsApp(registry)
    for status in _polls():
        current[0] = status
        assert _get(app)[2] == generate_latest(registry)
        assert _get(app, OPENMETRICS)[2] == openmetrics_latest(registry)


class _Values:
    def __init__(self) -> None:
        self.value = 0.0

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily("odd_value", "A value whose sign of zero matters.")
        family.add_metric([], self.value)
        return [family]


def test_a_zero_that_changes_sign_is_formatted_again():
    registry = CollectorRegistry(auto_describe=False)
    values = _Values()
    registry.register(values)  # type: ignore[arg-type]
    app = MetricsApp(registry)
    for value in (0.0, -0.0, 0.0, float("nan"), float("nan"), 1.0):
        values.value = value
        assert _get(app)[2] == generate_latest(registry)


def test_gzip_name_filter_and_other_methods_behave_as_prometheus_client():
    registry, histogram = make_registry()
    current = [_polls()[0]]
    registry.register(SnapshotCollector(lambda: current[0], ExportOptions(docker=False)))
    app = MetricsApp(registry)
    code, headers, body = _get(app, encoding="gzip")
    assert headers["Content-Encoding"] == "gzip"
    assert b"gputui_gpu_info{" in gzip.decompress(body) and b"process_cpu_seconds_total" in gzip.decompress(body)
    code, headers, body = _get(app, query="name[]=gputui_poll_duration_seconds_count")
    assert code == "200 OK" and body.startswith(b"# HELP gputui_poll_duration_seconds ")
    assert b"gputui_gpu_info" not in body
    assert _get(app, method="POST")[0] == "405 Method Not Allowed"
    assert _get(app, method="OPTIONS")[0] == "200 OK"
    histogram.observe(0.002)  # the exporter's own series change every scrape: never served stale
    assert b"gputui_poll_duration_seconds_count 1.0" in _get(app)[2]
    histogram.observe(0.002)
    assert b"gputui_poll_duration_seconds_count 2.0" in _get(app)[2]
