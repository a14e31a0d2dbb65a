"""The judging half of ``gputui doctor``: facts in, pass/warn/fail with a sentence and a fix out.

The probes that gather the facts from a real machine (the fake NVIDIA driver,
a real dockerd, real namespaces and device nodes) are tested in
test_doctor_real.py.
"""

from __future__ import annotations

import io
import json

import pytest

from gputui.core.doctor import checks as C
from gputui.core.doctor.facts import (
    ContainerEnvFacts,
    ContainerFinding,
    DeviceFacts,
    DeviceNode,
    DockerFacts,
    DoctorFacts,
    GpuHealth,
    NvmlFacts,
    RecorderFacts,
    RuntimeFacts,
    RuntimeProbe,
)
from gputui.core.record import replace


def _by_name(checks):
    return {c.name: c for c in checks}


HEALTHY = NvmlFacts(
    ok=True, library_path="/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", driver_version="550.54.15",
    cuda_driver_version="12.4", nvml_version="12.550.54.15", bindings_version="12.550.52",
    kernel_module_version="550.54.15",
    gpus=tuple(GpuHealth(index=i, name="NVIDIA A100-SXM4-80GB", persistence_mode=True, ecc_errors=0,
                         retired_pages_sbe=0, retired_pages_dbe=0, retired_pages_pending=False,
                         remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remapped_rows_pending=False,
                         remapped_rows_failure=False) for i in range(2)),
)
NODES = DeviceFacts(tuple(DeviceNode(p, True, usable=True, owner="root:root 0666")
                          for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1")),
                    user="alice", groups=("alice",), listed_groups=("alice",))
DOCKER = DockerFacts(socket_exists=True, socket_accessible=True, reachable=True, server_version="26.1.4",
                     api_version="1.45", runtimes=("nvidia", "runc"), default_runtime="runc",
                     hook_path="/usr/bin/nvidia-container-runtime-hook", user="alice")
GOOD = DoctorFacts(nvml=HEALTHY, devices=NODES, container_env=ContainerEnvFacts(in_container=False,
                   host_pid_namespace=True, host_cgroup_namespace=True), docker=DOCKER, container_findings=(),
                   host="gpu-node",
                   runtimes=RuntimeFacts(probes=(RuntimeProbe("Docker", "unix:///var/run/docker.sock", True),)),
                   recorder=RecorderFacts(running=True, pid=4242, db="/var/lib/gputui/history.db", writing=True))


def test_a_healthy_machine_passes_every_check_and_exits_0():
    checks = C.judge(GOOD)
    assert [c.status for c in checks] == ["pass"] * len(checks)
    assert all(c.fix is None for c in checks)
    assert {c.name for c in checks} == {
        "nvml", "nvml-functions", "gpu-models", "gpu-drivers", "persistence-mode", "device-nodes", "container",
        "cgroup-namespace", "docker-socket", "docker-daemon", "nvidia-runtime", "docker-gpus",
        "containers-unpinned", "containers-env", "container-runtimes", "kubernetes-names", "mig-devices",
        "mig-mode-change", "mig-grants", "gpu-lost", "ecc-errors", "memory-repair", "throttling", "history",
        "house-rules", "guard"}
    assert C.exit_status(checks) == 0
    nvml = _by_name(checks)["nvml"].message
    assert "driver 550.54.15, CUDA driver 12.4, NVML 12.550.54.15, nvidia-ml-py 12.550.52" in nvml


def test_warnings_do_not_fail_the_run_but_a_failure_does():
    warn = C.Check("x", "warn", "w", "f")
    fail = C.Check("y", "fail", "f", "f")
    assert C.exit_status([warn]) == 0
    assert C.exit_status([warn, fail]) == 1


@pytest.mark.parametrize("kind, fix_part", [
    ("library-not-found", "Install the NVIDIA driver"),
    ("driver-not-loaded", "sudo modprobe nvidia"),
    ("mismatch", "reboot"),
    ("no-permission", "/dev/nvidia*"),
])
def test_nvml_failures_name_the_fix(kind, fix_part):
    checks = C.judge(replace(GOOD, nvml=NvmlFacts(ok=False, error="NVML could not start.", error_kind=kind)))
    nvml = _by_name(checks)["nvml"]
    assert nvml.status == "fail" and fix_part in nvml.fix
    # without NVML the GPU checks are not made up (skip, saying why), the rest still runs
    names = {c.name for c in checks}
    by = _by_name(checks)
    assert by["persistence-mode"].status == by["throttling"].status == "skip"
    assert "NVML is not reachable" in by["throttling"].message
    assert [c.name for c in checks] == list(C.ALL_CHECKS)
    assert {"device-nodes", "container", "docker-gpus"} <= names
    assert C.exit_status(checks) == 1


def test_library_and_kernel_module_mismatch_fails():
    nvml = replace(HEALTHY, kernel_module_version="535.161.08")
    check = C.check_nvml(nvml)[0]
    assert check.status == "fail"
    assert "reports driver 550.54.15 but the loaded kernel module is 535.161.08" in check.message


def test_missing_functions_warn():
    check = _by_name(C.check_nvml(replace(HEALTHY, missing_functions=("persistence_mode",))))["nvml-functions"]
    assert check.status == "warn" and "persistence mode" in check.message


def test_mixed_models_and_foreign_drivers_warn():
    gpus = (HEALTHY.gpus[0], replace(HEALTHY.gpus[1], name="NVIDIA A100-PCIE-40GB"))
    checks = _by_name(C.check_gpu_models(replace(HEALTHY, gpus=gpus, foreign_bound=(("0000:87:00.0", "vfio-pci"),))))
    assert checks["gpu-models"].status == "warn"
    assert "GPU 0: NVIDIA A100-SXM4-80GB; GPU 1: NVIDIA A100-PCIE-40GB" in checks["gpu-models"].message
    assert checks["gpu-drivers"].status == "warn" and "0000:87:00.0 (vfio-pci)" in checks["gpu-drivers"].message


def test_persistence_off_warns_na_passes():
    off = replace(HEALTHY, gpus=(replace(HEALTHY.gpus[0], persistence_mode=False), HEALTHY.gpus[1]))
    check = C.check_persistence(off)
    assert check.status == "warn" and "GPU 0" in check.message and "nvidia-persistenced" in check.fix
    na = replace(HEALTHY, gpus=tuple(replace(g, persistence_mode=None) for g in HEALTHY.gpus))
    assert C.check_persistence(na).status == "pass"


def test_device_nodes_missing_unusable_and_new_group():
    missing = replace(NODES, nodes=(DeviceNode("/dev/nvidiactl", False),) + NODES.nodes[1:])
    check = C.check_device_nodes(missing, nvml_ok=True)
    assert check.status == "fail" and "/dev/nvidiactl does not exist" in check.message

    locked = tuple(replace(n, usable=False, owner="root:video 0660", group="video") for n in NODES.nodes)
    check = C.check_device_nodes(replace(NODES, nodes=locked), nvml_ok=True)
    assert check.status == "fail" and "alice cannot open" in check.message
    assert "sudo usermod -aG video alice" in check.fix

    fresh = replace(NODES, nodes=locked, listed_groups=("alice", "video"))
    assert "log out and back in" in C.check_device_nodes(fresh, nvml_ok=True).fix

    no_uvm = replace(NODES, nodes=tuple(n if n.path != "/dev/nvidia-uvm" else DeviceNode(n.path, False)
                                        for n in NODES.nodes))
    check = C.check_device_nodes(no_uvm, nvml_ok=True)
    assert check.status == "warn" and "modprobe nvidia-uvm" in check.fix


def test_container_without_host_pid_namespace_fails_and_private_cgroupns_warns():
    checks = _by_name(C.check_container_env(ContainerEnvFacts(
        in_container=True, evidence="/.dockerenv exists", host_pid_namespace=False, host_cgroup_namespace=False)))
    assert checks["container"].status == "fail" and "--pid=host" in checks["container"].fix
    assert checks["cgroup-namespace"].status == "warn" and "--cgroupns=host" in checks["cgroup-namespace"].fix
    ok = _by_name(C.check_container_env(ContainerEnvFacts(in_container=True, evidence="/.dockerenv exists",
                                                          host_pid_namespace=True, host_cgroup_namespace=True)))
    assert ok["container"].status == "pass" and "shares the host's PID namespace" in ok["container"].message


def test_docker_socket_missing_is_a_warning_not_a_failure():
    checks = C.check_docker(DockerFacts(socket_exists=False))
    assert [(c.name, c.status) for c in checks] == [("docker-socket", "warn")]


def test_docker_socket_permission_explains_group_membership():
    facts = DockerFacts(socket_exists=True, socket_accessible=False, socket_owner="root:docker 0660",
                        socket_group="docker", in_group_now=False, in_group_listed=False, user="bob")
    check = C.check_docker(facts)[0]
    assert check.status == "fail"
    assert check.message == "bob cannot use the Docker socket /var/run/docker.sock (owned by root:docker 0660)."
    assert "sudo usermod -aG docker bob" in check.fix
    relog = C.check_docker(replace(facts, in_group_listed=True))[0]
    assert "log out and back in" in relog.fix and "newgrp docker" in relog.fix


def test_docker_daemon_not_answering_fails():
    checks = _by_name(C.check_docker(DockerFacts(socket_exists=True, socket_accessible=True, reachable=False,
                                                 error="the Docker daemon did not answer within 5 s")))
    assert checks["docker-daemon"].status == "fail" and "did not answer" in checks["docker-daemon"].message


def test_no_nvidia_toolkit_fails_both_runtime_and_gpus():
    checks = _by_name(C.check_docker(replace(DOCKER, runtimes=("runc",), hook_path=None)))
    assert checks["nvidia-runtime"].status == "fail"
    assert checks["docker-gpus"].status == "fail"
    assert "could not select device driver" in checks["docker-gpus"].message
    assert "nvidia-container-toolkit" in checks["docker-gpus"].fix


@pytest.mark.parametrize("name", ["nvidia", "nvidia-experimental"])
def test_default_runtime_nvidia_warns_about_every_gpu(name):
    # Any nvidia* runtime is the legacy form, as the grant model reads it (core/grants.py).
    checks = _by_name(C.check_docker(replace(DOCKER, runtimes=(name, "runc"), default_runtime=name)))
    runtime = checks["nvidia-runtime"]
    assert runtime.status == "warn" and "NVIDIA_VISIBLE_DEVICES=all" in runtime.message
    assert f"Docker's default runtime is {name} (" in runtime.message


def test_hook_installed_after_dockerd_started_warns():
    checks = _by_name(C.check_docker(replace(DOCKER, hook_newer_than_daemon=True)))
    assert checks["docker-gpus"].status == "warn" and "restart docker" in checks["docker-gpus"].fix


def test_container_findings_become_warnings_with_fixes():
    findings = (ContainerFinding("bert", "unpinned", "bert can use all 8 GPUs (--gpus all) and nothing narrows it."),
                ContainerFinding("worker-2", "env-conflict", "worker-2: CUDA_VISIBLE_DEVICES=1 names nothing."),
                ContainerFinding("other", "unpinned", "other can use all 8 GPUs."),
                ContainerFinding("x", "idle-grant", "x holds GPU 7."))
    checks = _by_name(C.check_containers(findings, None, False))
    assert checks["containers-unpinned"].status == "warn"
    assert checks["containers-unpinned"].message == ("bert can use all 8 GPUs (--gpus all) and nothing narrows it "
                                                     "(1 more: other).")
    assert checks["containers-env"].status == "warn" and "CUDA_VISIBLE_DEVICES" in checks["containers-env"].fix
    not_checked = _by_name(C.check_containers(None, "Docker is not running", False))
    assert not_checked["containers-env"].message == "Not checked: Docker is not running."


def test_health_lost_ecc_remap_and_throttling():
    g0, g1 = HEALTHY.gpus
    sick = replace(HEALTHY, gpus=(
        replace(g0, ecc_errors=4, remapped_rows_pending=True, throttle_reasons=("hw_thermal_slowdown",),
                temperature=92),
        replace(g1, lost=True),
    ))
    checks = _by_name(C.check_health(sick))
    assert checks["gpu-lost"].status == "fail" and checks["gpu-lost"].message.startswith("GPU 1 has fallen off")
    assert checks["ecc-errors"].status == "warn" and "GPU 0: 4" in checks["ecc-errors"].message
    assert checks["memory-repair"].status == "warn" and "reset" in checks["memory-repair"].fix
    assert checks["throttling"].status == "warn" and "GPU 0 92°C" in checks["throttling"].message
    failed = replace(HEALTHY, gpus=(replace(g0, remapped_rows_failure=True), g1))
    assert _by_name(C.check_health(failed))["memory-repair"].status == "fail"
    capped = replace(HEALTHY, gpus=(replace(g0, throttle_reasons=("sw_power_cap",), power_draw=399.0,
                                            power_limit=400.0), g1))
    assert "GPU 0 399/400 W" in _by_name(C.check_health(capped))["throttling"].message


def test_render_shows_status_name_sentence_and_fix():
    text = C.render([C.Check("nvml", "pass", "NVML works."), C.Check("docker-gpus", "fail", "No hook.", "Install it.")],
                    "gputui doctor on h")
    assert text.splitlines() == [
        "gputui doctor on h",
        "PASS  nvml         NVML works.",
        "FAIL  docker-gpus  No hook.",
        "                   fix: Install it.",
        "2 checks: 1 passed, 0 warnings, 1 failed.",
    ]


def test_doctor_that_cannot_run_exits_2_with_one_sentence():
    from gputui.cli import build_parser
    from gputui.commands import doctor
    from gputui.context import Context
    from gputui.core.config import Settings

    class Broken(Context):
        def open_machine(self, docker=None):
            raise RuntimeError("the probe exploded")

    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["doctor", "--no-docker"])
    assert doctor.run(Broken(args=args, settings=Settings(), stdout=out, stderr=err)) == 2
    assert err.getvalue() == "gputui: doctor could not run: RuntimeError: the probe exploded.\n"
    assert out.getvalue() == ""


def test_json_document_shape_on_the_demo(capsys):
    from gputui.cli import main

    assert main(["--demo", "doctor", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["demo"] is True
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "message", "fix"}
        assert c["status"] in ("pass", "warn", "fail", "skip")
        assert (c["fix"] is None) == (c["status"] in ("pass", "skip"))
    # The demo lists the same checks as a real run (the README's 26).
    assert [c["name"] for c in doc["checks"]] == list(C.ALL_CHECKS) and len(C.ALL_CHECKS) == 26
    by = {c["name"]: c for c in doc["checks"]}
    assert by["nvml"]["message"].startswith("Demo:")
    assert by["containers-env"]["status"] == "warn" and "eval-server" in by["containers-env"]["message"]
    assert by["containers-unpinned"]["status"] == "warn" and "bert-finetune" in by["containers-unpinned"]["message"]


def test_docker_29_2_registers_the_nvidia_driver_through_the_cdi_hook():
    facts = replace(DOCKER, hook_path=None, cdi_hook_path="/usr/bin/nvidia-cdi-hook")
    assert _by_name(C.check_docker(replace(facts, server_version="29.2.0")))["docker-gpus"].status == "pass"
    # older daemons do not know the CDI hook: --gpus still needs the runtime hook
    assert _by_name(C.check_docker(replace(facts, server_version="28.5.2")))["docker-gpus"].status == "fail"


@pytest.mark.integration
def test_without_a_driver_every_check_is_listed_and_nothing_unchecked_passes(fake_nvml):
    """Issue 13: without a driver doctor showed 'PASS containers-unpinned Not checked: …' and left 11 checks out."""
    from tests.fakenvml.scenario import gpu, scenario

    fake_nvml.write(scenario([gpu(0)], init_error="driver_not_loaded"))
    res = fake_nvml.run_gputui("doctor", "--json", "--no-docker")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    by = {c["name"]: c for c in doc["checks"]}
    assert list(by) == list(C.ALL_CHECKS)
    assert by["nvml"]["status"] == "fail"
    for name in ("containers-unpinned", "containers-env", "gpu-lost", "throttling", "nvml-functions", "docker-gpus"):
        assert by[name]["status"] == "skip", name
        assert by[name]["message"].startswith("Not checked:")
    assert not any(c["status"] == "pass" and c["message"].startswith("Not checked") for c in doc["checks"])
    res = fake_nvml.run_gputui("doctor", "--no-docker")
    assert "SKIP  containers-unpinned  Not checked: --no-docker was given." in res.stdout
    assert res.stdout.rstrip().endswith("skipped.")
