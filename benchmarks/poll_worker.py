"""Measure gputui's core poll inside one process (run by benchmarks/run.py).

It must be its own process because the fake libnvidia-ml.so.1 is found through
LD_LIBRARY_PATH, which the dynamic loader reads at start-up. Prints one JSON
object: poll-tick times (the whole Poller.poll(): NVML, /proc, history and
judges), the two sources timed on their own, and NVML calls per GPU per poll
from the fake driver's counters.

The poll tick is timed twice: in a run's first seconds (``poll_tick``), and
once ``--fill`` polls have filled the history (``poll_tick_full``: a dashboard
or exporter left running, whose history windows are full and whose idle-holder
test covers its whole window). The poller's clock is simulated, one second per
poll, so the history fills in seconds; NVML and /proc keep the real clock.
The worker uses only public API, so run.py runs it over a baseline tree too.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path


def _timed(fn, runs: int, pause: float) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
        if pause:
            time.sleep(pause)
    walls.sort()
    return {
        "median_ms": 1000 * statistics.median(walls),
        "p90_ms": 1000 * walls[min(len(walls) - 1, int(0.9 * len(walls)))],
        "max_ms": 1000 * walls[-1],
        "cpu_median_ms": 1000 * statistics.median(cpus),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--pause", type=float, default=0.1, help="seconds between ticks (CPU%% needs >= 0.1)")
    ap.add_argument("--fill", type=int, default=720,
                    help="polls in all before the second timing (720: a full history; 0: no second timing)")
    args = ap.parse_args()

    from gputui.core.poller import Poller
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    t0 = time.perf_counter()
    nvml = NvmlSource()
    nvml.open()
    open_ms = 1000 * (time.perf_counter() - t0)
    procs = HostProcessSource()
    seconds = iter(range(1, 10**9))
    start = time.time()
    poller = Poller(nvml, procs, clock=lambda: start + next(seconds))  # one simulated second per poll
    for _ in range(3):  # warm: static facts, struct probes, per-identity caches, CPU baselines
        snap = poller.poll()
        time.sleep(args.pause)
    gpus = len(snap.gpus)
    rows = sum(len(g.processes) for g in snap.gpus)
    visible = sum(1 for p in snap.processes if p.visible)
    pids = {p.pid for procs_ in nvml.read().processes.values() for p in procs_}

    tick = _timed(poller.poll, args.ticks, args.pause)
    read = _timed(nvml.read, args.ticks, 0.0)
    facts = _timed(lambda: procs.facts(pids), args.ticks, args.pause)
    full = None
    if args.fill:
        for _ in range(max(0, args.fill - 3 - args.ticks)):  # the rest of a full history, in simulated seconds
            poller.poll()
            time.sleep(0.002)
        time.sleep(args.pause)
        full = _timed(poller.poll, args.ticks, args.pause)

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakeNvmlResetCalls()
    polls = 10
    for _ in range(polls):
        poller.poll()
    lib.fakeNvmlDumpCalls()
    calls = json.loads(Path(os.environ["GPUTUI_FAKE_NVML_CALLS"]).read_text())
    total = sum(calls.values())
    poller.close()

    json.dump({
        "gpus": gpus,
        "process_rows": rows,
        "visible_rows": visible,
        "distinct_pids": len(pids),
        "open_ms": open_ms,
        "poll_tick": tick,
        "poll_tick_full": full,
        "polls_before_full": args.fill,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # the history held, and the rest
        "nvml_read": read,
        "process_facts": facts,
        "nvml_calls_per_gpu_per_poll": total / (polls * max(1, gpus)),
        "nvml_calls_by_function_per_poll": {k: v / polls for k, v in sorted(calls.items())},
    }, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
