"""Pilot tests of the alerts panel (``!``): active alerts with their start times, the session's
history of raised and cleared alerts, the log file, and the optional bell."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.console import Console

from gputui.core.config import GIB, Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import Machine, open_machine
from gputui.core.model import Gpu, GpuReading
from gputui.ui.app import make_app
from gputui.ui.screens.alerts import AlertsScreen
from tests.fixtures.showcase import ManualClock, use_utc, wait_for_polls


def text_of(app, selector: str) -> str:
    renderable = app.screen.query_one(selector).content
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()


async def open_alerts(pilot):
    await pilot.press("exclamation_mark")
    app = pilot.app
    deadline = 50
    while not (isinstance(app.screen, AlertsScreen) and app.screen.query("#alerts-history")):
        deadline -= 1
        assert deadline, "the alerts panel did not open"
        await pilot.pause(0.05)
    await pilot.pause()


async def test_demo_alerts_panel_lists_active_alerts_with_their_start_and_the_session():
    use_utc()
    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    app = make_app(machine, Settings(), live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for_polls(pilot)
        await open_alerts(pilot)
        snap = app.snapshot
        title = text_of(app, "#alerts-title")
        assert title.startswith(f"Alerts — {len(snap.alerts)} active")
        active = text_of(app, "#alerts-active")
        assert "memory-full" in active and "GPU 4" in active and "imbalance" in active
        assert snap.time.strftime("%H:%M:%S") in active  # when each began
        history = text_of(app, "#alerts-history")
        assert history.count("raised") == len(snap.alerts)
        assert "not written to the alert log" in text_of(app, "#alerts-log")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, AlertsScreen)


class Thermometer:
    """One GPU whose temperature the test sets."""

    def __init__(self) -> None:
        self.temperature = 60

    def read(self) -> GpuReading:
        g = Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="Scripted GPU", utilization_gpu=50,
                memory_used=10 * GIB, memory_total=80 * GIB, temperature=self.temperature)
        return GpuReading("550", "12.4", (g,), {})

    def facts(self, pids):
        return {}

    def close(self) -> None:
        pass


async def test_panel_follows_an_alert_from_raised_to_cleared_and_the_log_keeps_both():
    use_utc()
    src = Thermometer()
    clock = ManualClock(FROZEN_EPOCH)
    settings = Settings(alert_hold=3.0, bell=True)
    app = make_app(Machine(gpu=src, processes=src, containers=None), settings, clock=clock, live=False)
    rings = []
    async with app.run_test(size=(160, 40)) as pilot:
        app.bell = lambda: rings.append(clock.now)  # count the bells instead of beeping
        await wait_for_polls(pilot)

        async def poll(n: int) -> None:
            for _ in range(n):
                clock.now += 1
                done = app.polls_done
                app.request_poll()
                await wait_for_polls(pilot, done + 1)

        await poll(5)
        await open_alerts(pilot)
        assert "No active alerts." in text_of(app, "#alerts-active")
        assert "Nothing has happened" in text_of(app, "#alerts-history")

        src.temperature = 92
        await poll(2)
        assert "No active alerts." in text_of(app, "#alerts-active"), "not before the hold"
        await poll(3)
        active = text_of(app, "#alerts-active")
        assert "CRITICAL" in active and "92°C" in active
        # Since: the first poll at 92°C (FROZEN_EPOCH + 6 s = 20:26:46 UTC), not when the hold ran out.
        assert "20:26:46" in active
        assert len(rings) == 1

        src.temperature = 50
        await poll(6)
        assert "No active alerts." in text_of(app, "#alerts-active")
        history = text_of(app, "#alerts-history").splitlines()
        events = [line for line in history if "temperature" in line]
        assert "cleared" in events[0] and "raised critical" in events[1], history
        assert len(rings) == 1, "a clearing does not ring"
        assert "Every event is appended to" in text_of(app, "#alerts-log")

    log = Path(os.environ["XDG_STATE_HOME"]) / "gputui" / "alerts.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["event"], x["kind"], x["severity"]) for x in lines] == [("raised", "temperature", "critical"),
                                                                      ("cleared", "temperature", "critical")]
    assert lines[0]["since"] == "2026-05-28T20:26:46+00:00"


async def test_no_bell_unless_asked():
    src = Thermometer()
    src.temperature = 95
    clock = ManualClock(FROZEN_EPOCH)
    app = make_app(Machine(gpu=src, processes=src, containers=None), Settings(), clock=clock, live=False)
    rings = []
    async with app.run_test(size=(120, 30)) as pilot:
        app.bell = lambda: rings.append(1)
        await wait_for_polls(pilot)
        assert [a.kind for a in app.snapshot.alerts] == ["temperature"]
        assert rings == []
