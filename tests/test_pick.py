"""``gputui pick``: the pure ranking, the output formats, the CLI on the demo, and the real
command against the fake NVIDIA driver."""

from __future__ import annotations

import shlex

import pytest

from gputui.core.history import History
from gputui.core.judges.placement import format_pick, gpu_loads, pick, reservations
from tests.fakenvml.scenario import GiB, fake_uuid, process, scenario
from tests.fakenvml.scenario import gpu as fake_gpu
from tests.fixtures.synthetic import T0, container, gpu, snapshot, uuid


def loads_of(*series):
    """series: one list of Gpu per poll."""
    h = History()
    for i, gpus in enumerate(series):
        h.add(snapshot(T0 + i, gpus))
    return gpu_loads(h, series[-1], None), h


def test_lowest_load_counts_compute_and_memory():
    loads, _ = loads_of([gpu(0, util=90, used_gib=10), gpu(1, util=2, used_gib=78), gpu(2, util=20, used_gib=5),
                         gpu(3, util=25, used_gib=4)])
    # GPU 1 is the least busy but 97% full; GPU 2 (20% + 6%) beats GPU 3 (25% + 5%).
    assert pick(loads, {}, count=2).chosen == (2, 3)


def test_windowed_load_not_the_last_reading():
    quiet_then_spike = [[gpu(0, util=5, used_gib=1), gpu(1, util=30, used_gib=1)] for _ in range(9)]
    quiet_then_spike.append([gpu(0, util=100, used_gib=1), gpu(1, util=30, used_gib=1)])
    loads, _ = loads_of(*quiet_then_spike)
    assert pick(loads, {}).chosen == (0,)


def test_min_free_uses_the_least_free_seen_and_says_what_is_missing():
    # GPU 0 had 50 GiB free a moment ago and 70 GiB now: it can promise 50.
    loads, _ = loads_of([gpu(0, used_gib=30), gpu(1, used_gib=40)], [gpu(0, used_gib=10), gpu(1, used_gib=40)])
    assert pick(loads, {}, min_free=45 * GiB).chosen == (0,)
    r = pick(loads, {}, min_free=60 * GiB)
    assert r.chosen == ()
    assert r.problem == "No GPU has 60.0 GiB free: the most free is 50.0 GiB on GPU 0."
    assert pick(loads, {}, min_free=40 * GiB, count=2).chosen == (0, 1)
    r = pick(loads, {}, min_free=45 * GiB, count=2)
    assert r.problem == "Only 1 GPU (0) has 45.0 GiB free; 2 were asked for."


def test_taken_and_lost_gpus_are_never_picked():
    gpus = [gpu(0, util=0, used_gib=1), gpu(1, util=50, used_gib=1), gpu(2, lost=True)]
    h = History()
    snap = snapshot(T0, gpus, [container("reserve", (0,)), container("gone", (1,), state="exited"),
                               container("everywhere", "all")])
    h.add(snap)
    loads = gpu_loads(h, gpus, None)
    taken = reservations(snap)
    assert taken == {0: ("reserve",)}
    assert pick(loads, taken).chosen == (1,)
    r = pick(loads, taken, count=2)
    assert r.problem == "Only 1 GPU (1) is not granted to a running container (GPU 0 to reserve); 2 were asked for."
    r = pick(loads, taken, count=3)
    assert r.problem == "Only 2 GPUs can be picked (0, 1, GPU 2 is lost); 3 were asked for."


def test_max_util_failure_names_the_least_busy():
    loads, _ = loads_of([gpu(0, util=40, used_gib=1), gpu(1, util=12, used_gib=1)])
    r = pick(loads, {}, max_util=10, observed=1.0)
    assert r.problem == "No GPU is at or below 10% utilization over 1 s: the least busy is GPU 1 at 12%."
    r = pick(loads, {}, max_util=10, min_free=1 * GiB, observed=1.0)
    assert r.problem.startswith("No GPU with 1.0 GiB free is at or below 10% utilization")
    assert pick(loads, {}, max_util=15).chosen == (1,)


def test_a_reserved_gpu_with_room_is_mentioned_when_nothing_else_fits():
    gpus = [gpu(0, used_gib=70), gpu(1, used_gib=1)]
    h = History()
    snap = snapshot(T0, gpus, [container("batch", (1,))])
    h.add(snap)
    r = pick(gpu_loads(h, gpus, None), reservations(snap), min_free=20 * GiB)
    assert r.problem == ("No GPU has 20.0 GiB free: the most free is 10.0 GiB on GPU 0 "
                         "(GPU 1 has room but is granted to batch).")


def test_formats():
    ids = {3: uuid(3), 5: uuid(5)}
    assert format_pick([3], ids, "index") == "3"
    assert format_pick([3, 5], ids, "index") == "3,5"
    assert format_pick([3, 5], ids, "env") == "CUDA_VISIBLE_DEVICES=3,5"
    assert format_pick([3, 5], ids, "uuid") == f"{uuid(3)},{uuid(5)}"
    assert format_pick([3], ids, "docker") == f"--gpus device={uuid(3)}"
    several = format_pick([3, 5], ids, "docker")
    # What the shell hands docker: --gpus and one item "device=A,B" wrapped in double quotes.
    assert shlex.split(several) == ["--gpus", f'"device={uuid(3)},{uuid(5)}"']


# -- the command ---------------------------------------------------------------------------


def run_cli(capsys, *argv):
    from gputui.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.strip(), out.err.strip()


def test_demo_pick_avoids_the_piled_up_and_the_reserved_gpus(capsys):
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0.3")
    # GPU 0 is piled up; 2, 3, 4, 5 and 7 are granted to running containers (2 and 7 are also reserved for
    # others by the house rules); Slurm's job 81734 holds GPU 6.
    assert (rc, out) == (0, "1"), err
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--count", "2")
    assert rc == 1 and "Only 1 GPU (1) is not granted to a running container" in err
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0.3", "--count", "2", "--include-allocated")
    assert rc == 0, err
    assert [int(x) for x in out.split(",")] == [6, 1]


def test_demo_pick_respects_gpu_filter_and_formats(capsys):
    rc, out, _ = run_cli(capsys, "pick", "--demo", "--sample", "0", "--gpu", "1", "--format", "env")
    assert (rc, out) == (0, "CUDA_VISIBLE_DEVICES=1")
    rc, out, err = run_cli(capsys, "pick", "--demo", "--sample", "0", "--gpu", "0,4")
    assert rc == 1 and out == ""
    assert err == "gputui: All 2 GPUs considered are granted to running containers (GPU 0 to llama-train, " \
                  "GPU 4 to vllm-cache)."


@pytest.mark.parametrize("argv,needle", [
    (["--count", "0"], "--count must be at least 1"),
    (["--min-free", "lots"], "is not a size"),
    (["--max-util", "150"], "between 0 and 100"),
    (["--format", "yaml"], "invalid choice"),
])
def test_bad_arguments_exit_2_with_one_sentence(capsys, argv, needle):
    rc, out, err = run_cli(capsys, "pick", "--demo", *argv)
    assert rc == 2 and needle in err and "\n" not in err and "Traceback" not in err


# -- against the fake driver -------------------------------------------------------------------


def _machine():
    """GPU 0 busy, GPU 1 quiet with 20 GiB free, GPU 2 quieter with 60 GiB free, GPU 3 lost."""
    return scenario([
        fake_gpu(0, utilization_gpu=97, processes=[process(4242, used_memory=30 * GiB, sm=97)]),
        fake_gpu(1, utilization_gpu=8, memory_used=60 * GiB),
        fake_gpu(2, utilization_gpu=3, memory_used=20 * GiB),
        fake_gpu(3, lost=True),
    ])


@pytest.mark.integration
def test_pick_against_the_fake_driver(fake_nvml):
    fake_nvml.write(_machine())

    def pick_(*args):
        r = fake_nvml.run_gputui("pick", "--no-docker", "--sample", "0.25", *args)
        return r.returncode, r.stdout.strip(), r.stderr.strip()

    assert pick_() == (0, "2", "")
    rc, out, _ = pick_("--count", "2")
    assert (rc, out) == (0, "2,1")
    # The memory constraint: only GPU 2 has 50 GiB free.
    assert pick_("--min-free", "50G", "--format", "uuid") == (0, fake_uuid(2), "")
    assert pick_("--min-free", "50G", "--format", "docker") == (0, f"--gpus device={fake_uuid(2)}", "")
    # No fit: exit 1 and one sentence naming the constraint.
    rc, out, err = pick_("--min-free", "70G")
    assert (rc, out) == (1, "")
    assert err == "gputui: No GPU has 70.0 GiB free: the most free is 60.0 GiB on GPU 2."
    rc, _, err = pick_("--count", "4")
    assert rc == 1 and err == "gputui: Only 3 GPUs can be picked (0-2, GPU 3 is lost); 4 were asked for."
    # The busy GPU is never picked, however many are asked for.
    rc, out, _ = pick_("--count", "3")
    assert rc == 0 and out.split(",")[-1] == "0"
    rc, _, err = pick_("--count", "3", "--max-util", "50")
    assert rc == 1 and "Only 2 GPUs" in err and "at or below 50% utilization" in err


@pytest.mark.integration
def test_pick_sees_a_gpu_get_busy_during_the_sample(fake_nvml):
    import subprocess
    import sys
    import time

    quiet = scenario([fake_gpu(0, utilization_gpu=5), fake_gpu(1, utilization_gpu=10)])
    fake_nvml.write(quiet)
    env = fake_nvml.env()
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "pick", "--no-docker", "--sample", "2", "--format",
                             "index"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.8)
        fake_nvml.write(scenario([fake_gpu(0, utilization_gpu=100), fake_gpu(1, utilization_gpu=10)]))
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == "1"
