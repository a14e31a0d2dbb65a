"""The GPU panel, the process table, the status line and the selection bar leave out Textual's
ANSI-to-truecolor filter only where it would change nothing (an idle-CPU saving, issue 17): on
the default theme every colour they draw is already RGB, and the SVG snapshots
(tests/test_snapshots.py) show the same picture as before. On a theme built from ANSI colours
the filter stays, so those colours still reach the terminal as the theme defines them."""

from __future__ import annotations

from textual.filter import ANSIToTruecolor
from textual.theme import Theme

from tests.fixtures.showcase import frozen_demo_app, wait_for_polls

WIDGETS = ("#procs", "#gpus", "#status", "#selection")


def _has_filter(app, selector: str) -> bool:
    return any(isinstance(f, ANSIToTruecolor) for f in app.screen.query_one(selector).get_line_filters())


async def test_truecolor_theme_skips_the_identity_filter_and_an_ansi_theme_keeps_it():
    app = frozen_demo_app(warm_seconds=30)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        assert any(isinstance(f, ANSIToTruecolor) for f in app.get_line_filters())  # Textual applies it
        assert not any(_has_filter(app, s) for s in WIDGETS)

        app.register_theme(Theme(name="ansi-colours", primary="ansi_blue", foreground="ansi_white",
                                 background="ansi_black", dark=True))
        app.theme = "ansi-colours"
        await pilot.pause()
        assert all(_has_filter(app, s) for s in WIDGETS)

        app.theme = "textual-dark"  # and back: the answer follows every theme switch
        await pilot.pause()
        assert not any(_has_filter(app, s) for s in WIDGETS)
