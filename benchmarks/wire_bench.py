"""Bytes on the wire, side by side with nvitop: ``.venv/bin/python benchmarks/wire_bench.py``.

Each program runs in its own pseudo-terminal (200x50, TERM=xterm-256color) and
a thread reads everything it writes, as ssh would carry it. In one run, against
the same fake NVIDIA driver (8 GPUs x 64 real ``sleep`` processes):

- ``gputui`` (1 s refresh, its own driver: only changed cells are sent),
- ``gputui --slow-link`` (when the installed gputui has it),
- ``gputui`` with ``GPUTUI_DRIVER=textual`` (Textual's own output: the "before"),
- ``nvitop`` (default settings, 2 s; from benchmarks/.venv, not a gputui dependency).

Two phases: the load changing every second (GPU load, power, a third of the
processes' SM %), then unchanging load, measured after ``--fill`` seconds so
that every history graph has filled with the flat line. It reports bytes/s and
the share of them that are SGR (style) sequences. ``--record DIR`` keeps each
program's whole output (tests/test_output.py replays such a stream).

Targets (issue 17): gputui <= 4,000 B/s with changing load, <= 200 B/s unchanging.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import re
import select
import signal
import struct
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SIZE = (200, 50)
TARGETS = {"changing": 4000.0, "static": 200.0}
SGR = re.compile(rb"\x1b\[[0-9;:]*m")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gputui_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class PtyProgram:
    """A program on its own pseudo-terminal; every byte it writes is kept with the time it arrived."""

    def __init__(self, argv: list[str], env: dict[str, str], size: tuple[int, int] = SIZE) -> None:
        pid, fd = os.forkpty()
        if pid == 0:  # the child: a terminal of the given size, then the program
            try:
                fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        self.chunks: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.chunks.append((time.monotonic(), data))

    def window(self, start: float, end: float) -> bytes:
        return b"".join(data for t, data in list(self.chunks) if start <= t < end)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self._stop.set()
        self._thread.join(timeout=2)
        os.close(self.fd)


def measure(programs: dict[str, PtyProgram], seconds: float) -> dict[str, dict[str, float]]:
    start = time.monotonic()
    time.sleep(seconds)
    end = time.monotonic()
    out = {}
    for name, prog in programs.items():
        data = prog.window(start, end)
        sgr = sum(len(m) for m in SGR.findall(data))
        out[name] = {"bytes_per_s": len(data) / (end - start), "sgr_share": sgr / len(data) if data else 0.0}
    return out


def _has_slow_link(gputui: list[str]) -> bool:
    import subprocess

    res = subprocess.run([*gputui, "--help"], capture_output=True, text=True, check=False)
    return "--slow-link" in res.stdout


def run(args: argparse.Namespace) -> dict[str, Any]:
    run_mod, ui_mod = _load("run"), _load("ui_bench")
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    from tests.fakenvml.scenario import FakeNvml

    nvitop = None if args.no_nvitop else run_mod.nvitop_executable(install=True)
    gputui = ui_mod.gputui_argv()
    variants = {"gputui": (gputui, {})}
    if _has_slow_link(gputui):
        variants["gputui --slow-link"] = ([*gputui, "--slow-link"], {})
    variants["gputui, Textual driver"] = (gputui, {"GPUTUI_DRIVER": "textual"})
    if nvitop is not None:
        variants["nvitop"] = ([str(nvitop)], {})
    results: dict[str, Any] = {"terminal": f"pty {SIZE[0]}x{SIZE[1]}", "gpus": 8, "processes": 64, "churn": args.churn,
                               "seconds": args.seconds, "fill_s": args.fill,
                               "nvitop_version": run_mod._version(run_mod.VENV / "bin" / "python", "nvitop")
                               if nvitop else None}
    with tempfile.TemporaryDirectory(prefix="gputui-wire-bench-") as tmp, run_mod.Sleepers(64) as sleepers:
        work = Path(tmp)
        fake = FakeNvml(work / "fake")
        fake.write(ui_mod.live_scenario(8, sleepers.pids, 0, args.churn))
        base = {k: v for k, v in fake.env().items()
                if k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "PATH", "HOME")}
        base.update(TERM="xterm-256color", XDG_STATE_HOME=str(work / "state"),
                    XDG_CONFIG_HOME=str(work / "config"), LANG="C.UTF-8")
        writer = ui_mod.ScenarioWriter(fake, 8, sleepers.pids, args.churn)
        writer.start()
        programs: dict[str, PtyProgram] = {}
        try:
            for name, (argv, extra) in variants.items():
                programs[name] = PtyProgram(argv, {**base, **extra})
            print(f"wire benchmark: {', '.join(programs)}; changing load, {args.warmup:.0f} s warm-up ...",
                  flush=True)
            time.sleep(args.warmup)
            changing = measure(programs, args.seconds)
            writer.stop.set()
            writer.join()
            print(f"wire benchmark: unchanging load, {args.fill:.0f} s for the graphs to fill ...", flush=True)
            time.sleep(args.fill)
            static = measure(programs, args.seconds)
        finally:
            writer.stop.set()
            for prog in programs.values():
                prog.close()
            if args.record:
                record = Path(args.record)
                record.mkdir(parents=True, exist_ok=True)
                for name, prog in programs.items():
                    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                    (record / f"{slug}.bin").write_bytes(b"".join(d for _, d in prog.chunks))
    results["changing"], results["static"] = changing, static
    return results


def verdicts(results: dict[str, Any]) -> list[str]:
    out = []
    for phase, label in (("changing", "load changing every second"), ("static", "unchanging load, graphs filled")):
        value = results[phase]["gputui"]["bytes_per_s"]
        target = TARGETS[phase]
        out.append(f"{'PASS' if value <= target else 'FAIL'}: bytes/s, {label}: {value:,.0f} "
                   f"(goal <= {target:,.0f})")
    return out


def print_table(results: dict[str, Any]) -> None:
    print(f"\n{results['terminal']}, 8 GPUs x 64 processes, {results['seconds']:.0f} s per phase; "
          f"nvitop {results.get('nvitop_version') or 'not run'}")
    print(f"{'program':26} {'changing B/s':>13} {'SGR share':>10} {'static B/s':>11} {'SGR share':>10}")
    for name in results["changing"]:
        c, s = results["changing"][name], results["static"][name]
        print(f"{name:26} {c['bytes_per_s']:13,.0f} {c['sgr_share']:10.0%} {s['bytes_per_s']:11,.0f} "
              f"{s['sgr_share']:10.0%}")
    print()
    for v in results["verdicts"]:
        print(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each measurement")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before the changing-load measurement")
    ap.add_argument("--fill", type=float, default=75.0,
                    help="seconds of unchanging load before it is measured (the graphs must fill)")
    ap.add_argument("--no-nvitop", action="store_true", help="do not install or run nvitop")
    ap.add_argument("--churn", choices=("third", "full"), default="third",
                    help="which processes' SM %% change every second (full: all of them, issue 29)")
    ap.add_argument("--record", metavar="DIR", help="keep each program's whole output in DIR")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = run(args)
    results["verdicts"] = verdicts(results)
    print_table(results)
    return _load("run").save_results(results, prefix="wire-")


if __name__ == "__main__":
    sys.exit(main())
