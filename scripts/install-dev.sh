#!/usr/bin/env bash
# Creates .venv with gputui installed in editable mode plus the test dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
