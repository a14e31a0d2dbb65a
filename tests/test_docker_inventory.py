"""DockerSource against a real dockerd: every grant form as Docker stores it, the cache, recovery."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputui.core.sources.docker_source import DockerSource

pytestmark = pytest.mark.docker

UUIDS = tuple(f"GPU-{i:08x}-0000-1111-2222-{i:012x}" for i in range(4))
#: minors deliberately differ from indices: /dev/nvidia3 is GPU 1
MINORS = {2: UUIDS[0], 3: UUIDS[1], 0: UUIDS[2], 1: UUIDS[3]}


def records(source: DockerSource) -> dict:
    inv = source.inventory(UUIDS, MINORS)
    assert inv.available, inv.error
    return {r.name: r for r in inv.containers}


def test_every_grant_form_read_back_from_docker(docker_cleanup):
    d = docker_cleanup
    compose = {"com.docker.compose.project": "research", "com.docker.compose.service": "trainer"}
    d.run("inv-index", gpus="device=1", labels=compose, restart_policy={"Name": "unless-stopped"})
    d.run("inv-uuid", gpus=f"device={UUIDS[2]}")
    d.run("inv-all", gpus="all")
    d.run("inv-count", gpus=2)
    d.run("inv-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": "3"})
    d.run("inv-cvd", gpus="device=2", environment={"CUDA_VISIBLE_DEVICES": "3"})
    d.run("inv-raw", devices=[f"{d.device_node(3)}:/dev/nvidia3:rwm"])
    d.run("inv-ghost", gpus="device=9")
    d.run("inv-envonly", environment={"NVIDIA_VISIBLE_DEVICES": "0"})  # no runtime: not a grant
    d.run("inv-plain")
    d.run("inv-paused", gpus="device=0").pause()
    d.run("inv-exited", gpus="device=0", command=["true"]).wait(timeout=30)

    got = records(DockerSource(environ=d.env()))
    assert "inv-exited" not in got
    grants = {name: (r.gpus, r.grant_source) for name, r in got.items()}
    assert grants == {
        "inv-index": ((UUIDS[1],), "device_request"),
        "inv-uuid": ((UUIDS[2],), "device_request"),
        "inv-all": ("all", "device_request"),
        "inv-count": ((UUIDS[0], UUIDS[1]), "device_request"),
        "inv-legacy": ((UUIDS[3],), "nvidia_runtime_env"),
        "inv-cvd": ((UUIDS[2],), "device_request"),
        "inv-raw": ((UUIDS[1],), "devices"),
        "inv-ghost": ((), "device_request"),
        "inv-envonly": ((), "none"),
        "inv-plain": ((), "none"),
        "inv-paused": ((UUIDS[0],), "device_request"),
    }
    idx = got["inv-index"]
    assert (idx.compose_project, idx.compose_service, idx.restart_policy, idx.image, idx.state) == \
        ("research", "trainer", "unless-stopped", d.image, "running")
    assert idx.main_pid and f"/docker/{idx.id}" in Path(f"/proc/{idx.main_pid}/cgroup").read_text()
    assert idx.started_at is not None and abs(time.time() - idx.started_at) < 300
    assert got["inv-paused"].state == "paused"
    assert got["inv-cvd"].cuda_visible_devices == "3"
    assert got["inv-envonly"].nvidia_visible_devices == "0"
    assert got["inv-ghost"].grant_problems == (
        "its device request names GPU 9, which does not exist on this host (4 GPUs)",)
    assert got["inv-count"].grant_raw == ("count=2",)


def test_steady_state_is_one_list_call_and_restarts_are_seen(docker_cleanup):
    d = docker_cleanup
    for i in range(6):
        d.run(f"cache-{i}", gpus=f"device={i % 4}")
    src = DockerSource(environ=d.env())
    first = records(src)
    assert src.stats.inspect_calls == 6 and src.stats.list_calls == 1
    src.stats.inspect_calls = 0
    for _ in range(3):
        assert records(src) == first
    assert (src.stats.list_calls, src.stats.inspect_calls, src.stats.cache_hits) == (4, 0, 18)

    # A restart gives the container a new main PID: inspected again, the others still cached.
    c = d.client.containers.get("cache-0")
    c.restart(timeout=0)
    after = records(src)
    assert src.stats.inspect_calls == 1
    assert after["cache-0"].main_pid != first["cache-0"].main_pid
    # A rename shows at once, without an inspect.
    c.rename("cache-renamed")
    assert "cache-renamed" in records(src) and src.stats.inspect_calls == 1
    # A removed container disappears from the inventory and the cache.
    d.client.containers.get("cache-1").remove(force=True)
    assert "cache-1" not in records(src)


def test_resolve_confirms_an_id_from_a_cgroup_path(docker_cleanup):
    d = docker_cleanup
    c = d.run("resolve-me", gpus="device=3")
    src = DockerSource(environ=d.env())
    src.inventory(UUIDS, MINORS)
    inv = src.resolve(c.id)
    assert inv.available and [r.name for r in inv.containers] == ["resolve-me"]
    assert inv.containers[0].gpus == (UUIDS[3],)
    unknown = src.resolve("ab" * 32)
    assert inv.available and unknown.containers == ()
