"""SVG snapshots of the dashboard: the frozen demo at fixed terminal sizes.

Time is frozen (the demo's clock stops at FROZEN_EPOCH after a stepped warm-up,
clock labels in UTC) and the app polls exactly once, so a snapshot changes only
when what the user would see changes. Update after inspecting the report:
``.venv/bin/python -m pytest tests/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import os
import time

import pytest
from textual.widgets import Input

from tests.fixtures.showcase import frozen_demo_app, wait_for_polls


@pytest.fixture(autouse=True)
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def app(n_gpus: int | None = None):
    # 5-minute history in 5-second steps: enough for every graph, fast to build.
    return frozen_demo_app(warm_seconds=300, step=5.0, n_gpus=n_gpus)


async def first_poll(pilot) -> None:
    await wait_for_polls(pilot)
    for field in pilot.app.query(Input):
        field.cursor_blink = False


def then(*keys: str):
    async def run(pilot) -> None:
        await first_poll(pilot)
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.press(*keys)
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause()

    return run


def test_overview_140x44(snap_compare):
    assert snap_compare(app(), terminal_size=(140, 44), run_before=first_poll)


def test_overview_80x24_compact_rows(snap_compare):
    assert snap_compare(app(), terminal_size=(80, 24), run_before=first_poll)


def test_who_is_on_gpu_0(snap_compare):
    assert snap_compare(app(), terminal_size=(140, 44), run_before=then("0"))


def test_filter_by_typing(snap_compare):
    assert snap_compare(app(), terminal_size=(120, 40), run_before=then("slash", "b", "o", "b"))


def test_gpu_detail(snap_compare):
    assert snap_compare(app(), terminal_size=(140, 44), run_before=then("enter"))


def test_help(snap_compare):
    assert snap_compare(app(), terminal_size=(140, 44), run_before=then("question_mark"))


def test_sixteen_gpus_120x40(snap_compare):
    assert snap_compare(app(n_gpus=16), terminal_size=(120, 40), run_before=first_poll)


# -- the other views and the dialogs, at the smallest supported and a large terminal ------------


async def _until(pilot, condition, timeout: float = 10.0) -> None:
    """Let the app run until ``condition()`` holds (a dialog's plan arrives from its worker)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the app did not reach the state the snapshot shows")
        await pilot.pause(0.05)


def dialog(key: str, ready):
    """Open a dialog with ``key`` on the first poll's highlighted row, and wait for its plan."""

    async def run(pilot) -> None:
        await first_poll(pilot)
        await pilot.press(key)
        await _until(pilot, lambda: ready(pilot.app.screen))
        await pilot.pause()

    return run


def _kill_ready(screen) -> bool:
    return getattr(screen, "state", None) in ("ready", "done")


def _migrate_ready(screen) -> bool:
    return getattr(screen, "plan", None) is not None or getattr(screen, "problem", None) is not None


def test_overview_200x50(snap_compare):
    assert snap_compare(app(), terminal_size=(200, 50), run_before=first_poll)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_containers_view(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=then("c"))


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_alerts_view(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=then("exclamation_mark"))


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_kill_dialog(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=dialog("k", _kill_ready))


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_migrate_dialog(snap_compare, size):
    assert snap_compare(app(), terminal_size=size, run_before=dialog("m", _migrate_ready))
