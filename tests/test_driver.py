"""gputui's terminal driver (gputui.ui.driver): the Textual internals it leans on, keys through a pty, the opt-out.

If a Textual upgrade changes anything the driver relies on, the first test fails
and says what: the driver would otherwise fall back silently (polling input, or
sending Textual's whole output), which no other test would notice.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import require
from tests.pty_term import PtyApp

GPUTUI = Path(sys.executable).parent / "gputui"


def test_the_textual_internals_the_driver_relies_on_are_still_there():
    from textual import events
    from textual._xterm_parser import (
        XTermParser,  # private: the driver runs its own input loop with it
    )
    from textual.app import App
    from textual.drivers.linux_driver import LinuxDriver

    parser = XTermParser(False)
    assert parser._timeout_time is None, "XTermParser._timeout_time: None while no sequence is pending"
    assert list(parser.feed("\x1b")) == []
    assert parser._timeout_time is not None, "XTermParser arms _timeout_time while an escape sequence waits"
    keys = list(parser.feed("[A")) + list(parser.tick())
    assert [k.key for k in keys if isinstance(k, events.Key)] == ["up"]
    assert parser._timeout_time is None, "XTermParser clears _timeout_time once the sequence is complete"

    for name in ("run_input_thread", "process_message", "write", "start_application_mode", "stop_application_mode",
                 "close"):
        assert callable(getattr(LinuxDriver, name, None)), f"LinuxDriver.{name} is gone"
    source = inspect.getsource(LinuxDriver)
    for attribute in ("self.exit_event", "self._file", "self.fileno", "self._debug", "self._writer_thread",
                      "run_input_thread", "signal.SIGWINCH"):
        assert attribute in source, f"LinuxDriver no longer uses {attribute}"

    async def make() -> LinuxDriver:
        from gputui.ui.driver import QuietLinuxDriver

        return QuietLinuxDriver(App(), debug=False, mouse=False, size=None)

    driver = asyncio.run(make())
    try:
        assert isinstance(driver.exit_event, threading.Event)
        assert isinstance(driver.fileno, int)
        assert driver._debug is False
    finally:
        driver.close()


def test_the_config_key_and_the_environment_choose_textuals_own_driver(tmp_path, monkeypatch):
    from textual.drivers.linux_driver import LinuxDriver

    from gputui.cli import build_parser, load_context
    from gputui.core.config import Settings
    from gputui.ui.app import make_app
    from gputui.ui.driver import QuietLinuxDriver

    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    monkeypatch.delenv("GPUTUI_DRIVER", raising=False)
    config = tmp_path / "config.toml"
    config.write_text('driver = "textual"\n')
    ctx = load_context(build_parser(["--demo", "--config", str(config)]).parse_args(["--demo", "--config",
                                                                                       str(config)]))
    assert ctx.settings.driver == "textual"
    monkeypatch.setenv("GPUTUI_DRIVER", "gputui")
    ctx = load_context(build_parser(["--demo", "--config", str(config)]).parse_args(["--demo", "--config",
                                                                                       str(config)]))
    assert ctx.settings.driver == "gputui"

    from gputui.core.machine import open_machine

    for choice, expected in (("gputui", QuietLinuxDriver), ("textual", LinuxDriver)):
        app = make_app(open_machine(demo=True), Settings(driver=choice))
        assert app.get_driver_class() is expected


@pytest.mark.functional
@pytest.mark.parametrize("where", ["env", "config"])
def test_an_unknown_driver_is_one_sentence_and_exit_2(tmp_path, where):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    if where == "env":
        env["GPUTUI_DRIVER"] = "curses"
    else:
        (tmp_path / "gputui").mkdir()
        (tmp_path / "gputui" / "config.toml").write_text('driver = "curses"\n')
    res = subprocess.run([sys.executable, "-m", "gputui", "--demo", "--once"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert "driver" in res.stderr.lower() and "gputui, textual" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.functional
@pytest.mark.parametrize("driver", ["gputui", "textual"])
def test_keys_typed_in_a_terminal_reach_the_app_through_the_driver(tmp_path, driver):
    """``?`` opens help, a lone Escape (the parser's timeout path) closes it, ``q`` then quits with 0."""
    require(GPUTUI.exists(), f"the gputui console script is not installed at {GPUTUI}")
    env = {**os.environ, "GPUTUI_DRIVER": driver, "TERM": "xterm-256color",
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("TEXTUAL_DRIVER", None)
    app = PtyApp([str(GPUTUI), "--demo"], env, (120, 40))
    try:
        app.wait_for(b"GPU", 30)
        app.wait_quiet(0.3, 5)
        mark = len(app.output())
        app.send(b"?")
        app.wait_for(b"Process table", 20, since=mark)  # the help screen is drawn
        app.wait_quiet(0.3, 5)
        mark = len(app.output())
        app.send(b"\x1b")  # a lone Escape: delivered when the parser's wait for more runs out
        # the table rows the help covered are drawn again: the help is closed. (Not "Filter": the help
        # lists that key too, and a live poll redrawing it let q reach the help, which q only closes.)
        app.wait_for(b"5388", 20, since=mark)
        app.send(b"q")  # on the dashboard q quits; had help stayed open it would only close help
        assert app.wait_exit(20) == 0, app.output()[-1500:]
    finally:
        app.close()
    if driver == "gputui":  # and what it wrote was the diffed stream: no reset after every style run
        assert app.output().count(b"\x1b[0m") < 50


@pytest.mark.tmux
def test_after_the_window_grows_the_driver_draws_the_rows_and_columns_it_gained(tmp_path):
    """The driver reads the terminal's size only after a SIGWINCH: a grown window is still drawn to its edges.

    gputui's own stream, recorded through a pty that grows from 90x30 to 120x40, is replayed into tmux
    resized the same way: the footer is on the new last row and the header reaches past the old width.
    """
    import shutil

    from tests.test_output import Tmux

    require(shutil.which("tmux") is not None, "tmux is needed to show the screen")
    require(GPUTUI.exists(), f"the gputui console script is not installed at {GPUTUI}")
    small, big = (90, 30), (120, 40)
    env = {**os.environ, "GPUTUI_DRIVER": "gputui", "TERM": "xterm-256color",
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("TEXTUAL_DRIVER", None)
    app = PtyApp([str(GPUTUI), "--demo"], env, small)
    try:
        app.wait_for(b"GPU", 30)
        app.wait_quiet(0.3, 5)
        cut = len(app.output())
        app.resize(big)
        app.wait_for_more(2_000, 30)
        app.wait_quiet(0.3, 5)
    finally:
        app.close()
    data = app.output()
    (tmp_path / "before").write_bytes(data[:cut])
    (tmp_path / "after").write_bytes(data[cut:])
    tmux = Tmux()
    try:
        tmux.show_resized("app", tmp_path / "before", tmp_path / "after", small, big)
        lines = tmux("capture-pane", "-p", "-t", "app").rstrip("\n").split("\n")
    finally:
        tmux.close()
    assert len(lines) == big[1], lines
    assert "Filter" in lines[-1], lines[-3:]  # the footer moved to the new last row
    assert any(len(line.rstrip()) > small[0] for line in lines), lines  # something is drawn past the old width
