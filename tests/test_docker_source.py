"""DockerSource without a daemon: grant resolution, and every way Docker can be unusable.

Each failure must come back as ``available=False`` with one sentence, quickly, and
never as an exception. The hung daemon is a real unix socket server that accepts
and never answers; the permission test drops root's DAC override so the socket's
mode really refuses the connection.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gputui.core.grants import HostGpus, read_grant
from gputui.core.sources import SourceUnavailable
from gputui.core.sources.docker_source import (
    DockerSource,
    describe_error,
    docker_client,
    parse_docker_time,
    restart_policy,
)
from tests.conftest import require

REPO = Path(__file__).resolve().parent.parent
UUIDS = ("GPU-0000aaaa-1111-2222-3333-444455556666", "GPU-1111bbbb-1111-2222-3333-444455556666",
         "GPU-2222cccc-1111-2222-3333-444455556666", "GPU-3333dddd-1111-2222-3333-444455556666")
#: minor numbers differ from NVML indices here on purpose: /dev/nvidia3 is GPU 1
MINORS = {2: UUIDS[0], 3: UUIDS[1], 0: UUIDS[2], 1: UUIDS[3]}
GPU_CAPS = [["gpu"]]


def resolve_grant(attrs):
    return read_grant(attrs, HostGpus.from_uuids(UUIDS, MINORS))


def inspect(device_requests=None, runtime="runc", env=(), devices=None) -> dict:
    return {"HostConfig": {"DeviceRequests": device_requests, "Runtime": runtime, "Devices": devices or []},
            "Config": {"Env": list(env)}}


def req(ids=None, count=0, driver="", caps=GPU_CAPS) -> dict:
    return {"Driver": driver, "Count": count, "DeviceIDs": ids, "Capabilities": caps, "Options": {}}


# -- grant forms --------------------------------------------------------------------

@pytest.mark.parametrize("attrs,gpus,source,problems", [
    (inspect([req(["1"])]), (UUIDS[1],), "device_request", 0),
    (inspect([req([UUIDS[2].lower()])]), (UUIDS[2],), "device_request", 0),
    (inspect([req([UUIDS[3].upper().replace("GPU-", "GPU-")])]), (UUIDS[3],), "device_request", 0),
    (inspect([req(["0", "2"])]), (UUIDS[0], UUIDS[2]), "device_request", 0),
    (inspect([req(count=-1)]), "all", "device_request", 0),
    (inspect([req(count=2)]), (UUIDS[0], UUIDS[1]), "device_request", 0),
    (inspect([req(count=6)]), UUIDS, "device_request", 2),
    (inspect([req(["9"])]), (), "device_request", 1),
    (inspect([req(["GPU-deadbeef"])]), (), "device_request", 1),
    (inspect([req(["0"], caps=[["compute", "utility", "gpu"]])]), (UUIDS[0],), "device_request", 0),
    (inspect([req(["0"], caps=[["tpu"]])]), (), "none", 0),
    (inspect([req(["0"], driver="nvidia", caps=None)]), (UUIDS[0],), "device_request", 0),
    (inspect([req(["nvidia.com/gpu=1"], driver="cdi", caps=None)]), (UUIDS[1],), "cdi", 0),
    (inspect([req([f"nvidia.com/gpu={UUIDS[3]}"], driver="cdi", caps=None)]), (UUIDS[3],), "cdi", 0),
    (inspect([req(["nvidia.com/gpu=all"], driver="cdi", caps=None)]), "all", "cdi", 0),
    (inspect([req(["amd.com/gpu=0"], driver="cdi", caps=None)]), (), "none", 0),
    (inspect(runtime="nvidia", env=["NVIDIA_VISIBLE_DEVICES=2,3"]), (UUIDS[2], UUIDS[3]), "nvidia_runtime_env", 0),
    (inspect(runtime="nvidia", env=[f"NVIDIA_VISIBLE_DEVICES={UUIDS[1]}"]), (UUIDS[1],), "nvidia_runtime_env", 0),
    (inspect(runtime="nvidia", env=["NVIDIA_VISIBLE_DEVICES=all"]), "all", "nvidia_runtime_env", 0),
    (inspect(runtime="nvidia", env=["NVIDIA_VISIBLE_DEVICES=none"]), (), "none", 0),
    (inspect(runtime="nvidia", env=["NVIDIA_VISIBLE_DEVICES=void"]), (), "none", 0),
    (inspect(runtime="nvidia"), (), "none", 0),
    # CUDA images set NVIDIA_VISIBLE_DEVICES=all for everyone: without the nvidia runtime it grants nothing.
    (inspect(runtime="runc", env=["NVIDIA_VISIBLE_DEVICES=all"]), (), "none", 0),
    (inspect(devices=[{"PathOnHost": "/dev/nvidia3", "PathInContainer": "/dev/nvidia3",
                       "CgroupPermissions": "rwm"}]), (UUIDS[1],), "devices", 0),
    (inspect(devices=[{"PathOnHost": "/dev/nvidia7", "PathInContainer": "/dev/nvidia7",
                       "CgroupPermissions": "rwm"}]), (), "devices", 1),
    (inspect(devices=[{"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl",
                       "CgroupPermissions": "rwm"}]), (), "none", 0),
    (inspect([req(["0"])], devices=[{"PathOnHost": "/dev/nvidia3", "PathInContainer": "/dev/nvidia3"}]),
     (UUIDS[0], UUIDS[1]), "device_request", 0),
    (inspect(), (), "none", 0),
])
def test_every_grant_form_resolves_to_this_hosts_uuids(attrs, gpus, source, problems):
    grant = resolve_grant(attrs)
    assert (grant.gpus, grant.source, len(grant.problems)) == (gpus, source, problems)


def test_grant_problems_and_raw_values_read_well():
    grant = resolve_grant(inspect([req(["1", "9"])]))
    assert grant.raw == ("1", "9")
    assert grant.problems == ("its device request names GPU 9, which does not exist on this host (4 GPUs)",)
    assert resolve_grant(inspect([req(count=3)])).raw == ("count=3",)


def test_small_parsers():
    assert restart_policy({"RestartPolicy": {"Name": "", "MaximumRetryCount": 0}}) == "no"
    assert restart_policy({"RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3}}) == "on-failure:3"
    assert restart_policy({}) is None
    assert parse_docker_time("2026-11-29T15:45:09.377980933Z") == pytest.approx(1795967109.377981)
    assert parse_docker_time("0001-01-01T00:00:00Z") is None


# -- a Docker that cannot be used -------------------------------------------------------

def env_for(host: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    if host is not None:
        env["DOCKER_HOST"] = host
    env.update(extra)
    return env


def test_missing_socket_is_one_sentence(tmp_path):
    host = f"unix://{tmp_path}/nope.sock"
    inv = DockerSource(timeout=1, environ=env_for(host)).inventory(UUIDS, MINORS)
    assert (inv.available, inv.containers) == (False, ())
    assert inv.error == f"the Docker daemon is not running (no socket at {tmp_path}/nope.sock (DOCKER_HOST))"
    with pytest.raises(SourceUnavailable, match="^the Docker daemon is not running"):
        docker_client(1, env_for(host))


def test_docker_not_installed(tmp_path, monkeypatch):
    from gputui.core.sources import docker_source

    # A machine without Docker: no default socket, no docker binaries on PATH, no DOCKER_HOST.
    monkeypatch.setattr(docker_source, "DEFAULT_SOCKET", str(tmp_path / "docker.sock"))
    env = env_for(None, PATH=str(tmp_path), XDG_RUNTIME_DIR=str(tmp_path))
    inv = DockerSource(timeout=1, environ=env).inventory(UUIDS, MINORS)
    assert (inv.available, inv.error) == (False, "Docker is not installed")
    (tmp_path / "dockerd").write_text("#!/bin/sh\n")
    (tmp_path / "dockerd").chmod(0o755)
    inv = DockerSource(timeout=1, environ=env).inventory(UUIDS, MINORS)
    assert inv.error == f"the Docker daemon is not running (no socket at {tmp_path}/docker.sock)"


def test_socket_file_without_a_daemon(tmp_path):
    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the file stays, nobody listens: what a crashed dockerd leaves behind
    inv = DockerSource(timeout=1, environ=env_for(f"unix://{path}")).inventory(UUIDS, MINORS)
    assert (inv.available, inv.error) == (False, "the Docker daemon is not running")


class HungDaemon:
    """A unix socket server that accepts connections and never answers: a hung dockerd."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(64)
        self.conns: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue

    def close(self) -> None:
        self._stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def hung_daemon(tmp_path):
    daemon = HungDaemon(tmp_path / "hung.sock")
    yield daemon
    daemon.close()


def test_hung_daemon_times_out_with_a_sentence(hung_daemon):
    src = DockerSource(timeout=0.5, environ=env_for(hung_daemon.host))
    start = time.monotonic()
    inv = src.inventory(UUIDS, MINORS)
    elapsed = time.monotonic() - start
    assert (inv.available, inv.error) == (False, "the Docker daemon did not answer within 0.5 s")
    assert elapsed < 2.0, f"a hung daemon held inventory() for {elapsed:.1f} s"
    assert hung_daemon.conns, "the source never reached the socket"


@pytest.mark.functional  # a process of its own
def test_permission_denied_names_the_socket_and_the_fix(tmp_path):
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None,
            "needs root and setpriv to drop CAP_DAC_OVERRIDE")
    path = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o755)
    code = ("from gputui.core.sources.docker_source import DockerSource;"
            "inv = DockerSource(timeout=2).inventory((), {}); print(inv.available, inv.error, sep='|')")
    try:
        # Root minus DAC override obeys file modes, like a user outside the docker group.
        out = subprocess.run(
            ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
             "--inh-caps=-dac_override,-dac_read_search", sys.executable, "-c", code],
            env=env_for(f"unix://{path}", PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60)
    finally:
        server.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"False|permission denied on {path} (add your user to the docker group)"


@pytest.mark.functional  # a process of its own
def test_without_the_docker_package(tmp_path):
    code = ("import sys; sys.modules['docker'] = None\n"
            "from gputui.core.sources.docker_source import DockerSource\n"
            "inv = DockerSource(timeout=1).inventory((), {}); print(inv.available, inv.error, sep='|')")
    sock = tmp_path / "d.sock"
    sock.touch()
    out = subprocess.run([sys.executable, "-c", code], env=env_for(f"unix://{sock}", PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False|the docker Python package is not installed (pip install docker)", out.stderr


@pytest.mark.functional  # a process of its own
def test_importing_the_source_does_not_import_docker():
    code = "import sys, gputui.core.sources.docker_source; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=env_for(None, PYTHONPATH=str(REPO)))
    assert out.stdout.strip() == "False", out.stderr


def test_describe_error_for_wrapped_failures():
    import requests

    wrapped = requests.exceptions.ConnectionError(
        ConnectionResetError(104, "Connection reset by peer"))
    assert describe_error(wrapped, "unix:///x.sock") == "the Docker daemon closed the connection (is it restarting?)"
    refused = requests.exceptions.ConnectionError(ConnectionRefusedError(111, "Connection refused"))
    assert describe_error(refused, "tcp://10.0.0.1:2375") == "nothing answers at tcp://10.0.0.1:2375"
    import docker

    class Resp:
        status_code = 500
        reason = "Internal Server Error"
        url = "http://x"

    api = docker.errors.APIError("500 Server Error", response=Resp(), explanation="daemon is shutting down")
    assert describe_error(api, "unix:///x.sock") == \
        "the Docker daemon answered with an error (500): daemon is shutting down"
