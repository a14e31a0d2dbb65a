"""``gputui record`` / ``who`` / ``usage``: ``.venv/bin/python benchmarks/history_bench.py``.

1. Recorder CPU: a real ``gputui record --interval 10`` over the fake NVIDIA driver with 8 GPUs ×
   64 real ``sleep`` processes (tests/fakenvml, the same machine as benchmarks/run.py's 8x64), with
   churn (every 30 s a quarter of the processes is replaced by new ones), measured from /proc over
   ``--seconds`` (default 180) after a warm-up. Target ≤ 0.5 % of one core.
2. A 30-day database of that machine with realistic churn — processes living minutes to days
   (a third 2-30 minutes, a third 1-12 hours, a third 1-5 days, 64 at a time) and 8 GPUs' per-minute
   rows — written through the recorder's own row writers. Target ≤ 100 MB.
3. On it, wall time of the whole commands ``gputui usage --since 30d`` (target ≤ 1 s) and
   ``gputui who --gpu 0 --at <15 days ago>`` (target ≤ 0.2 s), median of ``--runs``.

Results: benchmarks/results/history-latest.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
GPUS, PROCS, INTERVAL, DAYS = 8, 64, 10.0, 30
TARGETS = {"recorder_cpu_percent": 0.5, "db_mb": 100.0, "usage_30d_s": 1.0, "who_at_s": 0.2}


def _load_run_module() -> Any:
    spec = importlib.util.spec_from_file_location("gputui_bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def recorder_cpu(run_mod: Any, seconds: float, warmup: float) -> dict[str, Any]:
    from tests.fakenvml.scenario import FakeNvml

    with tempfile.TemporaryDirectory(prefix="gputui-history-bench-") as tmp, \
            run_mod.Sleepers(PROCS) as sleepers, run_mod.Sleepers(PROCS) as spare:
        fake = FakeNvml(Path(tmp) / "fakenvml")
        pids = list(sleepers.pids)
        fake.write(run_mod.machine_scenario(GPUS, pids))
        env = fake.env()
        env.setdefault("PYTHONPATH", str(REPO))
        env["XDG_RUNTIME_DIR"] = str(Path(tmp) / "run")
        db = Path(tmp) / "history.db"
        proc = subprocess.Popen([sys.executable, "-m", "gputui", "record", "--no-docker", "--db", str(db),
                                 "--interval", str(INTERVAL)], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=run_mod._die_with_parent)  # noqa: PLW1509
        try:
            time.sleep(warmup)
            before = run_mod.cpu_ticks(proc.pid)
            t0 = time.monotonic()
            spares = list(spare.pids)
            rng = random.Random(1)
            while time.monotonic() - t0 < seconds:
                time.sleep(min(30.0, max(0.0, seconds - (time.monotonic() - t0))))
                for _ in range(PROCS // 4):  # churn: a quarter of the holders replaced
                    i = rng.randrange(len(pids))
                    j = rng.randrange(len(spares))
                    pids[i], spares[j] = spares[j], pids[i]
                fake.write(run_mod.machine_scenario(GPUS, pids))
            elapsed = time.monotonic() - t0
            after = run_mod.cpu_ticks(proc.pid)
            rss, hwm = run_mod.memory(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        rows = _count(db, "holds")
    return {"recorder_cpu_percent": 100.0 * (after - before) / run_mod.CLK_TCK / elapsed, "seconds": elapsed,
            "rss_mib": rss, "rss_peak_mib": hwm, "holds_written": rows}


def _count(db: Path, table: str) -> int:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _lifetime(rng: random.Random) -> float:
    kind = rng.randrange(3)
    if kind == 0:
        return rng.uniform(120, 1800)
    if kind == 1:
        return rng.uniform(3600, 12 * 3600)
    return rng.uniform(86400, 5 * 86400)


def synthetic_db(path: Path, now: float) -> dict[str, Any]:
    """30 days of the 8x64 machine, written with the recorder's own row writers."""
    from gputui.core import recorder as rec

    rng = random.Random(26)
    r = rec.Recorder(str(path), INTERVAL, retention_days=90)
    assert r.open(), r.problem
    conn = r.conn
    assert conn is not None
    start = now - DAYS * 86400
    users = [f"user{i:02d}" for i in range(24)]
    images = [f"registry.example.com/team{i}/trainer:{v}" for i in range(8) for v in ("1.0", "2.3")]
    holds = 0
    conn.execute("BEGIN")
    # 64 slots, each a sequence of processes back to back (a short pause between them)
    pid = 10_000
    for slot in range(PROCS):
        t = start - rng.uniform(0, 86400)
        while t < now:
            life = _lifetime(rng)
            first, last = max(t, start), min(t + life, now)
            if last > first:
                pid += 1
                in_container = rng.random() < 0.6
                image = rng.choice(images)
                fields = {
                    "host": "gpu-node-01", "gpu": slot % GPUS, "gpu_uuid": f"GPU-{slot % GPUS:08d}", "pid": pid,
                    "start_time": t, "user": rng.choice(users), "uid": 1000 + slot,
                    "container_id": f"{pid:064x}" if in_container else None,
                    "container_name": f"job-{pid}" if in_container else None,
                    "image": image if in_container else None,
                    "compose_project": f"proj{slot % 5}" if in_container else None,
                    "compose_service": "trainer" if in_container else None,
                    "runtime": "docker" if in_container else None, "job": str(pid * 3) if rng.random() < 0.3 else None,
                    "exe": "python3",
                }
                held = last - first
                mem = rng.choice([2, 4, 8, 16, 24, 40]) * 1024**3
                h = rec._Hold(None, fields, first, last, mem_peak=mem, mem_byte_s=mem * 0.9 * held,
                              sm_pct_s=held * rng.uniform(0, 90), sm_s=held, busy_s=held * rng.uniform(0, 0.9),
                              idle_s=held * rng.uniform(0, 0.3), open=last >= now)
                r._write_hold(conn, h)
                holds += 1
            t += life + rng.uniform(10, 600)
    minutes = 0
    for g in range(GPUS):
        for minute in range(int(start // 60), int(now // 60)):
            u = rng.uniform(0, 100)
            m = rec._Minute(minute, 6, {"util": u * 6, "util#": 6, "mem": 40e9 * 6, "mem#": 6, "temp": 60 * 6,
                                        "temp#": 6, "power": 300.5 * 6, "power#": 6},
                            {"util": max(0, u - 10), "mem": 39e9, "temp": 58, "power": 290.2},
                            {"util": min(100, u + 10), "mem": 41e9, "temp": 62, "power": 310.7})
            r._write_minute(conn, g, m)
            minutes += 1
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('heartbeat', ?), ('last_time', ?)", (repr(now), repr(now)))
    conn.execute("COMMIT")
    r.close()
    conn2 = __import__("sqlite3").connect(path)
    conn2.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn2.close()
    size = sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name))
    return {"holds": holds, "gpu_minutes": minutes, "db_mb": size / 1e6}


def timed(cmd: list[str], runs: int) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    walls = []
    out = ""
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        if res.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed: {res.stderr}")
        out = res.stdout
    return statistics.median(walls), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=180.0, help="recorder CPU measuring time")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--skip-cpu", action="store_true", help="only the 30-day database and the queries")
    args = parser.parse_args(argv)
    run_mod = _load_run_module()
    results: dict[str, Any] = {}
    if not args.skip_cpu:
        results["recorder"] = recorder_cpu(run_mod, args.seconds, args.warmup)
        print(f"recorder: {results['recorder']['recorder_cpu_percent']:.3f} % of a core over "
              f"{results['recorder']['seconds']:.0f} s, RSS {results['recorder']['rss_mib']:.1f} MiB", flush=True)
    with tempfile.TemporaryDirectory(prefix="gputui-history-db-") as tmp:
        db = Path(tmp) / "history.db"
        now = time.time()
        t0 = time.perf_counter()
        results["db"] = synthetic_db(db, now)
        results["db"]["build_s"] = time.perf_counter() - t0
        print(f"30-day database: {results['db']['db_mb']:.1f} MB ({results['db']['holds']} holds, "
              f"{results['db']['gpu_minutes']} GPU-minutes)", flush=True)
        gputui = [sys.executable, "-m", "gputui"]
        usage_s, out = timed([*gputui, "usage", "--db", str(db), "--since", "30d"], args.runs)
        results["usage_30d_s"] = usage_s
        results["usage_rows"] = out.count("\n") - 1
        at = f"{now - 15 * 86400:.0f}"
        who_s, out = timed([*gputui, "who", "--db", str(db), "--gpu", "0", "--at", at], args.runs)
        results["who_at_s"] = who_s
        results["who_rows"] = max(0, out.count("\n") - 1)
    print(f"usage --since 30d: {usage_s * 1000:.0f} ms ({results['usage_rows']} rows); "
          f"who --gpu 0 --at: {who_s * 1000:.0f} ms ({results['who_rows']} holders)")
    met = {
        "recorder_cpu_percent": results.get("recorder", {}).get("recorder_cpu_percent", 0.0)
        <= TARGETS["recorder_cpu_percent"],
        "db_mb": results["db"]["db_mb"] <= TARGETS["db_mb"],
        "usage_30d_s": usage_s <= TARGETS["usage_30d_s"],
        "who_at_s": who_s <= TARGETS["who_at_s"],
    }
    results["targets"] = TARGETS
    results["met"] = met
    out_dir = BENCH / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "history-latest.json").write_text(json.dumps(results, indent=2) + "\n")
    for name, ok in met.items():
        print(f"{'ok  ' if ok else 'MISS'} {name} (target {TARGETS[name]})")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
