"""The pure parts of the NVML source and of the fake driver's scenario writer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gputui.core.sources import nvml
from tests.fakenvml.scenario import GiB, exported_functions, fake_uuid, gpu, process, render, scenario


@pytest.mark.parametrize(
    ("code", "phrase"),
    [
        (12, "libnvidia-ml.so.1 was not found"),
        (9, "kernel driver is not loaded"),
        (4, "no permission"),
        (18, "different versions"),
        (13, "too old"),
        (999, "could not be initialised"),
    ],
)
def test_init_errors_are_one_sentence(code: int, phrase: str) -> None:
    text = nvml.init_error_sentence(code, "Unknown Error")
    assert phrase in text
    assert text.endswith(".") and "\n" not in text


def test_cuda_version_as_nvidia_smi_prints_it() -> None:
    assert nvml.format_cuda_version(12040) == "12.4"
    assert nvml.format_cuda_version(11080) == "11.8"
    assert nvml.format_cuda_version(12000) == "12.0"
    assert nvml.format_cuda_version(0) is None
    assert nvml.format_cuda_version(None) is None


@pytest.mark.functional  # a process of its own
def test_importing_the_nvml_module_does_not_load_pynvml() -> None:
    code = ("import sys, gputui.core.sources.nvml, gputui.core.sources.processes; "
            "print('pynvml' in sys.modules, 'psutil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_reading_an_unopened_source_is_one_sentence() -> None:
    with pytest.raises(nvml.NvmlUnavailable, match="not initialised"):
        nvml.NvmlSource().read()


# -- the scenario writer -------------------------------------------------------------------------


def test_scenario_lines_carry_units_and_failures() -> None:
    text = render(scenario(
        [gpu(0, power_draw=250.5, throttle_reasons=["sw_power_cap", "hw_slowdown"], unsupported=["utilization_gpu"],
             errors={"temperature": "unknown"}, processes=[process(10, used_memory=None, sm=None, type="graphics")])],
        init_error="no_permission",
    ))
    lines = text.splitlines()
    assert "init_error 4" in lines
    assert "  power_draw_mw 250500" in lines
    assert "  throttle_reasons 12" in lines
    assert "  error utilization 3" in lines and "  error temperature 999" in lines
    assert "  proc 10 -1 -1 g 0" in lines
    assert f"  uuid {fake_uuid(0)}" in lines


def test_processes_are_counted_into_memory_used() -> None:
    g = gpu(3, processes=[process(1, used_memory=2 * GiB), process(2, used_memory=None)])
    assert g["memory_used"] == 2 * GiB + 4 * 1024**2
    assert gpu(3, memory_used=5)["memory_used"] == 5


def test_scenario_typos_are_caught() -> None:
    with pytest.raises(KeyError):
        gpu(0, temprature=40)
    with pytest.raises(ValueError):
        render(scenario([gpu(0, unsupported=["temprature"])]))
    with pytest.raises(ValueError):
        render(scenario([gpu(0, errors={"temperature": "exploded"})]))


def test_the_fake_can_leave_out_what_nvidia_ml_py_resolves() -> None:
    names = set(exported_functions())
    assert {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMemoryInfo_v2", "nvmlInitWithFlags", "nvmlDeviceGetProcessUtilization"} <= names
