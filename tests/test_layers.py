"""The headless layers stay headless: scripts and the CLI's one-shot commands stay light.

Each check runs in a fresh interpreter, so nothing another test imported can hide a regression.
The import-linter contracts in pyproject.toml (run by tests/test_static.py) check the static
imports; these check what importing really loads, lazy imports and plugins included.
"""

import json
import pkgutil
import subprocess
import sys

import pytest

import gputui.actions
import gputui.commands
import gputui.core
import gputui.exporter

pytestmark = pytest.mark.functional  # fresh interpreters

#: Loaded only by the faces (textual) or by the code that talks to Docker, at call time (docker).
HEAVY = ("textual", "docker")


def _modules(pkg) -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))


CORE_MODULES = ["gputui.core", *_modules(gputui.core)]


def _loaded_after(code: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter; which of HEAVY it left in sys.modules."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{n: n in sys.modules for n in {HEAVY!r}}}))\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_probe_sees_a_heavy_import() -> None:
    """The check below can fail: importing docker is seen."""
    assert _loaded_after("import docker") == {"textual": False, "docker": True}


@pytest.mark.parametrize("module", CORE_MODULES)
def test_importing_a_core_module_loads_neither_textual_nor_docker(module: str) -> None:
    assert _loaded_after(f"import {module}") == {"textual": False, "docker": False}


def test_every_core_action_command_and_exporter_module_at_once_loads_neither() -> None:
    names = CORE_MODULES + _modules(gputui.actions) + _modules(gputui.commands) + ["gputui.context", "gputui.cli"]
    names += ["gputui.exporter", *_modules(gputui.exporter)]
    assert _loaded_after("\n".join(f"import {n}" for n in names)) == {"textual": False, "docker": False}


def test_one_shot_demo_json_does_not_load_textual() -> None:
    code = (
        "import io, contextlib\n"
        "from gputui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['snapshot', '--json', '--demo']) == 0\n"
    )
    assert _loaded_after(code)["textual"] is False
