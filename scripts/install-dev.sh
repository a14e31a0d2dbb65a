#!/usr/bin/env bash
# Creates the test environment: a virtualenv (default .venv-test, or $GPUTUI_TEST_VENV) with gputui
# installed in editable mode plus the test dependencies. It is kept apart from the .venv that the
# README's first command creates, so running the tests never changes the environment the demo runs in.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GPUTUI_TEST_VENV:-.venv-test}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# setuptools explains editable installs with a warning on every install: nothing to act on here.
PYTHONWARNINGS="ignore::Warning" "$venv/bin/pip" install -q -e '.[test]'
