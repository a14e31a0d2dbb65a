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


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
def test_unchanged_process_rows_reuse_their_families_and_every_change_still_shows(accept: str | None):
    """The poller hands an unchanged process's row out again; the collector then hands out the
    process families it built before, and /metrics their bytes: the body stays byte for byte
    prometheus-client's, and a changed, added or removed row shows in the next scrape."""
    rows = [_proc(100 + p, mem=1000 + p, sm=p) for p in range(4)]
    changed = [*rows[:3], _proc(103, mem=9999, sm=3)]
    polls = [(rows, {}), (rows, {"utilization_gpu": 5}), (changed, {}), (changed, {}), (rows[:2], {}),
             (rows, {}), (rows, {})]
    current: list[PollStatus] = []
    collector = SnapshotCollector(lambda: current[0], ExportOptions(docker=False))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app = MetricsApp(registry)
    reference = openmetrics_latest if accept else generate_latest

    def process_family() -> Any:
        return next(f for f in collector.collect() if f.name == "gputui_process_gpu_memory_bytes")

    seen = []
    for i, (procs, gpu_kw) in enumerate(polls):
        current[:] = [PollStatus(_snap(*procs, **gpu_kw), True, 1000.0 + i)]
        body = _get(app, accept)[2]
        assert body == reference(registry)
        seen.append(process_family())
        pids = {s.labels["pid"]: s.value for s in seen[-1].samples}
        assert pids == {str(p.pid): p.gpu_memory for p in procs}
    assert seen[1] is seen[0] and seen[3] is seen[2] and seen[6] is seen[5]  # the same rows: the same family
    assert seen[2] is not seen[1] and seen[4] is not seen[3] and seen[5] is not seen[4]


class _SteadySource:
    """A GPU and process source that hands out the very same objects while nothing changes, as the
    NVML and /proc sources do for an unchanged GPU and an unchanged process."""

    def __init__(self) -> None:
        from gputui.core.model import Gpu, ProcessFacts, RawProcess

        self.gpus = (Gpu(index=0, uuid="GPU-0", name="A100", utilization_gpu=30, memory_used=5, memory_total=10),)
        self.raws = {0: (RawProcess(pid=7, type="compute", gpu_memory=4, sm_utilization=20),)}
        self.fact = ProcessFacts(pid=7, visible=True, user="alice", command="python train.py", create_time=1.0)

    def read(self) -> Any:
        from gputui.core.model import GpuReading

        return GpuReading(driver_version="550", cuda_driver_version="12.4", gpus=self.gpus, processes=self.raws)

    def facts(self, pids: Iterable[int]) -> dict[int, Any]:
        return {pid: self.fact for pid in pids}

    def close(self) -> None:
        pass


def test_an_unchanged_machine_reuses_its_families_and_a_changed_gpu_shows_at_the_next_scrape():
    """From source to /metrics: the same GPU and process objects give the same snapshot GPU, the
    same families and the same bytes; a GPU value that changes is in the very next body."""
    from gputui.core.poller import Poller
    from gputui.core.record import replace

    source = _SteadySource()
    ticks = iter(range(100))
    poller = Poller(source, source, clock=lambda: 1_800_000_000.0 + next(ticks))  # type: ignore[arg-type]
    current: list[PollStatus] = []
    collector = SnapshotCollector(lambda: current[0], ExportOptions(docker=False))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app = MetricsApp(registry)

    def scrape() -> tuple[Any, bytes]:
        current[:] = [PollStatus(poller.poll(), True, 1.0)]
        body = _get(app)[2]
        assert body == generate_latest(registry)
        return next(f for f in collector.collect() if f.name == "gputui_gpu_utilization_ratio"), body

    first, _ = scrape()
    gpu_a = current[0].snapshot.gpus[0]  # type: ignore[union-attr]
    second, _ = scrape()
    assert current[0].snapshot.gpus[0] is gpu_a  # type: ignore[union-attr]
    assert second is first
    source.gpus = (replace(source.gpus[0], utilization_gpu=31),)
    third, body = scrape()
    assert third is not second and b'gputui_gpu_utilization_ratio{gpu="0",uuid="GPU-0"} 0.31' in body
    assert b'gputui_process_gpu_memory_bytes{' in body and b'pid="7"' in body
