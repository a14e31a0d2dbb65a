"""Where one poll's CPU goes: ``.venv/bin/python benchmarks/profile_poll.py``.

Against the fake NVIDIA driver (tests/fakenvml) with real ``sleep`` processes spread
over the GPUs (8 x 64 unless ``--config`` says otherwise), it runs the exporter's
pipeline — ``open_machine(docker=False)`` with the exporter's ``tune_sources`` (/proc
stat figures re-read every 5 s, no P-state), ``Poller.poll()`` once per tick, then the
exporter's collector and exposition as one scrape would — and prints:

- CPU per poll (``time.process_time``, median of ``--ticks`` polls after a warm-up, and the
  mean, which counts the polls that re-read /proc), split into the NVML read, the /proc
  facts, and history + judges (the rest), then per part of the poll;
- CPU per scrape of a fresh snapshot (families + exposition, as `/metrics` serves it, each family's bytes
  kept while it does not change), of the same snapshot again, and with every family formatted afresh;
- with ``--profile``, the top functions of a cProfile of the ticks by own time and by
  cumulative time (the profiler inflates small functions; trust the timings above for totals).

CPU time is less noisy than wall time on a shared machine, but still quote ranges. The ticks
are ``--pause`` apart (default 0.1 s) so that CPU-percent baselines behave as in real use.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import importlib.util
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CONFIGS = {"8x64": (8, 64), "16x1000": (16, 1000), "4x3": (4, 3)}


def _load_module(name: str, filename: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, BENCH / filename)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _load_run_module() -> Any:
    return _load_module("gputui_bench_run", "run.py")


#: --spin: wait between polls by spinning on the clock (the CPU stays busy, so no idle wake-up)
SPIN = False


def _wait(seconds: float) -> None:
    if not SPIN:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _cpu(fn: Any, runs: int, pause: float) -> list[float]:
    out = []
    for _ in range(runs):
        c0 = time.process_time()
        fn()
        out.append(1000 * (time.process_time() - c0))
        if pause:
            _wait(pause)
    return out


def _summary(values: list[float]) -> str:
    values = sorted(values)
    return (f"median {statistics.median(values):.3f} ms  "
            f"(p10 {values[len(values) // 10]:.3f}, p90 {values[min(len(values) - 1, 9 * len(values) // 10)]:.3f})")


def _phases(poller: Any, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """CPU per poll of each part of ``Poller.poll()`` (median, mean), by wrapping the parts with timers.
    The mean counts the polls that do more than most (the exporter re-reads /proc every few seconds)."""
    import gputui.core.poller as poller_module

    spent: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - c0
        return wrapper

    parts = {"NVML read": (poller.gpu_source, "read"), "/proc facts": (poller.process_source, "facts"),
             "process rows": (poller, "_row" if hasattr(poller, "_row") else "_process"),  # older trees: _process
             "history.add": (poller.history, "add"),
             "containers": (poller_module, "build_containers"), "stale judge": (poller, "_judge_stale"),
             "imbalance judge": (poller._imbalance, "update"), "alert judge": (poller._alerts, "update")}
    originals = {name: getattr(obj, attr) for name, (obj, attr) in parts.items()}
    for name, (obj, attr) in parts.items():
        setattr(obj, attr, timed(name, originals[name]))
    import gputui.core.judges.imbalance as imbalance_module

    # Inside the imbalance judge (shown apart, not counted twice): the GPUs' windowed loads.
    inner = imbalance_module.gpu_loads
    imbalance_module.gpu_loads = timed("  of which window loads", inner)  # type: ignore[assignment]
    per_poll: dict[str, list[float]] = {name: [] for name in [*parts, "  of which window loads", "rest",
                                                               "whole poll"]}
    try:
        for _ in range(args.ticks):
            spent.clear()
            c0 = time.process_time()
            poller.poll()
            whole = time.process_time() - c0
            for name in [*parts, "  of which window loads"]:
                per_poll[name].append(1000 * spent.get(name, 0.0))
            per_poll["rest"].append(1000 * (whole - sum(v for k, v in spent.items() if k in parts)))
            per_poll["whole poll"].append(1000 * whole)
            _wait(args.pause)
    finally:
        imbalance_module.gpu_loads = inner  # type: ignore[assignment]
        for name, (obj, attr) in parts.items():
            if obj is poller_module:
                setattr(obj, attr, originals[name])
            else:
                delattr(obj, attr)  # back to the class's method
    return {name: (statistics.median(values), statistics.fmean(values)) for name, values in per_poll.items()}


#: cachegrind's simulated caches: 32 KiB L1s and an 8 MiB last level, emptied before each poll by
#: writing a buffer three times its size (what a second of other tenants does to a shared host's caches)
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64")
EVICT_BYTES = 3 * 8388608


def cold_worker(args: argparse.Namespace) -> int:
    """--cachegrind's worker: ``--ticks`` polls, each after emptying the caches (``--cg-mode poll``), or
    the emptying alone (``evict``), with every clock simulated (one second per poll) and the garbage
    collector off while they run, so that the two runs under cachegrind differ by exactly the polls."""
    from gputui.core.poller import Poller
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    tick = [0]
    start, mono = time.time(), time.monotonic()

    def wall() -> float:
        tick[0] += 1
        return start + tick[0] * args.interval

    nvml = NvmlSource(clock=lambda: mono + tick[0] * args.interval)
    nvml.open()
    poller = Poller(nvml, HostProcessSource(clock=lambda: mono + tick[0] * args.interval), clock=wall)
    for _ in range(args.warmup):
        poller.poll()
    big = bytearray(EVICT_BYTES)
    churn = sorted(Path(args.churn_dir).iterdir()) if args.churn_dir else []
    scenario_path = os.environ["GPUTUI_FAKE_NVML_SCENARIO"]
    count = ctypes.c_uint()
    gc.disable()
    for i in range(args.ticks):
        if churn:  # the next second's figures, loaded by the driver before the caches are emptied
            shutil.copyfile(churn[i % len(churn)], scenario_path + ".next")
            os.replace(scenario_path + ".next", scenario_path)
            ctypes.CDLL("libnvidia-ml.so.1").nvmlDeviceGetCount_v2(ctypes.byref(count))
        big[::64] = b"\1" * len(big[::64])  # every cache line of the buffer written
        bytes(big)
        if args.cg_mode == "poll":
            poller.poll()
    gc.enable()
    poller.close()
    return 0


def _cachegrind(cmd: list[str], env: dict[str, str], tmp: Path, ticks: int) -> int:
    """Run the cold worker under cachegrind with and without the polls; print the difference per poll."""
    totals = {}
    for mode in ("poll", "evict"):
        out = tmp / f"cachegrind.{mode}"
        res = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES,
                              f"--cachegrind-out-file={out}", *cmd, "--cg-mode", mode], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)
            return res.returncode
        events: list[str] = []
        for line in out.read_text().splitlines():
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                totals[mode] = dict(zip(events, map(int, line.split()[1:]), strict=True))
    d = {k: (totals["poll"][k] - totals["evict"][k]) / ticks for k in totals["poll"]}
    l1 = d["I1mr"] + d["D1mr"] + d["D1mw"]
    ll = d["ILmr"] + d["DLmr"] + d["DLmw"]
    print(f"per poll with every cache emptied before it (cachegrind, {ticks} polls, simulated 32 KiB L1s, 8 MiB LL):")
    print(f"  instructions      {d['Ir']:>12,.0f}")
    print(f"  data reads/writes {d['Dr']:>12,.0f} / {d['Dw']:,.0f}")
    print(f"  L1 misses         {l1:>12,.0f}  (instructions {d['I1mr']:,.0f}, data {d['D1mr'] + d['D1mw']:,.0f})")
    print(f"  last-level misses {ll:>12,.0f}  (instructions {d['ILmr']:,.0f}, data {d['DLmr'] + d['DLmw']:,.0f}): "
          f"lines fetched from memory, {64 * ll / 1024:,.0f} KiB")
    return 0


def worker(args: argparse.Namespace) -> int:
    """Runs inside the fake driver's environment (LD_LIBRARY_PATH is read at process start)."""
    global SPIN
    SPIN = args.spin
    from prometheus_client import generate_latest

    from gputui.core.config import Settings
    from gputui.core.machine import open_machine
    from gputui.exporter import server as server_module
    from gputui.exporter.exposition import MetricsApp
    from gputui.exporter.metrics import ExportOptions, PollStatus
    from gputui.exporter.server import SnapshotCollector, make_registry

    machine = open_machine(docker=False)
    if args.face == "exporter" and hasattr(server_module, "tune_sources"):  # older trees read /proc every poll
        server_module.tune_sources(machine)
    # The poller's clock advances one interval per poll, as in the exporter (1 s): the history then
    # holds what a long-running exporter's holds (a full 60 s imbalance window after 60 polls), however
    # fast the polls run here. /proc CPU percentages keep the real clock.
    ticks = iter(range(10**9))
    start = time.time()
    poller = machine.poller(Settings(), clock=lambda: start + next(ticks) * args.interval)
    nvml, procs = machine.gpu, machine.processes
    for _ in range(args.warmup):  # static facts, struct probes, per-identity caches, a full history
        snap = poller.poll()
        time.sleep(0.002)
    rows = sum(len(g.processes) for g in snap.gpus)
    pids = {p.pid for ps in nvml.read().processes.values() for p in ps}

    status = {"now": PollStatus(snap, True, time.time())}
    registry, _ = make_registry()
    registry.register(SnapshotCollector(lambda: status["now"], ExportOptions(docker=False)))

    app = MetricsApp(registry)  # what /metrics runs: each family's bytes kept while it does not change

    def scrape_fresh() -> None:
        status["now"] = PollStatus(snap, True, time.time())
        app.body(None)

    def scrape_changed() -> None:  # every family formatted again, as when every value moved since the last scrape
        status["now"] = PollStatus(snap, True, time.time())
        generate_latest(registry)

    gc_spent = [0.0, 0, 0.0]

    def gc_timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_spent[2] = time.process_time()
        else:
            gc_spent[0] += time.process_time() - gc_spent[2]
            gc_spent[1] += 1

    gc.callbacks.append(gc_timer)
    polls = _cpu(poller.poll, args.ticks, args.pause)
    gc.callbacks.remove(gc_timer)
    reads = _cpu(nvml.read, args.ticks, args.pause)
    facts = _cpu(lambda: procs.facts(pids), args.ticks, args.pause)
    fresh = _cpu(scrape_fresh, args.ticks, 0.0)
    again = _cpu(lambda: app.body(None), args.ticks, 0.0)
    changed = _cpu(scrape_changed, args.ticks, 0.0)
    print(f"{len(snap.gpus)} GPUs, {rows} process rows, {len(snap.alerts)} alerts, imbalance "
          f"{'flagged' if snap.imbalance.flagged else 'not flagged'}; after {args.warmup} polls, "
          f"{args.ticks} ticks {args.pause:g} s apart; CPU time:")
    print(f"  poll (whole)            {_summary(polls)}, mean {statistics.fmean(polls):.3f} ms")
    print(f"  - NVML read             {_summary(reads)}")
    print(f"  - /proc facts           {_summary(facts)}")
    rest = statistics.median(polls) - statistics.median(reads) - statistics.median(facts)
    print(f"  - history, judges, rest ~{rest:.3f} ms (median difference)")
    print(f"  garbage collector       {1000 * gc_spent[0] / args.ticks:.3f} ms per poll on average "
          f"({gc_spent[1] / args.ticks:.1f} collections per poll; included above)")
    print(f"  scrape, new snapshot    {_summary(fresh)}")
    print(f"  scrape, same snapshot   {_summary(again)}")
    print(f"  scrape, all formatted   {_summary(changed)}  (prometheus-client's generate_latest, no bytes kept)")

    phases = _phases(poller, args)
    print("  phases of a poll (CPU per poll, median and mean; timers wrapped around each part):")
    for name, (median, mean) in phases.items():
        print(f"    {name:26} {median:.3f} ms  (mean {mean:.3f})")

    if args.profile:
        prof = cProfile.Profile()
        for _ in range(args.ticks):
            prof.enable()
            poller.poll()
            prof.disable()
            _wait(args.pause)
        for order in ("tottime", "cumulative"):
            buf = io.StringIO()
            stats = pstats.Stats(prof, stream=buf)
            stats.sort_stats(order).print_stats(args.top)
            print(f"\n== cProfile of {args.ticks} polls, by {order} ==")
            print("\n".join(line for line in buf.getvalue().splitlines()[6:] if line.strip()))
    if args.json:
        json.dump({"poll_cpu_ms": polls, "nvml_read_cpu_ms": reads, "facts_cpu_ms": facts,
                   "scrape_fresh_cpu_ms": fresh, "scrape_again_cpu_ms": again,
                   "scrape_all_formatted_cpu_ms": changed}, sys.stdout)
        print()
    poller.close()
    machine.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="8x64")
    ap.add_argument("--ticks", type=int, default=50)
    ap.add_argument("--pause", type=float, default=0.1, help="real seconds between measured polls")
    ap.add_argument("--spin", action="store_true",
                    help="wait --pause by spinning, not sleeping: what time passing costs a poll without an idle CPU")
    ap.add_argument("--interval", type=float, default=1.0, help="simulated seconds between polls (the history's)")
    ap.add_argument("--warmup", type=int, default=120,
                    help="polls before measuring (720 fills the whole history ring)")
    ap.add_argument("--face", choices=("exporter", "dashboard"), default="exporter",
                    help="the exporter's sources (/proc stat every 5 s, no P-state) or the dashboard's "
                         "(every figure every poll, as run.py's poll tick measures)")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of the polls")
    ap.add_argument("--top", type=int, default=30, help="functions shown per cProfile table")
    ap.add_argument("--json", action="store_true", help="also print the raw timings as JSON")
    ap.add_argument("--cachegrind", action="store_true",
                    help="count instructions and cache misses per poll with every cache emptied before it "
                         "(valgrind's cachegrind; deterministic, unlike times on a shared machine)")
    ap.add_argument("--churn", action="store_true",
                    help="with --cachegrind: every GPU's utilization, temperature and power and every process's "
                         "SM %% change before each poll (issue 29's full churn); the driver loads them outside "
                         "the poll")
    ap.add_argument("--churn-dir", help=argparse.SUPPRESS)
    ap.add_argument("--tree", type=Path, default=REPO,
                    help="with --cachegrind: the source tree whose gputui is measured (e.g. a 'git worktree add' "
                         "of a baseline commit)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cg-mode", choices=("poll", "evict"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return cold_worker(args) if args.cg_mode else worker(args)

    run_mod = _load_run_module()
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    from tests.fakenvml.scenario import FakeNvml, render

    gpus, nprocs = CONFIGS[args.config]
    with tempfile.TemporaryDirectory(prefix="gputui-profile-") as tmp, run_mod.Sleepers(nprocs) as sleepers:
        fake = FakeNvml(Path(tmp) / "fakenvml")
        fake.write(run_mod.machine_scenario(gpus, sleepers.pids))
        env = fake.env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--ticks", str(args.ticks),
               "--pause", str(args.pause), "--top", str(args.top), "--interval", str(args.interval),
               "--warmup", str(args.warmup), "--face", args.face]
        cmd += ["--spin"] if args.spin else []
        cmd += ["--profile"] if args.profile else []
        cmd += ["--json"] if args.json else []
        if args.cachegrind:
            if shutil.which("valgrind") is None:
                print("profile_poll: --cachegrind needs valgrind (apt-get install valgrind)", file=sys.stderr)
                return 2
            env["PYTHONPATH"] = str(args.tree.resolve())
            # Same counts on every run: one hash seed (set iteration order moves the counts by ~5 %), and
            # the tree byte-compiled first (a module first imported inside a measured poll would count
            # its compilation: ~50 M instructions).
            env["PYTHONHASHSEED"] = "0"
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(args.tree.resolve() / "gputui")],
                           check=False, stdout=subprocess.DEVNULL)
            if args.churn:
                churn_dir = Path(tmp) / "churn"
                churn_dir.mkdir()
                ui_mod = _load_module("gputui_bench_ui", "ui_bench.py")
                for tick in range(1, args.ticks + 1):  # the scenario texts, written ahead (not in the runs)
                    (churn_dir / f"{tick:05d}.txt").write_text(render(ui_mod.live_scenario(gpus, sleepers.pids, tick,
                                                                                           churn="full")))
                cmd += ["--churn-dir", str(churn_dir)]
            return _cachegrind(cmd, env, Path(tmp), args.ticks)
        return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode


if __name__ == "__main__":
    sys.exit(main())
