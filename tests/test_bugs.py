"""Bugs told apart from faults of the outside world (issue 28, point 3): the driver, a source, Docker,
Prometheus and the file system are one sentence; anything else points at a 0600, rotated log in the
state folder with its traceback, and goes to stderr under --debug / GPUTUI_DEBUG=1."""

from __future__ import annotations

import pynvml
import pytest

from gputui.core import bugs
from gputui.core.fleet.prom import PrometheusError
from gputui.core.sources import SourceUnavailable
from gputui.ui.app import describe_error


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # a traceback to log, as a real failure has
        return caught


@pytest.mark.parametrize("exc", [
    pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST),
    SourceUnavailable("The NVIDIA driver is not loaded."),
    PrometheusError("Prometheus at http://127.0.0.1:1 does not answer."),
    ConnectionRefusedError("refused"),
    PermissionError("denied"),
    TimeoutError("timed out"),
])
def test_faults_of_the_outside_world_are_one_sentence(exc, isolated_xdg):
    assert bugs.expected(exc)
    text = describe_error(_raised(exc))
    assert text.startswith("Could not read the GPUs: ") and text.endswith(". Retrying.")
    assert not (isolated_xdg / "state" / "gputui" / "gputui.log").exists()


def test_docker_errors_are_faults_too():
    import docker.errors

    assert bugs.expected(docker.errors.APIError("500 Server Error"))
    assert bugs.expected(docker.errors.DockerException("Error while fetching server API version"))


@pytest.mark.parametrize("exc", [KeyError("gpu"), TypeError("unsupported operand"), AttributeError("x"),
                                 ZeroDivisionError("division by zero"), RuntimeError("oops")])
def test_anything_else_is_a_bug_with_its_traceback_in_a_private_log(exc, isolated_xdg, capsys, monkeypatch):
    monkeypatch.delenv("GPUTUI_DEBUG", raising=False)
    log = isolated_xdg / "state" / "gputui" / "gputui.log"
    assert not bugs.expected(exc)
    text = describe_error(_raised(exc))
    assert text == f"gputui hit a bug; details in {log}."
    logged = log.read_text()
    assert "gputui hit a bug while polling the GPUs" in logged and "Traceback (most recent call last)" in logged
    assert f"{type(exc).__name__}: " in logged and "_raised" in logged  # where it was raised
    assert log.stat().st_mode & 0o777 == 0o600
    assert (isolated_xdg / "state" / "gputui").stat().st_mode & 0o777 == 0o700
    assert capsys.readouterr().err == ""  # not debugging: the terminal stays clean


def test_debug_writes_the_traceback_to_stderr_too(isolated_xdg, capsys, monkeypatch):
    monkeypatch.setenv("GPUTUI_DEBUG", "1")
    bugs.report(_raised(KeyError("gpu")), "testing")
    err = capsys.readouterr().err
    assert err.startswith("gputui: gputui hit a bug while testing") and "Traceback" in err and "KeyError" in err


def test_debug_tracebacks_wait_for_a_full_screen_app_to_give_the_terminal_back(isolated_xdg, capsys, monkeypatch):
    monkeypatch.setenv("GPUTUI_DEBUG", "1")
    with bugs.hold_stderr():
        bugs.report(_raised(KeyError("held")), "drawing")
        assert capsys.readouterr().err == ""
    assert "KeyError: 'held'" in capsys.readouterr().err


def test_the_log_is_rotated_and_every_file_stays_private(isolated_xdg, monkeypatch):
    monkeypatch.setattr(bugs, "LOG_LIMIT", 2000)
    for n in range(40):
        bugs.report(_raised(ValueError(f"bug number {n}")), "testing rotation")
    folder = isolated_xdg / "state" / "gputui"
    logs = sorted(p.name for p in folder.glob("gputui.log*"))
    assert logs == ["gputui.log", "gputui.log.1", "gputui.log.2", "gputui.log.3"]  # LOG_KEEP old files
    for p in folder.glob("gputui.log*"):
        assert p.stat().st_mode & 0o777 == 0o600 and p.stat().st_size <= 2000 + 1500


def test_the_log_is_never_written_through_a_symlink(isolated_xdg, tmp_path):
    folder = isolated_xdg / "state" / "gputui"
    folder.mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (folder / "gputui.log").symlink_to(victim)
    text = bugs.report(_raised(KeyError("link")), "testing")
    assert victim.read_text() == "precious\n"
    assert text.startswith("gputui hit a bug; its log could not be written (") and "--debug" in text


def test_a_bug_in_the_exporter_poll_is_logged_with_its_traceback_and_said_once(isolated_xdg):
    import threading
    import time

    from gputui.exporter.metrics import PollStatus
    from gputui.exporter.server import PollLoop, make_registry

    class Buggy:
        calls = 0

        def poll(self):
            self.calls += 1
            raise KeyError("index")

    _, histogram = make_registry()
    poller = Buggy()
    logged: list[str] = []
    loop = PollLoop(poller, 0.01, histogram, PollStatus(None, True, None), log=logged.append)  # type: ignore[arg-type]
    loop.start()
    end = time.monotonic() + 10
    while poller.calls < 3 and time.monotonic() < end:
        threading.Event().wait(0.01)
    loop.stop()
    log = isolated_xdg / "state" / "gputui" / "gputui.log"
    assert logged == [f"gputui exporter: poll failed: gputui hit a bug; details in {log}."]
    assert "KeyError: 'index'" in log.read_text() and log.read_text().count("Traceback") == 1


@pytest.mark.parametrize("argv", [["--debug", "--once"], ["--debug", "snapshot", "--json"],
                                  ["snapshot", "--debug"], ["exporter", "--debug"], ["fleet", "--debug"]])
def test_every_command_takes_debug(argv):
    from gputui.cli import _fast_args, build_parser

    args = _fast_args(argv) or build_parser(argv).parse_args(argv)
    assert args.debug is True


def test_a_bug_in_a_command_is_one_sentence_pointing_at_the_log(isolated_xdg, capsys, monkeypatch):
    import gputui.cli as cli

    monkeypatch.delenv("GPUTUI_DEBUG", raising=False)

    what = ["gpu"]

    def broken(ctx):
        raise KeyError(what[0])

    monkeypatch.setattr(cli, "cmd_snapshot", broken)
    log = isolated_xdg / "state" / "gputui" / "gputui.log"
    assert cli.main(["--demo", "snapshot"]) == 1
    err = capsys.readouterr().err
    assert err == f"gputui: gputui hit a bug; details in {log}.\n"
    assert "while running gputui snapshot" in log.read_text() and "KeyError: 'gpu'" in log.read_text()
    what[0] = "another"  # (a bug already logged is not logged again)
    assert cli.main(["--debug", "--demo", "snapshot"]) == 1  # --debug: the traceback on stderr too
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith(f"details in {log}.")
