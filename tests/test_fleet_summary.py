"""The live fleet screen's refresh against a real Prometheus: the host list from per-host aggregates
(no GPU's series over the wire), the same figures as a full read, every series of the open host,
the processes' names only while the `/` filter is in use, and never more than eight queries."""

from __future__ import annotations

import json

import pytest

from gputui.core import metric_names
from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import FleetReader
from gputui.core.fleet.summary import detail_query, read_summary
from tests.fleet_exposition import GIB, Card, Host, Proc, StaticTarget, dcgm_text, gputui_text
from tests.fleet_scenarios import HOSTS

#: impossible values: 250 % utilization, 2 EiB used, a 5,000 °C card; one lost-free busy card
ODD = Host("odd-node", [Card(0, "GPU-o0", 2.5, 2 * GIB, temp=5000),
                        Card(1, "GPU-o1", 0.3, 2**61),
                        Card(2, "GPU-o2", 0.0, GIB, procs=[Proc(77, "carol", "ffmpeg", GIB, "encode-job")])])


GPU_METRICS = {m.name for m in (metric_names.GPU_INFO, metric_names.GPU_UTILIZATION, metric_names.GPU_MEMORY_USED,
                                 metric_names.GPU_MEMORY_TOTAL, metric_names.GPU_TEMPERATURE, metric_names.GPU_LOST,
                                 metric_names.PROCESS_GPU_MEMORY)}


class CountingClient(PromClient):
    """Counts the series each answer brings, and those that carry a GPU index (one GPU's series)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.series = 0
        self.gpu_series = 0

    def query(self, promql, at=None):
        out = super().query(promql, at)
        self.series += len(out)
        self.gpu_series += sum(1 for s in out if s.labels.get("__name__") in GPU_METRICS)
        return out


@pytest.fixture
def fleet(prometheus_factory):
    targets = [StaticTarget(gputui_text(h)) for h in (*HOSTS, ODD)] + [StaticTarget(dcgm_text())]
    try:
        prom = prometheus_factory([t.address for t in targets], scrape_interval="2s")
        prom.wait_for("up == 1", lambda r: len(r) == 5)
        prom.wait_for("gputui_host_info", lambda r: len(r) == 4)
        yield prom
    finally:
        for t in targets:
            t.stop()


def _listed(h):
    return (h.up, h.source, h.gpu_count, h.busy_gpus, h.lost_gpus, h.memory_used, h.memory_total, h.hottest,
            h.note, bool(h.problems), h.alerts, h.containers_with_findings, h.imbalance_flagged, h.stale_gpu_memory)


def test_the_host_list_reads_aggregates_not_gpus_and_shows_what_a_full_read_shows(fleet):
    full = FleetReader(PromClient(fleet.url)).read()
    client = CountingClient(fleet.url)
    live = FleetReader(client)
    live.summary, live.parallel = read_summary, False
    snap = live.read()
    by_key = {h.key: h for h in full.hosts}
    assert [h.key for h in snap.hosts] == [h.key for h in full.hosts]
    for h in snap.hosts:
        if h.host != "odd-node":
            assert _listed(h) == _listed(by_key[h.key]), h.host
    odd = next(h for h in snap.hosts if h.host == "odd-node")
    # a sum or maximum with an impossible value in it is N/A, the host flagged (its screen says which
    # GPU); an impossible utilization is not counted busy
    assert (odd.gpu_count, odd.busy_gpus, odd.memory_used, odd.memory_total, odd.hottest) == (3, 2, None, 240 * GIB,
                                                                                              None)
    assert any("impossible" in p for p in odd.problems) and by_key[odd.key].busy_gpus == 2
    # what crossed the wire: no gputui GPU's own series (the dcgm host's two GPUs are slimmed series)
    gputui_gpus = sum(len(h.gpus) for h in full.hosts if h.source == "gputui")
    assert client.gpu_series == 0 and client.series < 5 * gputui_gpus
    assert snap.queries == client.queries <= 8

    # the open host: every series of it, as the full read has it; the others stay aggregates
    one = next(h for h in full.hosts if h.host == "gpu-node-01")
    live.detail = one.key
    again = live.read()
    assert again.host(one.key).gpus == one.gpus and again.host(one.key).summary is None
    assert all(h.summary is not None for h in again.hosts if h.source == "gputui" and h.key != one.key)
    # the filter's words: only while it is in use (processes are read then)
    assert not any("carol" in (h.summary.words if h.summary else ()) for h in again.hosts)
    live.words = True
    worded = live.read()
    assert "carol" in next(h for h in worded.hosts if h.host == "odd-node").summary.words
    assert "NVIDIA H100 80GB HBM3" in next(h for h in worded.hosts if h.host == "gpu-node-02").summary.words
    assert worded.queries <= 8
    live.close()


@pytest.mark.unit
def test_a_host_whose_labels_cannot_be_put_in_a_matcher_gets_no_detail_query():
    assert detail_query(("gputui", "a:1")) is not None
    assert '\\"' in detail_query(("gputui", 'a"} or up{x="'))  # quoted: one label value, not PromQL
    assert detail_query(("gputui", "a\x1b:1")) is None
    assert detail_query(("gputui", "a" * 300)) is None
    assert detail_query(("gputui", "")) is None


@pytest.mark.unit
def test_fleet_json_is_one_document_with_one_host_a_line():
    from gputui.commands.fleet import document
    from gputui.core.fleet.queries import build_fleet
    from tests.test_fleet_model import NOW, gputui_host, up

    samples = gputui_host("a:1", "node-a") + gputui_host("b:1", "node-b")
    doc = build_fleet("http://p", NOW, [up("a:1"), up("b:1")], [], samples, [], []).to_json()
    text = document(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    for host in doc["hosts"]:  # a host's whole record on one line: grep finds it
        line = next(x for x in lines if f'"host": "{host["host"]}"' in x)
        assert json.loads(line.rstrip(",")) == host
    assert document({**doc, "hosts": []}).count("\n") == 4 and json.loads(document({**doc, "hosts": []}))["hosts"] == []


async def test_the_host_list_scrolls_half_a_page_when_the_cursor_leaves_it():
    from textual.widgets import DataTable

    from gputui.core.config import Settings
    from gputui.core.fleet.queries import build_fleet
    from gputui.ui.fleet_app import make_fleet_app
    from tests.test_fleet_model import NOW, gputui_host, up

    names = [f"node-{i:03d}" for i in range(120)]
    samples = [x for i, n in enumerate(names) for x in gputui_host(f"h{i}:1", n)]
    snap = build_fleet("http://p", NOW, [up(f"h{i}:1") for i in range(len(names))], [], samples, [], [])

    class Fixed(FleetReader):
        def read(self):
            return snap

    app = make_fleet_app(Fixed(PromClient("http://127.0.0.1:9")), Settings(interval=60.0))
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#fleet-hosts", DataTable)
        for _ in range(200):
            if table.row_count == len(names):
                break
            await pilot.pause(0.05)
        view = table.scrollable_content_region.height - 1  # the heading stays
        for _ in range(view - 1):
            await pilot.press("down")
        await pilot.pause()
        assert table.scroll_y == 0 and table.cursor_row == view - 1  # the last visible row
        await pilot.press("down")  # off the bottom: half a page on, not one row
        await pilot.pause()
        assert table.cursor_row == view and table.scroll_y == view // 2 + 1
        for _ in range(view // 2 - 1):  # the next keys only move the cursor
            await pilot.press("down")
        await pilot.pause()
        assert table.scroll_y == view // 2 + 1
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == len(names) - 1 and table.scroll_y == table.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_y == 0


class CannedClient:
    """Answers each query from ``answers`` (by which query it is); records the queries sent."""

    url = "http://p"

    def __init__(self, answers) -> None:
        self.answers = answers
        self.sent: list[str] = []

    @property
    def queries(self) -> int:
        return len(self.sent)

    def query(self, promql, at=None):
        self.sent.append(promql)
        return self.answers(promql)

    def close(self) -> None:
        pass


def listing(names, scraped, up=None):
    """Answers to the live refresh's listing queries (:mod:`gputui.core.fleet.scrapes`) as Prometheus
    gives them for targets ``names`` (instance ``NAME:9835``) last scraped at ``scraped[name]``, ``up``
    1 unless ``up`` says otherwise."""
    import re

    from gputui.core.fleet.prom import Sample
    from gputui.core.fleet.scrapes import PART, full_query

    up = up or {}

    def k(n):
        return {"job": "gputui", "instance": f"{n}:9835"}

    def answers(promql):
        if promql == full_query():
            since, base = None, None
        else:
            since = float(re.search(r"timestamp\(up\) > ([0-9.]+)", promql).group(1))
            base = float(re.search(r"sum\(timestamp\(up\) - ([0-9.]+)\)", promql).group(1))
        new = [n for n in names if since is None or scraped[n] > since]
        rows = [Sample({**k(n), PART: "up"}, scraped[n]) for n in new]
        rows += [Sample({"__name__": "up", **k(n), PART: "down"}, up[n]) for n in names if up.get(n, 1.0) != 1]
        rows += [Sample({**k(n), "hostname": n, "gputui_source": "gputui"}, scraped[n]) for n in new
                 if up.get(n, 1.0) == 1]
        if base is not None:
            live = [n for n in names if up.get(n, 1.0) == 1]
            rows += [Sample({PART: "up_count"}, len(names)), Sample({PART: "live_count"}, len(live)),
                     Sample({PART: "up_sum"}, sum(scraped[n] - base for n in names)),
                     Sample({PART: "live_sum"}, sum(scraped[n] - base for n in live))]
        return rows
    return answers, k


@pytest.mark.unit
def test_a_refresh_asks_again_only_for_the_hosts_scraped_since_the_last():
    from gputui.core.fleet import summary
    from gputui.core.fleet.prom import Sample
    from gputui.core.fleet.queries import Q_STATE

    names = [f"node-{i}" for i in range(8)]
    scraped = {n: 100.0 for n in names}
    used = {n: GIB for n in names}
    listed, k = listing(names, scraped)

    def answers(promql):
        plain = promql.replace("\\\\", "")  # the instances as a regex, escaped, in a PromQL string
        only = [n for n in names if f"{n}:9835" in plain] if " and on (job, instance) " in promql else names
        if promql.startswith(summary.Q_SUMMARY_STATIC):
            return [Sample({**k(n), "gputui_field": "name", "name": "H100"}, 2.0) for n in names] + \
                   [Sample({**k(n), "gputui_field": "total", "name": "H100"}, 160.0 * GIB) for n in names]
        if summary.Q_SUMMARY in promql:
            return [Sample({**k(n), "gputui_field": "used"}, used[n]) for n in only]
        if Q_STATE in promql:
            return [Sample({"__name__": "gputui_imbalance_flagged", **k(n)}, 0.0) for n in only]
        return listed(promql)

    client = CannedClient(answers)
    clock = [101.0]
    reader = FleetReader(client, clock=lambda: clock[0])  # type: ignore[arg-type]
    reader.summary, reader.parallel = summary.read_summary, False
    first = reader.read()
    # every target listed, the summaries, the states, the GPU models: four queries
    assert [h.memory_used for h in first.hosts] == [GIB] * 8 and client.queries == first.queries == 4
    # nothing scraped since: one query (what is newer, and the counts), the same hosts
    clock[0] = 103.0
    second = reader.read()
    assert second.queries == 1 and all(a is b for a, b in zip(first.hosts, second.hosts, strict=True))
    # node-3 scraped again, with more memory used: asked for it alone; the others stay as they were
    scraped["node-3"], used["node-3"], clock[0] = 104.0, 3 * GIB, 105.0
    client.sent.clear()
    third = reader.read()
    assert third.queries == 3
    assert all("node-3:9835" in q.replace("\\\\", "") and "node-4" not in q for q in client.sent[1:])
    assert [h.memory_used for h in third.hosts] == [GIB] * 3 + [3 * GIB] + [GIB] * 4
    assert all(a is b for a, b in zip(first.hosts, third.hosts, strict=True) if a.host != "node-3")
    # node-6 scraped again with more memory used, but Prometheus fails the summary query: the next
    # refresh asks for node-6 again, though no newer sample of it came since
    from gputui.core.fleet.prom import QueryFailed

    failing = [True]

    def flaky(promql):
        if failing[0] and summary.Q_SUMMARY in promql and "node-6" in promql.replace(chr(92), ""):
            failing[0] = False
            raise QueryFailed("Prometheus refused a query (execution): too many samples.")
        return answers(promql)

    client.answers = flaky
    scraped["node-6"], used["node-6"], clock[0] = 105.5, 5 * GIB, 106.0
    with pytest.raises(QueryFailed):
        reader.read()
    clock[0] = 106.5
    assert reader.read().host(("gputui", "node-6:9835")).memory_used == 5 * GIB
    used["node-6"], scraped["node-6"] = GIB, 106.2
    clock[0] = 106.8
    third = reader.read()
    # node-5 scraped again with the same figures: its host stays the same object
    scraped["node-5"], clock[0] = 106.0, 107.0
    fourth = reader.read()
    assert all(a is b for a, b in zip(third.hosts, fourth.hosts, strict=True))
    # most hosts scraped again: one query for all, as the first
    for n in names[:6]:
        scraped[n] = 108.0
    clock[0] = 109.0
    client.sent.clear()
    reader.read()
    assert client.sent[1:] == [summary.Q_SUMMARY, Q_STATE]
