"""Start and stop ``gputui exporter`` subprocesses for the tests (real nvidia-ml-py over the fake driver)."""

from __future__ import annotations

import functools
import os
import resource
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping

import pytest

from tests.fakenvml.scenario import REPO_ROOT, FakeNvml
from tests.fixtures.prometheus import free_port


class Exporter:
    """One ``python -m gputui exporter`` process on a free loopback port."""

    def __init__(self, args: list[str], env: Mapping[str, str], nofile: int | None = None) -> None:
        """``nofile``: the exporter's descriptor limit (soft and hard), as a service manager sets it."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        full_env = dict(env)
        full_env.setdefault("PYTHONPATH", str(REPO_ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputui", "exporter", "--listen", self.address, *args],
            env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=None if nofile is None else functools.partial(_limit_files, nofile))
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()  # "serving ..." once it listens, or the error
        self.banner = first
        #: what it wrote on stderr after the banner, read by stop()
        self.stderr_rest = ""
        if "serving" not in first:
            rest = self.proc.stderr.read()
            self.proc.wait(timeout=10)
            raise AssertionError(f"exporter did not start (exit {self.proc.returncode}): {first}{rest}")

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def metrics(self, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url, timeout=timeout) as r:
            return r.read().decode()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.stderr_rest = self.proc.stderr.read()
            self.proc.stderr.close()
        return self.proc.returncode


def _limit_files(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for e in started:
        e.stop()


def start_exporter(started: list[Exporter], fake: FakeNvml | None, *args: str,
                   env_extra: Mapping[str, str] | None = None, nofile: int | None = None) -> Exporter:
    env = fake.env() if fake is not None else dict(os.environ)
    if env_extra:
        env.update(env_extra)
    exporter = Exporter(list(args), env, nofile=nofile)
    started.append(exporter)
    return exporter
