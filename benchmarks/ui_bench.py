"""The live dashboard's cost, side by side with nvitop: ``.venv/bin/python benchmarks/ui_bench.py``.

Both run at the same time, each in its own 200x50 tmux session (a real
terminal), against the same fake NVIDIA driver whose scenario is rewritten every
second (GPU load and about a third of the processes' SM % change), with real
``sleep`` processes as the GPU processes so the /proc work is real:

- idle CPU over ``--seconds`` (default 30) at gputui's 1 s refresh and nvitop's
  default settings, at 8 GPUs x 64 processes and at 4 GPUs x 3 processes;
- CPU over the same time while a key (down/up) arrives every 100 ms (a held arrow key);
- gputui's time to the first painted frame and to the first frame with data
  (median of 3 starts), read with ``tmux capture-pane``;
- resident memory (VmRSS, and the peak VmHWM) after the idle phase.

nvitop comes from benchmarks/.venv (see benchmarks/README.md); it is not a
gputui dependency. Results go to benchmarks/results/ui-<time>.json and
results/ui-latest.json. Targets: idle CPU <= 0.4x nvitop's;
<= 10 % of a core with a key every 100 ms; first frame <= 1.0 s; RSS <= 80 MiB.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CONFIGS = {"8x64": (8, 64), "4x3": (4, 3)}
SIZE = (200, 50)
TARGETS = {"idle_ratio": 0.4, "keys_cpu": 10.0, "first_frame_s": 1.0, "rss_mib": 80.0}
GiB, MiB = 1024**3, 1024**2


def _load_run_module():
    """Reuse benchmarks/run.py's helpers (sleepers, nvitop's venv) instead of copying them."""
    spec = importlib.util.spec_from_file_location("gputui_bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def live_scenario(gpus: int, pids: list[int], tick: int, churn: str = "third") -> dict[str, Any]:
    """The machine at second ``tick``: load, temperature and power move; about a third of the
    processes change SM % (``churn="full"``: every process, every second — issue 29)."""
    from tests.fakenvml.scenario import gpu, process, scenario

    per_gpu: list[list[dict]] = [[] for _ in range(gpus)]
    for i, pid in enumerate(pids):
        moving = i % 3 == 0
        sm = (i * 37 + (tick * 11 if moving or churn == "full" else 0)) % 100
        per_gpu[i % gpus].append(process(pid, used_memory=256 * MiB * (1 + i % 4) + (tick % 5) * MiB * moving,
                                         sm=sm))
    return scenario([
        gpu(g, utilization_gpu=(g * 29 + tick * 7) % 100, temperature=40 + g + tick % 7,
            power_draw=100.0 + (g * 31 + tick * 13) % 250, processes=per_gpu[g])
        for g in range(gpus)
    ])


class ScenarioWriter(threading.Thread):
    """Rewrites the scenario once a second, like a real machine's numbers moving."""

    def __init__(self, fake, gpus: int, pids: list[int], churn: str = "third") -> None:
        super().__init__(daemon=True)
        self.fake, self.gpus, self.pids, self.churn = fake, gpus, pids, churn
        self.stop = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0):
            tick += 1
            self.fake.write(live_scenario(self.gpus, self.pids, tick, self.churn))


class Tmux:
    def __init__(self) -> None:
        self.socket = f"gputui-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def __call__(self, *args: str, check: bool = True) -> str:
        res = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)
        if check and res.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cmd = f"exec env {assignments} TERM=tmux-256color " + " ".join(shlex.quote(a) for a in argv)
        self("new-session", "-d", "-s", name, "-x", str(SIZE[0]), "-y", str(SIZE[1]), cmd)

    def pid(self, name: str) -> int:
        return int(self("display-message", "-p", "-t", name, "#{pane_pid}").strip())

    def screen(self, name: str) -> str:
        return self("capture-pane", "-p", "-t", name, check=False)

    def keys(self, name: str, *keys: str) -> None:
        self("send-keys", "-t", name, *keys)

    def kill_session(self, name: str) -> None:
        self("kill-session", "-t", name, check=False)

    def close(self) -> None:
        self("kill-server", check=False)
        (Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket).unlink(missing_ok=True)


def wait_for(tmux: Tmux, name: str, predicate, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate(tmux.screen(name)):
            return time.monotonic() - start
        time.sleep(0.01)
    raise RuntimeError(f"{name}: nothing expected on screen after {timeout} s:\n{tmux.screen(name)}")


#: Seconds between keys in the "keys" measurement.
KEY_PERIOD = 0.1


def measure_cpu(run_mod: Any, tmux: Tmux, pids: dict[str, int], seconds: float, press: bool) -> dict[str, float]:
    """% of one core per process over ``seconds``; with ``press``, a key every KEY_PERIOD to each session."""
    before = {name: run_mod.cpu_ticks(pid) for name, pid in pids.items()}
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        if press:
            key = "Down" if n % 2 == 0 else "Up"
            for name in pids:
                tmux.keys(name, key)
        n += 1
        time.sleep(max(0.0, start + n * (KEY_PERIOD if press else 1.0) - time.monotonic()))
    elapsed = time.monotonic() - start
    ticks = {name: run_mod.cpu_ticks(pid) - before[name] for name, pid in pids.items()}
    return {name: 100.0 * n / run_mod.CLK_TCK / elapsed for name, n in ticks.items()}


def gputui_argv() -> list[str]:
    exe = Path(sys.executable).parent / "gputui"
    return [str(exe) if exe.exists() else sys.executable] + ([] if exe.exists() else ["-m", "gputui"]) + [
        "--no-docker", "--interval", "1"]


def first_frames(tmux: Tmux, env: dict[str, str], runs: int = 3) -> dict[str, float]:
    """Seconds from starting gputui to its first painted frame, and to the first one with data."""
    painted, data = [], []
    for i in range(runs):
        name = f"ff{i}"
        t0 = time.monotonic()
        tmux.start(name, gputui_argv(), env)
        wait_for(tmux, name, lambda s: "gputui" in s, 20)  # the status line: a frame is painted
        painted.append(time.monotonic() - t0)
        wait_for(tmux, name, lambda s: "A100" in s, 20)  # a GPU card: the first poll is on screen
        data.append(time.monotonic() - t0)
        tmux.kill_session(name)
        time.sleep(0.5)
    return {"painted_s": statistics.median(painted), "data_s": statistics.median(data), "runs": runs,
            "all_data_s": data}


def bench_config(label: str, gpus: int, nprocs: int, seconds: float, nvitop: Path | None, run_mod,
                 workdir: Path, textual_driver: bool = False, churn: str = "third") -> dict[str, Any]:
    from tests.fakenvml.scenario import FakeNvml

    fake = FakeNvml(workdir / label)
    tmux = Tmux()
    with run_mod.Sleepers(nprocs) as sleepers:
        fake.write(live_scenario(gpus, sleepers.pids, 0, churn))
        full = fake.env()
        env = {k: full[k] for k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "PATH", "HOME",
                                    "XDG_CONFIG_HOME", "XDG_STATE_HOME") if k in full}
        env["XDG_STATE_HOME"] = str(workdir / label / "state")
        env["XDG_CONFIG_HOME"] = str(workdir / label / "config")
        writer = ScenarioWriter(fake, gpus, sleepers.pids, churn)
        writer.start()
        try:
            print(f"  {label}: time to first frame ...", flush=True)
            frames = first_frames(tmux, env)
            tmux.start("gputui", gputui_argv(), env)
            pids = {"gputui": tmux.pid("gputui")}
            if textual_driver:  # the same dashboard with Textual's own output, for a ratio in one run
                tmux.start("gputui-textual", gputui_argv(), {**env, "GPUTUI_DRIVER": "textual"})
                pids["gputui-textual"] = tmux.pid("gputui-textual")
            if nvitop is not None:
                tmux.start("nvitop", [str(nvitop)], env)
                pids["nvitop"] = tmux.pid("nvitop")
            wait_for(tmux, "gputui", lambda s: "GPU MEM" in s and "A100" in s, 20)
            if nvitop is not None:
                wait_for(tmux, "nvitop", lambda s: "MiB" in s and "Processes" in s, 30)
            time.sleep(5)  # past start-up work
            print(f"  {label}: idle CPU over {seconds:.0f} s ...", flush=True)
            idle = measure_cpu(run_mod, tmux, pids, seconds, press=False)
            rss = {name: run_mod.memory(pid) for name, pid in pids.items()}
            print(f"  {label}: CPU with a key every {KEY_PERIOD * 1000:.0f} ms over {seconds:.0f} s ...", flush=True)
            keys = measure_cpu(run_mod, tmux, pids, seconds, press=True)
            alive = {name: Path(f"/proc/{pid}").exists() for name, pid in pids.items()}
        finally:
            writer.stop.set()
            writer.join()
            tmux.close()
    return {
        "gpus": gpus, "processes": nprocs, "seconds": seconds,
        "idle_cpu_percent": idle, "keys_cpu_percent": keys,
        "rss_mib": {name: round(v[0], 1) for name, v in rss.items()},
        "peak_rss_mib": {name: round(v[1], 1) for name, v in rss.items()},
        "first_frame": frames, "still_running": alive,
    }


def verdicts(results: dict[str, Any]) -> list[str]:
    out = []
    for label, r in results["configs"].items():
        g_idle = r["idle_cpu_percent"]["gputui"]
        n_idle = r["idle_cpu_percent"].get("nvitop")
        if n_idle:
            ratio = g_idle / n_idle
            out.append(f"{'PASS' if ratio <= TARGETS['idle_ratio'] else 'FAIL'}: {label} idle CPU "
                       f"{g_idle:.2f}% vs nvitop {n_idle:.2f}% = {ratio:.2f}x (target <= {TARGETS['idle_ratio']}x)")
        k = r["keys_cpu_percent"]["gputui"]
        out.append(f"{'PASS' if k <= TARGETS['keys_cpu'] else 'FAIL'}: {label} CPU with a key every "
                   f"{KEY_PERIOD * 1000:.0f} ms {k:.2f}% "
                   f"(target <= {TARGETS['keys_cpu']:.0f}%)")
        ff = r["first_frame"]["data_s"]
        out.append(f"{'PASS' if ff <= TARGETS['first_frame_s'] else 'FAIL'}: {label} first frame with data "
                   f"{ff:.2f} s (target <= {TARGETS['first_frame_s']} s)")
        rss = r["rss_mib"]["gputui"]
        out.append(f"{'PASS' if rss <= TARGETS['rss_mib'] else 'FAIL'}: {label} RSS {rss:.1f} MiB "
                   f"(target <= {TARGETS['rss_mib']:.0f} MiB)")
    return out


def print_table(results: dict[str, Any]) -> None:
    print(f"\n{results['machine']}; nvitop {results.get('nvitop_version') or 'not run'}")
    print(f"{'config':8} {'':8} {'idle CPU %':>11} {'keys CPU %':>11} {'RSS MiB':>8} {'peak MiB':>9} "
          f"{'1st frame':>10}")
    for label, r in results["configs"].items():
        for name in r["idle_cpu_percent"]:
            frame = f"{r['first_frame']['data_s']:.2f} s" if name == "gputui" else ""
            print(f"{label:8} {name:8} {r['idle_cpu_percent'][name]:11.2f} {r['keys_cpu_percent'][name]:11.2f} "
                  f"{r['rss_mib'][name]:8.1f} {r['peak_rss_mib'][name]:9.1f} {frame:>10}")
    print()
    for v in results["verdicts"]:
        print(v)


def main(argv: list[str] | None = None) -> int:
    if shutil.which("tmux") is None:
        sys.exit("benchmarks: tmux is needed (apt-get install tmux).")
    run_mod = _load_run_module()
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each CPU measurement")
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append", help="only these configurations")
    ap.add_argument("--no-nvitop", action="store_true", help="do not install or run nvitop")
    ap.add_argument("--churn", choices=("third", "full"), default="third",
                    help="which processes' SM %% change every second (full: all of them, issue 29)")
    ap.add_argument("--textual-driver", action="store_true",
                    help="also run gputui with GPUTUI_DRIVER=textual (what the output layer costs or saves)")
    args = ap.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    nvitop = None if args.no_nvitop else run_mod.nvitop_executable(install=True)
    results: dict[str, Any] = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}, "
                   f"Python {platform.python_version()}",
        "nvitop_version": run_mod._version(run_mod.VENV / "bin" / "python", "nvitop") if nvitop else None,
        "terminal": f"tmux {SIZE[0]}x{SIZE[1]}", "churn": args.churn,
        "configs": {},
    }
    with tempfile.TemporaryDirectory(prefix="gputui-ui-bench-") as tmp:
        for label in args.config or list(CONFIGS):
            gpus, nprocs = CONFIGS[label]
            print(f"ui benchmark: {label} ({gpus} GPUs x {nprocs} processes)", flush=True)
            results["configs"][label] = bench_config(label, gpus, nprocs, args.seconds, nvitop, run_mod, Path(tmp),
                                                     textual_driver=args.textual_driver, churn=args.churn)
    results["verdicts"] = verdicts(results)
    print_table(results)
    return run_mod.save_results(results, prefix="ui-")


if __name__ == "__main__":
    sys.exit(main())
