"""Full churn, side by side with nvitop: ``.venv-test/bin/python benchmarks/churn_bench.py``.

Every process's SM % and every GPU's utilization, temperature and power change every
second (issue 29, goal 1), 8 GPUs x 64 real ``sleep`` processes on the fake NVIDIA
driver. gputui (``--interval 1``, installed as ``pip install .`` leaves it: not
editable, byte-code compiled) and nvitop (its defaults, from benchmarks/.venv) run at
the same time, each on its own 200x50 pseudo-terminal (TERM=xterm-256color, colours
on) whose every byte a thread reads, as ssh would carry it. In one run:

- idle: % of one core (``/proc/PID/stat``, all threads) and bytes/s to the terminal,
  over ``--seconds``, ``--rounds`` times (ranges are reported);
- keys: % of one core while Down/Up arrives every 100 ms;
- unchanging: bytes/s after the load stops moving and ``--fill`` seconds have let every
  history graph fill.

``--baseline REF`` also runs gputui at another commit (installed the same way from
``git archive``) as a third program, so before/after is one run. Results go to
benchmarks/results/churn-<time>.json and churn-latest.json. Targets: idle CPU <= 0.40x
nvitop's; bytes/s <= 1.0x nvitop's; unchanging <= 200 B/s; keys <= 10 % of a core.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import signal
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TARGETS = {"idle_ratio": 0.40, "bytes_ratio": 1.0, "static": 200.0, "keys_cpu": 10.0}
KEY_PERIOD = 0.1
KEYS = (b"\x1b[B", b"\x1b[A")  # Down, Up as an xterm sends them


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gputui_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def measure(run_mod: Any, programs: dict[str, Any], seconds: float, press: bool) -> dict[str, dict[str, float]]:
    """CPU (% of a core) and bytes/s of each program over ``seconds``; with ``press`` a key every 100 ms."""
    before = {name: run_mod.cpu_ticks(p.pid) for name, p in programs.items()}
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        if press:
            for p in programs.values():
                p.send(KEYS[n % 2])
        n += 1
        time.sleep(max(0.0, start + n * (KEY_PERIOD if press else 1.0) - time.monotonic()))
    end = time.monotonic()
    out = {}
    for name, p in programs.items():
        ticks = run_mod.cpu_ticks(p.pid) - before[name]
        out[name] = {"cpu_percent": 100.0 * ticks / run_mod.CLK_TCK / (end - start),
                     "bytes_per_s": len(p.window(start, end)) / (end - start)}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    run_mod, ui_mod, wire_mod = _load("run"), _load("ui_bench"), _load("wire_bench")
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    from tests.fakenvml.scenario import FakeNvml

    nvitop = None if args.no_nvitop else run_mod.nvitop_executable(install=True)
    results: dict[str, Any] = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}, "
                   f"Python {platform.python_version()}",
        "terminal": f"pty {wire_mod.SIZE[0]}x{wire_mod.SIZE[1]}", "gpus": args.gpus, "processes": args.processes,
        "churn": "full", "seconds": args.seconds, "rounds": args.rounds, "fill_s": args.fill,
        "nvitop_version": run_mod._version(run_mod.VENV / "bin" / "python", "nvitop") if nvitop else None,
    }
    with tempfile.TemporaryDirectory(prefix="gputui-churn-bench-") as tmp, \
            run_mod.Sleepers(args.processes) as sleepers:
        work = Path(tmp)
        variants: dict[str, list[str]] = {
            "gputui": [str(run_mod.installed_gputui(work).parent / "gputui"), "--no-docker", "--interval", "1"]}
        if args.baseline:
            python = run_mod.installed_gputui(work, args.baseline)
            variants[f"gputui {args.baseline}"] = [str(python.parent / "gputui"), "--no-docker", "--interval", "1"]
        if nvitop is not None:
            variants["nvitop"] = [str(nvitop)]
        fake = FakeNvml(work / "fake")
        fake.write(ui_mod.live_scenario(args.gpus, sleepers.pids, 0, churn="full"))
        base = {k: v for k, v in fake.env().items()
                if k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "PATH", "HOME")}
        base.update(TERM="xterm-256color", LANG="C.UTF-8")
        writer = ui_mod.ScenarioWriter(fake, args.gpus, sleepers.pids, churn="full")
        writer.start()
        programs: dict[str, Any] = {}
        idle: list[dict[str, dict[str, float]]] = []
        keys: list[dict[str, dict[str, float]]] = []
        try:
            for i, (name, argv) in enumerate(variants.items()):
                programs[name] = wire_mod.PtyProgram(argv, {**base, "XDG_STATE_HOME": str(work / f"state{i}"),
                                                            "XDG_CONFIG_HOME": str(work / f"config{i}")})
            print(f"churn benchmark: {', '.join(programs)}; full churn, {args.warmup:.0f} s warm-up ...", flush=True)
            time.sleep(args.warmup)
            # Idle first: a program still working off the keys of the last phase (nvitop takes most of a
            # core to follow them) would count them as idle.
            for r in range(args.rounds):
                print(f"churn benchmark: idle {r + 1}/{args.rounds}, {args.seconds:.0f} s ...", flush=True)
                idle.append(measure(run_mod, programs, args.seconds, press=False))
            for r in range(args.rounds):
                print(f"churn benchmark: a key every {KEY_PERIOD * 1000:.0f} ms {r + 1}/{args.rounds}, "
                      f"{args.seconds:.0f} s ...", flush=True)
                keys.append(measure(run_mod, programs, args.seconds, press=True))
            writer.stop.set()
            writer.join()
            print(f"churn benchmark: unchanging load, {args.fill:.0f} s for the graphs to fill ...", flush=True)
            time.sleep(args.fill)
            static = measure(run_mod, programs, args.seconds, press=False)
            alive = {name: os.waitpid(p.pid, os.WNOHANG)[0] == 0 for name, p in programs.items()}
        finally:
            writer.stop.set()
            for prog in programs.values():
                prog.close()
            if args.record:  # every byte each program wrote, e.g. to see which rows cost them
                record = Path(args.record)
                record.mkdir(parents=True, exist_ok=True)
                for name, prog in programs.items():
                    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
                    (record / f"{slug}.bin").write_bytes(b"".join(d for _, d in prog.chunks))
    results.update(idle=idle, keys=keys, static=static, still_running=alive)
    return results


def _range(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}–{hi:{fmt}}"


def verdicts(results: dict[str, Any]) -> list[str]:
    idle, keys = results["idle"], results["keys"]
    out = []
    if "nvitop" in idle[0]:
        cpu = [r["gputui"]["cpu_percent"] / max(r["nvitop"]["cpu_percent"], 1e-9) for r in idle]
        wire = [r["gputui"]["bytes_per_s"] / max(r["nvitop"]["bytes_per_s"], 1e-9) for r in idle]
        out.append(f"{'PASS' if max(cpu) <= TARGETS['idle_ratio'] else 'FAIL'}: idle CPU, full churn: "
                   f"{_range(cpu, '.2f')}x nvitop's (target <= {TARGETS['idle_ratio']:.2f}x)")
        out.append(f"{'PASS' if max(wire) <= TARGETS['bytes_ratio'] else 'FAIL'}: bytes/s, full churn: "
                   f"{_range(wire, '.2f')}x nvitop's (target <= {TARGETS['bytes_ratio']:.1f}x)")
    static = results["static"]["gputui"]["bytes_per_s"]
    out.append(f"{'PASS' if static <= TARGETS['static'] else 'FAIL'}: bytes/s, nothing changing: {static:,.0f} "
               f"(target <= {TARGETS['static']:.0f})")
    k = [r["gputui"]["cpu_percent"] for r in keys]
    out.append(f"{'PASS' if max(k) <= TARGETS['keys_cpu'] else 'FAIL'}: CPU with a key every "
               f"{KEY_PERIOD * 1000:.0f} ms: {_range(k, '.1f')}% (target <= {TARGETS['keys_cpu']:.0f}%)")
    return out


def print_table(results: dict[str, Any]) -> None:
    print(f"\n{results['machine']}; {results['terminal']}, {results['gpus']} GPUs x {results['processes']} "
          f"processes, full churn; {results['rounds']} x {results['seconds']:.0f} s; "
          f"nvitop {results.get('nvitop_version') or 'not run'}")
    print("| program | idle CPU % | bytes/s | keys CPU % | bytes/s, nothing changing |\n|---|---|---|---|---|")
    for name in results["idle"][0]:
        print(f"| {name} | {_range([r[name]['cpu_percent'] for r in results['idle']], '.2f')} "
              f"| {_range([r[name]['bytes_per_s'] for r in results['idle']], ',.0f')} "
              f"| {_range([r[name]['cpu_percent'] for r in results['keys']], '.1f')} "
              f"| {results['static'][name]['bytes_per_s']:,.0f} |")
    print()
    for v in results["verdicts"]:
        print(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each measurement")
    ap.add_argument("--rounds", type=int, default=3, help="idle and keys measurements, one after the other")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before the first measurement")
    ap.add_argument("--fill", type=float, default=75.0,
                    help="seconds of unchanging load before it is measured (the graphs must fill)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--processes", type=int, default=64)
    ap.add_argument("--baseline", metavar="REF", help="also run gputui at this commit, side by side")
    ap.add_argument("--no-nvitop", action="store_true", help="do not install or run nvitop")
    ap.add_argument("--record", metavar="DIR", help="keep each program's whole output in DIR")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = run(args)
    results["verdicts"] = verdicts(results)
    print_table(results)
    return _load("run").save_results(results, prefix="churn-")


if __name__ == "__main__":
    sys.exit(main())
