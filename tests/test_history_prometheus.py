"""``who``/``usage --prometheus`` against a real Prometheus whose TSDB was backfilled with a
synthetic day of ``gputui_*`` series (``promtool tsdb create-blocks-from openmetrics``), and the
same day fed to the SQLite recorder: both backends must give the expected numbers, and the same
numbers, to within the sampling step."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
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


RULES = REPO / "contrib" / "prometheus" / "gputui-history-rules.yml"
#: the recording rules were installed an hour into the day
RULES_FROM = 3600


def _rule_levels() -> tuple[str, str]:
    """The shipped rules split in two files: those over raw series, then those over recorded ones.
    promtool backfills a rule from what the server already has, so the second level needs the first
    in the server first."""
    text = RULES.read_text()
    rules = re.findall(r"^      - record: (\S+)\n        expr: (.+)$", text, re.M)
    assert len(rules) == 20
    head = "groups:\n  - name: gputui-history\n    interval: 1m\n    rules:\n"
    levels = ([], [])
    for name, expr in rules:
        levels["gputui:" in expr].append(f"      - record: {name}\n        expr: {expr}\n")
    return head + "".join(levels[0]), head + "".join(levels[1])


def _backfill_rules(tool: str, url: str, rules: Path, out: Path, t0: float, into: Path) -> None:
    """The rules file goes by its bare name, from its folder: a group is evaluated at an offset in the
    minute hashed from its name and the file's path as given, and where that offset falls in the
    minute's last second promtool skips one evaluation per two-hour block (it ends each block's range
    query at the block's last whole second). Under a temporary folder's path that was 1 run in 30,
    six minutes short over carol's twelve hours; ``first.yml`` and ``second.yml`` sit at 6.7 s and 15.0 s."""
    res = subprocess.run([tool, "tsdb", "create-blocks-from", "rules", f"--start={t0 + RULES_FROM:.0f}",
                          f"--end={t0 + 86400:.0f}", f"--url={url}", f"--output-dir={out}", rules.name],
                         capture_output=True, text=True, timeout=600, cwd=rules.parent)
    assert res.returncode == 0, res.stderr + res.stdout
    for block in out.iterdir():
        if (block / "meta.json").exists():
            shutil.move(str(block), into / block.name)


@pytest.fixture(scope="module")
def recorded(backfilled, tmp_path_factory):
    """A second Prometheus holding the same day's raw series and, from an hour into the day, what
    the shipped recording rules record from them (``promtool tsdb create-blocks-from rules``)."""
    raw_prom, _db, t0 = backfilled
    tool = promtool()
    tmp = tmp_path_factory.mktemp("history-recorded")
    (tmp / "p").mkdir()
    source = tmp / "day.om"
    source.write_text(_openmetrics(t0))
    res = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp / "p")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    first, second = _rule_levels()
    (tmp / "first.yml").write_text(first)
    (tmp / "second.yml").write_text(second)
    _backfill_rules(tool, raw_prom.url, tmp / "first.yml", tmp / "r1", t0, tmp / "p")
    prom = Prometheus([], tmp).start()
    try:
        _backfill_rules(tool, prom.url, tmp / "second.yml", tmp / "r2", t0, tmp / "p")
    finally:
        prom.stop()
    prom = Prometheus([], tmp).start()
    yield prom, raw_prom, t0
    prom.stop()


def test_usage_reads_the_recording_rules_series_where_they_cover_the_period(recorded):
    """With the shipped recording rules' series in Prometheus, `usage --prometheus` sums them (one
    query) and says so; the figures are the raw series' to within a minute per hold. A period the
    rules do not cover from its start is read from the raw series, and says why."""
    from gputui.core import metric_names as mn
    from gputui.core.fleet.prom import PromClient
    from gputui.core.recorded_usage import recorded_usage

    recorded_names = set(re.findall(r"record: (\S+)", RULES.read_text()))
    for r in (mn.RECORDED_BY_USER, mn.RECORDED_BY_CONTAINER, mn.RECORDED_BY_IMAGE, mn.RECORDED_BY_GPU):
        assert {r.held, r.busy, r.idle, r.memory, mn.RECORDED_GPU_UTILIZATION} <= recorded_names
    prom, raw_prom, t0 = recorded
    since, until = f"{t0 + RULES_FROM + 300:.0f}", f"{t0 + 86400:.0f}"
    for by in ("user", "gpu", "host"):
        fast = _gputui("usage", "--prometheus", prom.url, "--since", since, "--until", until, "--by", by)
        slow = _gputui("usage", "--prometheus", raw_prom.url, "--since", since, "--until", until, "--by", by)
        assert (fast["series"], slow["series"]) == ("recorded", "raw"), (fast.get("note"), slow.get("note"))
        assert "no series of the recording rules" in slow["note"]
        fast_rows, slow_rows = _by(fast), _by(slow)
        assert set(fast_rows) == set(slow_rows), by
        holds = {"user": {"alice": 2, "bob": 1, "carol": 1}, "gpu": {"0": 2, "1": 2}, "host": {"a": 3, "b": 1}}[by]
        for key, row in slow_rows.items():
            tolerance = holds[key] * 1.5 / 60  # a minute per hold, and half a minute for the ends
            for column in ("gpu_hours_held", "busy_gpu_hours", "idle_hold_hours"):
                assert fast_rows[key][column] == pytest.approx(row[column], abs=tolerance), (by, key, column)
            assert fast_rows[key]["memory_gib_hours"] == pytest.approx(row["memory_gib_hours"], abs=8 * tolerance)
            assert fast_rows[key]["peak_gpus"] == row["peak_gpus"], (by, key)
        assert fast["total"]["peak_gpus"] == slow["total"]["peak_gpus"] == 2
    assert _by(fast)["a"]["gpu_hours_held"] == pytest.approx(7.0, abs=4 / 60)
    text = subprocess.run([sys.executable, "-m", "gputui", "usage", "--prometheus", prom.url, "--since", since,
                           "--until", until], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert text.returncode == 0 and text.stdout.splitlines()[-1] == (
        "Read from the recording rules' series (contrib/prometheus/gputui-history-rules.yml).")
    # one query instead of three range queries
    client = PromClient(prom.url, timeout=30)
    try:
        assert not isinstance(recorded_usage(client, float(since), float(until), "user"), str)
        assert client.queries == 1
    finally:
        client.close()
    # from the day's start the rules were not installed yet: the raw series answer, and the note says why
    whole = _gputui("usage", "--prometheus", prom.url, "--since", f"{t0:.0f}", "--until", until)
    assert whole["series"] == "raw" and whole["note"].endswith("begin after the period's start")
    assert _by(whole)["carol"]["gpu_hours_held"] == pytest.approx(12.0, abs=2 / 60)
    # and per container the rules leave out host processes: raw, saying so
    containers = _gputui("usage", "--prometheus", prom.url, "--since", since, "--until", until, "--by", "container")
    assert containers["series"] == "raw" and "outside containers" in containers["note"]
