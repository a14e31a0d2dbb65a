"""Migration against a real dockerd (stub NVIDIA hook): nothing lost, everything identical except the GPU.

The subject container has env, labels, a named volume and an anonymous volume
holding files, a restart policy, a memory limit and a healthcheck. The host's
GPUs are the fake NVML scenario's (in-process tests build the snapshot from the
scenario; the CLI tests run the real ``gputui`` against the fake driver).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gputui.actions.audit import audit_path
from gputui.actions.journal import journal_dir, pending_journals
from gputui.actions.migrate import BACKUP_INFIX, DockerMigrationEngine, MigrationHooks, MigrationRefused
from gputui.core.model import ContainerRef, Gpu, Process, Snapshot
from tests.fakenvml.scenario import GiB, gpu, scenario
from tests.fixtures.dockerd import LABEL

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parent.parent
#: Exits at once on SIGTERM, so stopping takes a fraction of a second (sleep as PID 1 would ignore it).
CMD = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"]
HEALTH = {"test": ["CMD-SHELL", "test -f /data/ok && test -f /anon/ok"], "interval": 200_000_000, "retries": 3}


def host_gpus(used: dict[int, int] | None = None) -> tuple[Gpu, ...]:
    """The fake NVML scenario's four GPUs, as the snapshot shows them."""
    used = used or {}
    s = scenario([gpu(i, memory_used=used.get(i, 1 * GiB)) for i in range(4)])
    return tuple(Gpu(index=g["index"], uuid=g["uuid"], name=g["name"], memory_total=g["memory_total"],
                     memory_used=g["memory_used"], minor_number=g["minor_number"]) for g in s["gpus"])


def host_snapshot(used: dict[int, int] | None = None, container: tuple[str, str, int, int] | None = None) -> Snapshot:
    """A snapshot of the fake host; ``container`` = (id, name, gpu index, GPU memory) adds its process."""
    gpus = list(host_gpus(used))
    if container is not None:
        cid, name, index, memory = container
        proc = Process(pid=4242, gpu_index=index, type="compute", gpu_memory=memory, sm_utilization=40,
                       container=ContainerRef(id=cid, name=name))
        gpus[index] = Gpu(**{**gpus[index].__dict__, "processes": (proc,)})
    return Snapshot(host="test", time=datetime.now(timezone.utc), driver_version="550.54.15",
                    cuda_driver_version="12.4", gpus=tuple(gpus))


def uuid(i: int) -> str:
    return host_gpus()[i].uuid


@pytest.fixture
def subject(docker_cleanup):
    """(dockerd, factory): factory(name) starts the subject container and writes a file into each volume."""
    d = docker_cleanup
    volumes: list[str] = []

    def make(name: str, gpus: str = "device=0", **kw):
        vol = f"{name}-data"
        d.client.volumes.create(vol, labels={"gputui.test": "1"})
        volumes.append(vol)
        c = d.run(name, gpus=gpus, command=CMD, environment={"FOO": "bar", "CUDA_VISIBLE_DEVICES": "0"},
                  labels={"team": "vision", **kw.pop("labels", {})}, volumes=[f"{vol}:/data", "/anon"],
                  restart_policy={"Name": "unless-stopped"}, healthcheck=HEALTH, working_dir="/data",
                  mem_limit="256m", **kw)
        code, out = c.exec_run(["sh", "-c", f"echo named-{name} > /data/ok && echo anon-{name} > /anon/ok"])
        assert code == 0, out
        c.reload()
        volumes.extend(m["Name"] for m in c.attrs["Mounts"] if m["Name"] != vol)
        return c

    yield d, make
    d.remove_containers()
    for v in volumes:
        try:
            d.client.volumes.get(v).remove(force=True)
        except Exception:
            pass


def files(d, name: str) -> tuple[str, str]:
    c = d.client.containers.get(name)
    named = c.exec_run(["cat", "/data/ok"]).output.decode().strip()
    anon = c.exec_run(["cat", "/anon/ok"]).output.decode().strip()
    return named, anon


def comparable(attrs: dict) -> tuple[dict, dict]:
    """Config and HostConfig minus what a migration is meant to change."""
    cfg = copy.deepcopy(attrs["Config"])
    hc = copy.deepcopy(attrs["HostConfig"])
    cfg.pop("Hostname")  # generated from the container id
    hc.pop("DeviceRequests")  # the grant
    hc.pop("Binds")  # the anonymous volume is now a volume mount (compared separately)
    hc.pop("Mounts", None)
    return cfg, hc


def names(d) -> set[str]:
    return {c.name for c in d.client.containers.list(all=True)}


def last_audit() -> dict:
    return json.loads(audit_path().read_text().splitlines()[-1])


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def assert_original_back(d, original: dict) -> None:
    """The original container, by id, under its name, running, healthy-capable, policy and files intact."""
    now = d.client.api.inspect_container(original["Name"].lstrip("/"))
    assert now["Id"] == original["Id"]
    assert now["State"]["Running"] is True
    assert now["HostConfig"]["RestartPolicy"] == original["HostConfig"]["RestartPolicy"]
    assert now["HostConfig"]["DeviceRequests"] == original["HostConfig"]["DeviceRequests"]
    name = original["Name"].lstrip("/")
    assert files(d, name) == (f"named-{name}", f"anon-{name}")
    assert not [n for n in names(d) if BACKUP_INFIX in n]
    assert pending_journals() == []
    assert not list(journal_dir().glob("*.json"))


# -- the migration itself -----------------------------------------------------------------------


def test_migration_keeps_everything_but_the_gpu(subject):
    d, make = subject
    original = make("mig-ok").attrs
    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    plan = engine.plan("mig-ok", "2", host_snapshot())
    assert len(plan.diff) == 2  # the grant, nothing else
    steps = []
    result = engine.execute(plan, progress=steps.append, timeout=1.0)
    assert result.ok, result.message
    assert [p.step for p in steps if p.state == "done"] == [
        "journal", "restart-policy", "stop", "rename", "create", "start", "verify", "remove-old"]

    new = d.client.api.inspect_container("mig-ok")
    assert new["Id"] != original["Id"] and new["Id"] == result.new_id
    assert new["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": 0, "DeviceIDs": [uuid(2)], "Capabilities": [["gpu"]], "Options": {}}]
    assert comparable(new) == comparable(original)
    anon = next(m["Name"] for m in original["Mounts"] if m["Destination"] == "/anon")
    assert new["HostConfig"]["Binds"] == ["mig-ok-data:/data"]
    assert new["HostConfig"]["Mounts"] == [{"Type": "volume", "Source": anon, "Target": "/anon"}]
    assert sorted((m["Name"], m["Destination"]) for m in new["Mounts"]) == \
        sorted((m["Name"], m["Destination"]) for m in original["Mounts"])
    assert new["Config"]["Hostname"] == new["Id"][:12]
    assert new["State"]["Running"] and new["State"]["Health"]["Status"] == "healthy"
    # dockerd hands the new grant to the NVIDIA hook: the container's environment names the target.
    assert environ(new["State"]["Pid"])["NVIDIA_VISIBLE_DEVICES"] == uuid(2)
    assert files(d, "mig-ok") == ("named-mig-ok", "anon-mig-ok")
    # The old container is gone, its volumes are not.
    assert names(d) == {"mig-ok"}
    assert {v.name for v in d.client.volumes.list()} >= {"mig-ok-data", anon}
    assert pending_journals() == [] and not list(journal_dir().glob("*.json"))
    record = last_audit()
    assert (record["action"], record["result"], record["container"]) == ("migrate", "ok", "mig-ok")
    assert (record["from_gpus"], record["to_gpu"], record["to_uuid"]) == ([0], 2, uuid(2))
    assert record["user"] and record["time"]


class FailAt(MigrationHooks):
    """Fail one step. At verify the new container is really killed, so verification must notice."""

    def __init__(self, step: str, api) -> None:
        self.step = step
        self.api = api

    def before(self, step, run):
        if step != self.step:
            return
        if step == "verify":
            self.api.kill(run.new_id)
            return
        raise RuntimeError(f"injected failure at {step}")


@pytest.mark.parametrize("step", ["create", "start", "verify"])
def test_a_failing_step_puts_the_original_back(subject, step):
    d, make = subject
    name = f"mig-fail-{step}"
    original = make(name).attrs
    engine = DockerMigrationEngine(d.client, hooks=FailAt(step, d.client.api), poll_interval=0.1)
    result = engine.execute(engine.plan(name, "1", host_snapshot()), timeout=1.0)
    assert not result.ok and result.result == "rolled-back" and result.failed_step == step
    assert result.message.startswith(f"Migration of {name} failed:")
    assert result.message.endswith("the original container is back (running, restart policy unless-stopped).")
    assert assert_original_back(d, original) is None
    assert names(d) == {name}
    record = last_audit()
    assert (record["result"], record["step"]) == ("rolled-back", step)


CRASH = textwrap.dedent("""
    import os, sys
    import docker
    from gputui.actions.migrate import DockerMigrationEngine, MigrationHooks
    from tests.test_migrate_docker import host_snapshot

    class Crash(MigrationHooks):
        def before(self, step, run):
            if step == sys.argv[2]:
                os._exit(86)  # the process dies between two steps: no rollback, no cleanup

    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], version="auto")
    engine = DockerMigrationEngine(client, hooks=Crash(), poll_interval=0.1)
    engine.execute(engine.plan(sys.argv[1], "3", host_snapshot()), timeout=1.0)
    sys.exit(0)
""")


def _env(d, isolated_xdg) -> dict[str, str]:
    env = d.env()
    env["XDG_STATE_HOME"] = str(isolated_xdg / "state")
    env["XDG_CONFIG_HOME"] = str(isolated_xdg / "config")
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.mark.parametrize("crash_at,outcome", [("stop", "undo"), ("start", "undo"), ("remove-old", "finish")])
def test_a_crash_between_steps_is_reported_and_recover_finishes_or_undoes_it(subject, isolated_xdg, crash_at,
                                                                                outcome):
    d, make = subject
    name = f"mig-crash-{crash_at}"
    original = make(name).attrs
    env = _env(d, isolated_xdg)
    r = subprocess.run([sys.executable, "-c", CRASH, name, crash_at], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 86, r.stderr
    pending = pending_journals()
    assert len(pending) == 1 and pending[0].data["container"]["name"] == name
    assert "gputui migrate --recover" in pending[0].describe()

    if crash_at == "start":
        # A new migration of the same container is refused until the journal is dealt with.
        again = subprocess.run([sys.executable, "-m", "gputui", "migrate", name, "--to", "1", "--yes"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 1 and "interrupted migration" in again.stderr

    rec = subprocess.run([sys.executable, "-m", "gputui", "migrate", "--recover", "--yes"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    if outcome == "undo":
        assert f"Undid the interrupted migration of {name}" in rec.stdout
        assert_original_back(d, original)
    else:
        assert "Finished the interrupted migration" in rec.stdout
        new = d.client.api.inspect_container(name)
        assert new["Id"] != original["Id"] and new["State"]["Running"]
        assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(3)]
        assert files(d, name) == (f"named-{name}", f"anon-{name}")
        assert not [n for n in names(d) if BACKUP_INFIX in n]
    assert names(d) == {name}
    assert pending_journals() == []
    assert last_audit()["result"] == ("undone" if outcome == "undo" else "finished")


def test_if_the_original_vanishes_mid_way_recover_recreates_it_from_the_journal(subject, isolated_xdg):
    d, make = subject
    original = make("mig-gone").attrs

    class DeleteOld(MigrationHooks):
        def before(self, step, run):
            if step == "start":  # somebody removes the backup (not its volumes) behind gputui's back
                d.client.api.remove_container(run.plan.container_id, force=True)
                raise RuntimeError("injected failure at start")

    engine = DockerMigrationEngine(d.client, hooks=DeleteOld(), poll_interval=0.1)
    result = engine.execute(engine.plan("mig-gone", "2", host_snapshot()), timeout=0.5)
    assert not result.ok and result.result == "failed"
    assert result.message.endswith("run 'gputui migrate --recover'.")
    assert "putting the original back also failed" in result.message
    assert len(pending_journals()) == 1 and last_audit()["result"] == "failed"
    assert "mig-gone" not in names(d)

    # Docker keeps neither container: nothing is created from the journal alone until the operator says so
    rec = subprocess.run([sys.executable, "-m", "gputui", "migrate", "--recover", "--yes"],
                         env=_env(d, isolated_xdg), capture_output=True, text=True, timeout=120)
    assert rec.returncode == 1 and "--from-journal" in rec.stderr and "mig-gone" not in names(d)
    assert "host paths" in rec.stderr  # what it would reach is named
    rec = subprocess.run([sys.executable, "-m", "gputui", "migrate", "--recover", "--from-journal", "--yes"],
                         env=_env(d, isolated_xdg), capture_output=True, text=True, timeout=120)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    back = d.client.api.inspect_container("mig-gone")
    assert back["State"]["Running"]
    assert back["HostConfig"]["DeviceRequests"] == original["HostConfig"]["DeviceRequests"]
    assert comparable(back) == comparable(original)
    assert files(d, "mig-gone") == ("named-mig-gone", "anon-mig-gone")
    assert pending_journals() == [] and names(d) == {"mig-gone"}


def test_networks_keep_their_aliases_and_all_gpus_becomes_the_target(docker_cleanup):
    d = docker_cleanup
    nets = [d.client.networks.create(n, driver="bridge", labels={LABEL: "1"}) for n in ("mig-front", "mig-back")]
    try:
        c = d.client.containers.create(d.image, CMD, name="mig-net", labels={LABEL: "1"}, network="mig-front",
                                       device_requests=[d.device_request("all")])
        nets[1].connect(c, aliases=["metrics", "trainer-metrics"])
        c.start()
        original = d.client.api.inspect_container("mig-net")
        engine = DockerMigrationEngine(d.client, poll_interval=0.1)
        plan = engine.plan("mig-net", "1", host_snapshot())
        assert plan.from_all and any("granted GPU 1 only" in w for w in plan.warnings)
        result = engine.execute(plan, timeout=0.5)
        assert result.ok, result.message
        new = d.client.api.inspect_container("mig-net")
        assert new["HostConfig"]["NetworkMode"] == "mig-front"
        assert new["HostConfig"]["DeviceRequests"][0]["Count"] == 0
        assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(1)]
        assert environ(new["State"]["Pid"])["NVIDIA_VISIBLE_DEVICES"] == uuid(1)
        old_nets, new_nets = original["NetworkSettings"]["Networks"], new["NetworkSettings"]["Networks"]
        assert set(new_nets) == set(old_nets) == {"mig-front", "mig-back"}
        for net in old_nets:
            # Aliases are kept; the old short-id alias is gone, the new container has its own.
            assert set(new_nets[net]["Aliases"]) == set(old_nets[net]["Aliases"]) - {original["Id"][:12]} | \
                {new["Id"][:12]}
            assert new_nets[net]["IPAddress"]  # connected and addressed again
        assert "metrics" in new_nets["mig-back"]["Aliases"]
        assert comparable(new) == comparable(original)
    finally:
        d.remove_containers()
        for n in nets:
            n.remove()


def test_legacy_runtime_and_device_node_grants_are_rewritten_in_their_own_form(docker_cleanup):
    d = docker_cleanup
    d.run("mig-legacy", runtime="nvidia", environment={"NVIDIA_VISIBLE_DEVICES": "0", "KEEP": "1"}, command=CMD)
    d.run("mig-node", devices=[f"{d.device_node(0)}:/dev/nvidia0:rwm"], command=CMD)
    d.device_node(3)  # the target's node, as a GPU host has one per GPU
    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    for name in ("mig-legacy", "mig-node"):
        result = engine.execute(engine.plan(name, "3", host_snapshot()), timeout=0.3)
        assert result.ok, result.message
    legacy = d.client.api.inspect_container("mig-legacy")
    assert legacy["HostConfig"]["Runtime"] == "nvidia"
    assert f"NVIDIA_VISIBLE_DEVICES={uuid(3)}" in legacy["Config"]["Env"] and "KEEP=1" in legacy["Config"]["Env"]
    node = d.client.api.inspect_container("mig-node")
    # GPU 3's device node is /dev/nvidia3 (minor number 3 in the scenario).
    assert [(x["PathOnHost"], x["PathInContainer"]) for x in node["HostConfig"]["Devices"]] == \
        [(d.device_node(3), "/dev/nvidia3")]
    assert names(d) == {"mig-legacy", "mig-node"}


# -- refusals ----------------------------------------------------------------------------------


def test_refusals_change_nothing(subject):
    d, make = subject
    engine = DockerMigrationEngine(d.client)
    d.run("mig-swarm", gpus="device=0", command=CMD,
          labels={"com.docker.swarm.task.id": "t1", "com.docker.swarm.service.id": "s1"})
    d.run("mig-k8s", gpus="device=0", command=CMD,
          labels={"io.kubernetes.pod.name": "trainer-0", "io.kubernetes.pod.namespace": "ml"})
    shared = d.run("mig-shared", gpus="device=0", command=CMD)
    # The fixture's run() pins network_mode="none"; the sidecar joins the subject's namespace instead.
    d.client.containers.run(d.image, CMD, name="mig-sidecar", detach=True, network_mode=f"container:{shared.id}",
                            labels={LABEL: "1"})
    big = make("mig-big")
    cases = [
        ("mig-swarm", {}, "swarm", "is a Swarm task"),
        ("mig-k8s", {}, "kubernetes", "is managed by Kubernetes"),
        ("mig-shared", {}, "shared-namespace", "Container mig-sidecar shares mig-shared's network namespace"),
        ("mig-big", {"used": {2: 70 * GiB}}, "no-fit", "GPU 2 has 10.0 GiB free but mig-big has used up to 30.0 GiB"),
    ]
    before = {n: d.client.api.inspect_container(n)["Id"] for n in names(d)}
    for name, kw, kind, sentence in cases:
        cid = d.client.api.inspect_container(name)["Id"]
        snap = host_snapshot(kw.get("used"), container=(cid, name, 0, 30 * GiB))
        with pytest.raises(MigrationRefused) as info:
            engine.plan(name, "2", snap)
        assert info.value.kind == kind and sentence in str(info.value)
    forced = engine.plan("mig-big", "2", host_snapshot({2: 70 * GiB}, container=(big.id, "mig-big", 0, 30 * GiB)),
                         force=True)
    assert forced.forced
    with pytest.raises(MigrationRefused, match="read-only"):
        DockerMigrationEngine(d.client, read_only=True).plan("mig-big", "2", host_snapshot())
    assert {n: d.client.api.inspect_container(n)["Id"] for n in names(d)} == before
    assert all(d.client.api.inspect_container(n)["State"]["Running"] for n in before)
    assert not list(journal_dir().glob("*.json"))


# -- through the real CLI, on the fake NVIDIA driver ----------------------------------------------


def test_cli_migrates_on_the_fake_driver(subject, fake_nvml, isolated_xdg):
    d, make = subject
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    original = make("mig-cli").attrs
    env = fake_nvml.env(_env(d, isolated_xdg))

    def gputui(*args):
        return subprocess.run([sys.executable, "-m", "gputui", *args], env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    dry = gputui("migrate", "mig-cli", "--to", uuid(1), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f'+ HostConfig.DeviceRequests[0].DeviceIDs = ["{uuid(1)}"]' in dry.stdout
    assert "Dry run: nothing was changed." in dry.stdout
    assert d.client.api.inspect_container("mig-cli")["Id"] == original["Id"]

    no = gputui("migrate", "mig-cli", "--to", "1")
    assert no.returncode == 2 and "add --yes" in no.stderr
    ro = gputui("--read-only", "migrate", "mig-cli", "--to", "1", "--yes")
    assert ro.returncode == 1 and "read-only" in ro.stderr

    r = gputui("migrate", "mig-cli", "--to", "1", "--yes", "--timeout", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[ok] 8/8 remove the old container" in r.stdout
    assert f"mig-cli moved from GPU 0 to GPU 1 ({uuid(1)})." in r.stdout
    new = d.client.api.inspect_container("mig-cli")
    assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(1)]
    assert comparable(new) == comparable(original)
    assert files(d, "mig-cli") == ("named-mig-cli", "anon-mig-cli")
    assert names(d) == {"mig-cli"}

    same = gputui("migrate", "mig-cli", "--to", "1", "--yes")
    assert same.returncode == 1 and "gputui: mig-cli is already on GPU 1." in same.stderr
    assert last_audit()["result"] == "refused"
