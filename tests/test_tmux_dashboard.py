"""End to end: the installed ``gputui`` in a real terminal (tmux) against the fake driver.

The dashboard runs as a user runs it — the venv's console script, real
nvidia-ml-py loading the fake libnvidia-ml.so.1, real /proc — and the test reads
the screen with ``tmux capture-pane``: the scenario's values are on it, a change
written to the scenario file shows within two refresh intervals, and ``q`` exits
with status 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakenvml.scenario import GiB, gpu, process, scenario

pytestmark = pytest.mark.tmux

GPUTUI = Path(sys.executable).parent / "gputui"
INTERVAL = 1.0


class Tmux:
    """One private tmux server (its own socket), killed when the test ends."""

    def __init__(self) -> None:
        self.socket = f"gputui-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=check,
                              timeout=10)

    def screen(self) -> str:
        res = self.run("capture-pane", "-p", "-t", "dash", check=False)
        return res.stdout

    def wait_for(self, predicate, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.05)
        raise AssertionError(f"{what} did not appear within {timeout} s; the screen was:\n{text}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
        # tmux leaves its socket file behind when the server ended with its last session.
        base = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket
        base.unlink(missing_ok=True)


@pytest.fixture
def tmux():
    require(shutil.which("tmux") is not None, "tmux is needed for the end-to-end dashboard test")
    server = Tmux()
    yield server
    server.kill()


@pytest.fixture
def sleeper():
    """A real process for the fake driver to report, so the table has a real user and command."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_dashboard_in_tmux_shows_the_scenario_follows_changes_and_quits(fake_nvml, tmux, sleeper, tmp_path):
    require(GPUTUI.exists(), f"the gputui console script is not installed at {GPUTUI}")
    fake_nvml.write(scenario([
        gpu(0, name="NVIDIA H100 80GB HBM3", utilization_gpu=73, temperature=61, power_draw=312.0,
            power_limit=700.0, processes=[process(sleeper.pid, used_memory=12 * GiB, sm=71)]),
        gpu(1, utilization_gpu=4, temperature=33, fan_speed=27),
    ], driver_version="550.54.15"))

    exit_file = tmp_path / "exit-status"
    env = fake_nvml.env()
    keep = {k: env[k] for k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "GPUTUI_FAKE_NVML_CALLS",
                                "XDG_CONFIG_HOME", "XDG_STATE_HOME", "HOME", "PATH") if k in env}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
    command = (f"env {assignments} TERM=tmux-256color {shlex.quote(str(GPUTUI))} --no-docker "
               f"--interval {INTERVAL}; echo $? > {shlex.quote(str(exit_file))}")
    tmux.run("new-session", "-d", "-s", "dash", "-x", "160", "-y", "48", command)

    # The scenario's values are on the screen.
    screen = tmux.wait_for(lambda s: "H100 80GB HBM3" in s and str(sleeper.pid) in s, 20, "the first picture")
    assert "550.54.15" in screen  # driver version in the status line
    assert "73%" in screen and "61°C" in screen and "312/700 W" in screen
    assert "12.0G" in screen  # the process's GPU memory
    assert "sleep 300" in screen  # its command, read from the real /proc
    assert "27%" in screen  # GPU 1's fan

    # A change to the scenario file shows within two refresh intervals.
    fake_nvml.write(scenario([
        gpu(0, name="NVIDIA H100 80GB HBM3", utilization_gpu=42, temperature=88, power_draw=655.0,
            power_limit=700.0, processes=[process(sleeper.pid, used_memory=20 * GiB, sm=40)]),
        gpu(1, utilization_gpu=4, temperature=33, fan_speed=27),
    ], driver_version="550.54.15"))
    written = time.monotonic()
    screen = tmux.wait_for(lambda s: "88°C" in s and "655/700 W" in s and "20.0G" in s, 2 * INTERVAL + 1,
                           "the changed scenario")
    took = time.monotonic() - written
    assert took <= 2 * INTERVAL, f"the change took {took:.2f} s to show (interval {INTERVAL} s)"
    assert "42%" in screen

    # q quits with status 0 and gives the terminal back.
    tmux.run("send-keys", "-t", "dash", "q")
    deadline = time.monotonic() + 10
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, f"gputui did not exit after q; the screen was:\n{tmux.screen()}"
        time.sleep(0.05)
    assert exit_file.read_text().strip() == "0"
