"""A child process that drives gputui's sources step by step, for tests.

Run with a FakeNvml environment (``FakeNvml.probe()`` does it). It reads one
command per line on stdin and answers one JSON line on stdout, so a test can
change the scenario between two polls of the *same* NvmlSource — what a
long-running dashboard sees — while nvidia-ml-py and the fake driver are real.

Commands: ``open`` · ``read`` · ``info`` (nvml_library_info of the open source) ·
``facts PID...`` (HostProcessSource) · ``poll`` (a whole Poller.poll() with both
sources, returning Snapshot.to_json()) · ``tune [dcgm]`` (the exporter's tuning of both
sources) · ``calls`` (dump the fake's counters now)
· ``reset_calls`` · ``close``. Errors come back as ``{"error": type, "message": str}``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time


def _jsonable(value):
    from gputui.core.record import fields, is_record

    if is_record(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def main() -> int:
    from gputui.core.sources.nvml import NvmlSource
    from gputui.core.sources.processes import HostProcessSource

    # GPUTUI_PROBE_SLOW_TTL=0: cached values (power limit, MIG layout, ...) are read at every poll.
    ttl = os.environ.get("GPUTUI_PROBE_SLOW_TTL")
    source = NvmlSource() if ttl is None else NvmlSource(slow_ttl=float(ttl))
    processes = HostProcessSource()
    poller = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd, args = words[0], words[1:]
        try:
            if cmd == "open":
                t0 = time.perf_counter()
                source.open()
                answer = {"ok": True, "seconds": time.perf_counter() - t0, "devices": source.device_count}
            elif cmd == "read":
                answer = _jsonable(source.read())
            elif cmd == "info":
                answer = _jsonable(source.library_info())
            elif cmd == "facts":
                answer = _jsonable(processes.facts([int(a) for a in args]))
            elif cmd == "poll":
                if poller is None:
                    from gputui.core.poller import Poller

                    poller = Poller(source, processes)
                answer = poller.poll().to_json()
            elif cmd in ("calls", "reset_calls"):
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                (lib.fakeNvmlDumpCalls if cmd == "calls" else lib.fakeNvmlResetCalls)()
                answer = {"ok": True}
            elif cmd == "tune":  # what `gputui exporter` does to its sources (args: "dcgm" for --dcgm-names)
                from gputui.core.machine import Machine
                from gputui.exporter.server import tune_sources

                tune_sources(Machine(gpu=source, processes=processes, containers=None), dcgm_names="dcgm" in args)
                answer = {"ok": True, "refresh": processes.refresh}
            elif cmd == "close":
                source.close()
                answer = {"ok": True}
            else:
                answer = {"error": "UnknownCommand", "message": cmd}
        except Exception as exc:  # report, keep serving
            answer = {"error": type(exc).__name__, "message": str(exc)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
