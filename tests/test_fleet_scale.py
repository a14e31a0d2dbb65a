"""The fleet's hosts query at scale, against a real Prometheus whose TSDB was backfilled with an
hour of a small fleet (``promtool tsdb create-blocks-from openmetrics``): hosts that answer, one
down for ten minutes (gputui's exporter), one dcgm-exporter host down for twelve, one gone for more
than an hour.

The last-seen time of a down host is the time of its newest sample, to the second; a host gone for
more than an hour is not listed. And the subquery that finds that time (240 steps a series) runs
over the down hosts only: over a 2,000-host fleet it was most of a refresh's time
(``benchmarks/fleet_bench.py --hosts 2000``).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from gputui.core import metric_names
from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import FLEET_QUERIES, FleetReader
from tests.fixtures.prometheus import backfilled

pytestmark = pytest.mark.functional

STEP = 15
LIVE = [f"gpu-node-{i:02d}" for i in range(8)]
DOWN, DCGM_DOWN, GONE = "gpu-node-down", "dcgm-node-down", "gpu-node-gone"
SUBQUERY = re.compile(r"\[\w+:\w+\]")


def _times(now: int) -> range:
    start = now - 75 * 60
    return range(start - start % STEP + 7, now + 600, STEP)  # off the step grid: to the second


def _openmetrics(now: int) -> str:
    """75 minutes up to now and 10 minutes ahead (so the live hosts stay live however slowly the
    test starts), with the DOWN host's last sample 600 s before ``now`` and GONE's 65 min before."""
    times = _times(now)
    last = {DOWN: now - 600, DCGM_DOWN: now - 720, GONE: now - 65 * 60}
    families: dict[str, list[str]] = {}

    def add(name: str, host: str, labels: str, value: object) -> None:
        inst = f'job="gputui",instance="{host}:9835"'
        lines = families.setdefault(name, [])
        for t in times:
            if t > last.get(host, t):
                if name == "up":
                    lines.append(f"up{{{inst}}} 0 {t}")
                continue
            lines.append(f"{name}{{{inst}{labels}}} {value} {t}")

    for host in [*LIVE, DOWN, DCGM_DOWN, GONE]:
        add("up", host, "", 1)
        if host == DCGM_DOWN:
            for g in range(2):
                add(metric_names.DCGM_FB_USED.name, host,
                    f',gpu="{g}",UUID="GPU-d{g}",Hostname="{host}",modelName="NVIDIA A100"', 1000)
            continue
        add(metric_names.HOST_INFO.name, host, f',hostname="{host}"', 1)
        for g in range(2):
            uuid = f',gpu="{g}",uuid="GPU-{host}-{g}"'
            add(metric_names.GPU_INFO.name, host, uuid + ',name="NVIDIA H100"', 1)
            add(metric_names.GPU_UTILIZATION.name, host, uuid, 0.5)
            add(metric_names.GPU_MEMORY_USED.name, host, uuid, 2**30)
            add(metric_names.GPU_MEMORY_TOTAL.name, host, uuid, 2**34)
    out = []
    for name, lines in families.items():
        out += [f"# TYPE {name} gauge", *lines]
    return "\n".join([*out, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    now = int(time.time())
    prom = backfilled(_openmetrics(now), tmp_path_factory.mktemp("fleet-scale"))
    yield prom, now
    prom.stop()


def test_down_hosts_keep_their_last_seen_time_and_only_they_cost_a_subquery(fleet):
    prom, now = fleet
    client = PromClient(prom.url)
    sent: list[str] = []
    query = client.query
    client.query = lambda promql, at=None: sent.append(promql) or query(promql, at)  # type: ignore[method-assign]
    reader = FleetReader(client)
    try:
        snap = reader.read()
    finally:
        reader.close()
    hosts = {h.host: h for h in snap.hosts}
    assert sorted(hosts) == sorted([*LIVE, DOWN, DCGM_DOWN])  # gone for more than an hour: not listed
    assert all(hosts[h].up and len(hosts[h].gpus) == 2 for h in LIVE)
    assert hosts[LIVE[0]].gpus[1].uuid == f"GPU-{LIVE[0]}-1" and hosts[LIVE[0]].gpus[0].name == "NVIDIA H100"
    for host, ago in ((DOWN, 600), (DCGM_DOWN, 720)):
        assert not hosts[host].up and hosts[host].gpus == ()
        seen = hosts[host].last_seen
        newest = max(t for t in _times(now) if t <= now - ago)  # its newest sample
        assert seen is not None and seen.timestamp() == newest, (host, seen)
    # a fixed number of queries, one more for the down hosts' times ...
    assert len(sent) == snap.queries == len(FLEET_QUERIES) + 1 <= 8
    # ... and no query walks every host's hour step by step: the subquery names the down hosts only
    subqueries = [q for q in sent if SUBQUERY.search(q)]
    assert subqueries, sent
    for q in subqueries:
        patterns = [json.loads(p) for p in re.findall(r'instance=~("(?:[^"\\]|\\.)*")', q)]
        named = {re.sub(r"\\(.)", r"\1", i) for p in patterns for i in p.split("|")}
        assert patterns and named <= {f"{DOWN}:9835", f"{DCGM_DOWN}:9835"}, q
