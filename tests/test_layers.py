"""The headless core never imports textual: scripts and the CLI's one-shot commands stay light."""

import subprocess
import sys

import pytest

CORE_MODULES = [
    "gputui.core.model",
    "gputui.core.poller",
    "gputui.core.machine",
    "gputui.core.demo",
    "gputui.core.render",
    "gputui.core.config",
    "gputui.actions.audit",
    "gputui.cli",
]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_does_not_import_textual(module):
    code = f"import sys, {module}; print('textual' in sys.modules, 'docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False", f"{module} pulled in textual"


def test_every_core_and_action_module_is_headless():
    """Import every module under gputui.core, gputui.actions and gputui.commands in one fresh interpreter."""
    code = (
        "import pkgutil, importlib, sys, gputui.core, gputui.actions, gputui.commands\n"
        "for pkg in (gputui.core, gputui.actions, gputui.commands):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_one_shot_demo_json_does_not_load_textual():
    code = (
        "import sys, io, contextlib\n"
        "from gputui.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['snapshot', '--json', '--demo'])\n"
        "print(rc, 'textual' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["0", "False"]
