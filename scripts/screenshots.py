"""Regenerate the SVG screenshots in screenshots/ from the frozen demo server.

    .venv/bin/python scripts/screenshots.py [--out screenshots]

Every picture is the demo at a fixed moment (gputui.core.demo.FROZEN_EPOCH) with
ten minutes of history behind it, at 140x44, clock labels in UTC: running the
command twice gives the same files. The app is the real one (make_app), so a
screenshot is what `gputui --demo` shows. fleet.svg and fleet-host.svg are the real
fleet app (make_fleet_app) over the recorded fleet of tests/fixtures/fleet_showcase.py,
its clock stopped at the same moment.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.fleet_showcase import open_host, recorded_fleet_app, wait_for_fleet  # noqa: E402
from tests.fixtures.showcase import SIZE, frozen_demo_app, use_utc, wait_for_polls  # noqa: E402


async def _shot(path: Path, title: str, steps: Callable[[object], Awaitable[None]] | None = None) -> None:
    app = frozen_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_polls(pilot)
        if steps is not None:
            await steps(pilot)
        await pilot.pause()
        path.write_text(app.export_screenshot(title=title), encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


async def _fleet_shot(path: Path, title: str, steps: Callable[[object], Awaitable[None]]) -> None:
    """The fleet app over the recorded six-host fleet the fleet snapshots use (no Prometheus needed)."""
    app = recorded_fleet_app()
    async with app.run_test(size=SIZE) as pilot:
        await steps(pilot)
        path.write_text(app.export_screenshot(title=title), encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


async def _gpu0(pilot) -> None:
    await pilot.press("0")


async def _mig(pilot) -> None:
    await pilot.press("5")


async def _detail(pilot) -> None:
    await pilot.press("enter")  # the cursor starts on GPU 0's biggest process
    await pilot.pause()


async def _help(pilot) -> None:
    await pilot.press("question_mark")


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    await _shot(out / "overview.svg", "gputui --demo")
    await _shot(out / "gpu0-filter.svg", "gputui --demo · who is on GPU 0? (key 0)", _gpu0)
    await _shot(out / "mig.svg", "gputui --demo · GPU 5 in MIG mode: its instances and their owners (key 5)", _mig)
    await _shot(out / "detail.svg", "gputui --demo · GPU 0 details (Enter)", _detail)
    await _shot(out / "help.svg", "gputui --demo · keys (?)", _help)
    await _fleet_shot(out / "fleet.svg", "gputui fleet --prometheus URL", wait_for_fleet)
    await _fleet_shot(out / "fleet-host.svg", "gputui fleet · one host: load and memory history, processes (Enter)",
                      open_host)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots", help="folder for the SVG files")
    args = parser.parse_args()
    use_utc()
    asyncio.run(main(args.out.resolve()))
