"""Migration left unattended, against a real dockerd: interrupted stops, locks, recovery from anywhere.

Every test here is one way an operator's migration went wrong before (issue 11).
Stop timeouts are short (2-3 s) so a slow stop costs seconds, not minutes.

Container shapes tested (here, and in tests/test_migrate_docker.py marked "(docker)"):

| shape | how it is started | test |
|---|---|---|
| slow stopper | --gpus device=0, ignores SIGTERM, StopTimeout 3 s, unless-stopped | interrupt_during_a_slow_stop |
| empty entrypoint | image ENTRYPOINT ["env"], posted like --entrypoint "" (stored null) | an_empty_entrypoint |
| migrated twice at once | --gpus device=0 | two_migrations_of_one_container |
| static IP, two networks | user network + second network with a fixed IPv4 and an alias | recover_after_the_backup |
| journal of another user | --gpus device=0, crash at start, root-only journal | another_user_is_told |
| stopped, restart always | --gpus device=0, exited | a_stopped_restart_always |
| stopped, no policy | --gpus device=0, exited | a_stopped_restart_always |
| legacy runtime, other name | --runtime nvidia-experimental, NVIDIA_VISIBLE_DEVICES=1 | every_grant_form |
| request + device node | --gpus device=0 --device /dev/nvidia3 | every_grant_form |
| count, UUID, index | --gpus 2 / device=GPU-… / device=2 | every_grant_form |
| on-failure:5, plain | restart on-failure:5; no policy | cli_refusals_and_wording |
| subject (docker) | env, labels, named + anonymous volume, healthcheck, mem limit | test_migrate_docker |
| all GPUs, networks (docker) | --gpus all, two user networks with aliases | test_migrate_docker |
| legacy runtime, node (docker) | --runtime nvidia NVIDIA_VISIBLE_DEVICES=0; --device /dev/nvidia0 | ... |
| swarm, k8s, shared netns (docker) | labels; --network container: | test_migrate_docker (refusals) |

``--runtime NVIDIA`` is refused by Docker 20.10 ("Unknown runtime"); tests/test_grants.py reads it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from gputui.actions.journal import pending_journals, system_journal_dir
from gputui.actions.migrate import BACKUP_INFIX, DockerMigrationEngine
from gputui.core.sources.docker_source import DockerSource, parse_docker_time
from tests.fakenvml.scenario import gpu, scenario
from tests.fixtures.dockerd import LABEL
from tests.fixtures.unprivileged import readable_pythonpath
from tests.test_migrate_docker import CMD, REPO, host_gpus, host_snapshot, names, uuid

pytestmark = pytest.mark.docker

#: Ignores SIGTERM: a stop lasts its whole StopTimeout, then Docker kills it.
STUBBORN = ["sh", "-c", "trap 'touch /signal/term' TERM; while :; do sleep 0.1; done"]


def env_for(d, fake=None, **extra: str) -> dict[str, str]:
    env = d.env()
    env["PYTHONPATH"] = str(REPO)
    if fake is not None:
        env = fake.env(env)
    env.update(extra)
    return env


def gputui(env, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputui", *args], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL, **kw)


def wait_for(predicate, what: str, timeout: float = 60.0):
    """Poll a condition (not a sleep-as-assertion: it fails only if the condition never holds)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stopped_then_started(d, name: str, original: dict) -> dict:
    """The original container, by id: it did exit (the stop landed) and was started again after that."""
    now = d.client.api.inspect_container(name)
    assert now["Id"] == original["Id"] and now["State"]["Running"]
    finished = parse_docker_time(now["State"]["FinishedAt"])
    assert finished is not None, "the stop Docker was carrying out never finished before 'back' was reported"
    assert parse_docker_time(now["State"]["StartedAt"]) > finished
    assert now["HostConfig"]["RestartPolicy"] == original["HostConfig"]["RestartPolicy"]
    return now


@pytest.fixture
def fake_host(fake_nvml):
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    return fake_nvml


# -- 1. an interrupt during a slow stop ----------------------------------------------------------


def test_interrupt_during_a_slow_stop_waits_for_the_stop_and_recover_does_too(docker_cleanup, fake_host, tmp_path):
    d = docker_cleanup
    signals = tmp_path / "signal"
    signals.mkdir()
    c = d.run("slow-stop", gpus="device=0", command=STUBBORN, stop_timeout=3, volumes=[f"{signals}:/signal"],
              restart_policy={"Name": "unless-stopped"})
    original = c.attrs
    env = env_for(d, fake_host)

    def migrate_until_the_stop_is_in_flight() -> subprocess.Popen:
        (signals / "term").unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "gputui", "migrate", "slow-stop", "--to", "2", "--yes"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (signals / "term").exists(), "the container to receive SIGTERM")
        return proc

    # Ctrl-C while Docker is stopping it: undo waits for the stop, then starts it again.
    proc = migrate_until_the_stop_is_in_flight()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert "[..] 3/8 stop the old container: SIGTERM, waiting up to 3 s for it to exit" in out
    assert "wait for the stop Docker is still carrying out" in out
    assert "the original container is back (running, restart policy unless-stopped)" in err
    first = stopped_then_started(d, "slow-stop", original)
    assert pending_journals() == [] and names(d) == {"slow-stop"}

    # SIGKILL while Docker is stopping it, then an immediate --recover: it waits too.
    proc = migrate_until_the_stop_is_in_flight()
    proc.kill()
    proc.communicate(timeout=60)
    rec = gputui(env, "migrate", "--recover", "--yes")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    said = rec.stdout + rec.stderr
    assert said.count("An interrupted migrate was found: slow-stop") == 1  # said once, not twice
    assert "wait for the stop Docker is still carrying out" in rec.stdout
    assert "Undid the interrupted migration of slow-stop: the original container is back (running)." in rec.stdout
    second = stopped_then_started(d, "slow-stop", original)
    assert second["State"]["StartedAt"] != first["State"]["StartedAt"]
    assert pending_journals() == [] and names(d) == {"slow-stop"}


# -- 2. --entrypoint "" --------------------------------------------------------------------------


def test_an_empty_entrypoint_stays_empty_and_the_command_is_identical(docker_cleanup):
    d = docker_cleanup
    api = d.client.api
    base = api.create_container(d.image, command=["true"], labels={LABEL: "1"})
    # A pass-through entrypoint: with it the copy would run fine, just not the same command.
    api.commit(base["Id"], repository="gputui-test-entrypoint", tag="1", changes=['ENTRYPOINT ["env"]'])
    body = {"Image": "gputui-test-entrypoint:1", "Entrypoint": [""], "Cmd": CMD, "Labels": {LABEL: "1"},
            "StopTimeout": 1, "HostConfig": {"NetworkMode": "none",
                                             "DeviceRequests": [d.device_request("device=0")]}}
    cid = api.create_container_from_config(body, "empty-ep")["Id"]  # what `docker run --entrypoint ""` posts
    api.start(cid)
    original = api.inspect_container(cid)
    assert original["Config"]["Entrypoint"] is None and original["Path"] == "sh"

    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    plan = engine.plan("empty-ep", "1", host_snapshot())
    assert [line.split(" = ")[0] for line in plan.diff] == ["- HostConfig.DeviceRequests[0].DeviceIDs",
                                                            "+ HostConfig.DeviceRequests[0].DeviceIDs"]
    result = engine.execute(plan, timeout=0.5)
    assert result.ok, result.message
    new = api.inspect_container("empty-ep")
    assert new["Id"] != cid
    assert (new["Config"]["Entrypoint"], new["Config"]["Cmd"]) == (None, CMD)
    assert (new["Path"], new["Args"]) == (original["Path"], original["Args"])
    api.remove_container(new["Id"], force=True)
    api.remove_image("gputui-test-entrypoint:1")


# -- 3. two migrations of one container ------------------------------------------------------------


HOLD = textwrap.dedent("""
    import os, sys
    import docker
    from gputui.actions.migrate import DockerMigrationEngine, MigrationHooks
    from tests.test_migrate_docker import host_snapshot

    class Hold(MigrationHooks):
        def before(self, step, run):
            if step == "rename":
                print("holding", flush=True)
                sys.stdin.readline()  # the first migration is half-way until the test says go

    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], version="auto")
    engine = DockerMigrationEngine(client, hooks=Hold(), poll_interval=0.1)
    result = engine.execute(engine.plan(sys.argv[1], "3", host_snapshot()), timeout=0.5)
    print(result.result, flush=True)
""")


def test_two_migrations_of_one_container_the_second_is_refused_and_nothing_is_left(docker_cleanup, fake_host):
    d = docker_cleanup
    d.run("twice", gpus="device=0", command=CMD)
    env = env_for(d, fake_host)
    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    late_plan = engine.plan("twice", "2", host_snapshot())  # planned before the first one runs

    first = subprocess.Popen([sys.executable, "-c", HOLD, "twice"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "holding"
        second = gputui(env, "migrate", "twice", "--to", "1", "--yes")
        assert second.returncode == 1
        assert f"gputui: twice is being migrated by pid {first.pid} (" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.stdin.write("go\n")
        first.stdin.close()
        assert first.stdout.readline().strip() == "ok"
        first.wait(60)
    # The plan made before the first migration no longer fits: refused, not carried out on a stale id.
    late = engine.execute(late_plan, timeout=0.5)
    assert (late.ok, late.result) == (False, "refused")
    assert late.message == "twice changed since the plan (it was recreated or removed); plan the migration again."
    now = d.client.api.inspect_container("twice")
    assert now["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(3)] and now["State"]["Running"]
    assert names(d) == {"twice"} and pending_journals() == []
    assert list(system_journal_dir().glob("*.json")) == []
    rec = gputui(env, "migrate", "--recover", "--yes")
    assert rec.returncode == 0 and "No interrupted migration to recover." in rec.stdout


# -- 4 and 5. recover: backup removed, static IP on a second network, another state directory --------


CRASH_AT_START = textwrap.dedent("""
    import os, sys
    import docker
    from gputui.actions.migrate import DockerMigrationEngine, MigrationHooks
    from tests.test_migrate_docker import host_snapshot

    class Crash(MigrationHooks):
        def before(self, step, run):
            if step == "start":
                os._exit(86)

    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], version="auto")
    engine = DockerMigrationEngine(client, hooks=Crash(), poll_interval=0.1)
    engine.execute(engine.plan(sys.argv[1], "3", host_snapshot()), timeout=0.5)
""")


def test_recover_after_the_backup_was_removed_keeps_static_ips_from_another_state_dir(docker_cleanup, tmp_path):
    d = docker_cleanup
    front = d.client.networks.create("mig-front", driver="bridge", labels={LABEL: "1"})
    ipam = {"Driver": "default", "Config": [{"Subnet": "10.183.0.0/24"}]}
    back = d.client.networks.create("mig-static", driver="bridge", ipam=ipam, labels={LABEL: "1"})
    try:
        c = d.client.containers.create(d.image, CMD, name="static-ip", labels={LABEL: "1"}, network="mig-front",
                                       device_requests=[d.device_request("device=1")])
        back.connect(c, ipv4_address="10.183.0.183", aliases=["trainer-metrics"])
        c.start()
        original = d.client.api.inspect_container("static-ip")
        assert original["NetworkSettings"]["Networks"]["mig-static"]["IPAddress"] == "10.183.0.183"

        # The operator ran it with sudo -E from their own state directory ...
        crash = subprocess.run([sys.executable, "-c", CRASH_AT_START, "static-ip"], timeout=120,
                               env=env_for(d, XDG_STATE_HOME=str(tmp_path / "alice-state")))
        assert crash.returncode == 86
        backup = next(n for n in names(d) if n.startswith("static-ip" + BACKUP_INFIX))
        d.client.api.remove_container(backup, force=True)  # ... and a prune job removed the backup
        # ... then root recovers from root's own state directory: the journal is found all the same.
        rec = gputui(env_for(d, XDG_STATE_HOME=str(tmp_path / "root-state")), "migrate", "--recover", "--yes")
        assert rec.returncode == 1 and "--from-journal" in rec.stderr  # the journal alone vouches for nothing
        rec = gputui(env_for(d, XDG_STATE_HOME=str(tmp_path / "root-state")), "migrate", "--recover",
                     "--from-journal", "--yes")
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert "recreate static-ip from the journal" in rec.stdout
        assert "docker rm" not in rec.stdout + rec.stderr
        now = d.client.api.inspect_container("static-ip")
        assert now["State"]["Running"]
        assert now["HostConfig"]["DeviceRequests"] == original["HostConfig"]["DeviceRequests"]
        nets = now["NetworkSettings"]["Networks"]
        assert set(nets) == {"mig-front", "mig-static"}
        assert nets["mig-static"]["IPAddress"] == "10.183.0.183"
        assert nets["mig-static"]["IPAMConfig"]["IPv4Address"] == "10.183.0.183"
        assert "trainer-metrics" in nets["mig-static"]["Aliases"]
        assert names(d) == {"static-ip"} and pending_journals() == []
    finally:
        d.remove_containers()
        front.remove()
        back.remove()


def test_another_user_is_told_who_can_recover_and_never_to_remove_the_backup(docker_cleanup, tmp_path):
    d = docker_cleanup
    d.run("other-user", gpus="device=0", command=CMD)
    shared = Path(tempfile.mkdtemp(prefix="gputui-journals-"))  # tmp_path is private to root
    try:
        _another_user(d, shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _another_user(d, shared: Path) -> None:
    os.chmod(shared, 0o755)
    system = shared / "journal"
    env = env_for(d, GPUTUI_JOURNAL_DIR=str(system))
    crash = subprocess.run([sys.executable, "-c", CRASH_AT_START, "other-user"], env=env, timeout=120)
    assert crash.returncode == 86
    journal = next(system.glob("*.json"))
    # An unprivileged user (not in the docker group) runs --recover: the journal is found, not readable.
    user_env = {"PATH": os.environ["PATH"], "PYTHONPATH": readable_pythonpath(), "HOME": "/nonexistent",
                "XDG_STATE_HOME": str(shared / "nobody-state"), "DOCKER_HOST": d.host,
                "GPUTUI_JOURNAL_DIR": str(system), "GPUTUI_LOCK_DIR": str(shared / "locks")}
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m",
                        "gputui", "migrate", "--recover", "--yes"], env=user_env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert (f"An interrupted migrate left the journal {journal}, which this user cannot read (owned by root); "
            f"run 'sudo gputui migrate --recover'.") in r.stdout
    assert "Traceback" not in r.stderr and "docker rm" not in r.stdout + r.stderr
    # Without the journal, the backup note says it may be the only copy and how to bring it back.
    aside = shared / "aside.json"
    journal.rename(aside)
    lone = gputui(env, "migrate", "--recover", "--yes")
    backup = next(n for n in names(d) if BACKUP_INFIX in n)
    assert f"If no container other-user runs, it is the only copy of the original: do not remove it; " \
           f"'docker rename {backup} other-user'" in lone.stdout
    assert "docker rm " not in lone.stdout
    aside.rename(journal)
    rec = gputui(env, "migrate", "--recover", "--yes")
    assert rec.returncode == 0 and d.client.api.inspect_container("other-user")["State"]["Running"]


# -- 6. stopped containers ----------------------------------------------------------------------------


def test_a_stopped_restart_always_container_is_started_by_docker_like_the_original(docker_cleanup):
    d = docker_cleanup
    always = d.run("stopped-always", gpus="device=0", command=CMD, restart_policy={"Name": "always"})
    plain = d.run("stopped-plain", gpus="device=0", command=CMD)
    for c in (always, plain):
        c.stop(timeout=1)
    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    plan = engine.plan("stopped-always", "2", host_snapshot())
    assert "verify the new container, then stop it again (the original was stopped)" in plan.describe()
    result = engine.execute(plan, timeout=0.3)
    assert result.ok and "started, verified and stopped again" in result.message
    copy = d.client.api.inspect_container("stopped-always")
    assert copy["State"]["Status"] == "exited" and copy["HostConfig"]["RestartPolicy"]["Name"] == "always"

    plain_plan = engine.plan("stopped-plain", "2", host_snapshot())
    assert any("the copy is created but not started, so nothing is verified" in w for w in plain_plan.warnings)
    plain_result = engine.execute(plain_plan, timeout=0.3)
    assert plain_result.ok and plain_result.message.endswith(
        "It was not running, so the copy was not started and nothing was verified.")
    # Docker starts a restart-always container at daemon start, as it would have started the original.
    d.stop()
    d.start()
    assert d.client.api.inspect_container("stopped-always")["State"]["Running"]
    assert d.client.api.inspect_container("stopped-plain")["State"]["Status"] == "created"


# -- 8. one grant model ----------------------------------------------------------------------------


def test_every_grant_form_is_read_the_same_by_the_view_and_by_migrate(docker_cleanup):
    d = docker_cleanup
    d.run("g-experimental", runtime="nvidia-experimental", environment={"NVIDIA_VISIBLE_DEVICES": "1"}, command=CMD)
    d.run("g-request-node", gpus="device=0", devices=[f"{d.device_node(3)}:/dev/nvidia3:rwm"], command=CMD)
    d.run("g-count", gpus=2, command=CMD)
    d.run("g-uuid", gpus=f"device={uuid(2)}", command=CMD)
    d.run("g-index", gpus="device=2", command=CMD)
    gpus = host_gpus()
    source = DockerSource(environ=d.env())
    inv = source.inventory(tuple(g.uuid for g in gpus), {g.minor_number: g.uuid for g in gpus})
    assert inv.available, inv.error
    view = {r.name: tuple(next(g.index for g in gpus if g.uuid == u) for u in r.gpus) for r in inv.containers}
    assert view == {"g-experimental": (1,), "g-request-node": (0, 3), "g-count": (0, 1),
                    "g-uuid": (2,), "g-index": (2,)}
    engine = DockerMigrationEngine(d.client)
    for name, held in view.items():
        target = next(i for i in range(4) if i not in held)
        plan = engine.plan(name, str(target), host_snapshot(), from_gpu=str(held[-1]) if len(held) > 1 else None)
        if name == "g-count":
            assert plan.from_gpus == held  # --gpus 2 moves as a whole
        else:
            assert plan.from_gpus == held[-1:], name
            assert plan.grant_before.count("GPU ") == len(held), plan.grant_before


# -- 9. smaller ones, through the CLI ----------------------------------------------------------------


def test_cli_refusals_and_wording(docker_cleanup, fake_host, tmp_path):
    d = docker_cleanup
    env = env_for(d, fake_host)
    d.run("w-onfail", gpus="device=0", command=CMD, restart_policy={"Name": "on-failure", "MaximumRetryCount": 5})
    d.run("w-plain", gpus="device=0", command=CMD)
    held_from = gputui(env, "migrate", "w-plain", "--to", "1", "--from", "2", "--yes")
    assert held_from.returncode == 1
    assert held_from.stderr.strip() == "gputui: w-plain does not hold GPU 2 (it holds GPU 0)."
    ids = [c.id for c in d.client.containers.list(all=True)]
    while len({i[0] for i in ids}) == len(ids):  # until two ids share their first digit (17 at most)
        ids.append(d.client.api.create_container(d.image, ["true"], labels={LABEL: "1"})["Id"])
    prefix = next(p for p in "0123456789abcdef" if sum(i.startswith(p) for i in ids) > 1)
    ambiguous = gputui(env, "migrate", prefix, "--to", "1", "--dry-run")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr == f"gputui: Docker cannot tell which container {prefix!r} is: Multiple IDs found " \
                               f"with provided prefix: {prefix}.\n"
    dry = gputui(env, "migrate", "w-onfail", "--to", "1", "--dry-run")
    assert "restart policy on-failure:5" in dry.stdout
    plain = gputui(env, "migrate", "w-plain", "--to", "1", "--yes", "--timeout", "0.3")
    assert plain.returncode == 0, plain.stderr
    assert "[--] 2/8 the old container's restart policy is already 'no'" in plain.stdout
    assert "[ok] 2/8" not in plain.stdout
    gone = gputui(dict(env, DOCKER_HOST=f"unix://{tmp_path}/missing.sock"), "migrate", "w-plain", "--to", "2",
                  "--yes")
    assert gone.returncode == 3
    assert gone.stderr.strip().splitlines()[-1].startswith("gputui: ")
    assert "('Connection aborted." not in gone.stderr and "Error(" not in gone.stderr


def test_recover_discards_what_it_cannot_finish_and_touches_no_container(docker_cleanup):
    d = docker_cleanup
    d.run("discard-me", gpus="device=0", command=CMD)
    env = env_for(d)
    assert subprocess.run([sys.executable, "-c", CRASH_AT_START, "discard-me"], env=env, timeout=120).returncode == 86
    for n in names(d):  # the backup and the copy are gone, and somebody else took the name
        d.client.api.remove_container(n, force=True)
    squatter = d.run("discard-me", command=CMD).id
    stuck = gputui(env, "migrate", "--recover", "--yes")
    assert stuck.returncode == 1
    assert "the name discard-me is taken by container" in stuck.stderr
    assert len(pending_journals()) == 1
    gone = gputui(env, "migrate", "--recover", "--discard", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert "no container was touched" in gone.stdout
    assert pending_journals() == [] and len(list((system_journal_dir() / "discarded").glob("*.json"))) == 1
    assert d.client.api.inspect_container("discard-me")["Id"] == squatter
    assert gputui(env, "migrate", "--recover", "--yes").stdout.startswith("No interrupted migration to recover.")
