"""End to end: ``gputui fleet`` in a real terminal (tmux) reading a real Prometheus.

Hosts are listed, Enter shows a host's processes with their container, Esc goes
back, and a stopped exporter turns its row down.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fleet_exposition import StaticTarget, dcgm_text, gputui_text
from tests.fleet_scenarios import HOSTS
from tests.test_tmux_dashboard import Tmux

pytestmark = pytest.mark.tmux

GPUTUI = Path(sys.executable).parent / "gputui"


@pytest.fixture
def tmux():
    require(shutil.which("tmux") is not None, "tmux is needed for the end-to-end fleet test")
    server = Tmux()
    yield server
    server.kill()


def row(screen: str, host: str) -> str:
    return next((line for line in screen.splitlines() if line.strip().startswith(host)), "")


def test_fleet_screen_in_tmux(prometheus_factory, tmux):
    targets = [StaticTarget(gputui_text(h)) for h in HOSTS] + [StaticTarget(dcgm_text())]
    try:
        prom = prometheus_factory([t.address for t in targets])
        prom.wait_for("gputui_host_info", lambda r: len(r) == 3)
        command = (f"env -u COLUMNS -u LINES TERM=tmux-256color {shlex.quote(str(GPUTUI))} fleet "
                   f"--prometheus {prom.url} --interval 1")
        tmux.run("new-session", "-d", "-s", "dash", "-x", "160", "-y", "40", command)
        screen = tmux.wait_for(lambda s: "train-llm" in row(s, "gpu-node-01") and "dcgm-node-01" in s, 20,
                               "the host list")
        assert all(h in screen for h in ("gpu-node-02", "gpu-node-03"))
        assert "flagged" in row(screen, "gpu-node-01") and "temperature@0" in row(screen, "gpu-node-01")
        assert "up" in row(screen, "gpu-node-02")

        # the highlighted row follows its host when rows move, so find gpu-node-01 with the filter
        tmux.run("send-keys", "-t", "dash", "/", "gpu-node-01", "Enter")
        tmux.wait_for(lambda s: "gpu-node-01" in s and "gpu-node-02" not in s, 10, "the filtered list")
        tmux.run("send-keys", "-t", "dash", "Enter")
        # the PID as a word: the exporter's random port (127.0.0.1:4242x) may contain it too
        pid = re.compile(r"(?<![\d:])4242(?!\d)")
        screen = tmux.wait_for(lambda s: pid.search(s) is not None, 10, "gpu-node-01's processes")
        line = next(x for x in screen.splitlines() if pid.search(x))
        assert "alice" in line and "python3" in line and "train-llm" in line
        tmux.run("send-keys", "-t", "dash", "k")
        tmux.wait_for(lambda s: "ssh -t -- gpu-node-01 'gputui kill 4242'" in s, 5, "the kill command")
        tmux.run("send-keys", "-t", "dash", "Escape")
        tmux.wait_for(lambda s: "ssh -t" not in s, 5, "the command box closing")
        tmux.run("send-keys", "-t", "dash", "Escape")
        tmux.wait_for(lambda s: "4242" not in s and "Host" in s, 5, "the host list again")
        tmux.run("send-keys", "-t", "dash", "Escape")  # clears the filter
        tmux.wait_for(lambda s: "dcgm-node-01" in s and "gpu-node-02" in s, 5, "every host again")

        targets[1].stop()  # gpu-node-02's exporter
        screen = tmux.wait_for(lambda s: "down since" in row(s, "gpu-node-02"), 30, "gpu-node-02 down")
        assert "up" in row(screen, "gpu-node-01")
        tmux.run("send-keys", "-t", "dash", "q")
    finally:
        for t in targets:
            t.stop()
