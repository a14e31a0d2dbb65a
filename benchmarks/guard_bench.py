"""gputui guard: what the Docker authorization plugin adds to each container create.

A private dockerd (the tests' fixture class, a stub NVIDIA hook, no network) is started with
``--authorization-plugin`` naming a real ``gputui guard`` over the fake driver (8 GPUs, one reserved,
``allow_all_gpus = false``). Then N container creates through the Docker API (``--gpus device=K`` on
free GPUs, plain containers, and refused ones: ``all`` and the reserved GPU), timed on the client, and
the guard's own decision times read from its ``/gputui/stats``. For comparison the same creates are
timed against a dockerd without the plugin. Goal: p99 decision ≤ 5 ms.

    python benchmarks/guard_bench.py [--creates 1000]

Needs root, dockerd, gcc (the fake driver) and a static busybox, like the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
TARGET_P99_MS = 5.0


def _ask(sock: Path, method: str, path: str, body: bytes = b"") -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(sock))
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: p\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
              .encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def _creates(client, image: str, n: int) -> tuple[list[float], int]:
    from docker.errors import APIError
    from docker.types import DeviceRequest

    times, refused = [], 0
    for i in range(n):
        kind = i % 4
        kw: dict = {"network_mode": "none"}
        if kind == 0:
            kw["device_requests"] = [DeviceRequest(device_ids=[str(2 + i % 6)], capabilities=[["gpu"]])]
        elif kind == 2:
            kw["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        elif kind == 3:
            kw["device_requests"] = [DeviceRequest(device_ids=["1"], capabilities=[["gpu"]])]
        t0 = time.perf_counter()
        try:
            c = client.api.create_container(image, "true", host_config=client.api.create_host_config(**kw))
            times.append(time.perf_counter() - t0)
            client.api.remove_container(c["Id"])
        except APIError:
            times.append(time.perf_counter() - t0)
            refused += 1
    return times, refused


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--creates", type=int, default=1000)
    args = ap.parse_args()
    from tests.fakenvml.scenario import FakeNvml, gpu, scenario
    from tests.fixtures.dockerd import Dockerd

    with tempfile.TemporaryDirectory(prefix="gputui-guard-bench-") as tmp:
        tmpd = Path(tmp)
        os.chmod(tmpd, 0o755)
        fake = FakeNvml(tmpd / "fakenvml")
        fake.write(scenario([gpu(i) for i in range(8)]))
        rules_dir = tmpd / "rules"
        rules_dir.mkdir(mode=0o755)
        (rules_dir / "rules.toml").write_text("[limits]\nallow_all_gpus = false\n")
        env = fake.env()
        env.update(PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmpd / "state"))
        rules = str(rules_dir / "rules.toml")
        subprocess.run([sys.executable, "-m", "gputui", "reserve", "1", "--for", "nobody", "--hours", "1",
                        "--rules", rules], env=env, check=True, capture_output=True)
        sock = Path(f"/tmp/gputui-guard-bench-{os.getpid()}.sock")
        name = f"gputui-bench-{os.getpid()}"
        spec = Path("/etc/docker/plugins") / f"{name}.spec"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(f"unix://{sock}\n")
        guard = subprocess.Popen([sys.executable, "-m", "gputui", "guard", "--listen", f"unix://{sock}", "--rules",
                                  rules, "--no-docker"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        plain = guarded = None
        try:
            deadline = time.monotonic() + 30
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            plain = Dockerd()
            plain.start()
            base, _ = _creates(plain.client, plain.image, args.creates)
            plain.close()
            plain = None
            guarded = Dockerd(extra_args=(f"--authorization-plugin={name}",))
            guarded.start()
            with_guard, refused = _creates(guarded.client, guarded.image, args.creates)
            stats = _ask(sock, "GET", "/gputui/stats")
        finally:
            for d in (plain, guarded):
                if d is not None:
                    d.close()
            guard.terminate()
            guard.wait(10)
            spec.unlink(missing_ok=True)
            sock.unlink(missing_ok=True)
    print(f"gputui guard, {args.creates} container creates (a quarter each: free GPU, plain, --gpus all, "
          "reserved GPU)")
    print(f"  create round trip without the plugin: median {statistics.median(base) * 1000:.1f} ms, "
          f"p99 {_pct(base, 0.99):.1f} ms")
    print(f"  create round trip with gputui guard:  median {statistics.median(with_guard) * 1000:.1f} ms, "
          f"p99 {_pct(with_guard, 0.99):.1f} ms ({refused} refused)")
    print(f"  guard decisions: {stats['decisions']} (every request dockerd asked about), "
          f"p50 {stats['p50_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms, max {stats['max_ms']:.3f} ms "
          f"(goal p99 <= {TARGET_P99_MS} ms)")
    return 0 if stats["p99_ms"] <= TARGET_P99_MS else 1


if __name__ == "__main__":
    sys.exit(main())
