"""``gputui pick`` and MIG: whole-GPU picks skip MIG cards, ``--mig`` picks instances by free memory."""

from __future__ import annotations

import pytest

from gputui.core.judges.mig_placement import MigLoad, format_mig_pick, pick_mig
from tests.fakenvml.scenario import FakeNvml, GiB, fake_mig_uuid, gpu, mig_device, process, scenario


def run_cli(capsys, *argv):
    from gputui.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.strip(), out.err.strip()


def test_demo_whole_gpu_pick_never_offers_the_mig_card(capsys):
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--count", "3")
    assert rc == 1 and out == ""
    assert "GPU 5 to inference-api" not in err  # its grant is an instance, not the card
    assert "GPU 5 is split into MIG devices and not offered whole; 'gputui pick --mig' picks MIG devices." in err


def test_demo_pick_mig_takes_the_roomiest_free_instance(capsys):
    from gputui.core.demo import mig_uuid

    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig")
    # 5:0 has the most room but is granted to inference-api; 5:2 (5 GiB used) beats 5:1 (8.5 GiB used)
    assert (rc, out) == (0, "5:2"), err
    rc, out, _ = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--format", "docker")
    assert out == f"--gpus device={mig_uuid(5, 2)}"
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--count", "3")
    assert rc == 1 and err == ("gputui: Only 2 MIG devices (5:2, 5:1) are not granted to a running container "
                               "(5:0 to inference-api); 3 were asked for.")
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--min-free", "12G")
    assert rc == 0 and out == "5:2"
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--min-free", "20G")
    assert rc == 1 and "No MIG device has 20.0 GiB free: the most free is" in err and "5:2 (2g.20gb)" in err


def test_pick_mig_refuses_max_util(capsys):
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--max-util", "10")
    assert rc == 2 and "MIG devices report no utilization" in err


def test_pick_mig_without_mig_cards_says_so(capsys):
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--mig", "--gpu", "1")
    assert rc == 1 and "No GPU is in MIG mode with MIG devices" in err


def test_pick_mig_ranks_by_least_free_seen_then_fewer_processes():
    a = MigLoad(0, 0, "MIG-a", "1g.10gb", 5 * GiB, 1)
    b = MigLoad(0, 1, "MIG-b", "1g.10gb", 5 * GiB, 0)
    c = MigLoad(1, 0, "MIG-c", "3g.40gb", None, 0)
    got = pick_mig({m.uuid: m for m in (a, b, c)}, {}, count=3)
    assert [m.label for m in got.chosen] == ["0:1", "0:0", "1:0"]
    assert format_mig_pick(got.chosen[:2], "uuid") == "MIG-b,MIG-a"
    assert format_mig_pick(got.chosen[:2], "env") == "CUDA_VISIBLE_DEVICES=MIG-b,MIG-a"


@pytest.mark.integration
def test_pick_mig_against_the_fake_driver(fake_nvml: FakeNvml):
    fake_nvml.write(scenario([
        gpu(0, processes=[process(11, 60 * GiB)]),
        gpu(1, mig_mode=True, mig_devices=[mig_device(1, 0, "3g.40gb", processes=[process(12, 30 * GiB)]),
                                           mig_device(2, 0, "3g.40gb", processes=[process(13, 2 * GiB)])]),
    ]))
    res = fake_nvml.run_gputui("pick", "--mig", "--sample", "0", "--no-docker", "--format", "uuid")
    assert (res.returncode, res.stdout.strip()) == (0, fake_mig_uuid(1, 2, 0)), res.stderr
    res = fake_nvml.run_gputui("pick", "--sample", "0", "--no-docker")
    assert (res.returncode, res.stdout.strip()) == (0, "0"), res.stderr
