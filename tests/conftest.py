"""Shared test configuration. Fixtures live in tests/fixtures/ by subject."""

import os

import pytest

pytest_plugins = [
    "tests.fixtures.env",
    "tests.fixtures.fakenvml",
    "tests.fixtures.dockerd",
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
