"""gputui's benchmarks, in one command: ``.venv/bin/python benchmarks/run.py``.

Against the fake NVIDIA driver (tests/fakenvml) at 8 GPUs x 64 processes and
16 GPUs x 1000 processes — the processes are real ``sleep`` children, so the
/proc and psutil work is real — it measures, side by side in one run:

- wall and CPU time of ``gputui snapshot --json`` (with and without Docker)
  and of ``nvitop --once`` (from its own venv, benchmarks/.venv, created on
  first use; nvitop is not a gputui dependency), median of ``--runs`` runs,
  interleaved so that machine noise hits all of them alike. Both run as a user
  has them: nvitop's console script, and gputui's from a normal (not editable)
  install into a fresh venv, byte-code compiled by pip (see ``installed_gputui``);
- the core poll time per tick (Poller.poll() with NvmlSource and
  HostProcessSource), and the two sources on their own;
- NVML calls per GPU per poll, from the fake driver's counters.

Results go to benchmarks/results/<time>.json and results/latest.json, and a
table is printed. Targets: snapshot at 8 x 64 in at most 0.6x the
wall time of ``nvitop --once``; a poll tick (median wall, 1 s between polls) within 10 ms at
16 x 1000 and 1.5 ms at 8 x 64 (issue 29), both in a run's first seconds and once
the history is full (720 polls: a dashboard left running, every window full and
the idle-holder test covering its whole window).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENV = BENCH / ".venv"
RESULTS = BENCH / "results"
NVITOP_REQUIREMENT = "nvitop>=1.4,<2"

CONFIGS = {"8x64": (8, 64), "16x1000": (16, 1000)}
SNAPSHOT_RATIO_TARGET = 0.6  # snapshot --json wall / nvitop --once wall, at 8 x 64 (issue 17)
#: poll tick (median wall, 1 s between polls) per configuration (issue 29.2)
TICK_TARGETS_MS = {"16x1000": 10.0, "8x64": 1.5}

GiB, MiB = 1024**3, 1024**2


def _ensure_project_python() -> None:
    """Re-run under the project's venv if this interpreter cannot import gputui."""
    try:
        import gputui  # noqa: F401
    except ImportError:
        venv_python = REPO / ".venv" / "bin" / "python"
        if venv_python.exists() and Path(sys.executable).resolve() != venv_python.resolve():
            os.execv(str(venv_python), [str(venv_python), *sys.argv])
        sys.exit("benchmarks: gputui is not importable; "
                 "run with the project's venv: .venv/bin/python benchmarks/run.py")


def venv_executable(venv: Path, requirement: str, command: str, install: bool) -> Path | None:
    """``venv/bin/command``, creating that venv and pip-installing ``requirement`` on first use
    (a peer tool, kept out of the project's own dependencies)."""
    exe = venv / "bin" / command
    if exe.exists() or not install:
        return exe if exe.exists() else None
    print(f"benchmarks: installing {requirement} into {venv} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement],
                         check=False)
    if res.returncode != 0 or not exe.exists():
        print(f"benchmarks: could not install {command}; its column will be empty.", file=sys.stderr)
        return None
    return exe


def nvitop_executable(install: bool) -> Path | None:
    """benchmarks/.venv/bin/nvitop."""
    return venv_executable(VENV, NVITOP_REQUIREMENT, "nvitop", install)


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, all threads


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def _version(python: Path, dist: str) -> str | None:
    res = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                         capture_output=True, text=True)
    return res.stdout.strip() or None


# -- real processes ----------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no sleeper outlives an interrupted benchmark


class Sleepers:
    """N real processes to present as GPU processes; all killed and reaped on exit."""

    def __init__(self, n: int) -> None:
        self.procs: list[subprocess.Popen] = []
        try:
            for i in range(n):
                self.procs.append(subprocess.Popen(["sleep", str(100000 + i)], preexec_fn=_die_with_parent,
                                                   stdin=subprocess.DEVNULL))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs.clear()

    def __enter__(self) -> Sleepers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def machine_scenario(gpus: int, pids: list[int]) -> dict[str, Any]:
    """GPUs sharing the processes round-robin; most have an SM sample, a few are graphics."""
    from tests.fakenvml.scenario import gpu, process, scenario

    per_gpu: list[list[dict]] = [[] for _ in range(gpus)]
    for i, pid in enumerate(pids):
        per_gpu[i % gpus].append(process(
            pid, used_memory=256 * MiB * (1 + i % 4), sm=None if i % 4 == 3 else (i * 37) % 100,
            type="graphics" if i % 50 == 49 else "compute",
        ))
    return scenario([gpu(g, utilization_gpu=(g * 29) % 100, temperature=40 + g, processes=per_gpu[g])
                     for g in range(gpus)])


# -- one-shot commands ------------------------------------------------------------------------------


def source_tree(workdir: Path, ref: str) -> Path:
    """The files of commit ``ref``, extracted once under ``workdir``."""
    source = workdir / f"src-{ref}"
    if not source.exists():
        source.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    return source


def installed_gputui(workdir: Path, ref: str | None = None) -> Path:
    """A venv holding gputui as ``pip install gputui`` leaves it, and the path of its python.

    The project's venv has an editable install, whose import hook alone costs ~9 ms a start and
    which no user has; nvitop runs from a normal install too. The dependencies are not installed
    again: a path line in a .pth file lends this interpreter's site-packages (a directory named in
    a .pth is only added to sys.path, so the editable install's own hook there stays unused)."""
    import site

    source = REPO if ref is None else source_tree(workdir, ref)  # another commit, for a before/after in one run
    venv = workdir / ("gputui-venv" if ref is None else f"gputui-venv-{ref}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    (target / "gputui-bench-deps.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    print(f"benchmarks: installing gputui{'' if ref is None else ' ' + ref} (not editable) into a scratch venv ...",
          flush=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    str(source)], check=True, stdout=subprocess.DEVNULL)
    return python


def _run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # not from the repository: `python -c` would import the checkout's gputui instead of the installed one
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
                         cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, res


#: The pipeline `snapshot --json --no-docker` runs, without the CLI around it (argument parsing,
#: subcommand modules): the difference to the CLI's time is what the CLI's imports cost.
CORE_ONCE = """
import json, sys
from gputui.core.machine import open_machine
from gputui.core.config import Settings
m = open_machine(docker=False)
p = m.poller(Settings())
sys.stdout.write(json.dumps(p.poll().to_json(), indent=2) + "\\n")
p.close(); m.close()
"""


def one_shots(commands: dict[str, list[str]], env: dict[str, str], runs: int,
              check: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Median wall/CPU per command, runs interleaved; the first (warm-up) run is not counted."""
    walls: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    notes: dict[str, str] = {}
    for r in range(runs + 1):
        for name, cmd in commands.items():
            wall, cpu, res = _run_once(cmd, env)
            if res.returncode != 0:
                raise RuntimeError(f"{name} exited {res.returncode}: {res.stderr.strip()[-2000:]}")
            if r == 0:
                notes[name] = check[name](res.stdout) if name in check else ""
                continue
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {
        name: {
            "wall_median_ms": 1000 * statistics.median(walls[name]),
            "wall_min_ms": 1000 * min(walls[name]),
            "cpu_median_ms": 1000 * statistics.median(cpus[name]),
            "runs": runs,
            "check": notes.get(name, ""),
        }
        for name in commands
    }


def _check_snapshot(expected_rows: int):
    def check(stdout: str) -> str:
        snap = json.loads(stdout)
        rows = sum(len(g["processes"]) for g in snap["gpus"])
        visible = sum(1 for g in snap["gpus"] for p in g["processes"] if p["visible"] and p["user"])
        if rows != expected_rows or visible != expected_rows:
            raise RuntimeError(f"snapshot showed {rows} process rows ({visible} with an owner), "
                               f"expected {expected_rows}")
        return f"{rows} rows, all with owners"
    return check


def _check_nvitop(stdout: str) -> str:
    if "No Such Process" in stdout:
        raise RuntimeError("nvitop could not see the processes")
    return "ok"


# -- the whole run ----------------------------------------------------------------------------------


def _poll_worker(tree: Path, env: dict[str, str], ticks: int, pause: float, pythonpath: bool) -> dict[str, Any]:
    """The in-process poll tick of the gputui in ``tree`` (``pythonpath``: that tree, not the installed one),
    timed by this tree's poll worker (public API only, so the same timing applies to a baseline)."""
    env = dict(env)
    if pythonpath:
        env["PYTHONPATH"] = str(tree)
    worker = subprocess.run([sys.executable, str(BENCH / "poll_worker.py"), "--ticks", str(ticks),
                             "--pause", str(pause)], env=env, capture_output=True, text=True, timeout=900,
                            cwd=tempfile.gettempdir() if pythonpath else None)
    if worker.returncode != 0:
        raise RuntimeError(f"poll worker failed: {worker.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(worker.stdout)
    return result


def _poll_rounds(label: str, env: dict[str, str], workdir: Path, baseline: tuple[str, Path] | None, ticks: int,
                 pause: float, rounds: int) -> dict[str, Any]:
    """The poll tick of this tree (and of the baseline's), ``rounds`` times, alternating which runs first,
    so that the machine's noise falls on both alike: every round's figures, and as ``poll`` (and
    ``poll@ref``) the round whose median is the middle one."""
    trees: list[tuple[str, Path, bool]] = [("poll", REPO, False)]
    if baseline is not None:
        trees.append((f"poll@{baseline[0]}", workdir / f"src-{baseline[0]}", True))
    every: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in trees}
    for k in range(rounds):
        for name, tree, pythonpath in (trees if k % 2 == 0 else trees[::-1]):
            print(f"  {label}: poll ticks of {'this tree' if name == 'poll' else name[5:]} ({pause:g} s apart), "
                  f"round {k + 1}/{rounds} ...", flush=True)
            every[name].append(_poll_worker(tree, env, ticks, pause, pythonpath=pythonpath))
    out: dict[str, Any] = {}
    for name, results in every.items():
        ordered = sorted(results, key=lambda r: r["poll_tick"]["median_ms"])
        out[name] = dict(ordered[len(ordered) // 2])
        full = sorted((r["poll_tick_full"] for r in results if r.get("poll_tick_full")), key=lambda t: t["median_ms"])
        if full:  # the middle round of each timing (the two may come from different rounds)
            out[name]["poll_tick_full"] = full[len(full) // 2]
        out[f"{name}_rounds"] = [r["poll_tick"] for r in results]
        out[f"{name}_full_rounds"] = [r["poll_tick_full"] for r in results if r.get("poll_tick_full")]
    return out


def bench_config(label: str, gpus: int, nprocs: int, runs: int, ticks: int, nvitop: Path | None,
                 workdir: Path, python: Path, baseline: tuple[str, Path] | None = None, pause: float = 1.0,
                 poll_only: bool = False, rounds: int = 1) -> dict[str, Any]:
    from tests.fakenvml.scenario import FakeNvml

    fake = FakeNvml(workdir / label)
    with Sleepers(nprocs) as sleepers:
        fake.write(machine_scenario(gpus, sleepers.pids))
        env = fake.env()
        env.update(COLUMNS="200", LINES="80")
        # An installed package has its bytecode compiled (pip does it; nvitop's venv has it):
        # let the warm-up run write gputui's, instead of compiling every module on every run.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("PYTHONPATH", None)

        out: dict[str, Any] = {"gpus": gpus, "processes": nprocs}
        if rounds > 1:
            out.update(_poll_rounds(label, env, workdir, baseline, ticks, pause, rounds))
        else:
            print(f"  {label}: poll ticks ({pause:g} s apart) ...", flush=True)
            out["poll"] = _poll_worker(REPO, env, ticks, pause, pythonpath=False)
            if baseline is not None:  # the baseline's own poll worker over its own tree, against the same processes
                print(f"  {label}: poll ticks of {baseline[0]} ...", flush=True)
                out[f"poll@{baseline[0]}"] = _poll_worker(workdir / f"src-{baseline[0]}", env, ticks, pause,
                                                          pythonpath=True)
        if poll_only:
            return out

        gputui = [str(python.parent / "gputui"), "snapshot", "--json"]  # the console script pip wrote
        commands = {"snapshot_no_docker": gputui + ["--no-docker"], "snapshot": gputui,
                    "core_once": [str(python), "-c", CORE_ONCE]}
        if baseline is not None:
            commands[f"snapshot_no_docker@{baseline[0]}"] = [str(baseline[1].parent / "gputui"), "snapshot", "--json",
                                                             "--no-docker"]
        check = {name: _check_snapshot(nprocs) for name in commands if name.startswith(("snapshot", "core"))}
        if nvitop is not None:
            commands["nvitop_once"] = [str(nvitop), "--once"]
            check["nvitop_once"] = _check_nvitop
        print(f"  {label}: one-shot commands x {runs} ...", flush=True)
        shots = one_shots(commands, env, runs, check)

        # NVML calls of one `snapshot --json` process and of one `nvitop --once`
        calls: dict[str, float | None] = {}
        for name in ("snapshot_no_docker", "nvitop_once"):
            if name not in commands:
                continue
            fake.clear_calls()
            subprocess.run(commands[name], env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
            counted = fake.calls()
            calls[name] = sum(counted.values()) / gpus if counted else None
    return {**out, "one_shot": shots, "nvml_calls_per_gpu_per_run": calls}


def save_results(results: dict[str, Any], prefix: str = "") -> int:
    """Write results/<prefix><time>.json and <prefix>latest.json; exit status 0 when every verdict passed."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    text = json.dumps(results, indent=2)
    (RESULTS / f"{prefix}{stamp}.json").write_text(text)
    (RESULTS / f"{prefix}latest.json").write_text(text)
    print(f"\nresults: {RESULTS / f'{prefix}{stamp}.json'}")
    return 0 if all(v.startswith("PASS") for v in results["verdicts"]) else 1


def print_table(results: dict[str, Any]) -> None:
    print()
    print(f"gputui benchmarks — {results['time']} — {results['machine']} — load average before: "
          f"{results['load_before']}")
    print("(ms; one-shot columns: median of runs, CPU = user+sys of the process; poll columns: one tick "
          "of Poller.poll(), and the NVML and /proc sources alone)")
    print()
    hdr = ("config", "snapshot --json", "snapshot (docker)", "core, no CLI", "nvitop --once", "ratio", "poll tick",
           "poll tick", "history full", "nvml read", "/proc facts", "NVML calls")
    sub = ("", "wall / cpu ms", "wall / cpu ms", "wall / cpu ms", "wall / cpu ms", "snap/nvitop", "wall med / p90",
           "cpu median", "wall med / p90", "cpu median", "cpu median", "/GPU/poll")
    rows = [hdr, sub]
    for label, r in results["configs"].items():
        s = r.get("one_shot", {})

        def cell(name: str, s: dict[str, Any] = s) -> str:
            if name not in s:
                return "n/a"
            return f"{s[name]['wall_median_ms']:.0f} / {s[name]['cpu_median_ms']:.0f}"

        ratio = (f"{s['snapshot_no_docker']['wall_median_ms'] / s['nvitop_once']['wall_median_ms']:.2f}"
                 if "nvitop_once" in s else "n/a")
        p = r["poll"]
        rows.append((
            label, cell("snapshot_no_docker"), cell("snapshot"), cell("core_once"), cell("nvitop_once"), ratio,
            f"{p['poll_tick']['median_ms']:.1f} / {p['poll_tick']['p90_ms']:.1f}",
            f"{p['poll_tick']['cpu_median_ms']:.1f}",
            f"{full['median_ms']:.1f} / {full['p90_ms']:.1f}" if (full := p.get("poll_tick_full")) else "n/a",
            f"{p['nvml_read']['cpu_median_ms']:.1f}", f"{p['process_facts']['cpu_median_ms']:.1f}",
            f"{p['nvml_calls_per_gpu_per_poll']:.1f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(hdr))]
    for k, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if k == 1:
            print("  ".join("-" * w for w in widths))
    for label, r in results["configs"].items():
        for name in (n for n in r if n.endswith("_rounds") and r[n]):
            ticks = r[name]
            full = name.endswith("_full_rounds")
            tree = name[:-12 if full else -7]
            tree = ("this tree" if tree == "poll" else tree[5:]) + (", history full" if full else "")

            def span(key: str, ticks: list[dict[str, float]] = ticks) -> str:
                values = sorted(t[key] for t in ticks)
                return f"{values[0]:.2f}-{values[-1]:.2f} (middle {values[len(values) // 2]:.2f})"

            print(f"{label}: poll tick of {tree} over {len(ticks)} alternated rounds: median {span('median_ms')}, "
                  f"p90 {span('p90_ms')}, cpu median {span('cpu_median_ms')} ms")
        if "max_rss_mib" in r["poll"]:
            print(f"{label}: the poll worker's peak memory with the history full: {r['poll']['max_rss_mib']:.0f} MiB")
        for name in (n for n in r if n.startswith("poll@") and not n.endswith("_rounds")):
            p = r[name]
            full = p.get("poll_tick_full")
            print(f"{label}: poll tick at {name.split('@', 1)[1]}: {p['poll_tick']['median_ms']:.1f} / "
                  f"{p['poll_tick']['p90_ms']:.1f} ms (median / p90), cpu median {p['poll_tick']['cpu_median_ms']:.1f} "
                  f"ms; history full {full['median_ms']:.1f} / {full['p90_ms']:.1f} ms; /proc facts cpu median "
                  f"{p['process_facts']['cpu_median_ms']:.1f} ms" if full else
                  f"{label}: poll tick at {name.split('@', 1)[1]}: {p['poll_tick']['median_ms']:.1f} / "
                  f"{p['poll_tick']['p90_ms']:.1f} ms (median / p90), cpu median {p['poll_tick']['cpu_median_ms']:.1f} "
                  f"ms; /proc facts cpu median {p['process_facts']['cpu_median_ms']:.1f} ms")
        s = r.get("one_shot", {})
        for name in (n for n in s if "@" in n):
            ratio = (f", {s[name]['wall_median_ms'] / s['nvitop_once']['wall_median_ms']:.2f}x nvitop --once"
                     if "nvitop_once" in s else "")
            print(f"{label}: snapshot --json --no-docker at {name.split('@', 1)[1]}: "
                  f"{s[name]['wall_median_ms']:.0f} / {s[name]['cpu_median_ms']:.0f} ms{ratio}")
    print()
    for line in results["verdicts"]:
        print(line)


def main(argv: list[str] | None = None) -> int:
    _ensure_project_python()
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs of each one-shot command (median reported)")
    ap.add_argument("--ticks", type=int, default=30, help="poll ticks timed per configuration")
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append", help="only these configurations")
    ap.add_argument("--no-nvitop", action="store_true", help="do not install or run nvitop")
    ap.add_argument("--baseline", metavar="GIT-REF",
                    help="also time 'snapshot --json --no-docker' and the poll tick of this commit (e.g. main), "
                         "in the same runs")
    ap.add_argument("--pause", type=float, default=1.0,
                    help="seconds between timed poll ticks (default 1: the dashboard's interval)")
    ap.add_argument("--poll-only", action="store_true", help="only the poll tick (no one-shot commands, no nvitop)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the poll tick this many times, alternating with --baseline's (ranges reported)")
    args = ap.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanups
    nvitop = None if args.no_nvitop or args.poll_only else nvitop_executable(install=True)
    results: dict[str, Any] = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}, "
                   f"Python {platform.python_version()}",
        "nvitop_version": _version(VENV / "bin" / "python", "nvitop") if nvitop else None,
        "nvidia_ml_py_version": _version(Path(sys.executable), "nvidia-ml-py"),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "configs": {},
    }
    with tempfile.TemporaryDirectory(prefix="gputui-bench-") as tmp:
        if args.poll_only:  # the poll worker runs on this interpreter over a source tree: nothing to install
            python = Path(sys.executable)
            baseline = (args.baseline, python) if args.baseline else None
            if args.baseline:
                source_tree(Path(tmp), args.baseline)
        else:
            python = installed_gputui(Path(tmp))
            baseline = (args.baseline, installed_gputui(Path(tmp), args.baseline)) if args.baseline else None
        for label in args.config or list(CONFIGS):
            gpus, nprocs = CONFIGS[label]
            print(f"benchmarks: {label} ({gpus} GPUs x {nprocs} processes)", flush=True)
            results["configs"][label] = bench_config(label, gpus, nprocs, args.runs, args.ticks, nvitop, Path(tmp),
                                                     python, baseline, args.pause, args.poll_only, args.rounds)

    verdicts = []
    small = results["configs"].get("8x64")
    if small and "nvitop_once" in small.get("one_shot", {}):
        ratio = small["one_shot"]["snapshot_no_docker"]["wall_median_ms"] / small["one_shot"]["nvitop_once"][
            "wall_median_ms"]
        verdicts.append(f"{'PASS' if ratio <= SNAPSHOT_RATIO_TARGET else 'FAIL'}: snapshot --json at 8x64 takes "
                        f"{ratio:.2f}x nvitop --once's wall time (target <= {SNAPSHOT_RATIO_TARGET}x)")
    for label, target in TICK_TARGETS_MS.items():
        if label in results["configs"]:
            poll = results["configs"][label]["poll"]
            for when, key in (("in a run's first seconds", "poll_tick"), ("with the history full", "poll_tick_full")):
                if poll.get(key):
                    tick = poll[key]["median_ms"]
                    verdicts.append(f"{'PASS' if tick <= target else 'FAIL'}: poll tick at {label} is {tick:.2f} ms "
                                    f"median {when}, {args.pause:g} s between polls (target <= {target:g} ms)")
    results["verdicts"] = verdicts

    print_table(results)
    return save_results(results)


if __name__ == "__main__":
    sys.exit(main())
