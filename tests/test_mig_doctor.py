"""``gputui doctor``'s MIG checks: no instances, a pending mode change, a grant to a vanished MIG device."""

from __future__ import annotations

import json

import pytest

from gputui.core.doctor.checks import Check
from gputui.core.doctor.mig import MigFacts, Verdict, check_mig
from gputui.core.model import Gpu, MigDevice, MigMode
from tests.fakenvml.scenario import FakeNvml, gpu, mig_device, scenario


def _by_name(verdicts: list[Verdict]) -> dict[str, Check]:
    return {v[0]: Check(*v) for v in verdicts}


def card(index: int, current: bool, pending: bool, devices: tuple[MigDevice, ...] = ()) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index}", name="NVIDIA H100 80GB HBM3", mig_mode=MigMode(current, pending),
               mig_devices=devices)


def test_no_mig_capable_gpu_passes_and_unread_containers_skip():
    got = _by_name(check_mig(MigFacts((Gpu(index=0, uuid="GPU-0", name="NVIDIA L40S"),))))
    assert [c.status for c in got.values()] == ["pass", "pass", "pass"]
    assert list(got) == ["mig-devices", "mig-mode-change", "mig-grants"]
    got = _by_name(check_mig(MigFacts(), containers_checked=False, containers_error="--no-docker was given"))
    assert got["mig-grants"].status == "skip" and "--no-docker" in got["mig-grants"].message
    assert check_mig(None) == []


def test_mig_on_without_instances_says_how_to_create_them():
    got = _by_name(check_mig(MigFacts((card(0, True, True), card(1, False, False)))))
    c = got["mig-devices"]
    assert c.status == "warn" and "GPU 0" in c.message and "CUDA sees no device" in c.message
    assert "nvidia-smi mig -i 0 -cgi" in (c.fix or "") and " -C" in (c.fix or "")
    assert got["mig-mode-change"].status == "pass"


def test_pending_mode_change_needs_a_reset():
    c = _by_name(check_mig(MigFacts((card(3, False, True),))))["mig-mode-change"]
    assert c.status == "warn" and "GPU 3" in c.message and "turns on only after a GPU reset" in c.message
    assert "nvidia-smi -i 3 -r" in (c.fix or "")


def test_grant_to_a_vanished_mig_device():
    live = MigDevice(index=0, uuid="MIG-11111111-2222-3333-4444-555555555555")
    facts = MigFacts((card(0, True, True, (live,)),),
                     (("trainer", ("MIG-99999999-2222-3333-4444-555555555555",)), ("ok", (live.uuid,))))
    c = _by_name(check_mig(facts))["mig-grants"]
    assert c.status == "warn" and c.message.startswith("trainer is granted MIG device MIG-99999999")
    assert "no longer exists" in c.message and "gputui migrate trainer --to MIG-" in (c.fix or "")
    ok = MigFacts(facts.gpus, (("ok", (live.uuid,)),))
    assert _by_name(check_mig(ok))["mig-grants"].status == "pass"


@pytest.mark.integration
def test_doctor_against_the_fake_driver(fake_nvml: FakeNvml):
    fake_nvml.write(scenario([gpu(0, mig_mode=True), gpu(1, mig_mode=(False, True)),
                              gpu(2, mig_mode=True, mig_devices=[mig_device(1)])]))
    res = fake_nvml.run_gputui("doctor", "--json", "--no-docker")
    assert res.returncode in (0, 1) and res.stderr == ""  # /dev/nvidia* checks may fail here: no real GPU
    got = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert got["mig-devices"]["status"] == "warn" and "GPU 0" in got["mig-devices"]["message"]
    assert got["mig-mode-change"]["status"] == "warn" and "GPU 1" in got["mig-mode-change"]["message"]
