#!/usr/bin/env bash
# Every benchmark in one command: one-shot commands and poll ticks (run.py), then the live
# dashboard (ui_bench.py), then the Prometheus exporter (exporter_bench.py). Exit status 0 only
# when every target is met.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || { echo "benchmarks: run 'bash scripts/install-dev.sh' first" >&2; exit 2; }
status=0
"$py" benchmarks/run.py "$@" || status=1
"$py" benchmarks/ui_bench.py || status=1
"$py" benchmarks/exporter_bench.py || status=1
exit $status
