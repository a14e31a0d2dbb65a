"""``fleet --json``'s one-shot queries against a real Prometheus (a backfilled TSDB): the document is
the one the screen's older GPU queries (``Q_GPU_STATIC`` + ``Q_GPU_LIVE``) make of the same data, for
every kind of host — gputui's exporter, dcgm-exporter, a gputui exporter with ``--dcgm-names``, a
lost GPU (alone, and beside value series), impossible and NaN values, GPU labels that are not
indexes, a GPU without info, a host with no host info, two targets with one hostname, a host down,
a target that is no GPU exporter (so the join reads host info for hosts it does not know) — with
the ``up`` series and without (federated data); and each GPU series is selected once.
"""

from __future__ import annotations

import time

import pytest

from gputui.core import metric_names as mn
from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import (
    FLEET_QUERIES,
    Q_GPU_LIVE,
    Q_GPU_STATIC,
    Q_HOSTS,
    Q_PROCESSES,
    Q_STATE,
    Q_UP,
    FleetReader,
    build_fleet,
    gone_query,
    one_shot_gpus,
)
from tests.fixtures.prometheus import backfilled

pytestmark = pytest.mark.functional

STEP = 15
GIB = 2**30


def _series(now: int) -> dict[str, list[tuple[str, str, float, int | None]]]:
    """metric -> (instance, label text, value, last sample time or None for up to now)."""
    down = now - 600
    out: dict[str, list[tuple[str, str, float, int | None]]] = {}

    def add(metric: str, instance: str, labels: str, value: float, until: int | None = None) -> None:
        out.setdefault(metric, []).append((instance, labels, value, until))

    def gputui_host(instance: str, hostname: str | None, gpus: list[tuple[str, dict[str, float]]],
                    until: int | None = None, info: bool = True) -> None:
        add("up", instance, "", 1, until)
        if hostname is not None:
            add(mn.HOST_INFO.name, instance, f',hostname="{hostname}"', 1, until)
        for gpu, values in gpus:
            uuid = f',gpu="{gpu}",uuid="GPU-{instance}-{gpu}"'
            if info and "noinfo" not in values:
                add(mn.GPU_INFO.name, instance, uuid + ',name="NVIDIA H100"', 1, until)
            for metric, value in values.items():
                if metric != "noinfo":
                    add(metric, instance, uuid, value, until)

    def card(util: float = 0.5, used: float = 8 * GIB, total: float = 80 * GIB, temp: float = 50,
             lost: float = 0) -> dict[str, float]:
        return {mn.GPU_UTILIZATION.name: util, mn.GPU_MEMORY_USED.name: used, mn.GPU_MEMORY_TOTAL.name: total,
                mn.GPU_TEMPERATURE.name: temp, mn.GPU_LOST.name: lost}

    gputui_host("a:9835", "node-a", [("0", card()), ("1", card(util=0.9, temp=70))])
    # a lost GPU (no values, as the exporter sends it) and one lost beside its value series
    gputui_host("b:9835", "node-b", [("0", {mn.GPU_LOST.name: 1}), ("1", card(lost=1))])
    # impossible values, NaN, labels that are not GPU indexes, "0" and "00", a GPU without info
    gputui_host("c:9835", "node-c", [("0", card(util=5.0, used=90 * GIB, temp=5000)),
                                      ("1", card(util=float("nan"))), ("²", card()), ("00", card(util=0.1)),
                                      ("2", card() | {"noinfo": 1})])
    gputui_host("d1:9835", "twin", [("0", card())])
    gputui_host("d2:9835", "twin", [("0", card())])
    gputui_host("nohostinfo:9835", None, [("0", card())])
    gputui_host("down:9835", "node-down", [("0", card())], until=down)
    # dcgm-exporter, and a gputui exporter that also writes DCGM names
    add("up", "dcgm:9400", "", 1)
    gputui_host("both:9835", "node-both", [("0", card())])
    for instance, host in (("dcgm:9400", "node-dcgm"), ("both:9835", "node-both")):
        for gpu in ("0", "1"):
            labels = f',gpu="{gpu}",UUID="GPU-{instance}-{gpu}",Hostname="{host}",modelName="NVIDIA A100"'
            for metric, value in ((mn.DCGM_GPU_UTIL.name, 40), (mn.DCGM_FB_USED.name, 1000),
                                  (mn.DCGM_FB_FREE.name, 39000), (mn.DCGM_GPU_TEMP.name, 45)):
                add(metric, instance, labels, value)
    add("up", "node-exporter:9100", "", 1)  # not a GPU exporter: up, and nothing else
    add(mn.PROCESS_GPU_MEMORY.name, "a:9835", ',gpu="1",uuid="GPU-a:9835-1",pid="4242",user="alice",exe="python3"',
        4 * GIB)
    add(mn.IMBALANCE_FLAGGED.name, "a:9835", "", 1)
    return out


def _openmetrics(now: int) -> str:
    times = range(now - 1200 - now % STEP, now + 600, STEP)
    lines = []
    for metric, series in _series(now).items():
        lines.append(f"# TYPE {metric} gauge")
        for instance, labels, value, until in series:
            for t in times:
                if until is not None and t > until:
                    if metric == "up":
                        lines.append(f'up{{job="gputui",instance="{instance}"}} 0 {t}')
                    continue
                text = "NaN" if value != value else repr(value)
                lines.append(f'{metric}{{job="gputui",instance="{instance}"{labels}}} {text} {t}')
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    now = int(time.time())
    prom = backfilled(_openmetrics(now), tmp_path_factory.mktemp("fleet-one-shot"))
    yield prom, now
    prom.stop()


def _old_way(client: PromClient, at: float, with_up: bool = True) -> dict:
    """The snapshot the one-shot made before: the screen's GPU queries, their answers as they come."""
    up, seen, static, live, procs, state = (client.query(q, at) for q in
                                            (Q_UP, Q_HOSTS, Q_GPU_STATIC, Q_GPU_LIVE, Q_PROCESSES, Q_STATE))
    gone = gone_query(seen)
    seen = seen + (client.query(gone, at) if gone else [])
    return build_fleet(client.url, at, up if with_up else [], seen, static + live, procs, state).to_json()


def test_the_one_shot_document_is_the_one_the_older_queries_made(fleet):
    prom, now = fleet
    at = float(now - 7)
    client = PromClient(prom.url, timeout=30)
    reader = FleetReader(client, clock=lambda: at)
    try:
        snap = reader.read()
        new = snap.to_json()
        old = _old_way(client, at)
    finally:
        reader.close()
    assert new == old
    hosts = {h["host"]: h for h in new["hosts"]}
    # the data is what the comparison is about: every kind of host is there
    assert hosts["node-a"]["gpus"][1]["utilization_gpu"] == 90 and hosts["node-a"]["gpus"][1]["processes"]
    assert [g["lost"] for g in hosts["node-b"]["gpus"]] == [True, False]  # beside values: as before, not lost
    assert hosts["node-c"]["problems"] and hosts["node-dcgm"]["source"] == "dcgm"
    assert not hosts["node-down"]["up"] and hosts["node-down"]["last_seen"]
    assert "nohostinfo:9835" in hosts and hosts["node-both"]["source"] == "gputui"
    assert any("twin" in w for w in new["warnings"])


def test_without_up_series_too(fleet):
    """Federated data has no ``up``: the join then marks every host with host info seen now."""
    prom, now = fleet
    at = float(now - 7)
    client = PromClient(prom.url, timeout=30)
    try:
        up, seen, info, memory, rest, procs, state = (client.query(q, at) for q in FLEET_QUERIES)
        gpus = one_shot_gpus(seen, info, memory + rest)
        gone = gone_query(seen)
        seen = seen + (client.query(gone, at) if gone else [])
        new = build_fleet(client.url, at, [], seen, gpus, procs, state).to_json()
        assert new == _old_way(client, at, with_up=False)
    finally:
        client.close()


def test_each_gpu_series_is_selected_once(fleet):
    """The GPU queries of ``fleet --json`` answer each GPU series once and no host info (the hosts
    query carries it): over 2,000 hosts each series selected costs Prometheus ~13 µs."""
    prom, now = fleet
    client = PromClient(prom.url, timeout=30)
    gpu_queries = [q for q in FLEET_QUERIES if q not in (Q_UP, Q_HOSTS, Q_PROCESSES, Q_STATE)]
    read = "|".join(m.name for m in (mn.GPU_INFO, mn.GPU_UTILIZATION, mn.GPU_MEMORY_USED, mn.GPU_TEMPERATURE,
                                     mn.GPU_MEMORY_TOTAL, mn.DCGM_GPU_UTIL, mn.DCGM_FB_USED, mn.DCGM_FB_FREE,
                                     mn.DCGM_GPU_TEMP))
    try:
        answers = [client.query(q, now - 7) for q in gpu_queries]
        names = [s.labels.get("__name__", mn.GPU_INFO.name) for answer in answers for s in answer]
        stored = len(client.query(f'{{__name__=~"{read}"}}', now - 7)) + len(client.query(f"{mn.GPU_LOST.name} == 1",
                                                                                         now - 7))
    finally:
        client.close()
    assert mn.HOST_INFO.name not in names
    assert len(names) == stored

