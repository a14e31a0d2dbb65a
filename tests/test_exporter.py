"""``gputui exporter`` without a Prometheus: the contract on model snapshots, the HTTP surface, signals, TLS."""

from __future__ import annotations

import http.client
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputui.core.model import Alert, ContainerRef, Finding, Gpu, Imbalance, Process, Snapshot, Suggestion
from gputui.core.record import replace
from gputui.exporter.metrics import ExportOptions, PollStatus, build_families
from gputui.exporter.server import parse_listen
from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _samples(snap: Snapshot | None, **opts) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in build_families(PollStatus(snap, snap is not None, 1.0), ExportOptions(**opts)):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _proc(pid: int, mem: int | None, command: str = "python train.py", **kw) -> Process:
    return Process(pid=pid, gpu_index=0, type="compute", gpu_memory=mem, sm_utilization=kw.pop("sm", None),
                   user="alice", command=command, **kw)


def _snap(*procs: Process, **gpu_kw) -> Snapshot:
    g = Gpu(index=0, uuid="GPU-0", name="A100", memory_used=5, memory_total=10, processes=tuple(procs), **gpu_kw)
    return Snapshot(host="h", time=NOW, driver_version="550", cuda_driver_version="12.4", gpus=(g,))


def test_values_the_driver_does_not_report_are_absent_not_zero():
    s = _samples(_snap())
    assert "gputui_gpu_temperature_celsius" not in s and "gputui_gpu_power_watts" not in s
    assert "gputui_gpu_utilization_ratio" not in s and "gputui_gpu_fan_ratio" not in s
    assert s["gputui_gpu_memory_used_bytes"][0].value == 5
    assert s["gputui_gpu_lost"][0].value == 0


def test_process_cap_keeps_the_largest_and_counts_the_rest():
    procs = [_proc(100 + i, mem=i * 1000) for i in range(10)] + [_proc(99, mem=None)]
    s = _samples(_snap(*procs), max_processes=3)
    kept = sorted(int(x.labels["pid"]) for x in s["gputui_process_gpu_memory_bytes"])
    assert kept == [107, 108, 109]
    assert s["gputui_process_series_dropped"][0].value == 8


def test_command_line_never_exported_only_the_executable_base_name():
    p = _proc(7, 1, command="/opt/conda/bin/python3 train.py --wandb-key=abc123 PASSWORD=hunter2", exe="python3")
    s = _samples(_snap(p))
    labels = s["gputui_process_gpu_memory_bytes"][0].labels
    assert labels["exe"] == "python3"
    text = repr(s)
    assert "abc123" not in text and "hunter2" not in text and "train.py" not in text
    # the label is the source's executable name, never a word of the command line
    s = _samples(_snap(_proc(8, 1, command="  --hf-token=hf_SECRET x")))
    assert s["gputui_process_gpu_memory_bytes"][0].labels["exe"] == ""


def test_container_and_judgement_series():
    ref = ContainerRef(id="c1", name="train", image="img:1", compose_project="p", compose_service="s")
    stale = _proc(8, 3000, stale=(Finding("orphan", "x"), Finding("idle-holder", "y")))
    snap = _snap(_proc(7, 1000, container=ref, sm=50), stale)
    snap = replace(snap, imbalance=Imbalance(True, ("util",), "m", Suggestion(0, 3, "r", container="train", pid=7)),
                   alerts=(Alert(0, "temperature", "critical", "hot", NOW), Alert(None, "docker", "warning", "d", NOW)))
    s = _samples(snap)
    mine = next(x for x in s["gputui_process_gpu_memory_bytes"] if x.labels["pid"] == "7")
    assert (mine.labels["container"], mine.labels["image"], mine.labels["compose_service"]) == ("train", "img:1", "s")
    assert s["gputui_process_sm_utilization_ratio"][0].value == 0.5
    kinds = {x.labels["kind"]: x.value for x in s["gputui_stale_processes"]}
    assert kinds == {"orphan": 1, "idle-holder": 1}
    assert s["gputui_stale_gpu_memory_bytes"][0].value == 3000
    assert s["gputui_imbalance_flagged"][0].value == 1
    sug = s["gputui_imbalance_suggestion"][0].labels
    assert sug == {"container": "train", "pid": "7", "from_gpu": "0", "to_gpu": "3"}
    alerts = {(a.labels["gpu"], a.labels["kind"], a.labels["severity"]) for a in s["gputui_alert_active"]}
    assert alerts == {("0", "temperature", "critical"), ("", "docker", "warning")}


def test_before_a_poll_succeeds_only_the_exporter_series_are_served():
    s = _samples(None)
    assert s["gputui_source_up"][0].labels == {"source": "nvml"} and s["gputui_source_up"][0].value == 0
    assert "gputui_gpu_info" not in s
    assert s["gputui_host_info"][0].value == 1


def test_parse_listen():
    assert str(parse_listen("127.0.0.1:9835")) == "127.0.0.1:9835"
    assert parse_listen("[::1]:9").host == "::1"
    for bad in ("9835", "::1:9835", "127.0.0.1:0", "127.0.0.1:http", ":9835"):
        with pytest.raises(ValueError):
            parse_listen(bad)


@pytest.mark.functional
def test_demo_serves_metrics_404_elsewhere_and_stops_on_sigterm(exporters):  # noqa: F811
    e = start_exporter(exporters, None, "--demo", "--read-only", "--no-docker", "--interval", "0.5")
    families = {f.name: f for f in text_string_to_metric_families(e.metrics())}
    assert len(families["gputui_gpu_info"].samples) == 8
    # no docker series with --no-docker; the demo server runs a Slurm of its own
    assert [s.labels["source"] for s in families["gputui_source_up"].samples] == ["nvml", "slurm"]
    for path in ("/", "/metrics/", "/favicon.ico", "/api/v1/query"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{e.address}{path}", timeout=10)
        assert err.value.code == 404
    e.proc.send_signal(signal.SIGTERM)
    assert e.proc.wait(timeout=10) == 0
    with pytest.raises(OSError):  # the port is closed
        urllib.request.urlopen(e.url, timeout=2)


@pytest.mark.functional
def test_tls(tmp_path: Path, exporters):  # noqa: F811
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    e = start_exporter(exporters, None, "--demo", "--certfile", str(cert), "--keyfile", str(key))
    assert "https://" in e.banner
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    with urllib.request.urlopen(f"https://{e.address}/metrics", context=ctx, timeout=10) as r:
        assert b"gputui_gpu_info" in r.read()
    conn = http.client.HTTPConnection("127.0.0.1", e.port, timeout=10)  # plain HTTP to a TLS port: refused
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/metrics")
        conn.getresponse().read()
    conn.close()
    with urllib.request.urlopen(f"https://{e.address}/metrics", context=ctx, timeout=10) as r:
        assert r.status == 200  # a failed client does not take the server down
    assert e.stop() == 0
    assert "Traceback" not in e.stderr_rest, e.stderr_rest


class _Poller:
    """A stand-in for Poller.poll(): answers, raises, or hangs as the test says."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.mode = "ok"
        self.release = threading.Event()
        self.calls = 0

    def poll(self) -> Snapshot:
        self.calls += 1
        if self.mode == "raise":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)  # what the driver raises
        if self.mode == "hang":
            self.release.wait(30)
        return self.snap


def _wait(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


@pytest.mark.functional
def test_poll_loop_turns_nvml_down_when_a_poll_fails_or_hangs_and_recovers():
    from gputui.exporter.server import PollLoop, make_registry

    _, histogram = make_registry()
    poller = _Poller(_snap())
    logged: list[str] = []
    loop = PollLoop(poller, 0.25, histogram, PollStatus(None, True, None), stale_after=0.5,  # type: ignore[arg-type]
                    log=logged.append)
    loop.start()
    try:
        _wait(lambda: loop.status().snapshot is not None)
        assert loop.status().nvml_up
        poller.mode = "raise"
        _wait(lambda: not loop.status().nvml_up)
        assert loop.status().snapshot is None  # no stale GPU data served as if current
        assert loop.status().last_poll is not None  # when it last worked stays visible
        _wait(lambda: poller.calls >= 6)
        assert logged == ["gputui exporter: poll failed: GPU is lost"]  # said once, not per poll
        poller.mode = "ok"
        _wait(lambda: loop.status().nvml_up and loop.status().snapshot is not None)
        assert logged[-1] == "gputui exporter: polling works again."
        # A poll stuck in the driver: the scrape still answers at once, and says NVML is down.
        poller.mode = "hang"
        _wait(lambda: not loop.status().nvml_up)
        assert loop._poll_started is not None and loop.status().snapshot is None
        poller.mode = "ok"
        poller.release.set()
        _wait(lambda: loop.status().nvml_up)
    finally:
        poller.release.set()
        loop.stop()


def test_odd_text_and_duplicate_rows_never_break_the_scrape():
    from prometheus_client import CollectorRegistry, generate_latest

    from gputui.exporter.server import SnapshotCollector

    ref = ContainerRef(id="c1", name="caf\udce9", image="img")  # a byte that was not UTF-8
    odd = _proc(7, 1000, command="/usr/bin/\udcff\u202ehidden --x", exe="\udcff\u202ehidden", container=ref)
    snap = _snap(odd, odd)  # NVML listed the same process twice
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: PollStatus(snap, True, 1.0), ExportOptions()))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["gputui_process_gpu_memory_bytes"].samples
    assert len(samples) == 1
    assert samples[0].labels["container"] == "caf\\udce9"
    assert samples[0].labels["exe"] == "\\udcff\u202ehidden"  # escaped: the exposition is valid UTF-8


def test_families_are_built_once_per_poll_however_many_scrape():
    from gputui.exporter.server import SnapshotCollector

    first, second = PollStatus(_snap(), True, 1.0), PollStatus(_snap(_proc(5, 10)), True, 2.0)
    current = [first]
    collector = SnapshotCollector(lambda: current[0], ExportOptions())
    a, b = collector.collect(), collector.collect()
    assert a is b  # the second scraper of the same poll gets the same families
    current[0] = second
    c = collector.collect()
    assert c is not a
    assert any(f.name == "gputui_process_gpu_memory_bytes" and f.samples for f in c)


def test_mig_devices_have_their_memory_series_and_processes_their_mig_uuid():
    """Issue 16: gputui_mig_device_memory_used_bytes{gpu,uuid,mig_uuid,profile}; mig_uuid on process series."""
    from gputui.core.model import MigDevice, MigMode

    mig = MigDevice(index=1, uuid="MIG-1", gpu_instance_id=2, compute_instance_id=0, profile="3g.40gb",
                    memory_used=3, memory_total=4)
    snap = _snap(_proc(7, mem=3, mig_device=1), _proc(8, mem=1, sm=50), mig_mode=MigMode(True, True),
                 mig_devices=(mig,))
    s = _samples(snap)
    (used,) = s["gputui_mig_device_memory_used_bytes"]
    assert used.labels == {"gpu": "0", "uuid": "GPU-0", "mig_uuid": "MIG-1", "profile": "3g.40gb"}
    assert used.value == 3 and s["gputui_mig_device_memory_total_bytes"][0].value == 4
    by_pid = {x.labels["pid"]: x.labels["mig_uuid"] for x in s["gputui_process_gpu_memory_bytes"]}
    assert by_pid == {"7": "MIG-1", "8": ""}
    # and the device's index, so the fleet can say "0:1" as the dashboard does (issue 28)
    devices = {x.labels["pid"]: x.labels["mig_device"] for x in s["gputui_process_gpu_memory_bytes"]}
    assert devices == {"7": "1", "8": ""}
    assert s["gputui_process_sm_utilization_ratio"][0].labels["mig_uuid"] == ""
    assert "gputui_mig_device_memory_used_bytes" not in _samples(_snap())  # no MIG: no series


def test_the_exporter_reads_proc_stat_every_few_seconds_and_the_dashboard_every_poll():
    """The exporter shows no per-process CPU or RSS: its host process source reuses a living
    process's /proc/PID/stat figures for PROC_STAT_REFRESH seconds (a pidfd vouches for it on every
    poll); a source the exporter did not tune (the dashboard's) reads them on every poll."""
    from gputui.core.machine import Machine, open_machine
    from gputui.core.sources.processes import HostProcessSource
    from gputui.exporter.server import PROC_STAT_REFRESH, tune_sources

    dashboard, exporter = HostProcessSource(), HostProcessSource()
    tune_sources(Machine(gpu=None, processes=exporter, containers=None))  # type: ignore[arg-type]
    try:
        assert dashboard.refresh == 0.0
        probe = HostProcessSource()
        pidfds = probe.refresh_every(1.0)  # False on kernels without pidfds: then every poll reads
        probe.close()
        assert exporter.refresh == (PROC_STAT_REFRESH if pidfds else 0.0)
        assert PROC_STAT_REFRESH == 5.0
    finally:
        dashboard.close()
        exporter.close()
    demo = open_machine(demo=True)
    tune_sources(demo)  # the demo has no /proc to read: nothing to tune, nothing breaks
    assert demo.processes is demo.demo


@pytest.mark.functional  # a process of its own
def test_silent_clients_never_hold_up_a_scrape_and_scrapes_reuse_their_threads():
    """Connections are served by kept threads: one after another on the same thread while they come
    one at a time, on new threads while others are busy (a client that connects and says nothing
    holds its thread until the handler's timeout, never anyone else's scrape), and the extra threads
    end once they are done."""
    import socket

    from prometheus_client import CollectorRegistry

    from gputui.exporter.server import ListenAddress, SnapshotCollector, bind_server, serve_in_thread, stop_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: PollStatus(_snap(_proc(5, 10)), True, 1.0), ExportOptions()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = bind_server(ListenAddress("127.0.0.1", port), registry)
    serve_in_thread(server)
    url = f"http://127.0.0.1:{port}/metrics"

    def scrapers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "gputui-exporter-scrape"}

    silent: list[socket.socket] = []
    try:
        for _ in range(5):
            assert b"gputui_process_gpu_memory_bytes" in urllib.request.urlopen(url, timeout=5).read()
            # the client has its answer a moment before the thread that sent it is idle again: a scrape
            # arriving in that moment rightly starts a second thread, so wait for that moment to pass
            _wait(lambda: server._workers is not None and server._workers._idle == 1)  # type: ignore[attr-defined]
        assert len(scrapers()) == 1  # five scrapes one after another, one thread
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        _wait(lambda: len(scrapers()) >= 4)
        body = urllib.request.urlopen(url, timeout=5).read()  # answered while four threads wait on silence
        assert b"gputui_process_gpu_memory_bytes" in body
        for c in silent:
            c.close()
        _wait(lambda: len(scrapers()) <= 2)  # the threads beyond the two kept idle end
        assert b"gputui_gpu_info" in urllib.request.urlopen(url, timeout=5).read()
    finally:
        for c in silent:
            c.close()
        stop_server(server)
        server.server_close()
