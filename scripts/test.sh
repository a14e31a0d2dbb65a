#!/usr/bin/env bash
# The README's test command. Builds the fake NVML driver, starts what the tests need, runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/install-dev.sh
exec .venv/bin/python -m pytest -q "$@"
