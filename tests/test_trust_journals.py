"""Journals and locks another user controls never turn root's migrate and --recover against the operator
(issue 22, points 1, 2 and 6) nor send --recover to the wrong daemon (issue 23, point 2).

Every attack is replayed as a real unprivileged user (``useradd`` here, ``setpriv`` to drop privileges)
against the real ``gputui`` on the private dockerd, and judged by its outcome: no container created or
removed, no file moved, root's migration not refused. The users, files and processes made here are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.actions.journal import Journal, pending_journals, system_journal_dir
from gputui.actions.locks import ContainerLock, LockHeld
from tests.fakenvml.scenario import gpu, scenario
from tests.fixtures.dockerd import LABEL
from tests.test_migrate_docker import CMD, REPO, names
from tests.test_migrate_unattended import CRASH_AT_START

#: The interpreter the unprivileged user runs (the test venv may sit in a folder that user cannot enter).
USER_PYTHON = "/usr/bin/python3"

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(os.geteuid() != 0, reason="replays attacks of another user: needs root")]


@contextlib.contextmanager
def local_user(name: str) -> Iterator[pwd.struct_passwd]:
    """A real unprivileged user (not in the docker group) with a home folder under /home; removed after."""
    subprocess.run(["userdel", "-r", name], capture_output=True)  # a leftover of an interrupted run
    subprocess.run(["useradd", "-m", "-d", f"/home/{name}", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        shutil.rmtree(f"/home/{name}", ignore_errors=True)


def as_user(pw: pwd.struct_passwd, *argv: str) -> list[str]:
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *argv]


def user_env(pw: pwd.struct_passwd) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": pw.pw_dir}


PLANT = ("import os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); "
         "open(sys.argv[1], 'w').write(sys.stdin.read())")


def plant(pw: pwd.struct_passwd, path: Path, data: dict) -> None:
    """The user writes ``data`` as a journal at ``path`` (with their own rights)."""
    subprocess.run(as_user(pw, USER_PYTHON, "-c", PLANT, str(path)), input=json.dumps(data), text=True,
                   check=True, env=user_env(pw), timeout=60)


def home_journals(pw: pwd.struct_passwd) -> Path:
    return Path(pw.pw_dir) / ".local" / "state" / "gputui" / "journal"


def env_for(d, fake=None, **extra: str) -> dict[str, str]:
    env = d.env()
    env["PYTHONPATH"] = str(REPO)
    env["HOME"] = "/root"
    if fake is not None:
        env = fake.env(env)
    env.update(extra)
    return env


def gputui(env, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputui", *args], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL, **kw)


def evil_journal(d, name: str, **extra) -> dict:
    """A journal as gputui writes them, naming ``name``, whose original body mounts the host's /."""
    return {
        "version": 1, "action": "migrate", "created": "2026-01-01T00:00:00+00:00", "pid": 1, "user": "root",
        "step": "rename", "summary": f"{name}: GPU 0 -> GPU 1", "container": {"id": "f" * 64, "name": name},
        "backup_name": f"{name}-gputui-old-20260101000000", "restart_policy": {"Name": "no"}, "was_running": True,
        "stop_timeout": 1, "new_id": None, "verified": False, "connect": [],
        "original_body": {"Image": d.image, "Cmd": ["sleep", "600"], "Labels": {LABEL: "1"},
                          "HostConfig": {"Binds": ["/:/host:rw"], "NetworkMode": "none"}},
        "body": {"Image": d.image, "Labels": {LABEL: "1"}}, **extra,
    }


def mounts_host_root(d) -> list[str]:
    return [c.name for c in d.client.containers.list(all=True)
            if any(m.get("Source") == "/" for m in c.attrs.get("Mounts") or [])]


# -- journals ---------------------------------------------------------------------------------------


@pytest.mark.docker
def test_journals_planted_in_a_home_folder_create_and_remove_nothing(docker_cleanup):
    d = docker_cleanup
    victim = d.run("gtjr-victim", command=CMD)
    with local_user("gtjr1") as pw:
        folder = home_journals(pw)
        plant(pw, folder / "migrate-20260101T000000-gtjr-rootpwn-aaaaaa.json", evil_journal(d, "gtjr-rootpwn"))
        # ... and one whose new_id / verified name a victim container, for root to force-remove
        plant(pw, folder / "migrate-20260101T000001-gtjr-victim-bbbbbb.json", evil_journal(
            d, "gtjr-victim", container={"id": victim.id, "name": "gtjr-victim"}, new_id=victim.id, verified=True))
        before = sorted(p.name for p in folder.iterdir())
        r = gputui(env_for(d), "migrate", "--recover", "--yes")
        assert "Traceback" not in r.stderr
        assert "gtjr-rootpwn" not in names(d) and mounts_host_root(d) == []  # no root container with the host's /
        now = d.client.api.inspect_container("gtjr-victim")
        assert now["Id"] == victim.id and now["State"]["Running"]  # the victim was not removed
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing moved or deleted
        # and the user's journals do not block root's migrations, nor print on every start
        once = gputui(env_for(d), "snapshot", "--json", "--demo")
        assert "gtjr-victim" not in once.stderr


@pytest.mark.docker
def test_a_journal_folder_root_does_not_own_is_not_used(docker_cleanup, tmp_path):
    """``sudo -E`` keeps GPUTUI_JOURNAL_DIR: a folder a user made is read by nobody but that user."""
    d = docker_cleanup
    shared = Path(tempfile.mkdtemp(prefix="gtjr-shared-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        with local_user("gtjr2") as pw:
            folder = Path(pw.pw_dir) / "journal"
            subprocess.run(as_user(pw, "mkdir", "-m", "755", str(folder)), check=True, env=user_env(pw))
            plant(pw, folder / "migrate-20260101T000000-gtjr-rootpwn2-aaaaaa.json", evil_journal(d, "gtjr-rootpwn2"))
            r = gputui(env_for(d, GPUTUI_JOURNAL_DIR=str(folder)), "migrate", "--recover", "--yes")
            assert "Traceback" not in r.stderr and r.returncode != 0
            assert "gtjr-rootpwn2" not in names(d) and mounts_host_root(d) == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.docker
def test_a_journal_another_user_owns_in_the_system_folder_is_listed_and_skipped(docker_cleanup):
    d = docker_cleanup
    folder = system_journal_dir()
    folder.mkdir(parents=True)
    with local_user("gtjr6") as pw:
        journal = folder / "migrate-20260101T000000-gtjr-rootpwn3-aaaaaa.json"
        journal.write_text(json.dumps(evil_journal(d, "gtjr-rootpwn3")))
        os.chown(journal, pw.pw_uid, pw.pw_gid)  # what a docker-group user's own migration leaves there
        journal.chmod(0o600)
        r = gputui(env_for(d), "migrate", "--recover", "--yes")
        assert "Traceback" not in r.stderr and r.returncode != 0
        assert "gtjr-rootpwn3" not in names(d) and mounts_host_root(d) == []
        assert journal.exists() and str(journal) in r.stdout  # listed (one sentence), not acted on


@pytest.mark.docker
@pytest.mark.parametrize("shape", ["verified-original", "unverified-copy"])
def test_a_journal_naming_a_container_that_is_not_its_copy_or_backup_gets_nothing_removed(docker_cleanup, shape):
    """Even a journal root trusts cannot name a container for --recover to remove: Docker must show it to be
    the migration's copy (under the name, from the journal's image and labels) or its backup."""
    d = docker_cleanup
    victim = d.run("gtjr-v2", command=CMD)
    if shape == "verified-original":  # "finish" would remove the original: the victim
        data = evil_journal(d, "gtjr-v2", container={"id": victim.id, "name": "gtjr-v2"}, new_id=victim.id,
                            verified=True)
    else:  # "undo" would remove the copy: the victim
        data = evil_journal(d, "gtjr-x", new_id=victim.id)
    folder = system_journal_dir()
    folder.mkdir(parents=True)
    journal = folder / "migrate-20260101T000000-gtjr-v2-aaaaaa.json"
    journal.write_text(json.dumps(data))
    journal.chmod(0o600)
    r = gputui(env_for(d), "migrate", "--recover", "--yes")
    assert "Traceback" not in r.stderr and r.returncode != 0
    now = d.client.api.inspect_container("gtjr-v2")
    assert now["Id"] == victim.id and now["State"]["Running"]
    assert names(d) == {"gtjr-v2"} and journal.exists()


@pytest.mark.docker
def test_a_journal_alone_never_creates_a_container(docker_cleanup):
    """Neither the original nor its backup exists: only the journal vouches for the body (here one that
    mounts the host's /), so --recover creates nothing and names what the body would reach."""
    d = docker_cleanup
    folder = system_journal_dir()
    folder.mkdir(parents=True)
    journal = folder / "migrate-20260101T000000-gtjr-alone-aaaaaa.json"
    info = d.client.info()  # written on this daemon, as gputui writes them
    daemon = {"id": info["ID"], "root": info["DockerRootDir"], "endpoint": d.host}
    journal.write_text(json.dumps(evil_journal(d, "gtjr-alone", daemon=daemon)))
    journal.chmod(0o600)
    r = gputui(env_for(d), "migrate", "--recover", "--yes")
    assert "Traceback" not in r.stderr and r.returncode == 1
    assert names(d) == set() and mounts_host_root(d) == [] and journal.exists()
    assert "host paths /" in r.stderr and "--from-journal" in r.stderr


@pytest.mark.docker
@pytest.mark.parametrize("where", ["home", "journal-dir"])
def test_discard_never_moves_a_journal_through_a_symlinked_discarded_folder(docker_cleanup, where):
    d = docker_cleanup
    squatter = d.run("gtjr-squat", command=CMD)  # the name is taken: --recover cannot finish the journal
    shared = Path(tempfile.mkdtemp(prefix="gtjr-shared-", dir="/tmp"))
    root_only = Path(tempfile.mkdtemp(prefix="gtjr-rootonly-", dir="/tmp"))  # mode 700, root's
    try:
        os.chmod(shared, 0o755)
        with local_user("gtjr3") as pw:
            folder = home_journals(pw) if where == "home" else Path(pw.pw_dir) / "journal"
            journal = folder / "migrate-20260101T000000-gtjr-squat-aaaaaa.json"
            plant(pw, journal, evil_journal(d, "gtjr-squat"))
            subprocess.run(as_user(pw, "ln", "-s", str(root_only), str(folder / "discarded")), check=True,
                           env=user_env(pw))
            extra = {} if where == "home" else {"GPUTUI_JOURNAL_DIR": str(folder)}
            r = gputui(env_for(d, **extra), "migrate", "--recover", "--discard", "--yes")
            assert "Traceback" not in r.stderr
            assert list(root_only.iterdir()) == [] and journal.exists()  # nothing moved into root's folder
            assert d.client.api.inspect_container("gtjr-squat")["Id"] == squatter.id
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(root_only, ignore_errors=True)


@pytest.mark.docker
def test_discard_refuses_a_symlinked_discarded_folder_in_the_system_folder(docker_cleanup):
    d = docker_cleanup
    d.run("gtjr-squat2", command=CMD)
    root_only = Path(tempfile.mkdtemp(prefix="gtjr-rootonly-", dir="/tmp"))
    try:
        folder = system_journal_dir()
        folder.mkdir(parents=True)
        journal = folder / "migrate-20260101T000000-gtjr-squat2-aaaaaa.json"
        journal.write_text(json.dumps(evil_journal(d, "gtjr-squat2", original_body={"Image": d.image})))
        journal.chmod(0o600)
        (folder / "discarded").symlink_to(root_only)
        r = gputui(env_for(d), "migrate", "--recover", "--discard", "--yes")
        assert "Traceback" not in r.stderr and r.returncode != 0
        assert list(root_only.iterdir()) == [] and journal.exists()
    finally:
        shutil.rmtree(root_only, ignore_errors=True)


def test_many_journals_cost_a_few_lines_at_start(tmp_path):
    folder = system_journal_dir()
    folder.mkdir(parents=True)
    for i in range(20_000):
        (folder / f"migrate-20260101T000000-junk{i}-aaaaaa.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    r = gputui(env, "snapshot", "--json", "--demo")
    took = time.monotonic() - started
    assert r.returncode == 0
    assert len(r.stderr.splitlines()) <= 5, len(r.stderr.splitlines())
    print(f"snapshot --json --demo with 20,000 journals: {took:.2f} s")


# -- locks ------------------------------------------------------------------------------------------

HOLD = ("import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_SH)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")


@pytest.fixture
def fake_host(fake_nvml):
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    return fake_nvml


@pytest.mark.docker
def test_a_lock_another_user_holds_does_not_make_root_refuse(docker_cleanup, fake_host):
    d = docker_cleanup
    c = d.run("gtjr-held", gpus="device=0", command=CMD)
    shared = Path(tempfile.mkdtemp(prefix="gtjr-shared-", dir="/tmp"))
    holders: list[subprocess.Popen] = []
    try:
        os.chmod(shared, 0o755)
        locks = shared / "locks"
        locks.mkdir(mode=0o755)
        env = env_for(d, fake_host, GPUTUI_LOCK_DIR=str(locks))
        # lock files as an older gputui left them: readable by everybody
        for key in ("gtjr-held", c.id):
            (locks / f"migrate-{key}.lock").touch(mode=0o644)
        with local_user("gtjr4") as pw:
            for key in ("gtjr-held", c.id):
                p = subprocess.Popen(as_user(pw, USER_PYTHON, "-c", HOLD, str(locks / f"migrate-{key}.lock")),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=user_env(pw))
                holders.append(p)
                assert p.stdout.readline().strip() == "held"
            # an interrupted journal of that container stays visible to root's --recover
            with ContainerLock.acquire("migrate", ["gtjr-other"], "gtjr-other"):
                j = Journal.create("migrate", "gtjr-held", {"container": {"id": c.id, "name": "gtjr-held"}})
            os.environ["GPUTUI_LOCK_DIR"] = str(locks)
            try:
                assert [p.path for p in pending_journals("migrate")] == [j.path]
            finally:
                os.environ.pop("GPUTUI_LOCK_DIR")
            j.finish()
            r = gputui(env, "migrate", "gtjr-held", "--to", "1", "--yes", "--timeout", "0.3")
            assert r.returncode == 0, r.stdout + r.stderr
            assert str(locks / "migrate-gtjr-held.lock") in r.stdout  # root says which lock it ignored
            moved = d.client.api.inspect_container("gtjr-held")
            assert moved["Id"] != c.id
            assert moved["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] != \
                c.attrs["HostConfig"]["DeviceRequests"][0]["DeviceIDs"]
            for p in holders:
                p.stdin.close()
                p.wait(30)
    finally:
        for p in holders:
            if p.poll() is None:
                p.kill()
                p.wait(30)
        shutil.rmtree(shared, ignore_errors=True)


TAKE = ("import sys\n"
        "from gputui.actions.locks import ContainerLock\n"
        "try:\n"
        "    lock = ContainerLock.acquire('migrate', ['c0ffee', 'gtjr-trainer'], 'gtjr-trainer')\n"
        "except Exception as exc:\n"
        "    print('refused', exc, flush=True)\n"
        "    raise SystemExit(0)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n")


def test_a_lock_folder_another_user_made_never_lets_two_root_processes_hold_one_lock(monkeypatch):
    shared = Path(tempfile.mkdtemp(prefix="gtjr-shared-", dir="/tmp"))
    first = None
    try:
        os.chmod(shared, 0o755)
        with local_user("gtjr5") as pw:
            folder = Path(pw.pw_dir) / "userlocks"
            subprocess.run(as_user(pw, "mkdir", "-m", "777", str(folder)), check=True, env=user_env(pw))
            monkeypatch.setenv("GPUTUI_LOCK_DIR", str(folder))
            first = subprocess.Popen([sys.executable, "-c", TAKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
            first_locked = first.stdout.readline().startswith("locked")
            # the user moves root's lock files aside: the next root process finds none
            for lock in folder.glob("*.lock"):
                subprocess.run(as_user(pw, "mv", str(lock), str(lock) + ".aside"), check=True, env=user_env(pw))
            try:
                ContainerLock.acquire("migrate", ["c0ffee", "gtjr-trainer"], "gtjr-trainer").release()
                second_locked = True
            except (LockHeld, OSError):
                second_locked = False
            assert not (first_locked and second_locked), "two root processes held one container's lock"
    finally:
        if first is not None:
            first.stdin.close()
            first.wait(30)
        shutil.rmtree(shared, ignore_errors=True)


# -- two daemons ------------------------------------------------------------------------------------


@pytest.mark.docker
def test_recover_acts_only_on_the_daemon_the_migration_was_on(docker_cleanup, dockerd_factory):
    a = docker_cleanup
    b = dockerd_factory(fresh=True)
    try:
        c = b.run("gtjr-two", gpus="device=0", command=CMD, restart_policy={"Name": "unless-stopped"})
        crash = subprocess.run([sys.executable, "-c", CRASH_AT_START, "gtjr-two"], timeout=120, env=env_for(b))
        assert crash.returncode == 86
        before_b = {x.name: x.status for x in b.client.containers.list(all=True)}
        journal = next(system_journal_dir().glob("*.json"))
        # sudo drops DOCKER_HOST: root's --recover talks to daemon A
        wrong = gputui(env_for(a, SUDO_USER="gtjr"), "migrate", "--recover", "--yes")
        assert "Traceback" not in wrong.stderr
        assert a.host in wrong.stdout  # a sudo'ed run says which daemon it uses
        assert "gtjr-two" not in names(a)  # nothing recreated on the wrong daemon
        assert {x.name: x.status for x in b.client.containers.list(all=True)} == before_b
        assert journal.exists()  # and the journal was not called done
        assert f"DOCKER_HOST={b.host}" in wrong.stdout
        right = gputui(env_for(b), "migrate", "--recover", "gtjr-two", "--yes")
        assert right.returncode == 0, right.stdout + right.stderr
        back = b.client.api.inspect_container("gtjr-two")
        assert back["Id"] == c.id and back["State"]["Running"]
        assert back["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        assert not journal.exists() and names(b) == {"gtjr-two"}
    finally:
        b.close()


# -- the journal file --------------------------------------------------------------------------------


def test_a_journal_is_root_s_alone_keeps_the_env_once_and_its_temporary_files_go():
    secret = "HF_TOKEN=hf_" + "s3cr3t" * 4
    env = [secret, "PATH=/bin"]
    with ContainerLock.acquire("migrate", ["abc", "trainer"], "trainer"):
        j = Journal.create("migrate", "trainer", {
            "container": {"id": "abc", "name": "trainer"}, "original": {"Id": "abc", "Config": {"Env": env}},
            "original_body": {"Image": "x", "Env": env}, "body": {"Image": "x", "Env": env}})
        j.update(step="stop")
    assert oct(j.path.stat().st_mode & 0o777) == "0o600"
    assert j.path.read_text().count(secret) == 1
    taken = Journal.take(pending_journals()[0])
    assert taken.data["original"]["Config"]["Env"] == env and taken.data["body"]["Env"] == env
    assert taken.data["original_body"]["Env"] == env
    # a kill between the write and the rename left a temporary file (its writer is dead): the next run removes it
    probe = subprocess.Popen(["true"])
    probe.wait()
    tmp = j.path.with_name(f".{j.path.name}.{probe.pid}.tmp")
    tmp.write_text(json.dumps({"env": env}))
    pending_journals()
    assert not tmp.exists()
    taken.finish()


@pytest.mark.docker
def test_a_second_recover_takes_over_the_copy_the_first_left_when_a_network_was_pruned(docker_cleanup):
    d = docker_cleanup
    net1 = d.client.networks.create("gtjr-net1", driver="bridge", labels={LABEL: "1"})
    net2 = d.client.networks.create("gtjr-net2", driver="bridge", labels={LABEL: "1"})
    try:
        c = d.client.containers.create(d.image, CMD, name="gtjr-km", labels={LABEL: "1"}, network="gtjr-net1",
                                       device_requests=[d.device_request("device=0")])
        net2.connect(c)
        c.start()
        crash = subprocess.run([sys.executable, "-c", CRASH_AT_START, "gtjr-km"], timeout=120, env=env_for(d))
        assert crash.returncode == 86
        for n in names(d):  # the backup and the copy are removed, and the second network pruned
            d.client.api.remove_container(n, force=True)
        net2.remove()
        first = gputui(env_for(d), "migrate", "--recover", "--yes")
        # nothing half-made: the pruned network is named with the command that makes it again
        assert first.returncode == 1 and "gtjr-km" not in names(d), first.stdout + first.stderr
        assert "docker network create" in first.stdout + first.stderr
        net2 = d.client.networks.create("gtjr-net2", driver="bridge", labels={LABEL: "1"})  # the fix
        second = gputui(env_for(d), "migrate", "--recover", "--from-journal", "--yes")
        assert second.returncode == 0, second.stdout + second.stderr
        now = d.client.api.inspect_container("gtjr-km")
        assert now["State"]["Running"] and set(now["NetworkSettings"]["Networks"]) == {"gtjr-net1", "gtjr-net2"}
        assert pending_journals() == []
    finally:
        d.remove_containers()
        for net in (net1, net2):
            with contextlib.suppress(Exception):
                net.remove()
