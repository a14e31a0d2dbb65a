#!/usr/bin/env bash
# Every benchmark in one command: one-shot commands and poll ticks (run.py), the live
# dashboard's CPU (ui_bench.py), bytes on the wire (wire_bench.py), both under full churn
# side by side with nvitop (churn_bench.py), the Prometheus exporter
# (exporter_bench.py), the fleet from a backfilled Prometheus (fleet_bench.py), the Docker
# authorization plugin's decision time (guard_bench.py), then the
# issue-17 table (summary.py: every row with its goal).
# Exit status 0 only when every target is met.
set -uo pipefail
cd "$(dirname "$0")/.."
py="${GPUTUI_TEST_VENV:-.venv-test}/bin/python"  # the environment scripts/install-dev.sh makes
[ -x "$py" ] || py=.venv/bin/python
[ -x "$py" ] || { echo "benchmarks: run 'bash scripts/install-dev.sh' first" >&2; exit 2; }
status=0
"$py" benchmarks/run.py "$@" || status=1
"$py" benchmarks/ui_bench.py || status=1
"$py" benchmarks/wire_bench.py || status=1
"$py" benchmarks/churn_bench.py || status=1
"$py" benchmarks/exporter_bench.py || status=1
"$py" benchmarks/fleet_bench.py || status=1
"$py" benchmarks/guard_bench.py || status=1
"$py" benchmarks/summary.py || status=1
exit $status
