"""What --help says matches what the commands do (issue 28, point 7)."""

from __future__ import annotations

import re

from gputui.cli import build_parser


def _help(command: str) -> str:
    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[attr-defined]
    return " ".join(sub.format_help().split())


def test_doctor_help_counts_the_checks_it_runs():
    from gputui.core.doctor.checks import ALL_CHECKS

    found = re.search(r"lists the same (\d+) checks", _help("doctor"))
    assert found and int(found.group(1)) == len(ALL_CHECKS)


def test_pick_help_lists_each_format_once():
    choices = re.search(r"--format \{([^}]*)\}", _help("pick"))
    assert choices is not None
    names = choices.group(1).split(",")
    assert len(names) == len(set(names)) and set(names) == {"index", "uuid", "env", "docker", "host-index", "ssh"}


def test_fleet_help_offers_only_what_the_fleet_uses():
    text = _help("fleet")
    for option in ("--demo", "--gpu", "--read-only", "--no-docker"):
        assert option not in text
    for option in ("--prometheus", "--config", "--json", "--interval", "--debug"):
        assert option in text
