"""The light-over-ssh table (issue 17, and issue 29's full churn), from the latest results of the benchmarks.

``bash benchmarks/all.sh`` runs run.py, ui_bench.py and wire_bench.py, then this: one row per
measure with nvitop's figure, gputui's, and the goal beside it. Exit status 0 when every
row meets its goal (a row whose benchmark did not run is reported as missing and fails).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict[str, Any] | None:
    try:
        return json.loads((RESULTS / name).read_text())
    except (OSError, ValueError):
        return None


def rows() -> list[tuple[str, str, str, str, bool | None]]:
    """(measure, nvitop, gputui, goal, met) — met is None when the benchmark has no result."""
    out: list[tuple[str, str, str, str, bool | None]] = []
    wire, ui, one = _load("wire-latest.json"), _load("ui-latest.json"), _load("latest.json")
    for phase, what, goal in (("changing", "bytes/s written to the terminal, load changing every second", 4000),
                              ("static", "bytes/s, unchanging load, after the history graphs have filled", 200)):
        if wire is None:
            out.append((what, "-", "-", f"<= {goal:,}", None))
            continue
        g = wire[phase]["gputui"]
        n = wire[phase].get("nvitop")
        before = wire[phase].get("gputui, Textual driver")
        slow = wire[phase].get("gputui --slow-link")
        text = f"{g['bytes_per_s']:,.0f} (SGR {g['sgr_share']:.0%})"
        if before:
            text += f"; Textual's output {before['bytes_per_s']:,.0f}"
        if slow:
            text += f"; --slow-link {slow['bytes_per_s']:,.0f}"
        out.append((what, f"{n['bytes_per_s']:,.0f}" if n else "-", text, f"<= {goal:,}", g["bytes_per_s"] <= goal))
    r = (ui or {}).get("configs", {}).get("8x64")
    if r and "nvitop" in r["idle_cpu_percent"]:
        g, n = r["idle_cpu_percent"]["gputui"], r["idle_cpu_percent"]["nvitop"]
        out.append(("idle CPU, changing load, in tmux (% of a core)", f"{n:.2f}%",
                    f"{g:.2f}% (ratio {g / n:.2f})", "ratio <= 0.40", g / n <= 0.40))
    else:
        out.append(("idle CPU, changing load, in tmux (% of a core)", "-", "-", "ratio <= 0.40", None))
    s = (one or {}).get("configs", {}).get("8x64", {}).get("one_shot")
    if s and "nvitop_once" in s:
        g, n = s["snapshot_no_docker"]["wall_median_ms"], s["nvitop_once"]["wall_median_ms"]
        out.append(("`snapshot --json` vs `nvitop --once` wall time", f"{n:.0f} ms", f"{g:.0f} ms (ratio {g / n:.2f})",
                    "ratio <= 0.60", g / n <= 0.60))
    else:
        out.append(("`snapshot --json` vs `nvitop --once` wall time", "-", "-", "ratio <= 0.60", None))
    if r:
        k, nk = r["keys_cpu_percent"]["gputui"], r["keys_cpu_percent"].get("nvitop")
        out.append(("CPU while a key arrives every 100 ms", f"{nk:.1f}%" if nk is not None else "-", f"{k:.1f}%",
                    "<= 10%", k <= 10.0))
    else:
        out.append(("CPU while a key arrives every 100 ms", "-", "-", "<= 10%", None))
    churn = _load("churn-latest.json")
    for what, measure, goal, f in (("idle CPU, full churn (issue 29), % of a core", "cpu_percent", 0.40, ".2f"),
                                   ("bytes/s, full churn (issue 29)", "bytes_per_s", 1.0, ",.0f")):
        rounds = (churn or {}).get("idle") or []
        if not rounds or "nvitop" not in rounds[0]:
            out.append((what, "-", "-", f"ratio <= {goal:.2f}", None))
            continue
        ratios = [r["gputui"][measure] / max(r["nvitop"][measure], 1e-9) for r in rounds]
        n = [r["nvitop"][measure] for r in rounds]
        g = [r["gputui"][measure] for r in rounds]
        out.append((what, f"{min(n):{f}}–{max(n):{f}}", f"{min(g):{f}}–{max(g):{f}} "
                    f"(ratio {min(ratios):.2f}–{max(ratios):.2f})", f"ratio <= {goal:.2f}", max(ratios) <= goal))
    return out


def main() -> int:
    table = rows()
    print("\nLight over ssh (issue 17), 8 GPUs x 64 processes, 200x50; nvitop at its default 2 s, gputui at 1 s")
    print("| measure | nvitop | gputui | goal | |\n|---|---|---|---|---|")
    for what, n, g, goal, met in table:
        verdict = "missing" if met is None else "PASS" if met else "FAIL"
        print(f"| {what} | {n} | {g} | {goal} | {verdict} |")
    return 0 if all(met for *_, met in table) else 1


if __name__ == "__main__":
    sys.exit(main())
