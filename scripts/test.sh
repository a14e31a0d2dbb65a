#!/usr/bin/env bash
# The README's test command. On a fresh machine it installs what the tests drive for real
# (gcc for the fake NVML driver, tmux, dockerd, busybox, prometheus with promtool and openssh-server, when
# running as root with apt), creates the test environment .venv-test (never the README's .venv: the demo's
# environment stays as the user made it) with gputui and the test dependencies, then runs pytest.
# The integration tests start and stop their own dockerd and tmux servers.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v tmux >/dev/null || need+=(tmux)
command -v dockerd >/dev/null || need+=(docker.io)
for b in slurmctld slurmd sbatch munged; do command -v $b >/dev/null || { need+=(slurmctld slurmd slurm-client munge); break; }; done
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
command -v dpkg >/dev/null && ! dpkg -s busybox-static >/dev/null 2>&1 && need+=(busybox-static)
command -v podman >/dev/null || need+=(podman)
command -v containerd >/dev/null && command -v ctr >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
# sshd and the ssh client: the fleet's emitted ssh commands are run through a real sshd on loopback
{ command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; } && command -v ssh >/dev/null || need+=(openssh-server openssh-client)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages such as prometheus ship a service; the tests start their own on loopback, so keep
  # apt from starting the packaged one (policy-rc.d exit 101 = "not allowed"), unless a policy exists.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ -z "$policy" ] || rm -f "$policy"
fi
venv="${GPUTUI_TEST_VENV:-.venv-test}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import gputui, pytest, pytest_asyncio, mypy, ruff, importlinter, flit_core" 2>/dev/null; then
  GPUTUI_TEST_VENV="$venv" bash scripts/install-dev.sh
fi
exec "$venv/bin/python" -m pytest -q "$@"
