"""Where the idle dashboard's CPU goes: ``.venv/bin/python benchmarks/idle_profile.py``.

Runs the installed gputui (1 s refresh, ``--no-docker``) in a 200x50 tmux session against the
fake driver at 8 GPUs x 64 processes with the load changing every second (as ui_bench.py),
and samples it with py-spy (every thread, on-CPU samples only) for ``--seconds``. py-spy is
installed into benchmarks/.venv on first use, beside nvitop: never a gputui dependency.

It writes the on-CPU stacks to benchmarks/results/idle-8x64-stacks.txt (py-spy's collapsed
format, for a flame graph) and the summary to benchmarks/profiles/idle-8x64.md (kept in the
repository, so a change's effect can be compared): the share of samples per part of the
program (the poll thread, the judges, widget updates, Textual's compositor and rendering, the
output layer, the event loop's wake-ups) and the busiest functions.

``--callgrind`` instead runs gputui under valgrind's callgrind and counts the instructions it
executes in ``--seconds`` of idle dashboard after start-up (``callgrind_control -z`` then
``-d``): a figure that, unlike CPU percentages on a busy shared machine, barely moves between
runs. It prints the count and keeps the dump in benchmarks/results/idle-8x64.callgrind.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PROFILES = BENCH / "profiles"

#: Parts of the program, by the first matching frame of a stack (innermost frames are last).
PARTS = [
    ("poll: NVML source", "gputui/core/sources/nvml.py"),
    ("poll: /proc facts", "gputui/core/sources/processes.py"),
    ("poll: judges", "gputui/core/judges/"),
    ("poll: history, containers, model", "gputui/core/"),
    ("output layer (ScreenDiff)", "gputui/ui/output.py"),
    ("widgets: gputui", "gputui/ui/"),
    ("Textual: compositor", "textual/_compositor.py"),
    ("Textual: styles and CSS", "textual/css/"),
    ("Textual: strips, segments", "textual/strip.py"),
    ("Textual: rich rendering", "rich/"),
    ("Textual: other", "textual/"),
    ("event loop, threads", "asyncio/"),
]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gputui_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def py_spy(run_mod) -> Path:
    exe = run_mod.VENV / "bin" / "py-spy"
    if not exe.exists():
        run_mod.nvitop_executable(install=True)  # creates the venv
        subprocess.run([str(run_mod.VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "py-spy"],
                       check=True)
    return exe


#: Innermost frames of a thread that is waiting, not running (py-spy cannot always tell).
WAITING = ("Condition.wait", "Selector.select", "_worker (concurrent", "Event.wait", "Queue.get (")


def classify(stack: str) -> str:
    """The part of the innermost frame that belongs to a known part (the standard library's own are skipped)."""
    for frame in reversed(stack.split(";")):
        for label, needle in PARTS:
            if needle in frame:
                return label
    return "other (interpreter, threads, selectors)"


def summarise(raw: Path) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(share per part, share per innermost function — the top 15) of the samples on a CPU."""
    counts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or any(w in stack.split(";")[-1] for w in WAITING):
            continue
        counts[classify(stack)] += int(n)
        own[stack.split(";")[-1]] += int(n)
        total += int(n)
    if not total:
        return [], []
    return ([(label, n / total) for label, n in counts.most_common()],
            [(frame, n / total) for frame, n in own.most_common(15)])


def callgrind_instructions(tmux, pid: int, work: Path, seconds: int) -> int:
    """Instructions ``pid`` (running under callgrind) executes in the next ``seconds``."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    time.sleep(seconds)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    dumps = sorted(work.glob("callgrind.out*"), key=lambda f: f.stat().st_mtime)
    for dump in reversed(dumps):
        m = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(errors="replace"), re.MULTILINE)
        if m and dump.name != "callgrind.out":  # the -d dump (the file named without a suffix is the final one)
            kept = BENCH / "results" / "idle-8x64.callgrind"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dump, kept)  # for callgrind_annotate: calls of C functions (writes, selects, ...)
            return int(m.group(1))
    raise RuntimeError(f"no callgrind dump with a total in {work}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--churn", choices=("third", "full"), default="third",
                    help="which processes' SM %% change every second (full: all of them, issue 29)")
    ap.add_argument("--callgrind", action="store_true", help="count instructions under callgrind instead")
    ap.add_argument("--out", type=Path, default=PROFILES / "idle-8x64.md")
    ap.add_argument("--stacks", type=Path, default=BENCH / "results" / "idle-8x64-stacks.txt")
    args = ap.parse_args(argv)
    run_mod, ui_mod = _load("run"), _load("ui_bench")
    run_mod._ensure_project_python()
    sys.path.insert(0, str(REPO))
    from tests.fakenvml.scenario import FakeNvml

    if args.callgrind and shutil.which("valgrind") is None:
        sys.exit("idle_profile: --callgrind needs valgrind (apt-get install valgrind)")
    spy = None if args.callgrind else py_spy(run_mod)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.stacks.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gputui-profile-") as tmp, run_mod.Sleepers(64) as sleepers:
        work = Path(tmp)
        fake = FakeNvml(work / "fake")
        fake.write(ui_mod.live_scenario(8, sleepers.pids, 0, args.churn))
        env = {k: v for k, v in fake.env().items() if k in ("LD_LIBRARY_PATH", "GPUTUI_FAKE_NVML_SCENARIO", "PATH",
                                                               "HOME")}
        env.update(XDG_STATE_HOME=str(work / "state"), XDG_CONFIG_HOME=str(work / "config"))
        writer = ui_mod.ScenarioWriter(fake, 8, sleepers.pids, args.churn)
        writer.start()
        tmux = ui_mod.Tmux()
        pid = 0
        try:
            argv = ui_mod.gputui_argv()
            if args.callgrind:
                argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/callgrind.out",
                        sys.executable, "-m", "gputui", *argv[argv.index("--no-docker"):]]
            tmux.start("gputui", argv, env)
            ui_mod.wait_for(tmux, "gputui", lambda s: "GPU MEM" in s and "A100" in s, 300 if args.callgrind else 30)
            time.sleep(10 if args.callgrind else 5)
            pid = tmux.pid("gputui")
            if args.callgrind:
                print(f"idle profile: counting gputui's instructions (pid {pid}) for {args.seconds} s ...", flush=True)
                count = callgrind_instructions(tmux, pid, work, args.seconds)
                print(f"callgrind: {count / 1e9:.3f} G instructions in {args.seconds} s of idle dashboard")
                return 0
            print(f"idle profile: sampling gputui (pid {pid}) for {args.seconds} s ...", flush=True)
            raw = work / "raw.txt"
            assert spy is not None
            subprocess.run([str(spy), "record", "-p", str(pid), "-d", str(args.seconds), "-r", "1000", "--threads",
                            "--format", "raw", "-o", str(raw)], check=True, capture_output=True)
            # Only the samples on a CPU are kept (a thread waiting is not a cost).
            args.stacks.write_text("".join(line + "\n" for line in raw.read_text().splitlines()
                                        if not any(w in line.rpartition(" ")[0].split(";")[-1] for w in WAITING)))
        finally:
            writer.stop.set()
            writer.join()
            tmux.close()
            deadline = time.monotonic() + 60
            while args.callgrind and pid and _running(pid) and time.monotonic() < deadline:
                time.sleep(0.2)  # valgrind writes its last dump as it exits: before the folder goes
    parts, functions = summarise(args.stacks)
    lines = [f"# Where the idle dashboard's CPU goes ({time.strftime('%Y-%m-%d')})", "",
             (f"gputui at 8 GPUs x 64 processes, 1 s refresh, load changing every second, 200x50 tmux; py-spy, "
              f"{args.seconds} s at 1000 Hz, on-CPU samples of every thread (benchmarks/idle_profile.py)."), "",
             "| share | part |", "|---|---|"]
    lines += [f"| {share:.1%} | {label} |" for label, share in parts]
    lines += ["", "| share | busiest functions (own samples) |", "|---|---|"]
    lines += [f"| {share:.1%} | `{frame}` |" for frame, share in functions]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
