"""The README's test commands run as written (issue 28, point 4): the fast loop's interpreter is the
virtualenv the README's scripts create with the test tools, not the demo's .venv (which has no pytest)."""

from __future__ import annotations

import re
from pathlib import Path

from gputui.cli import build_parser

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


README = ROOT / "README.md"


def _commands() -> set[str]:
    text = README.read_text()
    found = {m.group(1) for m in re.finditer(r"`(gputui(?: [^`]*)?)`", text)}
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            found.update(m.group(0).strip() for m in re.finditer(r"gputui [^#|)\"]*", line))
    return found


def test_every_option_the_readme_shows_exists():
    subs = next(a for a in build_parser([])._actions if a.dest == "command").choices  # type: ignore[attr-defined]
    wrong = []
    commands = _commands()
    assert len(commands) > 40
    for command in sorted(commands):
        words = command.split()[1:]
        sub = next((w for w in words if w in subs), None)
        parser = build_parser([sub]) if sub else build_parser([])
        if sub:
            parser = next(a for a in parser._actions if a.dest == "command").choices[sub]  # type: ignore[attr-defined]
        known = {o for a in parser._actions for o in a.option_strings}
        wrong += [(command, option) for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command)
                  if option not in known]
    assert wrong == []
