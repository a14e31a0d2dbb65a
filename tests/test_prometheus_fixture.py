"""The real-Prometheus fixture scrapes a loopback target and answers PromQL with its labels."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fixtures.prometheus import Prometheus

pytestmark = pytest.mark.functional  # a real prometheus process


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"# TYPE fixture_probe gauge\nfixture_probe{kind=\"a\"} 42\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tiny_target() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fixture_scrapes_target_with_its_labels(prometheus_factory, tiny_target: str) -> None:
    prom: Prometheus = prometheus_factory([(tiny_target, {"server": "alpha"})])
    result = prom.wait_for("fixture_probe", lambda r: len(r) == 1)
    assert result[0]["metric"]["server"] == "alpha"
    assert result[0]["metric"]["kind"] == "a"
    assert prom.value("fixture_probe") == 42.0
    assert prom.value("up") == 1.0
    prom.stop()
    assert prom._proc is None


def test_fixture_refuses_non_loopback_targets(tmp_path) -> None:
    with pytest.raises(ValueError, match="loopback"):
        Prometheus(["10.0.0.1:9835"], tmp_path)
