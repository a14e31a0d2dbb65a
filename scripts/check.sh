#!/usr/bin/env bash
# The static checks CI runs (through tests/test_static.py): ruff, mypy and the import-linter
# contracts in pyproject.toml (layers core < actions < context < commands | ui < cli, no textual
# in the headless layers, no import cycles). Exit non-zero on the first failing check.
# Usage: bash scripts/check.sh [--fix]   (--fix lets ruff rewrite what it can)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${GPUTUI_TEST_VENV:-.venv-test}/bin/python"  # the test venv has the pinned tools
[ -x "$py" ] || py=python3
fix=()
[ "${1:-}" = "--fix" ] && fix=(--fix)
echo "== ruff"
"$py" -m ruff check "${fix[@]}" gputui tests benchmarks scripts
echo "== mypy"
"$py" -m mypy
echo "== import-linter"
"$py" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'
