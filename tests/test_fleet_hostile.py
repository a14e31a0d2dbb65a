"""Hostile exporters behind a real Prometheus, a hostile Prometheus, and the HTTP around it.

* A host whose exporter publishes ``hostname="-oProxyCommand=sh -c 'touch MARKER' x"``:
  every command gputui prints (``pick --prometheus --format ssh|host-index``, the host
  screen's ``k``/``m``) is run through ``sh`` with the real OpenSSH client, configured to
  reach a real ``sshd`` on loopback as a throw-away user ``gtfl1``. The marker is never
  created, and the remote ``gputui`` (a recorder on that user's PATH) receives exactly the
  words intended.
* A host whose exporter sends ``gpu="²"``, ``gpu="٣"``, a 5,000-digit label, utilization
  ``1e308`` and ``-5``, memory ``+Inf``: ``fleet --json`` and ``pick --prometheus`` exit 0
  with that host flagged; the fleet screen lists every host.
* A "Prometheus" that drips one byte a second (length-declared and close-delimited), one
  that nests JSON 200,000 deep, and one behind basic auth that checks the ``Authorization``
  header; the URL's password never shows.
* A host with 2,000 processes and a 100 KB hostname: the host list cuts the name, the host
  screen lists 500 rows and says how many more.
* Issue 28.1 through a real ``gputui exporter --demo``: ``m`` on the ``--gpus all``
  container names a GPU, the one ``pick`` ranks first.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gputui.core.config import Settings
from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import FleetReader
from tests.conftest import require
from tests.fixtures.prometheus import free_port
from tests.fleet_exposition import GIB, Card, Host, Proc, StaticTarget, gputui_text
from tests.fleet_scenarios import NODE1, NODE2, NODE3

pytestmark = pytest.mark.functional

GPUTUI = Path(sys.executable).parent / "gputui"
USER = "gtfl1"


def gputui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPUTUI), *args], capture_output=True, text=True, timeout=timeout, check=False)


# -- a real sshd on loopback ----------------------------------------------------------------


class Sshd:
    """``sshd`` on 127.0.0.1 for user ``gtfl1``; ``ssh`` on ``bin`` reaches it whatever host it is given."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gtfl-ssh-"))
        self.dir.chmod(0o755)  # the user's shell runs the recorder from here
        self.bin = self.dir / "bin"
        self.remote_bin = self.dir / "remote-bin"
        self.record = self.dir / "record"
        for d in (self.bin, self.remote_bin, self.record):
            d.mkdir()
        self.record.chmod(0o777)
        self.proc: subprocess.Popen[bytes] | None = None
        self.made_run_dir = False
        self.port = free_port()

    def start(self) -> None:
        d = self.dir
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        (d / "authorized_keys").chmod(0o644)
        subprocess.run(["userdel", USER], capture_output=True, check=False)
        subprocess.run(["useradd", "-M", "-d", str(d / "home"), "-s", "/bin/sh", USER], check=True)
        subprocess.run(["usermod", "-p", "*", USER], check=True)  # not locked: key logins only
        (d / "home").mkdir()
        shutil.chown(d / "home", USER)
        # the remote `gputui`: records the words it was given, one JSON list a line
        recorder = self.remote_bin / "gputui"
        recorder.write_text("#!/bin/sh\n{ for word in \"$@\"; do printf '%s\\037' \"$word\"; done; echo; } >> "
                            f"{self.record / 'argv'}\n")
        recorder.chmod(0o755)
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            f"KbdInteractiveAuthentication no\nAllowUsers {USER}\nSetEnv PATH={self.remote_bin}:/usr/bin:/bin\n")
        (d / "ssh_config").write_text(
            f"Host *\n  HostName 127.0.0.1\n  Port {self.port}\n  User {USER}\n  IdentityFile {d / 'client_key'}\n"
            "  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n"
            "  LogLevel ERROR\n  ConnectTimeout 20\n")
        wrapper = self.bin / "ssh"  # the real client, with this config instead of ~/.ssh and /etc/ssh
        wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {d / 'ssh_config'} \"$@\"\n")
        wrapper.chmod(0o755)
        if not os.path.isdir("/run/sshd"):  # sshd's privilege-separation folder
            os.makedirs("/run/sshd", mode=0o755)
            self.made_run_dir = True
        self.proc = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f",
                                      str(d / "sshd_config")], stderr=open(d / "sshd.log", "wb"))
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, (d / "sshd.log").read_text()
                assert time.monotonic() < deadline, "sshd did not start"
                time.sleep(0.1)

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        """``line`` as an operator pastes it: run by the local shell, ssh from ``bin``."""
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.dir)}
        return subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)

    def received(self) -> list[list[str]]:
        path = self.record / "argv"
        return [x.split("\x1f")[:-1] for x in path.read_text().splitlines()] if path.exists() else []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        subprocess.run(["userdel", USER], capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.made_run_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)


@pytest.fixture
def sshd() -> Iterator[Sshd]:
    require(shutil.which("sshd") is not None or os.path.exists("/usr/sbin/sshd"),
            "openssh-server is not installed (apt-get install openssh-server)")
    require(shutil.which("ssh") is not None and shutil.which("useradd") is not None, "ssh or useradd is missing")
    require(os.geteuid() == 0, "the sshd test runs as root (it adds a user)")
    server = Sshd()
    try:
        server.start()
        yield server
    finally:
        server.stop()


# -- a hostname that is an ssh option -------------------------------------------------------


def test_a_hostname_label_never_runs_a_command_on_the_operators_machine(prometheus_factory, sshd) -> None:
    marker = sshd.dir / "SSHPWN"
    evil = Host(f"-oProxyCommand=sh -c 'touch {marker}' x",  # idle, emptiest: the best pick
                [Card(0, "GPU-e0000000-0000-4000-8000-000000000000", 0.0, 0,
                      procs=[Proc(66, "mallory", "python3", 0, "innocent")])])
    targets = [StaticTarget(gputui_text(h)) for h in (NODE1, NODE2, evil)]
    try:
        prom = prometheus_factory([t.address for t in targets])
        prom.wait_for("gputui_host_info", lambda r: len(r) == 3)
        prom.wait_for("up == 1", lambda r: len(r) == 3)

        # the operator pastes what pick printed: nothing may run on this machine
        picked = gputui("pick", "--prometheus", prom.url, "--format", "ssh")
        sshd.run(picked.stdout)
        assert not marker.exists(), picked.stdout

        res = gputui("fleet", "--prometheus", prom.url, "--json")
        assert res.returncode == 0, res.stderr
        hosts = {h["host"]: h for h in json.loads(res.stdout)["hosts"]}
        assert any("No ssh command is offered" in p for p in hosts[evil.hostname]["problems"])
        assert hosts["gpu-node-02"]["problems"] == []

        lines = []
        for fmt in ("ssh", "host-index", "docker"):
            res = gputui("pick", "--prometheus", prom.url, "--format", fmt)
            assert res.returncode == 0 and res.stdout.count("\n") == 1, res.stderr
            assert "-oProxyCommand" not in res.stdout and "-oProxyCommand" in res.stderr  # said, not offered
            lines.append(res.stdout.strip())
        assert shlex.split(lines[1]) == ["gpu-node-01", "1"]  # ties go to the hostname

        # the host screen's k and m, for every process of every host
        reader = FleetReader(PromClient(prom.url))
        snap = reader.read()
        reader.close()
        from gputui.ui.screens.fleet_host import kill_command, migrate_command

        offered, refused = [], []
        for host in snap.hosts:
            for gpu in host.gpus:
                for p in gpu.processes:
                    for command, why in (kill_command(host, gpu, p), migrate_command(host, gpu, p)):
                        (offered if command is not None else refused).append(command or why)
        assert len(refused) == 3 and sum("No command is offered for -oProxyCommand" in why for why in refused) == 2

        ran = [sshd.run(line) for line in (lines[0], *offered)]
        assert not marker.exists()  # nothing ran locally
        assert all(r.returncode == 0 for r in ran), [(r.args, r.stderr) for r in ran]
        # the remote shell got exactly the words: kill and migrate for gpu-node-01's train-llm, and
        # the evil host's commands never reached it
        assert sorted(sshd.received()) == [["kill", "4242"], ["kill", "777"], ["migrate", "train-llm", "--to", "1"]]
    finally:
        for t in targets:
            t.stop()


# -- hostile labels and values ------------------------------------------------------------------

PLUS_INF_MARK = 123456789


def hostile_data_text() -> str:
    host = Host("evil-data", [
        Card(0, "GPU-d0000000-0000-4000-8000-000000000000", 1e308, 1 * GIB),
        Card(1, "GPU-d0000000-0000-4000-8000-000000000001", -5.0, 1 * GIB),
        Card(2, "GPU-d0000000-0000-4000-8000-000000000002", 0.0, PLUS_INF_MARK,
             procs=[Proc(5, "u" * 300, "python3", 10**300, "x;touch /tmp/pwn")]),
    ])
    text = gputui_text(host).replace(f" {PLUS_INF_MARK}\n", " +Inf\n")
    extra = "".join(f'gputui_gpu_utilization_ratio{{gpu="{g}",uuid="GPU-bad"}} 0.5\n'
                    for g in ("²", "٣", "9" * 5000))
    head = "# TYPE gputui_gpu_utilization_ratio gauge\n"
    return text.replace(head, head + extra)


async def _until(pilot, predicate, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"{what} did not happen within {timeout} s"
        await pilot.pause(0.05)


def test_a_hostile_exporter_is_flagged_and_the_fleet_stays_up(prometheus_factory) -> None:
    targets = [StaticTarget(gputui_text(h)) for h in (NODE1, NODE3)] + [StaticTarget(hostile_data_text())]
    try:
        prom = prometheus_factory([t.address for t in targets])
        prom.wait_for("gputui_host_info", lambda r: len(r) == 3)
        prom.wait_for('gputui_gpu_utilization_ratio{gpu="²"}', bool)
        prom.wait_for("up == 1", lambda r: len(r) == 3)

        res = gputui("fleet", "--prometheus", prom.url, "--json")
        assert res.returncode == 0 and res.stderr == "", res.stderr
        hosts = {h["host"]: h for h in json.loads(res.stdout)["hosts"]}
        assert sorted(hosts) == ["evil-data", "gpu-node-01", "gpu-node-03"]
        evil = hosts["evil-data"]
        assert [g["index"] for g in evil["gpus"]] == [0, 1, 2]
        assert [g["utilization_gpu"] for g in evil["gpus"]] == [None, None, 0]
        assert evil["gpus"][2]["memory_used"] is None and evil["gpus"][2]["processes"][0]["gpu_memory"] is None
        assert len(evil["problems"]) >= 3 and hosts["gpu-node-01"]["problems"] == []
        assert hosts["gpu-node-01"]["gpus"][0]["utilization_gpu"] == 95

        for fmt in ("host-index", "ssh"):
            res = gputui("pick", "--prometheus", prom.url, "--format", fmt, "--window", "30")
            assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
            assert res.stdout.count("\n") == 1

        from textual.widgets import DataTable

        from gputui.ui.fleet_app import make_fleet_app

        async def screen() -> list[str]:
            app = make_fleet_app(FleetReader(PromClient(prom.url)), Settings(interval=1.0))
            async with app.run_test(size=(170, 40)) as pilot:
                table = app.screen.query_one("#fleet-hosts", DataTable)
                await _until(pilot, lambda: table.row_count == 3, "three hosts")
                names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
                await pilot.press("q")
            return names

        names = asyncio.run(screen())
        assert "gpu-node-01" in names and "gpu-node-03" in names and "evil-data ⚠" in names
    finally:
        for t in targets:
            t.stop()


# -- a hostile or guarded Prometheus ------------------------------------------------------------


class _Server:
    """A loopback HTTP server whose POST handler is ``handle(handler)``."""

    def __init__(self, handle) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                handle(self)

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def http_server():
    made: list[_Server] = []

    def make(handle) -> _Server:
        made.append(_Server(handle))
        return made[-1]

    yield make
    for m in made:
        m.close()


def _answer(handler, body: bytes, status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


@pytest.mark.parametrize("framing", ["length", "close"])
def test_timeout_bounds_the_whole_request_against_a_server_that_drips(http_server, framing: str) -> None:
    stop = threading.Event()

    def drip(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if framing == "length":
            handler.send_header("Content-Length", "1000000")
        else:  # read until the server closes
            handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        while not stop.wait(1.0):  # one byte a second: no single read ever waits long
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return

    srv = http_server(drip)
    try:
        started = time.monotonic()
        for args in (("fleet", "--json"), ("pick",)):
            res = gputui(*args, "--prometheus", f"http://{srv.address}", "--timeout", "3", timeout=60)
            assert res.returncode == 3 and res.stdout == ""
            assert res.stderr == f"gputui: Prometheus at http://{srv.address} did not answer within 3 s.\n"
        assert time.monotonic() - started < 30
    finally:
        stop.set()


def test_json_nested_200000_deep_is_one_sentence(http_server) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    body = b'{"status": "success", "data": {"resultType": "vector", "result": ' + deep + b"}}"
    srv = http_server(lambda h: _answer(h, body))
    for args in (("fleet", "--json"), ("pick",)):
        res = gputui(*args, "--prometheus", f"http://{srv.address}")
        assert res.returncode == 3 and res.stdout == "" and "Traceback" not in res.stderr
        assert res.stderr.startswith("gputui: ") and res.stderr.count("\n") == 1 and "nested" in res.stderr


def test_basic_auth_is_sent_and_the_password_never_printed(http_server, tmp_path) -> None:
    seen: list[str | None] = []
    good = "Basic " + base64.b64encode(b"admin:s3cr:t@pw").decode()

    def guarded(handler) -> None:
        seen.append(handler.headers.get("Authorization"))
        if handler.headers.get("Authorization") != good:
            _answer(handler, b"Unauthorized\n", 401)
            return
        _answer(handler, EMPTY)

    srv = http_server(guarded)
    url = f"http://admin:s3cr%3At%40pw@{srv.address}"
    res = gputui("fleet", "--json", "--prometheus", url)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["prometheus"] == f"http://admin:***@{srv.address}"
    assert seen and set(seen) == {good}

    password = tmp_path / "password"
    password.write_text("s3cr:t@pw\n")
    seen.clear()
    res = gputui("fleet", "--json", "--prometheus", f"http://{srv.address}", "--prometheus-user", "admin",
                 "--prometheus-password-file", str(password))
    assert res.returncode == 0 and set(seen) == {good}, res.stderr
    seen.clear()
    res = gputui("fleet", "--json", "--prometheus", f"http://admin@{srv.address}", "--prometheus-password-file",
                 str(password))
    assert res.returncode == 0 and set(seen) == {good}, res.stderr

    # refused, and unreachable: the sentence names the server, never the password
    for bad in (f"http://admin:guess-7@{srv.address}", f"http://admin:s3cret@127.0.0.1:{free_port()}"):
        res = gputui("fleet", "--json", "--prometheus", bad)
        assert res.returncode == 3 and "http://admin:***@127.0.0.1:" in res.stderr
        assert "guess-7" not in res.stderr and "s3cret" not in res.stderr and res.stderr.count("\n") == 1


# -- a host with too much to show -------------------------------------------------------------


def test_a_host_with_thousands_of_processes_and_a_100kb_name_stays_usable() -> None:
    from textual.widgets import DataTable

    from gputui.core.fleet.prom import PrometheusError
    from gputui.core.fleet.queries import build_fleet
    from gputui.ui.fleet_app import make_fleet_app
    from tests.test_fleet_model import NOW, gputui_host, s, up

    procs = [s("gputui_process_gpu_memory_bytes", (i + 1) * 1024**2, instance="a:1", gpu=str(i % 2), pid=str(100 + i),
               user="u", exe="python3") for i in range(2000)]
    samples = gputui_host("a:1", "n" * 100_000) + gputui_host("b:1", "z-node-02")
    snap = build_fleet("http://p", NOW, [up("a:1"), up("b:1")], [], samples, procs, [])

    class Fixed(FleetReader):
        def read(self):
            return snap

        def host_history(self, host, span=600.0, points=120):
            raise PrometheusError("no history in this test.")

    async def run() -> tuple[list[str], int, str]:
        app = make_fleet_app(Fixed(PromClient("http://127.0.0.1:9")), Settings(interval=60.0))
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#fleet-hosts", DataTable)
            await _until(pilot, lambda: table.row_count == 2, "two hosts")
            names = [str(table.get_row_at(i)[0]) for i in range(2)]
            await pilot.press("enter")  # the long name sorts first
            await _until(pilot, lambda: app.screen.query("#host-procs")
                         and app.screen.query_one("#host-procs", DataTable).row_count > 0, "the processes")
            procs_table = app.screen.query_one("#host-procs", DataTable)
            last = " ".join(str(c) for c in procs_table.get_row_at(procs_table.row_count - 1))
            rows = procs_table.row_count
            await pilot.press("q")
        return names, rows, last

    names, rows, last = asyncio.run(run())
    assert len(names[0]) <= 50 and names[0].endswith("… ⚠") and names[1] == "z-node-02"
    assert rows == 500 and "1501 more processes" in last


# -- issue 28.1: m and pick --prometheus share one placement rule ---------------------------------


def test_m_on_a_gpus_all_container_of_the_demo_host_names_a_gpu(prometheus_factory) -> None:
    """The demo's bert-finetune runs with `--gpus all`: the exporter lists all eight GPUs as granted,
    which reserves none in particular (as the local dashboard and pick read it)."""
    from tests.exporter_helpers import Exporter

    exporter = Exporter(["--demo", "--hostname", "gpu-node-03", "--interval", "0.5"], dict(os.environ))
    try:
        prom = prometheus_factory([exporter.address])
        prom.wait_for('gputui_container_gpu_granted{container="bert-finetune"}', lambda r: len(r) == 8)
        prom.wait_for('gputui_process_gpu_memory_bytes{container="bert-finetune"}', bool)
        reader = FleetReader(PromClient(prom.url))
        host = reader.read().hosts[0]
        reader.close()
        from gputui.ui.screens.fleet_host import migrate_command

        gpu, proc = next((g, p) for g in host.gpus for p in g.processes if p.container == "bert-finetune")
        command, why = migrate_command(host, gpu, proc)
        assert command is not None, why
        from gputui.core.fleet.pick import best_other_gpu

        target = best_other_gpu(host, gpu.index)
        assert target is not None and command == (f"ssh -- gpu-node-03 'gputui migrate bert-finetune "
                                                  f"--to {target.index}'")
        # pick --prometheus would offer that GPU too: it is the least loaded one left
        res = gputui("pick", "--prometheus", prom.url, "--window", "5")
        assert res.returncode == 0 and res.stdout.startswith("gpu-node-03 "), res.stderr
    finally:
        exporter.stop()
