"""build_containers: grants against use, and the four findings, on synthetic inputs."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gputui.core.config import Settings
from gputui.core.containers import build_containers, gpus_phrase, grant_phrase
from gputui.core.history import History
from gputui.core.model import ContainerRecord, ContainerRef, Gpu, Process, Snapshot

GIB = 1024**3
T0 = 1_780_000_000.0
UUIDS = tuple(f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}" for i in range(8))
SETTINGS = Settings(idle_grant_window=600.0)


def rec(name: str, gpus=(), source="device_request", raw=None, cvd=None, nvd=None, state="running",
        problems=(), started=None, runtime="docker") -> ContainerRecord:
    if gpus == "all":
        grant, raw = "all", raw or ("all",)
    else:
        grant = tuple(UUIDS[i] for i in gpus)
        raw = raw or tuple(str(i) for i in gpus)
    if not gpus and source == "device_request":
        source = "none"
    return ContainerRecord(id=f"{name:0<64}"[:64], name=name, image="img", state=state, gpus=grant,
                           grant_source=source, grant_raw=raw if grant else (), cuda_visible_devices=cvd,
                           nvidia_visible_devices=nvd, grant_problems=problems, started_at=started,
                           runtime=runtime)


def proc(pid: int, gpu: int, owner: ContainerRecord | ContainerRef | None, mem: int = GIB) -> Process:
    ref = owner.ref() if isinstance(owner, ContainerRecord) else owner
    return Process(pid=pid, gpu_index=gpu, type="compute", gpu_memory=mem, sm_utilization=50, container=ref)


def machine(n: int, procs: list[Process]) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, uuid=UUIDS[i], name="A100", processes=tuple(p for p in procs if p.gpu_index == i))
                 for i in range(n))


def history_of(polls: list[tuple[float, tuple[Gpu, ...]]], records: list[ContainerRecord]) -> History:
    h = History()
    for t, gpus in polls:
        snap = Snapshot(host="h", time=datetime.fromtimestamp(t, tz=timezone.utc), driver_version=None,
                        cuda_driver_version=None, gpus=gpus)
        h.add(snap, [r.id for r in records])
    return h


def judge(records: list[ContainerRecord], gpus: tuple[Gpu, ...], history: History | None = None,
          now: float = T0):
    if history is None:
        history = history_of([(now, gpus)], records)
    return {c.name: c for c in build_containers(tuple(records), gpus, history, SETTINGS, now)}


def kinds(container) -> list[str]:
    return [f.kind for f in container.findings]


def message(container, kind: str) -> str:
    (found,) = [f.message for f in container.findings if f.kind == kind]
    return found


# -- listing and sums ---------------------------------------------------------------

def test_lists_granted_or_gpu_using_containers_with_summed_memory():
    a = rec("alpha", gpus=(0,))
    web = rec("web")  # no grant, no GPU process: not a GPU container
    pod = ContainerRef(id="f" * 64, runtime="kubernetes", pod=None)
    gpus = machine(2, [proc(10, 0, a, 3 * GIB), proc(11, 0, a, 2 * GIB), proc(12, 1, pod, GIB)])
    got = judge([web, a], gpus)
    assert set(got) == {"alpha", ("f" * 64)[:12]}
    alpha = got["alpha"]
    assert (alpha.gpu_memory, alpha.pids, alpha.used_gpus, alpha.granted_gpus) == (5 * GIB, (10, 11), (0,), (0,))
    assert alpha.findings == ()
    k8s = got[("f" * 64)[:12]]
    assert (k8s.runtime, k8s.grant_source, k8s.findings, k8s.used_gpus) == ("kubernetes", "none", (), (1,))
    assert [c.name for c in build_containers((a, rec("aardvark", gpus=(1,))), gpus, None, SETTINGS, T0)] == \
        ["aardvark", "alpha", "ffffffffffff"]


# -- unpinned -----------------------------------------------------------------------

def test_gpus_all_that_landed_on_gpu0_is_unpinned():
    c = rec("bert", gpus="all")
    got = judge([c], machine(4, [proc(1, 0, c)]))["bert"]
    assert kinds(got) == ["unpinned"]
    assert message(got, "unpinned") == \
        "bert can use all 4 GPUs (--gpus all) and nothing narrows it; its processes landed on GPU 0."
    assert got.granted_gpus == (0, 1, 2, 3)


@pytest.mark.parametrize("cvd,expected", [("1", []), ("GPU-00000002", []), ("0,1,2,3", ["unpinned"])])
def test_cuda_visible_devices_narrowing_counts(cvd, expected):
    c = rec("w", gpus="all", cvd=cvd)
    assert kinds(judge([c], machine(4, [proc(1, 1, c)]))["w"]) == expected


def test_legacy_runtime_all_is_unpinned_and_named_as_such():
    c = rec("legacy", gpus="all", source="nvidia_runtime_env", raw=("all",))
    got = judge([c], machine(2, []))["legacy"]
    assert "NVIDIA_VISIBLE_DEVICES=all with the nvidia runtime" in message(got, "unpinned")
    assert "runs nothing on a GPU yet" in message(got, "unpinned")


def test_all_on_a_one_gpu_host_is_not_unpinned():
    c = rec("solo", gpus="all")
    assert judge([c], machine(1, [proc(1, 0, c)]))["solo"].findings == ()


# -- misplaced ----------------------------------------------------------------------

def test_process_outside_the_grant_is_misplaced():
    c = rec("pinned", gpus=(1,))
    got = judge([c], machine(2, [proc(1, 0, c)]))["pinned"]
    assert "misplaced" in kinds(got)
    assert message(got, "misplaced") == "pinned runs on GPU 0, outside its grant (--gpus device=1 = GPU 1)."


def test_all_processes_on_the_first_of_several_granted_gpus_is_misplaced_not_idle():
    c = rec("pair", gpus=(2, 3))
    got = judge([c], machine(4, [proc(1, 2, c), proc(2, 2, c)]))["pair"]
    assert kinds(got) == ["misplaced"]
    assert "all its processes run on GPU 2, the first of them" in message(got, "misplaced")
    spread = judge([c], machine(4, [proc(1, 2, c), proc(2, 3, c)]))["pair"]
    assert spread.findings == ()
    assert spread.used_gpus == (2, 3)


def test_first_of_a_cuda_narrowed_set_is_misplaced():
    c = rec("nar", gpus="all", cvd="1,2")
    got = judge([c], machine(4, [proc(1, 1, c)]))["nar"]
    assert kinds(got) == ["misplaced"]
    assert "was given GPUs 1, 2" in message(got, "misplaced")


def test_gpu_process_without_any_grant_is_misplaced():
    c = rec("priv")
    got = judge([c], machine(2, [proc(1, 1, c)]))["priv"]
    assert kinds(got) == ["misplaced"]
    assert "Docker gave it no GPU" in message(got, "misplaced")


# -- env-conflict ---------------------------------------------------------------------

def test_container_relative_cuda_index_that_does_not_exist_inside():
    c = rec("eval", gpus=(2,), cvd="3")
    got = judge([c], machine(4, [proc(1, 2, c)]))["eval"]
    assert kinds(got) == ["env-conflict"]
    assert message(got, "env-conflict") == (
        "eval: CUDA_VISIBLE_DEVICES=3 names device 3, but inside the container --gpus device=2 leaves only "
        "device 0 (host GPU 2), so that GPU does not exist there.")
    assert judge([rec("ok", gpus=(2,), cvd="0")], machine(4, []))["ok"].findings[0].kind == "idle-grant"


@pytest.mark.parametrize("cvd,fragment", [
    ("", "is empty, which hides its granted GPU 1 from CUDA"),
    (UUIDS[0], "names GPU 0, which is not granted to it (--gpus device=1 = GPU 1)"),
    ("GPU-deadbeef-0000", "which is not a GPU on this host"),
    ("0,5", "names device 5"),
])
def test_cuda_visible_devices_conflicts(cvd, fragment):
    c = rec("x", gpus=(1,), cvd=cvd)
    got = judge([c], machine(2, [proc(1, 1, c)]))["x"]
    assert kinds(got) == ["env-conflict"]
    assert fragment in message(got, "env-conflict")


def test_cuda_uuid_prefix_of_a_granted_gpu_is_fine():
    c = rec("x", gpus=(1,), cvd=UUIDS[1][:14])
    assert judge([c], machine(2, [proc(1, 1, c)]))["x"].findings == ()


def test_nvidia_visible_devices_against_the_device_request():
    bad = rec("bad", gpus=(2,), nvd="3")
    same = rec("same", gpus=(2,), nvd="2")
    useless = rec("useless", nvd="1")
    got = judge([bad, same, useless], machine(4, [proc(1, 2, bad), proc(2, 2, same), proc(3, 1, useless)]))
    assert message(got["bad"], "env-conflict") == (
        "bad: NVIDIA_VISIBLE_DEVICES=3 disagrees with --gpus device=2; Docker's grant wins, so it gets GPU 2.")
    assert got["same"].findings == ()
    assert "has no effect" in message(got["useless"], "env-conflict")


def test_grant_naming_a_missing_gpu_is_an_env_conflict():
    c = rec("ghost", gpus=(), source="device_request", raw=("9",),
            problems=("its device request names GPU 9, which does not exist on this host (2 GPUs)",))
    got = judge([c], machine(2, []))["ghost"]
    assert kinds(got) == ["env-conflict"]
    assert "GPU 9, which does not exist" in message(got, "env-conflict")


# -- idle-grant -----------------------------------------------------------------------

def test_idle_grant_over_a_full_window():
    c = rec("reserve", gpus=(7,))
    polls = [(T0 + t, machine(8, [])) for t in range(0, 601, 60)]
    got = judge([c], polls[-1][1], history_of(polls, [c]), now=polls[-1][0])["reserve"]
    assert message(got, "idle-grant") == "reserve holds GPU 7 but ran nothing there during the last 10 min."
    assert not next(f for f in got.findings if f.kind == "idle-grant").provisional


def test_idle_grant_on_one_sample_says_so():
    c = rec("reserve", gpus=(7,), state="paused")
    got = judge([c], machine(8, []))["reserve"]
    assert message(got, "idle-grant") == (
        "Provisional: reserve holds GPU 7 (it is paused) but runs nothing there in one sample (the idle window is "
        "10 min).")
    # One sample cannot show a 10-minute idle window: the verdict is labelled, in JSON too.
    assert next(f for f in got.findings if f.kind == "idle-grant").to_json()["provisional"] is True


def test_idle_grant_on_a_short_watch_says_how_long():
    c = rec("reserve", gpus=(6, 7))
    polls = [(T0 + t, machine(8, [proc(1, 7, c)])) for t in range(0, 121, 30)]
    got = judge([c], polls[-1][1], history_of(polls, [c]), now=polls[-1][0])["reserve"]
    assert message(got, "idle-grant") == (
        "Provisional: reserve holds GPU 6 but ran nothing there in the 2 min watched so far (the idle window is "
        "10 min).")


def test_a_gpu_used_earlier_in_the_window_is_not_idle():
    c = rec("bursty", gpus=(3,))
    polls = [(T0, machine(4, [proc(1, 3, c)]))] + [(T0 + t, machine(4, [])) for t in range(60, 601, 60)]
    assert judge([c], polls[-1][1], history_of(polls, [c]), now=polls[-1][0])["bursty"].findings == ()


def test_a_just_started_container_is_not_judged_idle():
    c = rec("fresh", gpus=(3,), started=T0 - 10)
    assert judge([c], machine(4, []))["fresh"].findings == ()
    old = rec("old", gpus=(3,), started=T0 - 3600)
    assert kinds(judge([old], machine(4, []))["old"]) == ["idle-grant"]


# -- wording ------------------------------------------------------------------------

def test_grant_phrases():
    assert grant_phrase(rec("a", gpus="all")) == "--gpus all"
    assert grant_phrase(rec("a", gpus=(0, 1), raw=("count=2",))) == "--gpus 2"
    assert grant_phrase(rec("a", gpus=(1,), raw=(UUIDS[1],))) == "--gpus device=GPU-00000001…"
    assert grant_phrase(rec("a", gpus=(1,), source="cdi", raw=("nvidia.com/gpu=1",))) == "--device nvidia.com/gpu=1"
    assert grant_phrase(rec("a", gpus=(1,), source="devices", raw=("/dev/nvidia1",))) == "--device /dev/nvidia1"
    assert gpus_phrase([1, 2, 3, 5]) == "GPUs 1-3, 5"
    assert gpus_phrase([]) == "no GPU"


# -- the demo -----------------------------------------------------------------------

@pytest.mark.functional  # a process of its own
def test_demo_snapshot_shows_the_intended_findings():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gputui", "snapshot", "--demo", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["docker"] == {"available": True, "error": None}
    found = {c["name"]: [f["kind"] for f in c["findings"]] for c in snap["containers"]}
    assert found["bert-finetune"] == ["unpinned"]
    assert found["eval-server"] == ["env-conflict", "rule_reserved"]  # GPU 2 is bob's by the house rules
    assert found["batch-reserve"] == ["idle-grant"]
    assert found["llama-train"] == [] and found["worker-2"] == []
    bert = next(c for c in snap["containers"] if c["name"] == "bert-finetune")
    assert bert["gpus"] == "all" and bert["used_gpus"] == [0]
    procs = {p["pid"]: p for g in snap["gpus"] for p in g["processes"]}
    assert procs[4201]["container"]["name"] == "bert-finetune"
    assert procs[4101]["container"]["compose_project"] == "research"
    assert procs[5120]["container"] is None
