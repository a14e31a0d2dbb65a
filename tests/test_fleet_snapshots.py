"""SVG snapshots of the fleet screens over a recorded fleet (no Prometheus, no network).

The fleet app is the real one (make_fleet_app) with a :class:`RecordedFleetReader`: six hosts
(imbalance, stale memory, alerts, containers with findings, a dcgm-only host, a host down since
18:03:40), its clock stopped at FROZEN_EPOCH, clock labels in UTC, one refresh. Update after
inspecting the report: ``.venv/bin/python -m pytest tests/test_fleet_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import pytest

from tests.fixtures.fleet_showcase import open_host, recorded_fleet_app, wait_for_fleet
from tests.fixtures.showcase import use_utc

SIZES = [(80, 24), (200, 50)]
IDS = ["80x24", "200x50"]


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    use_utc()
    yield
    monkeypatch.undo()
    import time

    time.tzset()


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_fleet_host_list(snap_compare, size):
    assert snap_compare(recorded_fleet_app(), terminal_size=size, run_before=wait_for_fleet)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_fleet_host_screen(snap_compare, size):
    assert snap_compare(recorded_fleet_app(), terminal_size=size, run_before=open_host)


def test_fleet_dcgm_host_screen_80x24(snap_compare):
    """The dcgm-only host: its GPUs with history, and the note that it has no per-process data."""

    async def run(pilot) -> None:
        await open_host(pilot, row=0)

    assert snap_compare(recorded_fleet_app(), terminal_size=(80, 24), run_before=run)
