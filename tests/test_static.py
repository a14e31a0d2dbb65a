"""The static checks as tests, so CI (``bash .ci/run`` → ``scripts/test.sh``) runs them:
the import-linter contracts in pyproject.toml, ruff and mypy with the pinned versions.

``scripts/check.sh`` runs the same three by hand. Each failure message is the tool's report.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

pytestmark = pytest.mark.functional  # ruff, mypy and import-linter in subprocesses

ROOT = Path(__file__).resolve().parent.parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    require(importlib.util.find_spec(tool) is not None,
            f"{tool} is not installed (pip install -e '.[test]')")
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_import_contracts_hold() -> None:
    """core < actions < context < commands | ui < cli; no textual below the faces; no cycles."""
    require(importlib.util.find_spec("importlinter") is not None,
            "import-linter is not installed (pip install -e '.[test]')")
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_ruff_is_clean() -> None:
    proc = _run("ruff", "check", "--no-cache", "gputui", "tests", "benchmarks", "scripts")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


@pytest.mark.functional
def test_mypy_is_clean() -> None:
    """Strict on gputui.core and gputui.actions, the default rules elsewhere (pyproject.toml)."""
    proc = _run("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
