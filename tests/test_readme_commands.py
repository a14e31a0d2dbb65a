"""The README's test commands run as written (issue 28, point 4): the fast loop's interpreter is the
virtualenv the README's scripts create with the test tools, not the demo's .venv (which has no pytest)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_pytest_command_in_the_readme_uses_the_test_virtualenv():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(\S*python\S*) -m pytest\b.*$", readme, re.M)
    assert commands, "the README shows how to run the tests"
    install = (ROOT / "scripts" / "install-dev.sh").read_text()
    made = re.search(r'venv="\$\{GPUTUI_TEST_VENV:-([^}]+)\}"', install)
    assert made is not None
    for python in commands:
        assert python == f"{made.group(1)}/bin/python", python
    assert "bash scripts/install-dev.sh" in readme  # how that virtualenv comes to exist
