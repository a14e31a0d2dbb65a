"""Measure gputui's core poll inside one process (run by benchmarks/run.py).

It must be its own process because the fake libnvidia-ml.so.1 is found through
LD_LIBRARY_PATH, which the dynamic loader reads at start-up. Prints one JSON
object: poll-tick times (the whole Poller.poll(): NVML, /proc, history and
judges), the two sources timed on their own, and NVML calls per GPU per poll
from the fake driver's counters.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
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
    args = ap.parse_args()

    from gputui.core.poller import Poller
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    t0 = time.perf_counter()
    nvml = NvmlSource()
    nvml.open()
    open_ms = 1000 * (time.perf_counter() - t0)
    procs = HostProcessSource()
    poller = Poller(nvml, procs)
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
        "nvml_read": read,
        "process_facts": facts,
        "nvml_calls_per_gpu_per_poll": total / (polls * max(1, gpus)),
        "nvml_calls_by_function_per_poll": {k: v / polls for k, v in sorted(calls.items())},
    }, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
