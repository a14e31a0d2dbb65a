"""Shared test configuration. Fixtures live in tests/fixtures/ by subject."""

import inspect
import os
import subprocess

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
#: Fixtures that start real parts: the fake driver, dockerd, prometheus, exporters in subprocesses, the app's
#: SVG snapshots. A test that uses one (directly or through another fixture) is functional.
_REAL_PART_FIXTURES = frozenset({
    "fake_nvml", "fake_nvml_factory", "dockerd", "dockerd_factory", "docker_cleanup", "prometheus_factory",
    "exporters", "snap_compare",
})


def _functional(item: pytest.Item) -> bool:
    """What the test uses says what it is: a real-part marker or fixture, or an ``async`` test (the Textual
    app under Pilot). A test that starts a subprocess anyway fails as a unit test (see
    :func:`_unit_tests_stay_in_process`), so the class cannot drift."""
    if any(item.get_closest_marker(m) for m in _REAL_PART_MARKERS):
        return True
    if _REAL_PART_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return inspect.iscoroutinefunction(getattr(item, "obj", None))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is ``functional`` (real parts, the app, subprocesses) or ``unit`` (in-process
    logic), so ``pytest -m unit`` is the seconds-long loop while editing and the full run is CI's."""
    for item in items:
        item.add_marker(pytest.mark.functional if _functional(item) else pytest.mark.unit)


class _NoSubprocess(subprocess.Popen):
    def __init__(self, args, *rest, **kw) -> None:  # type: ignore[no-untyped-def]
        raise AssertionError(f"a unit test started a subprocess ({args!r}): mark it functional "
                             "(pytest.mark.functional), or keep it in-process")


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pytest -m unit`` is the in-process loop: a unit test may not start a process."""
    if request.node.get_closest_marker("unit") is not None:
        monkeypatch.setattr(subprocess, "Popen", _NoSubprocess)
