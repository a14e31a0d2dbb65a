"""What a migration does with everything besides the configuration, against a real dockerd (issue 23).

* The container's own files (outside volumes) travel byte for byte, deletions from the image too —
  after a plain migration and after one killed mid-way and finished by ``--recover``.
* A tmpfs holding data is refused without ``--force``.
* The terminal hanging up during a slow stop does not leave the container down, and a second Ctrl-C
  during the rollback is ignored.
* A link on a second network, ``--network host --uts host``, and a network pruned while a migration was
  interrupted (``--recover`` names the ``docker network create`` that fixes it, then finishes in one go).
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time

import pytest

from gputui.actions.audit import audit_path
from gputui.actions.journal import pending_journals
from gputui.actions.migrate import BACKUP_INFIX
from tests.fixtures.dockerd import LABEL
from tests.test_migrate_docker import CMD, CRASH, names, uuid
from tests.test_migrate_unattended import STUBBORN, env_for, gputui, wait_for

pytestmark = pytest.mark.docker

#: What a user leaves in a container's own filesystem: a checkpoint with its own mode, owner and time,
#: a pip-installed file, and a file of the image deleted.
WRITE = ("mkdir -p /ckpt && dd if=/dev/urandom of=/ckpt/model.pt bs=1k count=300 2>/dev/null && "
         "chmod 0640 /ckpt/model.pt && chown 1234:5678 /ckpt/model.pt && touch -d '2021-03-04 05:06:07' "
         "/ckpt/model.pt && echo installed > /etc/pip.conf && rm /bin/ls")
#: sha256, mode, owner, group and mtime of each file, and whether the deleted one is still gone.
FACTS = ("for f in /ckpt/model.pt /etc/pip.conf; do sha256sum $f; stat -c '%a %u %g %Y' $f; done; "
         "test -e /bin/ls && echo ls-present || echo ls-deleted")


def facts(d, name: str) -> str:
    code, out = d.client.containers.get(name).exec_run(["sh", "-c", FACTS])
    assert code == 0, out
    return out.decode()


def audits() -> list[dict]:
    return [json.loads(line) for line in audit_path().read_text().splitlines()]


@pytest.fixture
def host(fake_nvml):
    from tests.fakenvml.scenario import gpu, scenario

    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    return fake_nvml


def test_files_in_the_container_layer_travel_byte_for_byte(docker_cleanup, host):
    d = docker_cleanup
    d.run("layer", gpus="device=0", command=CMD)
    code, out = d.client.containers.get("layer").exec_run(["sh", "-c", WRITE])
    assert code == 0, out
    before = facts(d, "layer")
    assert "ls-deleted" in before and "640 1234 5678 " in before
    env = env_for(d, host)

    plan = gputui(env, "migrate", "layer", "--to", "2", "--dry-run")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "changed since the image are carried: the stopped original is committed into image " \
           "gputui-layer/layer:" in plan.stdout
    assert "D /bin/ls" in plan.stdout and "A /ckpt/model.pt" in plan.stdout
    discard = gputui(env, "migrate", "layer", "--to", "2", "--dry-run", "--discard-changes")
    assert "are DISCARDED (--discard-changes)" in discard.stdout and "KiB" in discard.stdout, discard.stdout

    r = gputui(env, "migrate", "layer", "--to", "2", "--yes", "--timeout", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "committed " in r.stdout and " into gputui-layer/layer:" in r.stdout
    new = d.client.api.inspect_container("layer")
    assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(2)]
    assert new["Config"]["Labels"]["io.gputui.migrate.image"] == d.image
    assert new["Config"]["Labels"]["io.gputui.migrate.container"] == "layer"
    assert facts(d, "layer") == before
    assert not [n for n in names(d) if BACKUP_INFIX in n]
    done = audits()[-1]
    assert done["result"] == "ok" and done["layer"] == "committed" and done["layer_image_id"].startswith("sha256:")

    # Moved again with nothing new: nothing to commit, the copy keeps the image. With a new file: a new
    # commit, and the image the first move committed goes with the backup; the first image stays named.
    first_image = new["Config"]["Image"]
    r = gputui(env, "migrate", "layer", "--to", "1", "--yes", "--timeout", "1")
    assert r.returncode == 0 and "nothing to carry" in r.stdout, r.stdout + r.stderr
    assert facts(d, "layer") == before and d.client.api.inspect_container("layer")["Config"]["Image"] == first_image
    assert d.client.containers.get("layer").exec_run(["sh", "-c", "echo more > /ckpt/more"])[0] == 0
    r = gputui(env, "migrate", "layer", "--to", "3", "--yes", "--timeout", "1")
    assert r.returncode == 0 and "1 path (5 bytes) changed" in r.stdout, r.stdout + r.stderr
    assert facts(d, "layer") == before
    assert first_image not in {t for i in d.client.api.images() for t in i.get("RepoTags") or []}
    assert d.client.api.inspect_container("layer")["Config"]["Labels"]["io.gputui.migrate.image"] == d.image


@pytest.mark.parametrize("crash_at,outcome", [("remove-old", "Finished"), ("start", "Undid")])
def test_files_survive_an_interrupted_migration_and_recover(docker_cleanup, host, crash_at, outcome):
    d = docker_cleanup
    d.run("layer-crash", gpus="device=0", command=CMD)
    assert d.client.containers.get("layer-crash").exec_run(["sh", "-c", WRITE])[0] == 0
    before = facts(d, "layer-crash")
    env = env_for(d, host)
    tags_before = {t for i in d.client.api.images() for t in i.get("RepoTags") or []}
    r = subprocess.run([sys.executable, "-c", CRASH, "layer-crash", crash_at], env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 86, r.stderr
    journal = pending_journals()[0].data
    assert journal["layer_image"].startswith("gputui-layer/layer-crash:")
    assert journal["layer_image_id"].startswith("sha256:")  # the commit is recorded before the copy exists
    rec = gputui(env, "migrate", "--recover", "--yes")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert f"{outcome} the interrupted migration" in rec.stdout
    assert facts(d, "layer-crash") == before
    assert names(d) == {"layer-crash"} and pending_journals() == []
    tags = {t for i in d.client.api.images() for t in i.get("RepoTags") or []}
    used = d.client.api.inspect_container("layer-crash")["Config"]["Image"]
    assert tags - tags_before <= {used}, rec.stdout  # no committed image left unused


def test_a_tmpfs_holding_data_is_refused_without_force(docker_cleanup, host):
    d = docker_cleanup
    d.run("scratch", gpus="device=0", command=CMD, tmpfs={"/scratch": ""})
    assert d.client.containers.get("scratch").exec_run(["sh", "-c", "echo work > /scratch/state"])[0] == 0
    env = env_for(d, host)
    r = gputui(env, "migrate", "scratch", "--to", "1", "--yes")
    assert r.returncode == 1
    assert "The tmpfs /scratch of scratch holds 4.0 KiB, which a migration loses" in r.stderr
    assert d.client.api.inspect_container("scratch")["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0"]
    forced = gputui(env, "migrate", "scratch", "--to", "1", "--dry-run", "--force")
    assert forced.returncode == 0 and "tmpfs /scratch: contents lost (holds 4.0 KiB)" in forced.stdout


def _slow_stopper(d, name: str, tmp_path):
    signals = tmp_path / "signal"
    signals.mkdir()
    c = d.run(name, gpus="device=0", command=STUBBORN, stop_timeout=3, volumes=[f"{signals}:/signal"],
              restart_policy={"Name": "unless-stopped"})
    return c.attrs, signals / "term"


def test_a_hangup_during_the_stop_finishes_the_migration_on_its_own(docker_cleanup, host, tmp_path):
    d = docker_cleanup
    original, term = _slow_stopper(d, "hup", tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "migrate", "hup", "--to", "2", "--yes", "--timeout", "1"],
                            env=env_for(d, host), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(term.exists, "the container to receive SIGTERM")
    hung_up = time.monotonic()
    proc.send_signal(signal.SIGHUP)

    def running_copy():
        try:
            now = d.client.api.inspect_container("hup")
        except Exception:
            return None
        return now if now["Id"] != original["Id"] and now["State"]["Running"] else None

    new = wait_for(running_copy, "the copy to run", timeout=3 + 15)
    assert time.monotonic() - hung_up <= 3 + 15
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(2)]
    assert new["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert pending_journals() == [] and names(d) == {"hup"}
    results = [a["result"] for a in audits() if a.get("container") == "hup"]
    assert results[-2:] == ["ok", "detached"]


def test_a_second_interrupt_during_the_rollback_is_ignored(docker_cleanup, host, tmp_path):
    d = docker_cleanup
    original, term = _slow_stopper(d, "twice-int", tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "migrate", "twice-int", "--to", "2", "--yes"],
                            env=env_for(d, host), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(term.exists, "the container to receive SIGTERM")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # not an assertion: only so that the second Ctrl-C is a second one
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert err.count("already putting twice-int back; this interrupt is ignored") == 1
    assert "the original container is back (running, restart policy unless-stopped)" in err
    now = d.client.api.inspect_container("twice-int")
    assert now["Id"] == original["Id"] and now["State"]["Running"]
    assert pending_journals() == [] and names(d) == {"twice-int"}


def test_a_link_on_a_second_network_is_kept(docker_cleanup, host):
    d = docker_cleanup
    nets = [d.client.networks.create(n, driver="bridge", labels={LABEL: "1"}) for n in ("lk-n1", "lk-n2")]
    try:
        vols = d.client.containers.create(d.image, CMD, name="lk-vols", labels={LABEL: "1"}, network="lk-n2")
        vols.start()
        c = d.client.containers.create(d.image, CMD, name="lk2", labels={LABEL: "1"}, network="lk-n1",
                                       device_requests=[d.device_request("device=0")])
        d.client.api.connect_container_to_network("lk2", "lk-n2", links=[("lk-vols", "v")])
        c.start()
        env = env_for(d, host)
        dry = gputui(env, "migrate", "lk2", "--to", "1", "--dry-run")
        assert dry.returncode == 0 and "does not exist" not in dry.stdout
        r = gputui(env, "migrate", "lk2", "--to", "1", "--yes", "--timeout", "1")
        assert r.returncode == 0, r.stdout + r.stderr
        new = d.client.api.inspect_container("lk2")
        assert new["NetworkSettings"]["Networks"]["lk-n2"]["Links"] == ["lk-vols:v"] or \
            new["NetworkSettings"]["Networks"]["lk-n2"]["Links"] == ["/lk-vols:/lk2/v"]
        assert d.client.containers.get("lk2").exec_run(["ping", "-c", "1", "-W", "2", "v"])[0] == 0
    finally:
        d.remove_containers()
        for n in nets:
            n.remove()


def test_host_network_and_uts_are_migrated_without_a_hostname(docker_cleanup, host):
    d = docker_cleanup
    d.client.containers.run(d.image, CMD, name="hostnet", detach=True, labels={LABEL: "1"}, network_mode="host",
                            uts_mode="host", device_requests=[d.device_request("device=0")])
    r = gputui(env_for(d, host), "migrate", "hostnet", "--to", "3", "--yes", "--timeout", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    new = d.client.api.inspect_container("hostnet")
    assert new["HostConfig"]["UTSMode"] == "host" and new["HostConfig"]["NetworkMode"] == "host"
    assert new["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == [uuid(3)]
    assert new["State"]["Running"]


def test_a_network_pruned_during_an_interrupted_migration_is_named_with_its_fix(docker_cleanup, host):
    d = docker_cleanup
    ipam = {"Driver": "default", "Config": [{"Subnet": "10.231.7.0/24", "Gateway": "10.231.7.1"}]}
    net = d.client.networks.create("km-net", driver="bridge", ipam=ipam, labels={LABEL: "1", "prune-me": "1"})
    try:
        c = d.client.containers.create(d.image, CMD, name="km", labels={LABEL: "1"}, network="km-net",
                                       device_requests=[d.device_request("device=0")])
        c.start()
        original = d.client.api.inspect_container("km")
        env = env_for(d, host)
        r = subprocess.run([sys.executable, "-c", CRASH, "km", "create"], env=env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 86, r.stderr
        # Stopped and renamed, km's network has no endpoint left: 'docker network prune' removes it.
        assert "km-net" in (d.client.api.prune_networks(filters={"label": "prune-me=1"})["NetworksDeleted"] or [])

        first = gputui(env, "migrate", "--recover", "--yes")
        assert first.returncode == 1
        fix = ("docker network create --driver bridge --subnet 10.231.7.0/24 --gateway 10.231.7.1 km-net")
        assert fix in first.stderr, first.stderr
        assert not [n for n in names(d) if n == "km"]  # nothing half-made under the name
        made = subprocess.run(shlex.split(fix), env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr

        second = gputui(env, "migrate", "--recover", "--yes")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "Undid the interrupted migration of km: the original container is back (running)." in second.stdout
        back = d.client.api.inspect_container("km")
        assert back["Id"] == original["Id"] and back["State"]["Running"]
        assert back["NetworkSettings"]["Networks"]["km-net"]["IPAddress"].startswith("10.231.7.")
        assert pending_journals() == [] and names(d) == {"km"}
    finally:
        d.remove_containers()
        for n in d.client.networks.list(names=["km-net"]):
            n.remove()
        del net
