"""``who``/``usage --prometheus`` against a real Prometheus whose TSDB was backfilled with a
synthetic day of ``gputui_*`` series (``promtool tsdb create-blocks-from openmetrics``), and the
same day fed to the SQLite recorder: both backends must give the expected numbers, and the same
numbers, to within the sampling step."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputui.core.model import ContainerRef
from gputui.core.record import replace
from gputui.core.recorder import Recorder
from tests.fixtures.prometheus import Prometheus, prometheus_binary, promtool
from tests.fixtures.synthetic import gpu, proc, snapshot

pytestmark = pytest.mark.functional

GIB = 1024**3
SCRAPE = 15
REPO = Path(__file__).resolve().parents[1]
#: (host, gpu, pid, user, container, image, memory GiB, SM %, GPU util %, from hour, to hour) of the day
HOLDS = [
    ("a", 0, 101, "alice", None, None, 4.0, 70, 80, 2.0, 6.0),
    ("a", 1, 202, "bob", None, None, 2.0, 0, 0, 10.0, 12.0),
    ("a", 1, 203, "alice", "notebook", "jupyter:1", 1.0, 0, 0, 11.0, 13.0),
    ("b", 0, 301, "carol", "train", "pytorch:2", 8.0, 50, 50, 8.0, 20.0),
]


def _day_start() -> float:
    """Midnight UTC a day and a few hours back: blocks wholly in the past, inside retention."""
    return math.floor((time.time() - 30 * 3600) / 86400) * 86400


def _util(host: str, g: int, t: float, t0: float) -> float:
    for h, gi, _pid, _u, _c, _i, _m, _sm, util, a, b in HOLDS:
        if h == host and gi == g and t0 + a * 3600 <= t <= t0 + b * 3600:
            return util
    return 0.0


def _openmetrics(t0: float) -> str:
    lines = ["# TYPE gputui_process_gpu_memory_bytes gauge", "# TYPE gputui_process_sm_utilization_ratio gauge",
             "# TYPE gputui_gpu_utilization_ratio gauge", "# TYPE gputui_host_info gauge"]
    body: dict[str, list[str]] = {k: [] for k in ("mem", "sm", "util", "info")}
    for step in range(0, 86400 // SCRAPE + 1):
        t = t0 + step * SCRAPE
        for host in ("a", "b"):
            inst = f'job="gputui",instance="{host}:9835"'
            body["info"].append(f'gputui_host_info{{{inst},hostname="{host}"}} 1 {t:.0f}')
            for g in (0, 1):
                body["util"].append(f'gputui_gpu_utilization_ratio{{{inst},gpu="{g}",uuid="GPU-{host}{g}"}} '
                                    f'{_util(host, g, t, t0) / 100} {t:.0f}')
        for host, g, pid, user, container, image, mem, sm, _util_pct, a, b in HOLDS:
            if not t0 + a * 3600 <= t <= t0 + b * 3600:
                continue
            labels = (f'job="gputui",instance="{host}:9835",gpu="{g}",uuid="GPU-{host}{g}",pid="{pid}"')
            body["mem"].append(f'gputui_process_gpu_memory_bytes{{{labels},user="{user}",exe="python",'
                               f'container="{container or ""}",image="{image or ""}",compose_project="",'
                               f'compose_service="",mig_uuid=""}} {int(mem * GIB)} {t:.0f}')
            body["sm"].append(f'gputui_process_sm_utilization_ratio{{{labels},mig_uuid=""}} {sm / 100} {t:.0f}')
    # OpenMetrics wants each family's samples together
    out = [lines[0], *body["mem"], lines[1], *body["sm"], lines[2], *body["util"], lines[3], *body["info"], "# EOF"]
    return "\n".join(out) + "\n"


def _record_host_a(db: Path, t0: float) -> None:
    r = Recorder(str(db), SCRAPE)
    assert r.open(), r.problem
    for step in range(0, 86400 // SCRAPE + 1):
        t = t0 + step * SCRAPE
        gpus = []
        for g in (0, 1):
            procs = []
            for host, gi, pid, user, container, image, mem, sm, _u, a, b in HOLDS:
                if host == "a" and gi == g and t0 + a * 3600 <= t <= t0 + b * 3600:
                    p = replace(proc(pid, g, mem_gib=mem, sm=sm, create_time=t0 + pid), user=user,
                                command="/usr/bin/python train.py")
                    if container:
                        p = replace(p, container=ContainerRef(id=f"{pid:064x}", name=container, image=image))
                    procs.append(p)
            gpus.append(gpu(g, util=int(_util("a", g, t, t0)), procs=procs))
        r.record(replace(snapshot(t, gpus), host="a"))
    r.close()


def _gputui(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "gputui", *args, "--json"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    prometheus_binary()
    tool = promtool()
    tmp = tmp_path_factory.mktemp("history-prom")
    t0 = _day_start()
    source = tmp / "day.om"
    source.write_text(_openmetrics(t0))
    (tmp / "p").mkdir()
    res = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp / "p")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    prom = Prometheus([], tmp).start()
    db = tmp / "history.db"
    _record_host_a(db, t0)
    yield prom, db, t0
    prom.stop()


def _by(doc: dict) -> dict[str, dict]:
    return {r["key"]: r for r in doc["rows"]}


def test_usage_from_prometheus_and_sqlite_agree(backfilled):
    prom, db, t0 = backfilled
    since, until = f"{t0:.0f}", f"{t0 + 86400:.0f}"
    fleet = _by(_gputui("usage", "--prometheus", prom.url, "--since", since, "--until", until, "--by", "user"))
    # expected from the day's description, per user across both hosts (a minute of tolerance per hold)
    assert fleet["alice"]["gpu_hours_held"] == pytest.approx(4.0 + 2.0, abs=2 / 60)
    assert fleet["alice"]["busy_gpu_hours"] == pytest.approx(4.0 * 0.8, abs=2 / 60)
    assert fleet["alice"]["idle_hold_hours"] == pytest.approx(2.0, abs=2 / 60)
    assert fleet["alice"]["peak_gpus"] == 1
    assert fleet["carol"]["gpu_hours_held"] == pytest.approx(12.0, abs=2 / 60)
    assert fleet["carol"]["memory_gib_hours"] == pytest.approx(12.0 * 8, abs=8 * 2 / 60)
    hosts = _by(_gputui("usage", "--prometheus", prom.url, "--since", since, "--until", until, "--by", "host"))
    # host a: GPU 0 02-06, GPU 1 10-13 (bob and alice's notebook share it 11-12: held once)
    assert hosts["a"]["gpu_hours_held"] == pytest.approx(7.0, abs=4 / 60)
    assert hosts["a"]["peak_gpus"] == 1
    assert hosts["b"]["gpu_hours_held"] == pytest.approx(12.0, abs=2 / 60)

    # host a alone, both backends, every figure
    local = _by(_gputui("usage", "--db", str(db), "--since", since, "--until", until, "--by", "user"))
    fleet_a = {k: v for k, v in fleet.items() if k != "carol"}
    assert set(local) == set(fleet_a) == {"alice", "bob"}
    for user in local:
        for column in ("gpu_hours_held", "busy_gpu_hours", "idle_hold_hours"):
            assert local[user][column] == pytest.approx(fleet_a[user][column], abs=2 / 60), (user, column)
        assert local[user]["memory_gib_hours"] == pytest.approx(fleet_a[user]["memory_gib_hours"], abs=4 * 2 / 60)
        assert local[user]["peak_gpus"] == fleet_a[user]["peak_gpus"]


def test_who_from_prometheus_and_sqlite_agree(backfilled):
    prom, db, t0 = backfilled
    at = f"{t0 + 11.5 * 3600:.0f}"
    fleet = _gputui("who", "--prometheus", prom.url, "--at", at, "--gpu", "1")["holders"]
    local = _gputui("who", "--db", str(db), "--at", at, "--gpu", "1")["holders"]
    for rows in (fleet, local):
        assert [(h["user"], h["pid"], h["container"], h["exe"]) for h in rows] == [
            ("bob", 202, None, "python"), ("alice", 203, "notebook", "python")]
    for f, s in zip(fleet, local, strict=True):
        assert abs(_ts(f["from"]) - _ts(s["from"])) <= 60
        assert abs(_ts(f["to"]) - _ts(s["to"])) <= 60
        assert f["peak_memory"] == s["peak_memory"]
    assert abs(_ts(local[0]["from"]) - (t0 + 10 * 3600)) <= SCRAPE
    assert abs(_ts(local[0]["to"]) - (t0 + 12 * 3600)) <= SCRAPE
    everyone = _gputui("who", "--prometheus", prom.url, "--since", f"{t0:.0f}", "--until", f"{t0 + 86400:.0f}")
    assert [(h["host"], h["user"]) for h in everyone["holders"]] == [
        ("a", "alice"), ("b", "carol"), ("a", "bob"), ("a", "alice")]


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_three_range_queries_whatever_the_fleet(backfilled):
    from gputui.core.fleet import history
    from gputui.core.fleet.prom import PromClient

    prom, _db, t0 = backfilled
    client = PromClient(prom.url, timeout=30)
    try:
        rows, total = history.usage(client, t0, t0 + 86400, "host")
        assert client.queries == 3 and {u.key for u in rows} == {"a", "b"} and total.peak_gpus == 2
        assert history.step_for(t0, t0 + 86400) == 60 and history.step_for(t0, t0 + 30 * 86400) == 300
        holders = history.holdings(client, t0, t0 + 86400)
        assert client.queries == 6 and len(holders) == 4
    finally:
        client.close()
