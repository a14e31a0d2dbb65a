"""The fleet model from Prometheus answers (pure), fleet pick, and the HTTP client's failures."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gputui.core.fleet.pick import choose, format_fleet_pick
from gputui.core.fleet.prom import NotPrometheus, PromClient, PrometheusUnreachable, QueryFailed, Sample, check_url
from gputui.core.fleet.queries import DCGM_NOTE, FLEET_QUERIES, NO_GPU_NOTE, build_fleet

GIB = 1024**3
NOW = 1_800_000_000.0


def s(metric: str, value: float, **labels: str) -> Sample:
    return Sample({"__name__": metric, "job": "gpu", **labels}, value)


def gputui_host(instance: str, hostname: str, gpus: int = 2, util: float = 0.5) -> list[Sample]:
    out = [s("gputui_host_info", 1, instance=instance, hostname=hostname)]
    for i in range(gpus):
        lab = {"instance": instance, "gpu": str(i), "uuid": f"GPU-{hostname}-{i}"}
        out += [s("gputui_gpu_info", 1, name="NVIDIA H100", **lab),
                s("gputui_gpu_utilization_ratio", util, **lab),
                s("gputui_gpu_memory_used_bytes", 10 * GIB, **lab),
                s("gputui_gpu_memory_total_bytes", 80 * GIB, **lab),
                s("gputui_gpu_temperature_celsius", 60 + i, **lab)]
    return out


def up(instance: str, value: float = 1) -> Sample:
    return Sample({"__name__": "up", "job": "gpu", "instance": instance}, value)


def seen(instance: str, ts: float, source: str = "gputui", **labels: str) -> Sample:
    return Sample({"job": "gpu", "instance": instance, "gputui_source": source, **labels}, ts)


def test_fleet_queries_are_fixed_and_few() -> None:
    assert len(FLEET_QUERIES) <= 8


def test_hosts_gpus_processes_and_judgements() -> None:
    gpus = gputui_host("10.0.0.1:9835", "gpu-node-01") + gputui_host("10.0.0.2:9835", "gpu-node-02")
    procs = [s("gputui_process_gpu_memory_bytes", 9 * GIB, instance="10.0.0.1:9835", gpu="1", uuid="GPU-x",
               pid="4242", user="alice", exe="python3", container="train", image="pytorch")]
    state = [s("gputui_imbalance_flagged", 1, instance="10.0.0.1:9835"),
             s("gputui_alert_active", 1, instance="10.0.0.1:9835", gpu="1", kind="temperature", severity="critical"),
             s("gputui_container_finding", 1, instance="10.0.0.1:9835", container="train", kind="unpinned"),
             s("gputui_stale_processes", 2, instance="10.0.0.2:9835", gpu="0", uuid="u", kind="idle-holder")]
    snap = build_fleet("http://p:9090", NOW, [up("10.0.0.1:9835"), up("10.0.0.2:9835")],
                       [seen("10.0.0.1:9835", NOW - 3, hostname="gpu-node-01")], gpus, procs, state)
    doc = snap.to_json()
    assert [h["host"] for h in doc["hosts"]] == ["gpu-node-01", "gpu-node-02"]
    one, two = snap.hosts
    assert one.up and one.source == "gputui" and one.imbalance_flagged is True
    assert one.gpus[1].processes[0].container == "train" and one.gpus[1].processes[0].user == "alice"
    assert one.gpus[1].utilization_gpu == 50 and one.gpus[0].memory_total == 80 * GIB
    assert doc["hosts"][0]["alerts"] == [{"gpu": 1, "kind": "temperature", "severity": "critical"}]
    assert one.containers_with_findings == ("train",)
    assert one.stale_gpu_memory == 0 and two.stale_processes == 2 and two.stale_gpu_memory is None
    assert one.busy_gpus == 2  # 50 % busy each
    json.dumps(doc)


def test_down_host_keeps_last_seen_and_shows_no_stale_values() -> None:
    snap = build_fleet("http://p", NOW, [up("10.0.0.3:9835", 0)],
                       [seen("10.0.0.3:9835", NOW - 120, hostname="gpu-node-03")], [], [], [])
    (host,) = snap.hosts
    assert (host.host, host.up, host.gpus) == ("gpu-node-03", False, ())
    assert host.last_seen is not None and host.last_seen.timestamp() == NOW - 120
    assert host.to_json()["imbalance_flagged"] is None and host.to_json()["last_seen"].endswith("+00:00")


def test_dcgm_host_in_mib_with_a_note_and_gputui_copies_ignored() -> None:
    lab = {"instance": "10.0.0.9:9400", "gpu": "0", "UUID": "GPU-d0", "modelName": "A100", "Hostname": "dcgm-01"}
    dcgm = [s("DCGM_FI_DEV_GPU_UTIL", 97, **lab), s("DCGM_FI_DEV_FB_USED", 1024, **lab),
            s("DCGM_FI_DEV_FB_FREE", 3072, **lab), s("DCGM_FI_DEV_GPU_TEMP", 70, **lab)]
    # a gputui exporter with --dcgm-names: its DCGM copies must not make a second host or GPU
    copies = [s("DCGM_FI_DEV_GPU_UTIL", 3, instance="10.0.0.1:9835", gpu="0", UUID="GPU-gpu-node-01-0",
                Hostname="gpu-node-01")]
    snap = build_fleet("http://p", NOW, [up("10.0.0.9:9400"), up("10.0.0.1:9835")],
                       [seen("10.0.0.9:9400", NOW, "dcgm", Hostname="dcgm-01")],
                       dcgm + copies + gputui_host("10.0.0.1:9835", "gpu-node-01", gpus=1), [], [])
    dc = next(h for h in snap.hosts if h.source == "dcgm")
    assert dc.host == "dcgm-01" and dc.note == DCGM_NOTE and dc.imbalance_flagged is None
    (g,) = dc.gpus
    assert (g.name, g.utilization_gpu, g.memory_used, g.memory_total) == ("A100", 97, GIB, 4 * GIB)
    gt = next(h for h in snap.hosts if h.source == "gputui")
    assert len(gt.gpus) == 1 and gt.gpus[0].utilization_gpu == 50


def test_same_hostname_twice_zero_gpus_and_missing_labels_are_said() -> None:
    gpus = gputui_host("a:1", "twin", gpus=0) + gputui_host("b:1", "twin", gpus=1)
    gpus.append(s("gputui_gpu_utilization_ratio", 0.5, instance="b:1"))  # no gpu label
    gpus.append(Sample({"__name__": "gputui_gpu_utilization_ratio", "gpu": "0"}, 0.5))  # no instance
    snap = build_fleet("http://p", NOW, [up("a:1"), up("b:1")], [], gpus, [], [])
    assert sorted(h.shown for h in snap.hosts) == ["twin (a:1)", "twin (b:1)"]
    zero = next(h for h in snap.hosts if h.instance == "a:1")
    assert zero.gpus == () and zero.note == NO_GPU_NOTE
    text = " ".join(snap.warnings)
    assert "2 targets report the hostname 'twin'" in text
    flagged = next(h for h in snap.hosts if h.instance == "b:1")
    assert flagged.problems == ("1 GPU series whose gpu label is not a GPU index was left out (such as no label).",)
    assert "GPU series without an instance label was left out" in text


def test_host_without_hostname_is_its_instance_and_ssh_drops_the_port() -> None:
    snap = build_fleet("http://p", NOW, [up("10.1.2.3:9835")], [], gputui_host("10.1.2.3:9835", ""), [], [])
    (host,) = snap.hosts
    assert host.host == "10.1.2.3:9835" and host.ssh_target == "10.1.2.3"


# -- pick ---------------------------------------------------------------------------------

def _fleet_for_pick():
    a = gputui_host("a:1", "gpu-node-01", gpus=2)
    b = gputui_host("b:1", "gpu-node-02", gpus=2)
    grants = [s("gputui_container_gpu_granted", 1, instance="b:1", container="llm", uuid="GPU-gpu-node-02-0",
                gpu="0", via="device_request")]
    return build_fleet("http://p", NOW, [up("a:1"), up("b:1"), up("c:1", 0)],
                       [seen("c:1", NOW - 600, hostname="gpu-node-03")], a + b, [], grants)


def test_pick_prefers_the_idlest_gpu_not_granted_and_skips_down_hosts() -> None:
    snap = _fleet_for_pick()
    util = {("gpu", "a:1", 0): 0.9, ("gpu", "a:1", 1): 0.5, ("gpu", "b:1", 0): 0.0, ("gpu", "b:1", 1): 0.2}
    used = {k: 10.0 * GIB for k in util}
    result = choose(snap, util, used, used, 1, None, None, 60)
    assert (result.host.host, result.chosen) == ("gpu-node-02", (1,))  # GPU 0 there is granted to llm
    assert format_fleet_pick(result.host, result.chosen, "host-index") == "gpu-node-02 1"
    assert format_fleet_pick(result.host, result.chosen, "ssh") == "ssh -- gpu-node-02 CUDA_VISIBLE_DEVICES=1"
    assert format_fleet_pick(result.host, result.chosen, "docker") == \
        "DOCKER_HOST=ssh://gpu-node-02 docker run --gpus device=GPU-gpu-node-02-1"
    two = choose(snap, util, used, used, 2, None, None, 60)
    assert (two.host.host, two.chosen) == ("gpu-node-01", (1, 0))  # node-02 has only one free GPU


def test_pick_a_gpus_all_grant_reserves_no_gpu() -> None:
    every = [s("gputui_container_gpu_granted", 1, instance="a:1", container="notebook", uuid=f"GPU-gpu-node-01-{g}",
               gpu=str(g), via="device_request") for g in (0, 1)]
    snap = build_fleet("http://p", NOW, [up("a:1")], [], gputui_host("a:1", "gpu-node-01"), [], every)
    util = {("gpu", "a:1", 0): 0.5, ("gpu", "a:1", 1): 0.1}
    result = choose(snap, util, {}, {}, 1, None, None, 60)
    assert (result.host.host, result.chosen) == ("gpu-node-01", (1,))


def test_pick_nothing_fits_is_one_sentence() -> None:
    snap = _fleet_for_pick()
    util = {("gpu", i, g): 0.9 for i in ("a:1", "b:1") for g in (0, 1)}
    used = {k: 10.0 * GIB for k in util}
    result = choose(snap, util, used, used, 1, None, 20, 60)
    assert result.host is None
    assert result.problem.startswith("Nothing fits on any GPU host (2 hosts up, 1 down); closest is ")
    assert "\n" not in result.problem
    none = choose(build_fleet("http://p", NOW, [], [], [], [], []), {}, {}, {}, 1, None, None, 60)
    assert "knows no GPU host" in none.problem


def test_pick_never_offers_a_host_whose_name_is_not_a_host_name() -> None:
    snap = build_fleet("http://p", NOW, [up("a:1")], [], gputui_host("a:1", "x;rm -rf ~", gpus=1), [], [])
    util = {("gpu", "a:1", 0): 0.0}
    result = choose(snap, util, {}, {}, 1, None, None, 60)
    assert result.host is None and result.problem.startswith("No command is offered for x;rm -rf ~: ")
    assert "\n" not in result.problem
    assert snap.hosts[0].problems == ("No ssh command is offered for this host: its name cannot be put in one "
                                      "safely (it is not a host name or IP address, which hold only letters, "
                                      "digits, '-', '_', '.' and ':').",)


# -- the HTTP client ------------------------------------------------------------------------

class _Server:
    def __init__(self, status: int, body: bytes, hang: bool = False) -> None:
        release = self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if hang:
                    release.wait(10)
                    return
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made: list[_Server] = []

    def make(status: int = 200, body: bytes = b"", hang: bool = False) -> _Server:
        made.append(_Server(status, body, hang))
        return made[-1]

    yield make
    for m in made:
        m.close()


def test_not_prometheus(server) -> None:
    srv = server(200, b"<html>Grafana</html>")
    with pytest.raises(NotPrometheus, match="answered .*but not as Prometheus does"):
        PromClient(srv.url).query("up")


def test_query_error_is_one_clean_sentence(server) -> None:
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error\x1b[31m"}).encode()
    srv = server(400, body)
    with pytest.raises(QueryFailed) as info:
        PromClient(srv.url).query("up{")
    assert str(info.value).endswith("refused a query (bad_data): parse error^[[31m.")


def test_timeout_and_refused(server) -> None:
    srv = server(hang=True)
    with pytest.raises(PrometheusUnreachable, match="did not answer within 0.3 s"):
        PromClient(srv.url, timeout=0.3).query("up")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusUnreachable, match="connection refused"):
        PromClient(f"http://127.0.0.1:{port}").query("up")


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://p", "http://p/?x=1", ""])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        check_url(url)
