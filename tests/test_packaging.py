"""Installing gputui never writes into its source tree (issue 28, point 9): an unprivileged user's
``pip install`` of a read-only checkout must work, so the build backend named in pyproject.toml is run
here on a copy of the tracked files and the copy is checked to be exactly as it was."""

from __future__ import annotations

import importlib
import shutil
import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent


def _tracked() -> list[str]:
    # git's index, read without a subprocess: every path under gputui/ plus the files the build reads
    files = [str(p.relative_to(ROOT)) for p in (ROOT / "gputui").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return [*files, "pyproject.toml", "README.md"]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_building_the_wheel_writes_nothing_into_the_source_tree(tmp_path, monkeypatch):
    src = tmp_path / "src"
    for rel in _tracked():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    before = _listing(src)
    backend_name = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["build-backend"]
    out = tmp_path / "dist"
    out.mkdir()
    monkeypatch.chdir(src)
    backend = importlib.import_module(backend_name)
    wheel = backend.build_wheel(str(out))
    assert _listing(src) == before  # no gputui.egg-info, no build/: a read-only checkout installs
    names = zipfile.ZipFile(out / wheel).namelist()
    assert "gputui/ui/gputui.tcss" in names and "gputui/cli.py" in names  # the stylesheet travels with it
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gputui=gputui.cli:main" in zipfile.ZipFile(out / wheel).read(entry).decode().replace(" ", "")


