"""What carrying a container's own files costs a migration: ``gputui migrate`` of a container with an
empty writable layer against one with ``--size`` MiB written outside its volumes (default 1 GiB).

    sudo .venv-test/bin/python benchmarks/migrate_layer_bench.py [--size 1024] [--runs 2]

It starts its own private dockerd (``tests/fixtures/dockerd.py``: root, dockerd and a static busybox),
migrates each container ``--runs`` times in process through :class:`DockerMigrationEngine` (the CLI's
engine) with a 1 s verification, and prints the median of the whole migration and of the commit alone,
and what the layer adds. Results go to ``benchmarks/results/migrate-layer-latest.json``. The file is
written with ``dd`` from ``/dev/zero``: Docker's commit does not compress, so the bytes cost the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gputui.actions.migrate import DockerMigrationEngine  # noqa: E402
from gputui.actions.migrate.model import Progress  # noqa: E402
from tests.fixtures.dockerd import Dockerd  # noqa: E402
from tests.test_migrate_docker import CMD, host_snapshot  # noqa: E402


def migrate_once(d: Dockerd, name: str, target: str) -> tuple[float, float | None]:
    """(seconds for the whole migration, seconds of the commit or None)."""
    commit: list[float] = []

    def progress(p: Progress) -> None:
        if p.state == "info" and p.message.startswith("committed "):
            commit.append(float(p.message.split(" in ", 1)[1].split(" s", 1)[0]))

    engine = DockerMigrationEngine(d.client, poll_interval=0.1)
    start = time.monotonic()
    plan = engine.plan(name, target, host_snapshot())
    result = engine.execute(plan, progress=progress, timeout=1.0)
    took = time.monotonic() - start
    if not result.ok:
        raise SystemExit(f"migration failed: {result.message}")
    return took, commit[0] if commit else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024, help="MiB written into the container's layer (1024)")
    ap.add_argument("--runs", type=int, default=2, help="migrations of each container (2)")
    args = ap.parse_args()
    d = Dockerd()
    d.start()
    out: dict[str, object] = {"size_mib": args.size, "runs": args.runs}
    try:
        d.run("bench-empty", gpus="device=0", command=CMD)
        d.run("bench-layer", gpus="device=0", command=CMD)
        code, log = d.client.containers.get("bench-layer").exec_run(
            ["sh", "-c", f"mkdir /ckpt && dd if=/dev/zero of=/ckpt/big bs=1M count={args.size} 2>&1"])
        if code != 0:
            raise SystemExit(log.decode())
        empty, layer, commits = [], [], []
        for run in range(args.runs):
            target = str(1 + run % 3)
            empty.append(migrate_once(d, "bench-empty", target)[0])
            if run:  # after its first move the copy's own layer is empty: write the file again
                d.client.containers.get("bench-layer").exec_run(
                    ["sh", "-c", f"rm -f /ckpt/big; dd if=/dev/zero of=/ckpt/big bs=1M count={args.size}"])
            took, commit = migrate_once(d, "bench-layer", target)
            layer.append(took)
            commits.append(commit or 0.0)
        out.update(empty_s=round(statistics.median(empty), 2), layer_s=round(statistics.median(layer), 2),
                   commit_s=round(statistics.median(commits), 2),
                   added_s=round(statistics.median(layer) - statistics.median(empty), 2),
                   storage_driver=d.client.info().get("Driver"))
    finally:
        d.remove_containers()
        d.close()
    print(f"migrate, empty layer:        {out['empty_s']} s (median of {args.runs})")
    print(f"migrate, {args.size} MiB layer:    {out['layer_s']} s, of which the commit {out['commit_s']} s")
    print(f"a {args.size} MiB layer adds:     {out['added_s']} s ({out['storage_driver']})")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "migrate-layer-latest.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
