#!/usr/bin/env bash
# The README's test command. On a fresh machine it installs what the tests drive for real
# (gcc for the fake NVML driver, tmux, dockerd and busybox, when running as root with apt),
# creates .venv with gputui and the test dependencies, then runs pytest.
# The integration tests start and stop their own dockerd and tmux servers.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v tmux >/dev/null || need+=(tmux)
command -v dockerd >/dev/null || need+=(docker.io)
command -v dpkg >/dev/null && ! dpkg -s busybox-static >/dev/null 2>&1 && need+=(busybox-static)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import gputui, pytest, pytest_asyncio, mypy, ruff, importlinter" 2>/dev/null; then
  bash scripts/install-dev.sh
fi
exec .venv/bin/python -m pytest -q "$@"
