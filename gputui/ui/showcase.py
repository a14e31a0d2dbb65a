"""A frozen, reproducible dashboard: the demo server with ten minutes of history.

Used by ``scripts/screenshots.py`` and the SVG snapshot tests, so both show the
same picture. The demo's values are functions of its clock; a manual clock is
stepped through ``warm_seconds`` of polls (filling the history the graphs draw)
and then stopped at :data:`FROZEN_EPOCH`. The app is built with ``live=False``:
it polls once when it starts and never again, so what is on screen cannot
depend on how fast the machine running the test is.
"""

from __future__ import annotations

import os
import time

from gputui.core.config import Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.machine import open_machine
from gputui.ui.app import GpuTuiApp, make_app

#: The terminal size of every screenshot and snapshot.
SIZE = (140, 44)


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def use_utc() -> None:
    """Clock labels in UTC, so screenshots and snapshots read the same everywhere."""
    os.environ["TZ"] = "UTC"
    if hasattr(time, "tzset"):
        time.tzset()


def frozen_demo_app(warm_seconds: int = 600, step: float = 1.0, settings: Settings | None = None,
                    n_gpus: int | None = None) -> GpuTuiApp:
    """The demo at FROZEN_EPOCH with ``warm_seconds`` of history behind it."""
    clock = ManualClock(FROZEN_EPOCH - warm_seconds)
    machine = open_machine(demo=True, demo_clock=clock)
    if n_gpus is not None and machine.demo is not None:
        machine.demo.n_gpus = n_gpus
    app = make_app(machine, settings or Settings(), clock=clock, live=False)
    steps = int(warm_seconds / step)
    for _ in range(steps):
        app.poller.poll()
        clock.now += step
    clock.now = FROZEN_EPOCH
    return app


async def wait_for_polls(pilot, count: int = 1, timeout: float = 10.0) -> None:
    """Let a running app (``app.run_test()``) finish ``count`` polls in all, then settle.

    Raises TimeoutError with the count reached, so a test failing here says why.
    """
    app = pilot.app
    deadline = time.monotonic() + timeout
    while app.polls_done < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app finished {app.polls_done} of {count} polls in {timeout} s")
        await pilot.pause(0.02)
    await pilot.pause()
