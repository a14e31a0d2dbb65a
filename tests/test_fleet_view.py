"""The fleet's cells and sorts (issue 28, point 5): lost GPUs apart from idle ones, "procs", a host
list that keeps its order under the State sort, Home/End, and no "c Copy" with nothing to copy."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from gputui.core.fleet.model import FleetGpu, FleetHost, FleetProcess, FleetSnapshot
from gputui.ui.screens.fleet import HostTable
from gputui.ui.screens.fleet_host import CommandScreen, card_text
from gputui.ui.screens.fleet_view import host_cells, sort_key, summary

NOW = 1_800_000_000.0
GIB = 1024**3


def _gpu(index: int, util: int = 0, lost: bool = False, procs: int = 0) -> FleetGpu:
    processes = tuple(FleetProcess(pid=100 + n, user="alice", exe="python", gpu_memory=GIB, container=None)
                      for n in range(procs))
    if lost:
        return FleetGpu(index=index, uuid=f"GPU-{index}", name="H100", lost=True, processes=processes)
    return FleetGpu(index=index, uuid=f"GPU-{index}", name="H100", utilization_gpu=util, memory_used=GIB,
                    memory_total=80 * GIB, temperature=50, processes=processes)


def _host(name: str, gpus=(), seen: float = NOW, up: bool = True, **kw) -> FleetHost:
    return FleetHost(host=name, instance=f"{name}:9835", job="gpu", up=up,
                     last_seen=datetime.fromtimestamp(seen, tz=timezone.utc), source="gputui", gpus=tuple(gpus), **kw)


def test_a_lost_gpu_is_counted_apart_never_as_idle():
    host = _host("n1", [_gpu(0, util=90, procs=1), _gpu(1), _gpu(2, lost=True)])
    assert (host.busy_gpus, host.lost_gpus) == (1, 1)
    gpus_cell = host_cells(host, NOW)[2].plain
    assert gpus_cell == "1/1 +1 lost"  # busy/idle: the lost GPU is neither
    snap = FleetSnapshot("http://p:9090", datetime.fromtimestamp(NOW, tz=timezone.utc), (host,))
    text = summary(snap, 1, "").plain
    assert "1/2 GPUs busy · 1 lost" in text


def test_processes_read_one_proc_and_four_procs():
    many = _host("n1", [_gpu(0, procs=4), _gpu(1, procs=1)], stale_processes=4)
    assert "4 procs" in card_text(many.gpus[0], None, False).plain
    assert card_text(many.gpus[1], None, False).plain.rstrip().endswith("1 proc")
    assert host_cells(many, NOW)[6].plain == "4 procs"
    assert host_cells(_host("n2", [_gpu(0)], stale_processes=1), NOW)[6].plain == "1 proc"


def test_the_state_sort_keeps_up_hosts_in_place_as_their_scrapes_move():
    def order(seen_a: float, seen_b: float) -> list[str]:
        hosts = [_host("beta", seen=seen_b), _host("alpha", seen=seen_a), _host("down", seen=NOW - 600, up=False)]
        return [h.host for h in sorted(hosts, key=sort_key("state"))]

    assert order(NOW - 1, NOW - 2) == order(NOW - 2, NOW - 1) == ["down", "alpha", "beta"]


def test_every_sort_breaks_ties_by_name():
    hosts = [_host(n, [_gpu(0)]) for n in ("c", "a", "b")]
    for column in ("host", "state", "gpus", "memory", "hottest", "imbalance", "stale", "alerts", "findings"):
        assert [h.host for h in sorted(hosts, key=sort_key(column))] == ["a", "b", "c"], column


def test_copy_is_offered_only_with_a_command():
    assert CommandScreen("Migrate", None, "Runs outside a container.").check_action("copy", ()) is False
    assert CommandScreen("Kill", "ssh n1 gputui kill 7", "Stops it.").check_action("copy", ()) is True


class _Hosts(App):
    def compose(self) -> ComposeResult:
        yield HostTable(cursor_type="row")


@pytest.mark.functional
async def test_home_and_end_go_to_the_first_and_last_host():
    app = _Hosts()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(HostTable)
        table.add_column("Host")
        for n in range(30):
            table.add_row(Text(f"host-{n}"))
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == 29
        await pilot.press("home")
        assert table.cursor_row == 0


@pytest.mark.functional
@pytest.mark.parametrize("width, cut", [(80, True), (200, False)])
async def test_host_rows_cut_at_the_right_edge_end_in_an_ellipsis(width, cut):
    from tests.fixtures.fleet_showcase import recorded_fleet_app

    app = recorded_fleet_app()
    async with app.run_test(size=(width, 24)) as pilot:
        table = app.screen.query_one(HostTable)
        for _ in range(100):
            await pilot.pause(0.05)
            if table.row_count:
                break
        await pilot.pause(0.1)
        lines = [table.render_line(y).text for y in range(table.row_count + 1)]  # the header and every host
        assert all(line.endswith("…") for line in lines) == cut, lines
        assert not any(line.endswith("…") for line in lines) or cut


def test_a_mig_process_reads_gpu_colon_instance_as_on_the_dashboard():
    from gputui.core.fleet.prom import Sample
    from gputui.core.fleet.queries import build_fleet
    from gputui.ui.screens.fleet_host import process_cells

    def s(metric, value, **labels):
        return Sample({"__name__": metric, "job": "gpu", "instance": "n1:9835", **labels}, value)

    gpus = [s("gputui_host_info", 1, hostname="n1"), s("gputui_gpu_info", 1, gpu="5", uuid="GPU-5", name="A100"),
            s("gputui_gpu_memory_total_bytes", 80 * GIB, gpu="5", uuid="GPU-5")]
    procs = [s("gputui_process_gpu_memory_bytes", GIB, gpu="5", uuid="GPU-5", pid="7", user="bob", exe="python",
               mig_uuid="MIG-a", mig_device="1"),
             s("gputui_process_gpu_memory_bytes", GIB, gpu="5", uuid="GPU-5", pid="8", user="bob", exe="python",
               mig_uuid="MIG-b", mig_device="99999999999"),  # out of range: the whole GPU's index only
             s("gputui_process_gpu_memory_bytes", GIB, gpu="5", uuid="GPU-5", pid="9", user="bob", exe="python")]
    up = Sample({"__name__": "up", "job": "gpu", "instance": "n1:9835"}, 1)
    snap = build_fleet("http://p:9090", NOW, [up], [], gpus, procs, [])
    (gpu,) = snap.hosts[0].gpus
    cells = {p.pid: process_cells(gpu, p)[0].plain for p in gpu.processes}
    assert cells == {7: "5:1", 8: "5", 9: "5"}
