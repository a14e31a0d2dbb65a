"""What a hostile exporter can put in the fleet's data, in-process: commands, labels, values.

The real-Prometheus, real-ssh and real-HTTP versions of these attacks are in
``test_fleet_hostile.py``; here the pure parts are held to the same rules.
"""

from __future__ import annotations

import json
import math
import shlex

import pytest

from gputui.core.fleet.pick import best_other_gpu, choose, format_fleet_pick
from gputui.core.fleet.prom import Sample
from gputui.core.fleet.queries import build_fleet
from gputui.core.fleet.remote import host_problem
from gputui.ui.screens.fleet_host import kill_command, migrate_command
from tests.test_fleet_model import GIB, NOW, gputui_host, s, up

PROXY = "-oProxyCommand=sh -c 'id>$HOME/SSHPWN' x"


@pytest.mark.parametrize("name", ["gpu-node-01", "node.example.org", "node.example.org.", "n_1", "10.0.0.7",
                                  "::1", "fd00::a:7", "GPU1"])
def test_host_names_and_addresses_can_be_given_to_ssh(name: str) -> None:
    assert host_problem(name) is None


@pytest.mark.parametrize("name", [PROXY, "-h", "a b", "a;b", "$(id)", "`id`", "user@host", "host:22", "a'b",
                                  "fe80::1%eth0", "", "x" * 254, "ho\nst", "nöde", "a..b", "-node", "node-",
                                  "a" * 64 + ".b"])
def test_anything_else_is_no_host(name: str) -> None:
    assert host_problem(name) is not None


def _host(hostname: str, gpus: int = 2, **kw: float):
    snap = build_fleet("http://p", NOW, [up("a:1")], [], gputui_host("a:1", hostname, gpus=gpus, **kw),
                       [s("gputui_process_gpu_memory_bytes", GIB, instance="a:1", gpu="0", pid="4242", user="u",
                          exe="python3", container="train-llm")], [])
    return snap.hosts[0]


def test_ssh_commands_end_the_options_and_survive_both_shells() -> None:
    host = _host("gpu-node-01")
    gpu = host.gpus[0]
    proc = gpu.processes[0]
    for (command, _), tty, remote in ((kill_command(host, gpu, proc), ["-t"], ["gputui", "kill", "4242"]),
                                      (migrate_command(host, gpu, proc), [], ["gputui", "migrate", "train-llm",
                                                                              "--to", "1"])):
        assert command is not None
        local = shlex.split(command)  # what the operator's shell hands ssh
        assert local == ["ssh", *tty, "--", "gpu-node-01", shlex.join(remote)]
        # ssh joins the words after the host with spaces and hands them to the remote shell
        assert shlex.split(" ".join(local[len(tty) + 3:])) == remote
    line = format_fleet_pick(host, (0, 1), "ssh")
    assert shlex.split(line)[:3] == ["ssh", "--", "gpu-node-01"]
    assert format_fleet_pick(host, (1,), "host-index") == "gpu-node-01 1"


def test_a_hostile_hostname_gets_a_sentence_and_no_command() -> None:
    host = _host(PROXY)
    assert host.host == PROXY and any("No ssh command is offered" in p for p in host.problems)
    gpu, proc = host.gpus[0], host.gpus[0].processes[0]
    for command, why in (kill_command(host, gpu, proc), migrate_command(host, gpu, proc)):
        assert command is None and why.startswith("No command is offered for -oProxyCommand=")
        assert "\n" not in why
    with pytest.raises(ValueError):
        format_fleet_pick(host, (0,), "host-index")
    result = choose(build_fleet("http://p", NOW, [up("a:1"), up("b:1")], [],
                                gputui_host("a:1", PROXY, util=0.0) + gputui_host("b:1", "gpu-node-02", util=0.9),
                                [], []), {}, {}, {}, 1, None, None, 60)
    assert result.host is not None and result.host.host == "gpu-node-02"  # the idle hostile host is never offered
    assert len(result.skipped) == 1 and "-oProxyCommand" in result.skipped[0]


def test_a_hostile_container_name_gets_no_migrate_command() -> None:
    snap = build_fleet("http://p", NOW, [up("a:1")], [], gputui_host("a:1", "gpu-node-01"),
                       [s("gputui_process_gpu_memory_bytes", GIB, instance="a:1", gpu="0", pid="7", user="u",
                          exe="x", container="x;touch /tmp/pwn")], [])
    host = snap.hosts[0]
    command, why = migrate_command(host, host.gpus[0], host.gpus[0].processes[0])
    assert command is None and "cannot be put in one safely" in why


def _override(samples: list[Sample], values: dict[tuple[str, str], float]) -> list[Sample]:
    """``samples`` with the value of (metric, gpu) replaced as ``values`` says."""
    return [Sample(x.labels, values.get((x.labels["__name__"], x.labels.get("gpu", "")), x.value)) for x in samples]


def test_hostile_labels_and_values_are_flagged_never_fatal() -> None:
    lab = {"instance": "a:1"}
    evil = _override(gputui_host("a:1", "evil-node", gpus=4), {
        ("gputui_gpu_utilization_ratio", "0"): 1e308, ("gputui_gpu_utilization_ratio", "1"): -5.0,
        ("gputui_gpu_memory_used_bytes", "2"): math.inf, ("gputui_gpu_temperature_celsius", "3"): 1e308})
    evil += [s("gputui_gpu_utilization_ratio", 0.5, gpu=gpu, **lab) for gpu in ("²", "٣", "9" * 5000)]
    good = gputui_host("b:1", "gpu-node-02")
    procs = [s("gputui_process_gpu_memory_bytes", 1e308, instance="a:1", gpu="0", pid="5", user="u" * 100_000),
             s("gputui_process_gpu_memory_bytes", GIB, instance="a:1", gpu="٣", pid="6"),
             s("gputui_process_gpu_memory_bytes", GIB, instance="a:1", gpu="0", pid="1" * 5000)]
    state = [s("gputui_stale_processes", 1e308, instance="a:1", gpu="0"),
             s("gputui_stale_gpu_memory_bytes", -math.inf, instance="a:1", gpu="0")]
    snap = build_fleet("http://p", NOW, [up("a:1"), up("b:1")], [], evil + good, procs, state)
    doc = json.loads(json.dumps(snap.to_json(), allow_nan=False))  # finite, plain JSON
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["gpu-node-02"]["problems"] == [] and len(hosts["gpu-node-02"]["gpus"]) == 2
    bad = hosts["evil-node"]
    assert [g["index"] for g in bad["gpus"]] == [0, 1, 2, 3]  # "٣" is not GPU 3, "²" not a GPU
    g0, g1, g2, g3 = bad["gpus"]
    assert g0["utilization_gpu"] is None and g1["utilization_gpu"] is None
    assert g2["memory_used"] is None and g3["temperature"] is None and g3["utilization_gpu"] == 50
    assert g0["processes"][0]["gpu_memory"] is None and len(g0["processes"][0]["user"].encode()) <= 256
    assert bad["stale_processes"] in (0, None) or bad["stale_processes"] < 2**53
    text = " ".join(bad["problems"])
    assert "GPU 0: Prometheus reported impossible values, shown as N/A: GPU utilization (1e+308)" in text
    assert "GPU 2: " in text and "memory used (inf)" in text
    assert "3 GPU series whose gpu label is not a GPU index were left out" in text
    assert "process series whose gpu or pid label is not a number were left out" in text
    assert all(len(p) < 400 for p in bad["problems"])


def test_a_100kb_hostname_is_cut_and_flagged() -> None:
    snap = build_fleet("http://p", NOW, [up("a:1")], [], gputui_host("a:1", "n" * 100_000), [], [])
    host = snap.hosts[0]
    assert len(host.host.encode()) <= 253 and host.host.endswith("…")
    assert any("hostname label is 100000 bytes long" in p for p in host.problems)


def test_fleet_m_and_pick_share_one_rule_for_a_gpus_all_container() -> None:
    """Issue 28.1: a `--gpus all` container (granted every GPU, so the exporter lists every UUID)
    reserves no GPU in particular: `m` moves it to the idlest other GPU, as `pick` would choose."""
    samples = _override(gputui_host("a:1", "gpu-node-03", gpus=8, util=0.6),
                        {("gputui_gpu_utilization_ratio", "6"): 0.02})
    grants = [s("gputui_container_gpu_granted", 1, instance="a:1", container="bert-finetune", gpu=str(i),
                uuid=f"GPU-gpu-node-03-{i}", via="device_request") for i in range(8)]
    procs = [s("gputui_process_gpu_memory_bytes", GIB, instance="a:1", gpu="0", pid="99", user="u", exe="python3",
               container="bert-finetune")]
    host = build_fleet("http://p", NOW, [up("a:1")], [], samples, procs, grants).hosts[0]
    gpu, proc = host.gpus[0], host.gpus[0].processes[0]
    command, why = migrate_command(host, gpu, proc)
    assert command == "ssh -- gpu-node-03 'gputui migrate bert-finetune --to 6'", why
    assert best_other_gpu(host, 0).index == 6
    util = {("gpu", "a:1", i): 0.02 if i == 6 else 0.6 for i in range(8)}
    result = choose(build_fleet("http://p", NOW, [up("a:1")], [], samples, procs, grants), util, {}, {}, 1, None,
                    None, 60)
    assert result.chosen == (6,)


def test_an_explicit_grant_is_still_taken_by_m() -> None:
    samples = gputui_host("a:1", "gpu-node-03", gpus=3)
    grants = [s("gputui_container_gpu_granted", 1, instance="a:1", container="serve", gpu="1",
                uuid="GPU-gpu-node-03-1", via="device_request")]
    host = build_fleet("http://p", NOW, [up("a:1")], [], samples, [], grants).hosts[0]
    assert best_other_gpu(host, 0).index == 2


def test_label_values_that_are_not_strings_leave_the_series_out() -> None:
    from gputui.core.fleet.prom import PromClient

    client = PromClient("http://127.0.0.1:9")
    doc = {"resultType": "vector", "result": [
        {"metric": {"__name__": "up", "instance": ["x"]}, "value": [1, "1"]},
        {"metric": {"__name__": "up", "instance": "a:1"}, "value": [1, "1"]}]}
    client._call = lambda path, params: doc  # type: ignore[method-assign]
    assert client.query("up") == [Sample({"__name__": "up", "instance": "a:1"}, 1.0)]


def test_an_answer_over_the_cap_is_refused_without_being_read(monkeypatch) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gputui.core.fleet import prom
    from gputui.core.fleet.prom import PromClient, QueryFailed

    monkeypatch.setattr(prom, "MAX_BODY", 1024**2)
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            if self.path.endswith("query"):  # declares 10 MiB, then sends nothing
                self.send_header("Content-Length", str(10 * 1024**2))
                self.end_headers()
                self.wfile.flush()
                release.wait(20)
                return
            self.end_headers()  # undeclared: 3 MiB, then close
            for _ in range(3 * 16):
                self.wfile.write(b" " * 65536)

        def log_message(self, *a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = PromClient(f"http://127.0.0.1:{httpd.server_address[1]}", timeout=10)
        with pytest.raises(QueryFailed, match="sent more than 1 MiB for one query"):
            client.query("up")  # refused on its Content-Length, not after the 10 s timeout
        with pytest.raises(QueryFailed, match="sent more than 1 MiB for one query"):
            client.query_range("up", 0, 1, 1)
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def test_an_impossible_last_seen_time_is_no_time() -> None:
    from tests.test_fleet_model import seen

    for ts in (1e308, -1e308, math.inf, math.nan):
        snap = build_fleet("http://p", NOW, [up("a:1", 0)], [seen("a:1", ts, hostname="gpu-node-01")], [], [], [])
        assert snap.hosts[0].last_seen is None and json.dumps(snap.to_json())


def test_metric_names_are_written_once_for_the_exporter_and_the_fleet() -> None:
    """Issue 28.10: one table (gputui.core.metric_names) names every metric; no other module of
    gputui spells one, so the exporter and the fleet reader cannot drift apart."""
    import ast
    import re
    from pathlib import Path

    from gputui.core import metric_names
    from gputui.core.fleet.queries import FLEET_QUERIES
    from gputui.exporter.metrics import ExportOptions, PollStatus, build_families
    from tests.test_exporter import _proc, _snap

    known = {metric.name for metric in metric_names.ALL}
    pattern = re.compile(r"\b(?:gputui|DCGM_FI)_[A-Za-z_]+\b")
    root = Path(metric_names.__file__).parent.parent
    spelled = []
    for path in root.rglob("*.py"):
        if path.name == "metric_names.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                spelled += [(path.name, name) for name in pattern.findall(node.value) if name in known]
    assert spelled == []
    # and what the fleet reads is what the exporter writes
    snap = _snap(_proc(100, mem=1000, sm=5), utilization_gpu=10, temperature=50)
    written = {f.name for f in build_families(PollStatus(snap, True, 0.0), ExportOptions(dcgm_names=True))}
    read = set(pattern.findall(" ".join(FLEET_QUERIES))) & known
    # DCGM_FI_DEV_FB_RESERVED: dcgm-exporter's own; the Slurm series are written on Slurm nodes only, the
    # house rules' where a rules folder has rules or reservations
    only_some = {m.name for m in (metric_names.DCGM_FB_RESERVED, metric_names.SLURM_JOB_INFO,
                                  metric_names.RULE_VIOLATION, metric_names.RESERVATION)}
    assert len(read) >= 15 and read - only_some <= written
