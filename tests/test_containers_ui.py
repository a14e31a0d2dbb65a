"""Pilot tests of the containers view (key ``c``) on the demo server."""

from __future__ import annotations

import html
import re

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.ui.app import make_app
from gputui.ui.screens.containers import GRANTED_STYLE, OTHER_STYLE, USED_STYLE, ContainersScreen, indices
from gputui.ui.screens.dashboard import DashboardScreen
from tests.fixtures.showcase import ManualClock, wait_for_polls


def demo_app(docker: bool = True):
    clock = ManualClock(FROZEN_EPOCH)
    machine = open_machine(demo=True, docker=docker, demo_clock=clock)
    return make_app(machine, Settings(), clock=clock, live=False), clock


def visible_text(app) -> str:
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg.replace("&#160;", " ")))


def strip_styles(screen: ContainersScreen) -> dict[int, str]:
    """GPU index -> the style its cell has in the highlighted container's GPU strip."""
    text = screen.strip
    out = {}
    for span in text.spans:
        cell = text.plain[span.start:span.end].strip()
        if cell.isdigit() and int(cell) not in out:
            out[int(cell)] = str(span.style)
    return out


async def open_containers(pilot) -> ContainersScreen:
    await wait_for_polls(pilot, 1)
    await pilot.press("c")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, ContainersScreen)
    return screen


async def test_c_lists_every_gpu_container_with_grant_use_memory_and_findings():
    app, _ = demo_app()
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await open_containers(pilot)
        table = screen.table
        names = [table.get_row_at(i)[0] for i in range(table.row_count)]
        assert names == ["batch-reserve", "bert-finetune", "eval-server", "inference-api", "jupyter-alice",
                         "llama-train", "vllm-cache", "worker-2", "job 81734 (carol)"]
        rows = {table.get_row_at(i)[0]: [str(x) for x in table.get_row_at(i)] for i in range(table.row_count)}
        # NAME STATE GRANT VIA USES GPU-MEM PIDS FINDINGS
        assert rows["bert-finetune"][2:] == ["all (8)", "--gpus", "0", "18.0G", "1", "unpinned"]
        assert rows["eval-server"][2:] == ["2", "--gpus", "2", "7.0G", "1", "env-conflict, rule_reserved"]
        assert rows["job 81734 (carol)"][1:] == ["RUNNING", "6", "slurm GRES", "6", "2.0G", "1", "-"]
        assert rows["batch-reserve"][2:] == ["7", "--gpus", "-", "-", "0", "idle-grant"]
        assert rows["llama-train"][7] == "-"
        text = visible_text(app)
        assert "8 with a GPU grant or a GPU process, 3 with findings" in text


async def test_highlighting_a_container_shows_its_gpus_processes_and_sentences():
    app, _ = demo_app()
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_containers(pilot)
        # batch-reserve is first: granted GPU 7, runs nothing there.
        styles = strip_styles(screen)
        assert styles[7] == GRANTED_STYLE and styles[0] == OTHER_STYLE
        await pilot.press("down")  # bert-finetune: --gpus all, landed on GPU 0
        await pilot.pause()
        assert screen.selected_id == app.snapshot.container("bert-finetune").id
        styles = strip_styles(screen)
        assert styles[0] == USED_STYLE
        assert all(styles[i] == GRANTED_STYLE for i in range(1, 8))
        text = visible_text(app)
        assert "unpinned: bert-finetune can use all 8 GPUs (--gpus all)" in text
        # Its process is marked among the others on its GPUs (GPU 0's pile-up shows too).
        assert re.search(r"▶\s*0\s*4201\s*bob", text)
        assert re.search(r"\n\s*0\s*4101\s*alice", text)
        assert "all 8 GPUs via --gpus" in text
        await pilot.press("down")  # eval-server
        await pilot.pause()
        text = visible_text(app)
        assert "CUDA_VISIBLE_DEVICES=3 names device 3" in text
        assert strip_styles(screen)[2] == USED_STYLE


async def test_the_highlight_survives_a_poll_and_escape_goes_back():
    app, clock = demo_app()
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await open_containers(pilot)
        assert screen.select("vllm-cache")
        clock.now += 5
        done = app.polls_done
        app.request_poll()
        await wait_for_polls(pilot, done + 1)
        assert app.snapshot.time.timestamp() == FROZEN_EPOCH + 5
        assert screen.selected_id == app.snapshot.container("vllm-cache").id
        assert screen.table.get_row_at(screen.table.cursor_row)[0] == "vllm-cache"
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)


async def test_enter_filters_the_dashboard_to_the_container():
    app, _ = demo_app()
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await open_containers(pilot)
        screen.select("llama-train")
        await pilot.press("enter")
        await pilot.pause()
        dash = app.screen
        assert isinstance(dash, DashboardScreen)
        assert dash.filter_input.value == "llama-train"
        assert [p.pid for p in dash.table.rows] == [4101]


async def test_without_docker_the_view_says_why():
    app, _ = demo_app(docker=False)
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await open_containers(pilot)
        # Processes still name their containers through cgroups: listed by id, grant unknown, not judged.
        table = screen.table
        rows = [[str(x) for x in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[-1][0] == "job 81734 (carol)"  # Slurm's job is read without Docker
        rows = rows[:-1]
        assert len(rows) == 7
        # their grants go unjudged; only the house rules still see who holds a reserved GPU
        assert {r[2] for r in rows} == {"unknown"} and {r[7] for r in rows} - {"rule_reserved"} == {"-"}
        assert all(re.fullmatch(r"[0-9a-f]{12}", r[0]) for r in rows)
        text = visible_text(app)
        assert "Docker unavailable: container information is off" in text
        assert "unknown: Docker is unavailable" in text


def test_index_ranges():
    assert indices((0, 1, 2, 5)) == "0-2,5"
    assert indices((3, 4)) == "3,4"
    assert indices(()) == "-"
