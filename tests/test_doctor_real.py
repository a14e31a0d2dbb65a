"""``gputui doctor`` against real parts: the fake NVIDIA driver, a real dockerd (with and without the
stub NVIDIA hook), real namespaces, real device nodes and sockets seen by an unprivileged user.

This machine has no GPU, so it has no /dev/nvidia* either. Where a test wants the
device-node check to pass, doctor runs in a private mount namespace whose /dev
holds the nodes a driver would create (character devices, major 195).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakenvml.scenario import FakeNvml, GiB, gpu, process, scenario
from tests.fixtures.unprivileged import readable_pythonpath

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534

pytestmark = pytest.mark.integration

_FAKE_DEV = (
    "mount -t tmpfs -o mode=755 gputui-dev /dev && "
    "mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/zero c 1 5 && mknod -m 666 /dev/urandom c 1 9 && "
    "mknod -m 666 /dev/nvidiactl c 195 255 && mknod -m 666 /dev/nvidia-uvm c 511 0 && "
    "for m in $GPUTUI_TEST_MINORS; do mknod -m 666 /dev/nvidia$m c 195 $m; done && exec \"$@\""
)


def _unshare_ok() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                          capture_output=True).returncode == 0


def doctor(fake: FakeNvml, *args: str, gpus: int = 1, env: dict[str, str] | None = None,
           fake_dev: bool = True, wrap: list[str] | None = None) -> tuple[int, dict, str]:
    """Run ``gputui doctor --json ARGS`` against the fake driver; (exit status, document, stderr)."""
    e = fake.env(env)
    e["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "gputui", "doctor", "--json", *args]
    if fake_dev:
        require(_unshare_ok(), "a private /dev for the device-node check needs root and unshare")
        e["GPUTUI_TEST_MINORS"] = " ".join(str(i) for i in range(gpus))
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _FAKE_DEV, "sh", *cmd]
    if wrap:
        cmd = [*wrap, *cmd]
    res = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert "Traceback" not in res.stderr, res.stderr
    doc = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, doc, res.stderr


def checks_of(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


# -- the fake driver --------------------------------------------------------------------------------


def test_a_complete_healthy_driver_passes_everything(fake_nvml):
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    rc, doc, err = doctor(fake_nvml, "--no-docker", gpus=2)
    by = checks_of(doc)
    # --no-docker: the Docker checks say they were skipped; the history recorder is optional; everything
    # else passes.
    bad = {n: c for n, c in by.items() if c["status"] != "pass"
           and not (c["status"] == "skip" and c["message"] == "Not checked: --no-docker was given.")
           and not (n == "history" and c["status"] != "fail")}
    assert rc == 0 and not bad, bad
    assert by["nvml"]["message"].startswith(f"NVML works from {fake_nvml.lib_path}: driver 550.54.15, CUDA driver "
                                            "12.4, NVML 12.550.54.15, nvidia-ml-py ")
    assert by["device-nodes"]["message"] == "All 4 /dev/nvidia* nodes are present and usable by root."
    assert by["gpu-models"]["message"] == "All 2 GPUs are NVIDIA A100-SXM4-80GB."
    assert by["memory-repair"]["message"] == "No retired pages or remapped rows."


def test_an_unhealthy_machine_warns_with_fixes(fake_nvml):
    fake_nvml.write(scenario([
        gpu(0, persistence_mode=False, throttle_reasons=["sw_thermal_slowdown"], temperature=93,
            processes=[process(os.getpid(), 2 * GiB)]),
        gpu(1, name="NVIDIA A100-PCIE-40GB", ecc_errors=2, retired_pages_pending=1, retired_pages_dbe=1),
    ]))
    rc, doc, err = doctor(fake_nvml, "--no-docker", gpus=2)
    by = checks_of(doc)
    assert rc == 0  # warnings only
    expect = {"persistence-mode": "GPU 0", "gpu-models": "2 models", "ecc-errors": "GPU 1: 2",
              "memory-repair": "GPU 1", "throttling": "GPU 0 93°C"}
    for name, part in expect.items():
        assert by[name]["status"] == "warn", by[name]
        assert part in by[name]["message"]
        assert by[name]["fix"]


def test_a_driver_lacking_functions_reports_them_as_not_available(fake_nvml_factory):
    fake = fake_nvml_factory(without=("nvmlDeviceGetPersistenceMode", "nvmlDeviceGetRemappedRows",
                                      "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPages_v2",
                                      "nvmlDeviceGetRetiredPagesPendingStatus"))
    fake.write(scenario([gpu(0)]))
    rc, doc, err = doctor(fake, "--no-docker")
    by = checks_of(doc)
    assert rc == 0
    assert by["nvml"]["status"] == "pass"
    assert by["nvml-functions"]["status"] == "warn" and "persistence mode" in by["nvml-functions"]["message"]
    assert by["persistence-mode"]["message"] == ("The driver does not report persistence mode (N/A), so there is "
                                                 "nothing to check.")
    assert by["memory-repair"]["message"] == "The GPUs do not report retired pages or remapped rows (N/A)."


def test_a_lost_gpu_fails_and_the_others_are_still_judged(fake_nvml):
    fake_nvml.write(scenario([gpu(0, throttle_reasons=["sw_power_cap"], power_draw=398.0), gpu(1, lost=True)]))
    rc, doc, err = doctor(fake_nvml, "--no-docker", gpus=2)
    by = checks_of(doc)
    assert rc == 1
    assert by["gpu-lost"]["status"] == "fail"
    assert by["gpu-lost"]["message"] == "GPU 1 has fallen off the bus or stopped answering NVML."
    assert "nvidia-smi -r" in by["gpu-lost"]["fix"]
    assert by["throttling"]["status"] == "warn" and "GPU 0 398/400 W" in by["throttling"]["message"]


@pytest.mark.parametrize("error, fix_part", [
    ("driver_not_loaded", "sudo modprobe nvidia"),
    ("lib_mismatch", "reboot"),
    ("no_permission", "/dev/nvidia*"),
])
def test_nvml_init_failure_is_a_failed_check_not_a_crash(fake_nvml, error, fix_part):
    fake_nvml.write(scenario([gpu(0)], init_error=error))
    rc, doc, err = doctor(fake_nvml, "--no-docker", fake_dev=False)
    by = checks_of(doc)
    assert rc == 1 and err == ""
    assert by["nvml"]["status"] == "fail" and fix_part in by["nvml"]["fix"]
    assert {"device-nodes", "container", "cgroup-namespace", "docker-socket"} <= set(by)
    assert by["gpu-lost"]["status"] == "skip"  # no GPU facts are made up


def test_text_output_has_a_line_per_check_and_the_fix(fake_nvml):
    fake_nvml.write(scenario([gpu(0, persistence_mode=False)]))
    env = fake_nvml.env()
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-m", "gputui", "doctor", "--no-docker"], env=env, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    lines = res.stdout.splitlines()
    assert lines[0].startswith("gputui doctor on ")
    warn = next(i for i, ln in enumerate(lines) if ln.startswith("WARN  persistence-mode"))
    assert lines[warn + 1].strip().startswith("fix: Enable the persistence daemon")
    assert lines[-1].endswith("skipped.")  # --no-docker


def test_without_the_host_pid_namespace_gpu_processes_are_invisible(fake_nvml):
    require(_unshare_ok(), "a private PID namespace needs root and unshare")
    fake_nvml.write(scenario([gpu(0, processes=[process(os.getpid(), GiB)])]))
    rc, doc, err = doctor(fake_nvml, "--no-docker", fake_dev=False,
                          wrap=["unshare", "--pid", "--fork", "--mount-proc"])
    by = checks_of(doc)
    assert rc == 1
    assert by["container"]["status"] == "fail"
    assert "without the host's PID namespace" in by["container"]["message"]
    assert "--pid=host" in by["container"]["fix"]


# -- a real dockerd -------------------------------------------------------------------------------


@pytest.mark.docker
def test_docker_with_the_nvidia_hook_and_container_findings(fake_nvml, docker_cleanup):
    d = docker_cleanup
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    d.run("gputui-doc-all", gpus="all")
    d.run("gputui-doc-conflict", gpus="device=0", environment={"CUDA_VISIBLE_DEVICES": "1"})
    rc, doc, err = doctor(fake_nvml, gpus=2, env=d.env())
    by = checks_of(doc)
    assert rc == 0, [c for c in doc["checks"] if c["status"] == "fail"]
    assert by["docker-socket"]["status"] == "pass" and d.host.removeprefix("unix://") in by["docker-socket"]["message"]
    daemon = by["docker-daemon"]["message"]
    assert daemon.startswith("Docker Engine 20.10") or "answers" in daemon
    assert by["nvidia-runtime"]["status"] == "pass" and "nvidia" in by["nvidia-runtime"]["message"]
    assert by["docker-gpus"]["status"] == "pass"
    assert str(d.bin / "nvidia-container-runtime-hook") in by["docker-gpus"]["message"]
    assert by["containers-unpinned"]["status"] == "warn" and "gputui-doc-all" in by["containers-unpinned"]["message"]
    assert by["containers-env"]["status"] == "warn" and "gputui-doc-conflict" in by["containers-env"]["message"]


@pytest.mark.docker
def test_docker_without_the_hook_fails_the_gpus_check_as_docker_itself_does(fake_nvml, dockerd_factory):
    import docker

    d = dockerd_factory(hook=False)
    # What the user would see: the request really fails, with the sentence doctor quotes.
    with pytest.raises(docker.errors.APIError) as info:
        d.run("gputui-doc-nohook", gpus="all")
    assert 'could not select device driver "" with capabilities: [[gpu]]' in str(info.value)
    d.remove_containers()
    fake_nvml.write(scenario([gpu(0)]))
    rc, doc, err = doctor(fake_nvml, env=d.env())
    by = checks_of(doc)
    assert rc == 1
    check = by["docker-gpus"]
    assert check["status"] == "fail"
    assert 'could not select device driver "" with capabilities: [[gpu]]' in check["message"]
    assert "dockerd finds no nvidia-container-runtime-hook (looked in dockerd's PATH)" in check["message"]
    assert "--runtime nvidia" in check["message"]  # this daemon has the legacy runtime registered
    assert "nvidia-container-toolkit" in check["fix"] and "restart" in check["fix"]


def test_no_docker_socket_is_a_warning(fake_nvml, tmp_path):
    fake_nvml.write(scenario([gpu(0)]))
    rc, doc, err = doctor(fake_nvml, env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    by = checks_of(doc)
    assert by["docker-socket"]["status"] == "warn"
    assert f"There is no Docker socket at {tmp_path}/none.sock" in by["docker-socket"]["message"]
    assert by["containers-env"]["message"].startswith("Not checked: ")
    assert rc == 0


# -- what an unprivileged user sees ---------------------------------------------------------------


@pytest.fixture
def open_dir():
    d = Path(tempfile.mkdtemp(prefix="gputui-doctor-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as(uid: int):
    def drop() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def _run_as_nobody(code: str) -> list[dict]:
    """Run probe code as nobody with an interpreter nobody can use; returns its JSON checks."""
    path = readable_pythonpath()
    for python in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not python:
            continue
        try:
            res = subprocess.run([python, "-c", code], env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
                                 preexec_fn=_as(NOBODY), capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if res.returncode == 0:
            return json.loads(res.stdout)
        if "ModuleNotFoundError" not in res.stderr and "Permission denied" not in res.stderr:
            raise AssertionError(res.stderr)
    require(False, "no Python with gputui's dependencies is usable by an unprivileged user")
    return []


def _group_named(*names: str) -> tuple[str, int] | None:
    import grp

    for name in names:
        try:
            return name, grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    return None


def test_device_nodes_this_user_cannot_open(open_dir):
    require(os.geteuid() == 0, "creating device nodes needs root")
    group = _group_named("video", "render", "adm")
    require(group is not None, "no video/render/adm group on this machine")
    name, gid = group
    for node, minor in (("nvidiactl", 255), ("nvidia-uvm", 0), ("nvidia0", 0)):
        path = open_dir / node
        os.mknod(path, 0o660 | 0o020000, os.makedev(195 if node != "nvidia-uvm" else 511, minor))
        os.chown(path, 0, gid)
        path.chmod(0o660)
    checks = _run_as_nobody(
        "import json; from gputui.core.doctor.probes import probe_devices; from gputui.core.doctor.checks import "
        f"check_device_nodes; c = check_device_nodes(probe_devices([0], dev={str(open_dir)!r}), True); "
        "print(json.dumps([c.to_json()]))")
    check = checks[0]
    assert check["status"] == "fail"
    assert check["message"].startswith(f"nobody cannot open {open_dir}/nvidiactl, {open_dir}/nvidia-uvm, "
                                       f"{open_dir}/nvidia0 (root:{name} 0660)")
    assert check["fix"] == f"Add nobody to group {name} (`sudo usermod -aG {name} nobody`) and log in again."


def test_docker_socket_this_user_cannot_use(open_dir):
    require(os.geteuid() == 0, "changing a socket's owner needs root")
    group = _group_named("docker")
    require(group is not None, "no docker group on this machine (docker.io creates it)")
    name, gid = group
    path = open_dir / "docker.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    try:
        os.chown(path, 0, gid)
        path.chmod(0o660)
        checks = _run_as_nobody(
            "import json; from gputui.core.doctor.probes import probe_docker; "
            "from gputui.core.doctor.checks import check_docker; "
            f"f = probe_docker(environ={{'DOCKER_HOST': 'unix://{path}'}}); "
            "print(json.dumps([c.to_json() for c in check_docker(f)]))")
    finally:
        srv.close()
    assert [c["name"] for c in checks] == ["docker-socket"]
    check = checks[0]
    assert check["status"] == "fail"
    assert check["message"] == f"nobody cannot use the Docker socket {path} (owned by root:docker 0660)."
    assert check["fix"].startswith("Add nobody to group docker (`sudo usermod -aG docker nobody`)")
