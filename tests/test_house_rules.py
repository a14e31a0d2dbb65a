"""House rules and reservations, judged live and enforced where containers start.

Real parts: the installed gputui over the fake driver, processes of real test users (``useradd`` here,
``setpriv`` to run as them), a real exporter scraped over HTTP, and a real dockerd started with
``--authorization-plugin`` asking a real ``gputui guard`` through the real docker CLI.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require
from tests.exporter_helpers import exporters, start_exporter  # noqa: F401 (fixture)
from tests.fakenvml.scenario import GiB, fake_uuid, gpu, process, scenario

pytestmark = pytest.mark.integration

USERS = ("gtrl1", "gtrl2")


@pytest.fixture(scope="module")
def users():
    require(os.geteuid() == 0, "creating test users needs root")
    require(shutil.which("useradd") is not None and shutil.which("setpriv") is not None, "useradd/setpriv missing")
    made = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
            made.append(name)
    yield {name: pwd.getpwnam(name) for name in USERS}
    for name in made:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def as_user(users):
    """Start ``sleep`` as a test user; every process is killed at the end."""
    started: list[subprocess.Popen] = []

    def spawn(name: str) -> int:
        pw = users[name]
        proc = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                                 "sleep", "600"], stdin=subprocess.DEVNULL)
        started.append(proc)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.stat(f"/proc/{proc.pid}").st_uid != pw.pw_uid:
            time.sleep(0.02)
        return proc.pid

    yield spawn
    for proc in started:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture
def rules_dir(tmp_path) -> Path:
    d = tmp_path / "rules"
    d.mkdir(mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    return d


def write_rules(rules_dir: Path, text: str) -> Path:
    path = rules_dir / "rules.toml"
    path.write_text(text)
    os.chmod(path, 0o644)
    return path


def snapshot(fake, rules: Path) -> dict:
    out = fake.run_gputui("snapshot", "--json", "--no-docker", "--rules", str(rules))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- the rules file is trusted only when root owns it ------------------------------------------------


def test_a_rules_file_others_may_write_is_refused_with_one_sentence(fake_nvml, rules_dir, as_user):
    pid = as_user("gtrl1")
    fake_nvml.write(scenario([gpu(i, processes=[process(pid, used_memory=GiB)]) for i in range(3)]))
    rules = write_rules(rules_dir, "[limits]\nmax_gpus_per_user = 1\n")
    assert snapshot(fake_nvml, rules)["rule_violations"], "the rule applies while the file is root's"
    os.chmod(rules, 0o666)
    doc = snapshot(fake_nvml, rules)
    assert doc["rule_violations"] == []  # a file anyone may edit steers nothing
    assert "other users may write" in doc["rules_error"] and doc["rules_error"].count(". ") == 0


def test_a_rules_file_owned_by_a_user_is_refused(fake_nvml, rules_dir, users, as_user):
    pid = as_user("gtrl1")
    fake_nvml.write(scenario([gpu(i, processes=[process(pid, used_memory=GiB)]) for i in range(3)]))
    rules = write_rules(rules_dir, "[limits]\nmax_gpus_per_user = 1\n")
    os.chown(rules, users["gtrl1"].pw_uid, -1)
    doc = snapshot(fake_nvml, rules)
    assert doc["rule_violations"] == [] and "belongs to uid" in doc["rules_error"]


@pytest.mark.parametrize("text", ["[limits]\nmax_gpus_per_user = 0\n", "[limits]\nmax_idle_hold = \"forever\"\n",
                                  "[limits]\nallow_all_gpus = \"no\"\n", "[limts]\n", "not toml ["])
def test_bad_rules_are_refused_whole(fake_nvml, rules_dir, text, as_user):
    fake_nvml.write(scenario([gpu(0)]))
    doc = snapshot(fake_nvml, write_rules(rules_dir, text))
    assert doc["rules_error"] and "\n" not in doc["rules_error"]


def test_no_rules_file_changes_nothing(fake_nvml, rules_dir, as_user):
    pid = as_user("gtrl1")
    fake_nvml.write(scenario([gpu(i, processes=[process(pid, used_memory=GiB)]) for i in range(3)]))
    doc = snapshot(fake_nvml, rules_dir / "rules.toml")
    assert doc["rule_violations"] == [] and doc["reservations"] == [] and doc["rules_error"] is None


# -- judged live: JSON, --once, the exporter -------------------------------------------------------------


def test_max_gpus_per_user_names_the_cheapest_gpu_to_free(fake_nvml, rules_dir, as_user):
    a, b = as_user("gtrl1"), as_user("gtrl2")
    fake_nvml.write(scenario([
        gpu(0, processes=[process(a, used_memory=20 * GiB)]),
        gpu(1, processes=[process(a, used_memory=2 * GiB)]),
        gpu(2, processes=[process(a, used_memory=30 * GiB), process(b, used_memory=GiB)]),
        gpu(3, processes=[process(b, used_memory=GiB)]),
    ]))
    rules = write_rules(rules_dir, "[limits]\nmax_gpus_per_user = 2\n")
    v = snapshot(fake_nvml, rules)["rule_violations"]
    assert [(x["rule"], x["user"], x["gpu"]) for x in v] == [("max_gpus_per_user", "gtrl1", 1)]
    assert f"gputui kill {a}" in v[0]["message"]
    once = fake_nvml.run_gputui("--once", "--no-docker", "--rules", str(rules))
    assert once.returncode == 0 and "free GPU 1" in once.stdout


def test_idle_hold_is_flagged_once_it_lasts_longer_than_the_limit(fake_nvml, rules_dir, as_user):
    a = as_user("gtrl1")
    fake_nvml.write(scenario([gpu(0, processes=[process(a, used_memory=8 * GiB, sm=0)], utilization_gpu=0),
                              gpu(1)]))
    rules = write_rules(rules_dir, "[limits]\nmax_idle_hold = \"2s\"\n")
    assert snapshot(fake_nvml, rules)["rule_violations"] == []  # one look proves no idle hold
    out = fake_nvml.run_gputui("snapshot", "--json", "--no-docker", "--rules", str(rules), "--observe", "4")
    v = json.loads(out.stdout)["rule_violations"]
    assert [(x["rule"], x["user"], x["gpu"]) for x in v] == [("max_idle_hold", "gtrl1", 0)]


def test_reservations_pick_and_violations_on_every_face(fake_nvml, rules_dir, as_user, exporters):  # noqa: F811
    b = as_user("gtrl2")
    fake_nvml.write(scenario([gpu(0, processes=[process(b, used_memory=4 * GiB)]), gpu(1), gpu(2)]))
    rules = write_rules(rules_dir, "")
    made = fake_nvml.run_gputui("reserve", "0,1", "--for", "gtrl1", "--hours", "2", "--note", "deadline",
                                "--rules", str(rules))
    assert made.returncode == 0, made.stderr
    token = next(line.split()[1] for line in made.stdout.splitlines() if line.startswith("token:"))
    stored = (rules_dir / "reservations.json").read_text()
    assert token not in stored  # only its digest is kept
    assert os.stat(rules_dir / "reservations.json").st_mode & 0o777 == 0o644

    doc = snapshot(fake_nvml, rules)
    assert [(r["gpu"], r["for"]) for r in doc["reservations"]] == [(0, "gtrl1"), (1, "gtrl1")]
    assert [(v["rule"], v["user"], v["gpu"]) for v in doc["rule_violations"]] == [("reserved", "gtrl2", 0)]

    # pick: never a GPU reserved for someone else; the holder's own first
    other = fake_nvml.run_gputui("pick", "--sample", "0", "--rules", str(rules))
    assert other.returncode == 0 and other.stdout.strip() == "2"
    two = fake_nvml.run_gputui("pick", "--sample", "0", "--count", "2", "--rules", str(rules))
    assert two.returncode == 1 and "reserved for gtrl1" in two.stderr
    mine = fake_nvml.run_gputui("pick", "--sample", "0", "--rules", str(rules), env_extra={"SUDO_USER": "gtrl1"})
    assert mine.returncode == 0 and mine.stdout.strip() == "1"

    listed = json.loads(fake_nvml.run_gputui("reserve", "--list", "--json", "--rules", str(rules)).stdout)
    assert [r["gpus"] for r in listed["reservations"]] == [[0, 1]] and "token" not in json.dumps(listed)

    exp = start_exporter(exporters, fake_nvml, "--no-docker", "--rules", str(rules))
    lines = exp.metrics().splitlines()
    assert any(line.startswith("gputui_rule_violation{") and 'rule="reserved"' in line and 'user="gtrl2"' in line
               and 'gpu="0"' in line for line in lines)
    assert sum(line.startswith("gputui_reservation{") and 'user="gtrl1"' in line for line in lines) == 2

    rid = listed["reservations"][0]["id"]
    gone = fake_nvml.run_gputui("reserve", "--release", rid, "--rules", str(rules))
    assert gone.returncode == 0, gone.stderr
    assert snapshot(fake_nvml, rules)["reservations"] == []


def test_an_expired_reservation_vanishes_by_itself(fake_nvml, rules_dir):
    fake_nvml.write(scenario([gpu(0), gpu(1)]))
    rules = write_rules(rules_dir, "")
    until = int(time.time()) + 12  # room for a loaded machine to start two commands before it ends
    made = fake_nvml.run_gputui("reserve", "0", "--for", "gtrl1", "--until", str(until), "--rules", str(rules))
    assert made.returncode == 0, made.stderr
    assert snapshot(fake_nvml, rules)["reservations"]
    time.sleep(max(0.0, until + 0.5 - time.time()))
    assert snapshot(fake_nvml, rules)["reservations"] == []
    assert fake_nvml.run_gputui("pick", "--sample", "0", "--rules", str(rules)).stdout.strip() in {"0", "1"}


def test_reserve_refuses_bad_input_with_one_sentence(fake_nvml, rules_dir):
    fake_nvml.write(scenario([gpu(0)]))
    rules = write_rules(rules_dir, "")
    for args in (["9", "--for", "a", "--hours", "1"], ["0", "--for", "a b", "--hours", "1"],
                 ["0", "--for", "a", "--until", "someday"], ["0", "--for", "a"], ["0", "--for", "a", "--hours", "-1"]):
        out = fake_nvml.run_gputui("reserve", *args, "--rules", str(rules))
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (args, out.stderr)
    assert not (rules_dir / "reservations.json").exists()


# -- the guard: a real dockerd asks a real gputui guard --------------------------------------------------


class Guard:
    def __init__(self, fake, rules: Path, sock: Path, extra: tuple[str, ...] = ()) -> None:
        self.fake, self.rules, self.sock, self.extra = fake, rules, sock, extra
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = self.fake.env()
        env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
        self.proc = subprocess.Popen([sys.executable, "-m", "gputui", "guard", "--listen", f"unix://{self.sock}",
                                      "--rules", str(self.rules), "--no-docker", "--interval", "0.5", *self.extra],
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(self.proc.stdout.read().decode() if self.proc.stdout else "guard exited")
            if self.sock.exists() and self.ask("POST", "/Plugin.Activate", b"{}") is not None:
                return
            time.sleep(0.05)
        raise AssertionError("gputui guard did not answer")

    def ask(self, method: str, path: str, body: bytes) -> dict | None:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(str(self.sock))
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: plugin\r\nContent-Length: {len(body)}\r\n"
                      f"Connection: close\r\n\r\n".encode() + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            s.close()
            return json.loads(data.split(b"\r\n\r\n", 1)[1])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def guarded(fake_nvml, rules_dir, dockerd_factory, tmp_path):
    """A guard over the fake driver, and a fresh dockerd that asks it about every request."""
    fake_nvml.write(scenario([gpu(i) for i in range(4)]))
    rules = write_rules(rules_dir, "[limits]\nallow_all_gpus = false\n")
    made = fake_nvml.run_gputui("reserve", "1", "--for", "gtrl1", "--hours", "2", "--rules", str(rules))
    assert made.returncode == 0, made.stderr
    token = next(line.split()[1] for line in made.stdout.splitlines() if line.startswith("token:"))
    sock = Path(f"/tmp/gtg{os.getpid()}-{time.monotonic_ns() % 100000}.sock")
    name = f"gputui-test-{os.getpid()}"
    spec = Path("/etc/docker/plugins") / f"{name}.spec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(f"unix://{sock}\n")
    guard = Guard(fake_nvml, rules, sock)
    guard.start()
    d = None
    try:
        d = dockerd_factory(extra_args=(f"--authorization-plugin={name}",))
        yield d, guard, token
    finally:
        if d is not None:
            if guard.proc is None or guard.proc.poll() is not None:
                guard.start()  # dockerd asks the plugin even to remove containers
            d.close()
        guard.stop()
        spec.unlink(missing_ok=True)
        sock.unlink(missing_ok=True)


def _docker(d, *args: str) -> subprocess.CompletedProcess[str]:
    cli = shutil.which("docker")
    require(cli is not None, "the docker CLI is not installed")
    return subprocess.run([cli, "-H", d.host, *args], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")})


def test_the_guard_refuses_what_the_rules_forbid_and_allows_the_rest(guarded):
    d, guard, token = guarded
    base = ("create", "--network", "none")
    every = _docker(d, *base, "--gpus", "all", d.image, "true")
    assert every.returncode != 0 and "allow_all_gpus = false" in every.stderr
    assert "--gpus device=" in every.stderr  # the refusal names a command that would be allowed
    reserved = _docker(d, *base, "--gpus", "device=1", d.image, "true")
    assert reserved.returncode != 0 and "reserved for gtrl1" in reserved.stderr
    env_form = _docker(d, *base, "--runtime", "nvidia", "-e", f"NVIDIA_VISIBLE_DEVICES={fake_uuid(1)}",
                       d.image, "true")
    assert env_form.returncode != 0 and "reserved for gtrl1" in env_form.stderr
    with_token = _docker(d, *base, "--gpus", "device=1", "--label", f"gputui.reservation={token}", d.image, "true")
    assert with_token.returncode == 0, with_token.stderr
    free = _docker(d, *base, "--gpus", "device=2", d.image, "true")
    assert free.returncode == 0, free.stderr
    plain = _docker(d, *base, d.image, "true")
    assert plain.returncode == 0, plain.stderr
    assert _docker(d, "ps", "-a").returncode == 0  # every other endpoint is untouched
    assert len(d.client.containers.list(all=True)) == 3  # the three allowed were created, the refused were not
    d.remove_containers()


def test_the_guard_survives_malformed_requests_and_a_restart(guarded):
    d, guard, _ = guarded
    deep = base64.b64encode(b"[" * 100_000).decode()
    for body in (b"not json", b"[1,2]",
                 json.dumps({"RequestMethod": "POST", "RequestUri": "/v1.41/containers/create",
                             "RequestBody": deep}).encode(),
                 json.dumps({"RequestMethod": "POST", "RequestUri": "/containers/create"}).encode()):
        answer = guard.ask("POST", "/AuthZPlugin.AuthZReq", body)
        assert answer is not None and answer["Allow"] is False, answer
    assert guard.ask("POST", "/AuthZPlugin.AuthZReq", json.dumps(
        {"RequestMethod": "GET", "RequestUri": "/v1.41/containers/json"}).encode()) == {"Allow": True}
    guard.stop()
    down = _docker(d, "ps")
    assert down.returncode != 0  # dockerd refuses every request while its plugin is away
    guard.start()
    assert _docker(d, "ps").returncode == 0
    stats = guard.ask("GET", "/gputui/stats", b"")
    assert stats is not None and stats["decisions"] >= 1 and stats["p99_ms"] is not None


def test_users_reserve_for_themselves_only_through_the_guard_when_the_rules_allow(fake_nvml, rules_dir, users,
                                                                                   tmp_path):
    from tests.fixtures.unprivileged import readable_pythonpath

    fake_nvml.write(scenario([gpu(i) for i in range(3)]))
    rules = write_rules(rules_dir, "[reservations]\nself_service = true\n")
    import tempfile

    open_dir = Path(tempfile.mkdtemp(prefix="gtrs", dir="/tmp"))  # a folder every user may pass through
    os.chmod(open_dir, 0o755)
    service = open_dir / "reserve.sock"
    guard = Guard(fake_nvml, rules, Path(f"/tmp/gts{os.getpid()}.sock"), extra=("--self-service", f"unix://{service}"))
    guard.start()
    try:
        def reserve_as(name: str, *args: str) -> subprocess.CompletedProcess[str]:
            pw = users[name]
            env = {"PATH": os.environ["PATH"], "PYTHONPATH": readable_pythonpath(), "HOME": "/",
                   "GPUTUI_RULES": str(rules)}
            return subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                                   sys.executable, "-m", "gputui", "reserve", *args, "--guard", f"unix://{service}"],
                                  capture_output=True, text=True, env=env, timeout=60, cwd="/")

        mine = reserve_as("gtrl1", "2", "--for", "gtrl1", "--hours", "1")
        assert mine.returncode == 0, mine.stderr
        assert "token:" in mine.stdout
        other = reserve_as("gtrl1", "1", "--for", "gtrl2", "--hours", "1")
        assert other.returncode == 2 and "only for yourself" in other.stderr
        taken = reserve_as("gtrl2", "2", "--for", "gtrl2", "--hours", "1")
        assert taken.returncode == 1 and "already reserved for gtrl1" in taken.stderr
        doc = snapshot(fake_nvml, rules)
        assert [(r["gpu"], r["for"]) for r in doc["reservations"]] == [(2, "gtrl1")]
    finally:
        guard.stop()
    write_rules(rules_dir, "")  # self-service off: the guard opens no socket for users
    guard = Guard(fake_nvml, rules, Path(f"/tmp/gts{os.getpid()}.sock"), extra=("--self-service", f"unix://{service}"))
    guard.start()
    try:
        assert not service.exists()
    finally:
        guard.stop()
        shutil.rmtree(open_dir, ignore_errors=True)


def test_doctor_says_whether_the_guard_answers(guarded):
    d, guard, _ = guarded

    def checks() -> dict[str, dict]:
        out = guard.fake.run_gputui("doctor", "--json", "--rules", str(guard.rules), env_extra={"DOCKER_HOST": d.host,
                                    "GPUTUI_RULES": str(guard.rules)})
        return {c["name"]: c for c in json.loads(out.stdout)["checks"]}

    up = checks()
    assert up["guard"]["status"] == "pass" and "gputui-test" in up["guard"]["message"]
    assert up["house-rules"]["status"] == "pass" and "allow_all_gpus = false" in up["house-rules"]["message"]
    guard.stop()
    down = checks()
    assert down["guard"]["status"] == "fail" and "gputui-guard" in down["guard"]["fix"]


@pytest.mark.tmux
def test_the_dashboard_shows_reservations_and_broken_rules(fake_nvml, rules_dir, as_user, tmp_path):
    import shlex

    from tests.test_tmux_dashboard import GPUTUI, Tmux

    require(shutil.which("tmux") is not None and GPUTUI.exists(), "tmux and the installed gputui are needed")
    b = as_user("gtrl2")
    fake_nvml.write(scenario([gpu(0, processes=[process(b, used_memory=4 * GiB)]), gpu(1), gpu(2)]))
    rules = write_rules(rules_dir, "")
    made = fake_nvml.run_gputui("reserve", "0", "--for", "gtrl1", "--hours", "2", "--rules", str(rules))
    assert made.returncode == 0, made.stderr
    env = fake_nvml.env()
    keep = {k: env[k] for k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
                                "HOME", "PATH") if k in env}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
    tmux = Tmux()
    try:
        tmux.run("new-session", "-d", "-s", "dash", "-x", "200", "-y", "50",
                 f"env {assignments} TERM=tmux-256color {shlex.quote(str(GPUTUI))} --no-docker --interval 1 "
                 f"--rules {shlex.quote(str(rules))}")
        screen = tmux.wait_for(lambda s: "reserved for gtrl1" in s, 30, "the broken reservation")
        assert "gtrl2" in screen
    finally:
        tmux.kill()


def test_the_fleet_shows_reservations_and_broken_rules_and_pick_skips_reserved_gpus(
        fake_nvml_factory, rules_dir, as_user, exporters, prometheus_factory):  # noqa: F811
    """Two hosts behind a real Prometheus: a GPU reserved for gtrl1 on the only idle host is never picked
    across the fleet, except for gtrl1 (first); the fleet JSON lists the reservation and the broken rule."""
    b = as_user("gtrl2")
    busy, spare = fake_nvml_factory(), fake_nvml_factory()
    busy.write(scenario([gpu(0, utilization_gpu=95, memory_used=70 * GiB,
                             processes=[process(b, used_memory=60 * GiB, sm=90)]),
                         gpu(1, utilization_gpu=90, memory_used=60 * GiB)]))
    spare.write(scenario([gpu(0, processes=[process(b, used_memory=4 * GiB)]), gpu(1)]))
    rules = write_rules(rules_dir, "")
    made = spare.run_gputui("reserve", "0,1", "--for", "gtrl1", "--hours", "2", "--rules", str(rules))
    assert made.returncode == 0, made.stderr
    elsewhere = rules_dir.parent / "other-host" / "rules.toml"  # the busy host has no rules folder
    one = start_exporter(exporters, busy, "--no-docker", "--hostname", "gpu-node-busy", "--interval", "0.5",
                         "--rules", str(elsewhere))
    two = start_exporter(exporters, spare, "--no-docker", "--hostname", "gpu-node-spare", "--interval", "0.5",
                         "--rules", str(rules))
    prom = prometheus_factory([one.address, two.address])
    prom.wait_for("gputui_host_info", lambda r: len(r) == 2)
    prom.wait_for("gputui_reservation", lambda r: len(r) == 2)
    prom.wait_for("gputui_rule_violation", lambda r: len(r) == 1)

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gputui", *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})

    doc = json.loads(run("fleet", "--prometheus", prom.url, "--json").stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert [(r["gpu"], r["for"]) for r in hosts["gpu-node-spare"]["reservations"]] == [(0, "gtrl1"), (1, "gtrl1")]
    assert [(v["rule"], v["user"], v["gpu"]) for v in hosts["gpu-node-spare"]["rule_violations"]] == \
        [("reserved", "gtrl2", 0)]
    other = run("pick", "--prometheus", prom.url)
    assert other.returncode == 0 and other.stdout.startswith("gpu-node-busy "), other.stdout + other.stderr
    mine = run("pick", "--prometheus", prom.url, SUDO_USER="gtrl1")
    assert mine.returncode == 0 and mine.stdout == "gpu-node-spare 1\n", mine.stdout + mine.stderr


def test_the_fleet_host_card_names_the_reservation():
    from gputui.core.fleet.model import FleetGpu
    from gputui.ui.screens.fleet_host import card_text

    g = FleetGpu(index=3, uuid=fake_uuid(3), name="A100", utilization_gpu=0, memory_used=0, memory_total=80 * GiB,
                 temperature=30, lost=False, processes=())
    text = card_text(g, None, False, (), ((fake_uuid(3), "@vision", "2026-12-04T18:00:00+00:00"),)).plain
    assert "reserved for @vision until 2026-12-04T18:00:00+00:00" in text
    assert "reserved" not in card_text(g, None, False, (), ((fake_uuid(2), "alice", ""),)).plain
