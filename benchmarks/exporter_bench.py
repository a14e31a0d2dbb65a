"""``gputui exporter`` side by side with nvitop-exporter: ``.venv/bin/python benchmarks/exporter_bench.py``.

Both exporters run at the same time against the same fake NVIDIA driver (8 GPUs × 64
real ``sleep`` processes, tests/fakenvml), both polling every 1 s, both scraped every
5 s by this script as Prometheus would. It measures, over ``--seconds`` (default 60)
after a warm-up:

- CPU of each exporter process (utime + stime of all its threads, from /proc), in % of one core;
- scrape latency (request sent → whole body read), median and worst;
- RSS at the end (and the high-water mark);
- gputui's own poll cost, from its ``gputui_poll_duration_seconds`` histogram;
- how long gputui takes to exit after SIGTERM.

nvitop-exporter comes from PyPI into ``benchmarks/.venv-nvitop-exporter`` (created on first
use; never a gputui dependency). Both run with Docker off (nvitop-exporter knows no
containers). Results: benchmarks/results/exporter-latest.json. Targets: gputui's CPU at
most 0.1× nvitop-exporter's, scrape median ≤ 20 ms, RSS ≤ 60 MiB, SIGTERM exit ≤ 1 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEER_VENV = BENCH / ".venv-nvitop-exporter"
PEER_REQUIREMENT = "nvitop-exporter>=1.4,<2"
TARGETS = {"cpu_ratio": 0.1, "scrape_median_ms": 20.0, "rss_mib": 60.0, "sigterm_s": 1.0}
GPUS, PROCS = 8, 64
SCRAPE_EVERY = 5.0


def _load_run_module() -> Any:
    """Reuse benchmarks/run.py's helpers (sleepers, scenario, results) instead of copying them."""
    spec = importlib.util.spec_from_file_location("gputui_bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read().decode()
    return time.perf_counter() - t0, body


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the exporter exited with {proc.returncode}")
        try:
            scrape(url)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url}: no answer after {timeout} s")


class Scraper(threading.Thread):
    """Scrapes every exporter every ``SCRAPE_EVERY`` seconds and records the latencies."""

    def __init__(self, urls: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.latencies: dict[str, list[float]] = {name: [] for name in urls}
        self.last: dict[str, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for name, url in self.urls.items():
                try:
                    took, body = scrape(url)
                except OSError:
                    continue
                self.latencies[name].append(took)
                self.last[name] = body
            self.stop.wait(SCRAPE_EVERY)


def _histogram(body: str, name: str) -> tuple[float, float]:
    total = count = 0.0
    for line in body.splitlines():
        if line.startswith(f"{name}_sum "):
            total = float(line.split()[1])
        elif line.startswith(f"{name}_count "):
            count = float(line.split()[1])
    return total, count


def measure(run_mod: Any, peer: Path | None, seconds: float, warmup: float,
            baseline: Path | None = None) -> dict[str, Any]:
    from tests.fakenvml.scenario import FakeNvml

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gputui-exporter-bench-") as tmp, run_mod.Sleepers(PROCS) as sleepers:
        fake = FakeNvml(Path(tmp) / "fakenvml")
        fake.write(run_mod.machine_scenario(GPUS, sleepers.pids))
        env = fake.env()
        env.setdefault("PYTHONPATH", str(REPO))
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        ports = {"gputui": free_port(), "nvitop-exporter": free_port(), "gputui (baseline)": free_port()}
        commands = {"gputui": [sys.executable, "-m", "gputui", "exporter", "--no-docker", "--interval", "1",
                               "--listen", f"127.0.0.1:{ports['gputui']}"]}
        envs = {name: env for name in ports}
        cwds: dict[str, Path | None] = {name: None for name in ports}
        if baseline is not None:
            # The same exporter from another source tree (e.g. `git worktree add /tmp/base main`), so
            # a change is measured against what it changes under the same load at the same time.
            commands["gputui (baseline)"] = [*commands["gputui"][:-1], f"127.0.0.1:{ports['gputui (baseline)']}"]
            envs["gputui (baseline)"] = {**env, "PYTHONPATH": str(baseline)}
            cwds["gputui (baseline)"] = baseline  # `python -m` puts the working directory first on the path
        if peer is not None:
            commands["nvitop-exporter"] = [str(peer), "--bind-address", "127.0.0.1", "--port",
                                           str(ports["nvitop-exporter"]), "--interval", "1"]
        procs: dict[str, subprocess.Popen] = {}
        try:
            for name, cmd in commands.items():
                procs[name] = subprocess.Popen(cmd, env=envs[name], cwd=cwds[name], stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               preexec_fn=run_mod._die_with_parent)  # noqa: PLW1509 (prctl only, before exec)
            urls = {name: f"http://127.0.0.1:{ports[name]}/metrics" for name in procs}
            for name, proc in procs.items():
                wait_ready(urls[name], proc)
            scraper = Scraper(urls)
            scraper.start()
            time.sleep(warmup)
            for lat in scraper.latencies.values():
                lat.clear()
            before = {name: run_mod.cpu_ticks(p.pid) for name, p in procs.items()}
            t0 = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - t0
            after = {name: run_mod.cpu_ticks(p.pid) for name, p in procs.items()}
            scraper.stop.set()
            scraper.join(30)
            for name, proc in procs.items():
                rss, hwm = run_mod.memory(proc.pid)
                lat = scraper.latencies[name] or [float("nan")]
                body = scraper.last.get(name, "")
                out[name] = {
                    "cpu_percent": 100.0 * (after[name] - before[name]) / run_mod.CLK_TCK / elapsed,
                    "scrape_median_ms": 1000 * statistics.median(lat),
                    "scrape_max_ms": 1000 * max(lat),
                    "scrapes": len(scraper.latencies[name]),
                    "series": sum(1 for line in body.splitlines() if line and not line.startswith("#")),
                    "exposition_kib": len(body.encode()) / 1024,
                    "rss_mib": rss,
                    "rss_peak_mib": hwm,
                }
            for name in ("gputui", "gputui (baseline)"):
                if name in out:
                    total, count = _histogram(scraper.last.get(name, ""), "gputui_poll_duration_seconds")
                    out[name]["poll_mean_ms"] = 1000 * total / count if count else None
                    out[name]["polls"] = count
            t_stop = time.monotonic()
            procs["gputui"].send_signal(signal.SIGTERM)
            procs["gputui"].wait(timeout=30)
            out["gputui"]["sigterm_exit_s"] = time.monotonic() - t_stop
            out["gputui"]["sigterm_exit_code"] = procs["gputui"].returncode
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    return out


def verdicts(results: dict[str, Any]) -> list[str]:
    g = results["exporters"]["gputui"]
    n = results["exporters"].get("nvitop-exporter")
    v = []
    if n is not None and n["cpu_percent"] > 0:
        ratio = g["cpu_percent"] / n["cpu_percent"]
        ok = ratio <= TARGETS["cpu_ratio"]
        v.append(f"{'PASS' if ok else 'FAIL'} CPU: gputui {g['cpu_percent']:.3f}% vs nvitop-exporter "
                 f"{n['cpu_percent']:.3f}% of a core = {ratio:.3f}x (target <= {TARGETS['cpu_ratio']}x)")
    else:
        v.append(f"SKIP CPU ratio: nvitop-exporter not run (gputui {g['cpu_percent']:.3f}% of a core)")
    ok = g["scrape_median_ms"] <= TARGETS["scrape_median_ms"]
    v.append(f"{'PASS' if ok else 'FAIL'} scrape latency median {g['scrape_median_ms']:.1f} ms "
             f"(target <= {TARGETS['scrape_median_ms']:g} ms)")
    ok = g["rss_mib"] <= TARGETS["rss_mib"]
    v.append(f"{'PASS' if ok else 'FAIL'} RSS {g['rss_mib']:.1f} MiB (target <= {TARGETS['rss_mib']:g} MiB)")
    ok = g["sigterm_exit_s"] <= TARGETS["sigterm_s"] and g["sigterm_exit_code"] == 0
    v.append(f"{'PASS' if ok else 'FAIL'} SIGTERM: exit {g['sigterm_exit_code']} after {g['sigterm_exit_s']:.2f} s "
             f"(target <= {TARGETS['sigterm_s']:g} s)")
    return v


def print_table(results: dict[str, Any]) -> None:
    cols = [("cpu_percent", "CPU % core", "{:.3f}"), ("scrape_median_ms", "scrape ms (med)", "{:.1f}"),
            ("scrape_max_ms", "scrape ms (max)", "{:.1f}"), ("rss_mib", "RSS MiB", "{:.1f}"),
            ("series", "series", "{:d}"), ("exposition_kib", "KiB", "{:.0f}")]
    print(f"\nexporters, {GPUS} GPUs x {PROCS} processes, 1 s poll, scraped every {SCRAPE_EVERY:g} s, "
          f"{results['seconds']:g} s measured")
    print(f"{'':18}" + "".join(f"{title:>17}" for _, title, _ in cols))
    for name, r in results["exporters"].items():
        print(f"{name:18}" + "".join(f"{fmt.format(r[key]):>17}" for key, _, fmt in cols))
    for name in ("gputui", "gputui (baseline)"):
        g = results["exporters"].get(name)
        if g is not None and g.get("poll_mean_ms") is not None:
            print(f"{name} poll (histogram mean): {g['poll_mean_ms']:.2f} ms over {g['polls']:.0f} polls")
    n = results["exporters"].get("nvitop-exporter")
    b = results["exporters"].get("gputui (baseline)")
    if b is not None and n is not None and n["cpu_percent"] > 0:
        print(f"gputui (baseline, {results['baseline']}) CPU: {b['cpu_percent']:.3f}% of a core = "
              f"{b['cpu_percent'] / n['cpu_percent']:.3f}x nvitop-exporter's (not a verdict)")
    print(f"{results['machine']}; nvitop-exporter {results.get('peer_version') or 'not run'}")
    for line in results["verdicts"]:
        print(line)


def main(argv: list[str] | None = None) -> int:
    run_mod = _load_run_module()
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the CPU measurement")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before measuring")
    ap.add_argument("--no-nvitop", action="store_true", help="do not install or run nvitop-exporter")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run gputui's exporter from this source tree alongside (e.g. a worktree of main)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    peer = None if args.no_nvitop else run_mod.venv_executable(PEER_VENV, PEER_REQUIREMENT, "nvitop-exporter", True)
    results: dict[str, Any] = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}, "
                   f"Python {platform.python_version()}",
        "peer_version": run_mod._version(PEER_VENV / "bin" / "python", "nvitop-exporter") if peer else None,
        "seconds": args.seconds,
        "baseline": str(args.baseline) if args.baseline else None,
    }
    print(f"exporter benchmark: {GPUS} GPUs x {PROCS} processes, {args.seconds:g} s ...", flush=True)
    if args.baseline is not None and not (args.baseline / "gputui" / "__init__.py").is_file():
        ap.error(f"--baseline {args.baseline}: no gputui package there")
    results["exporters"] = measure(run_mod, peer, args.seconds, args.warmup,
                                   args.baseline.resolve() if args.baseline else None)
    results["verdicts"] = verdicts(results)
    print_table(results)
    return int(run_mod.save_results(results, prefix="exporter-"))


if __name__ == "__main__":
    sys.exit(main())
