"""Shared test configuration. Fixtures live in tests/fixtures/ by subject."""

import os

import pytest

pytest_plugins = [
    "tests.fixtures.env",
    "tests.fixtures.fakenvml",
    "tests.fixtures.dockerd",
    "tests.fixtures.prometheus",
    "tests.fixtures.slurm",
    "tests.fixtures.podman",
    "tests.fixtures.containerd",
]

#: In CI the integration tests must run: a missing compiler, dockerd or tmux fails instead of skipping.
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(condition: bool, why: str) -> None:
    """Skip locally when a test's real part is missing; fail in CI."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {why}", pytrace=False)
    pytest.skip(why)


#: Markers of tests that drive real parts (the fake driver, dockerd, tmux).
_REAL_PART_MARKERS = ("integration", "docker", "tmux", "functional")
#: Files whose tests run the Textual app (Pilot, SVG snapshots) or fresh interpreters: seconds each.
_FUNCTIONAL_FILES = frozenset({
    "test_alerts_panel.py",
    "test_cli.py",
    "test_containers_ui.py",
    "test_imbalance_banner.py",
    "test_kill_ui.py",
    "test_layers.py",
    "test_migrate_demo.py",
    "test_migrate_ui.py",
    "test_snapshots.py",
    "test_ui_app.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is ``functional`` (real parts, the app, subprocesses) or ``unit`` (in-process
    logic), so ``pytest -m unit`` is the seconds-long loop while editing and the full run is CI's."""
    for item in items:
        if item.path.name in _FUNCTIONAL_FILES or any(item.get_closest_marker(m) for m in _REAL_PART_MARKERS):
            item.add_marker(pytest.mark.functional)
        else:
            item.add_marker(pytest.mark.unit)
