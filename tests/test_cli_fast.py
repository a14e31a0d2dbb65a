"""The one-shot fast path of ``gputui.cli.main`` (issue 17): ``snapshot``/``--once`` command lines read
without argparse must mean exactly what argparse makes of them, and everything else must still reach
argparse, with its messages and exit statuses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputui import cli
from tests.fakenvml.scenario import FakeNvml, MiB, gpu, process, scenario

#: Command lines the fast path reads itself: its namespace must be argparse's, attribute for attribute.
FAST = [
    [],
    ["--once"],
    ["snapshot"],
    ["snapshot", "--json"],
    ["snapshot", "--json", "--no-docker"],
    ["--no-docker", "snapshot", "--json"],
    ["--once", "--no-docker", "--gpu", "0,1", "--config", "/nonexistent.toml"],
    ["snapshot", "--json", "--demo", "--gpu", "2", "--gpu", "5"],
    ["--gpu", "0", "snapshot", "--gpu", "1"],  # the subcommand's --gpu replaces the top level's
    ["--gpu", "0", "snapshot", "--json"],  # ... and leaves it alone when not given
    ["--window", "5", "snapshot", "--window", "3"],
    ["--imbalance-window", "5.5", "snapshot", "--observe", "0"],
    ["--interval", "2", "--theme", "nord", "--slow-link", "--bell", "--read-only", "--once"],
    ["--temp-warning", "70", "--temp-critical", "85", "snapshot", "--read-only", "--config", ""],
    ["--theme", "snapshot"],  # a value, not the subcommand
    ["snapshot", "--observe", "1e1", "--observe", "2"],
    ["--demo", "--demo", "snapshot", "--demo"],
]

#: Command lines left to argparse: errors, help, other forms and other subcommands.
GENERAL = [
    ["--help"], ["-h"], ["snapshot", "--help"], ["--version"],
    ["snapshot", "--jso"],  # an abbreviation
    ["snapshot", "--observe=2"], ["--gpu=0", "--once"],
    ["snapshot", "--observe", "-1"], ["snapshot", "--observe", "soon"], ["--interval", "0.01"],
    ["--interval", "fast"], ["--temp-warning", "hot"], ["--gpu"], ["snapshot", "--config"],
    ["snapshot", "--once"], ["--json", "snapshot"], ["snapshot", "snapshot"], ["snapshot", "extra"],
    ["pick"], ["doctor"], ["nonsense"], ["--", "snapshot"], ["--theme", "-x"],
]


@pytest.mark.parametrize("argv", FAST, ids=" ".join)
def test_fast_path_reads_what_argparse_reads(argv: list[str]) -> None:
    fast = cli._fast_args(argv)
    assert fast is not None, f"{argv} should take the fast path"
    assert vars(fast) == vars(cli.build_parser(argv).parse_args(argv))


@pytest.mark.parametrize("argv", GENERAL, ids=" ".join)
def test_everything_else_goes_to_argparse(argv: list[str]) -> None:
    assert cli._fast_args(argv) is None


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputui", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.functional
@pytest.mark.parametrize("fast, general", [
    # same meaning, the second spelled so that argparse reads it (an abbreviation, --opt=value)
    (["snapshot", "--observe", "-1"], ["snapshot", "--observ", "-1"]),
    (["snapshot", "--gpu", "9", "--demo"], ["snapshot", "--gpu=9", "--demo"]),
    (["--once", "--demo", "--gpu", "abc"], ["--once", "--demo", "--gpu=abc"]),
    (["--demo", "--config", "/nonexistent/gputui.toml", "snapshot"],
     ["--demo", "--config=/nonexistent/gputui.toml", "snapshot"]),
    (["--interval", "0.01", "--once", "--demo"], ["--interval=0.01", "--once", "--demo"]),
])
def test_errors_read_the_same_either_way(fast: list[str], general: list[str]) -> None:
    a, b = _run(*fast), _run(*general)
    assert a.returncode == b.returncode != 0
    assert a.stderr == b.stderr and a.stderr.count("\n") == 1, a.stderr
    assert a.stdout == b.stdout == ""


@pytest.mark.integration
def test_snapshot_json_is_the_same_document_either_way(fake_nvml: FakeNvml) -> None:
    sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(4)]
    try:
        fake_nvml.write(scenario([
            gpu(0, utilization_gpu=97, processes=[process(p.pid, used_memory=512 * MiB, sm=90) for p in sleepers[:3]]),
            gpu(1, utilization_gpu=3, processes=[process(sleepers[3].pid, used_memory=256 * MiB, sm=None)]),
        ]))
        for fast, general in ((["snapshot", "--json", "--no-docker"], ["snapshot", "--jso", "--no-docker"]),
                              (["--once", "--no-docker"], ["--onc", "--no-docker"]),
                              (["snapshot", "--json", "--no-docker", "--gpu", "1"],
                               ["snapshot", "--json", "--no-docker", "--gpu=1"])):
            a, b = fake_nvml.run_gputui(*fast), fake_nvml.run_gputui(*general)
            assert a.returncode == b.returncode == 0, a.stderr + b.stderr
            assert a.stderr == b.stderr
            # the same output byte for byte, but for the clock: the two runs are moments apart
            assert _unclocked(a.stdout) == _unclocked(b.stdout)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def _unclocked(text: str) -> str:
    """Output with the moment it was taken masked: JSON's ``time``/``since``, the table's clock and ages."""
    text = re.sub(r'"(time|since)": "[^"]*"', r'"\1": "T"', text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "T", text)
    return re.sub(r"\b\d+[smhd]\b", "AGE", text)


@pytest.mark.functional
def test_a_one_shot_imports_neither_argparse_nor_the_journals(tmp_path: Path) -> None:
    code = ("import sys; from gputui.cli import main; rc = main(['snapshot', '--json', '--demo']); "
            "print(sorted(m for m in ('argparse', 'gputui.actions.journal', 'gputui.ui') if m in sys.modules), "
            "file=sys.stderr); raise SystemExit(rc)")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "GPUTUI_JOURNAL_DIR": str(tmp_path / "none")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "[]"


#: What a one-shot must not import: each is milliseconds of every `snapshot --json` a cron job runs
#: (the dataclass machinery and inspect/ast behind it, pathlib and urllib.parse behind that) or the
#: weight of another face (argparse, the UI, Textual, the Docker SDK, the journals).
ONE_SHOT_NEVER = ("argparse", "dataclasses", "inspect", "ast", "pathlib", "urllib.parse", "typing_extensions",
                  "textual", "docker", "gputui.ui", "gputui.actions.journal")


@pytest.mark.integration
def test_a_one_shot_on_a_driver_imports_only_what_its_answer_needs(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        fake_nvml.write(scenario([gpu(0, processes=[process(sleeper.pid, used_memory=512 * MiB, sm=50)]), gpu(1)]))
        # measured against what the interpreter had loaded before gputui (a test venv's site may load pathlib)
        code = ("import sys; before = set(sys.modules); from gputui.cli import main; "
                "rc = main(['snapshot', '--json', '--no-docker']); "
                f"print(sorted(m for m in {ONE_SHOT_NEVER!r} if m in sys.modules and m not in before), "
                "file=sys.stderr); raise SystemExit(rc)")
        env = {**fake_nvml.env(), "XDG_STATE_HOME": str(tmp_path), "GPUTUI_JOURNAL_DIR": str(tmp_path / "none"),
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        assert f'"pid": {sleeper.pid}' in res.stdout  # the answer is there ...
        assert res.stderr.strip().splitlines()[-1] == "[]"  # ... and nothing it did not need was imported
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_journal_check_looks_where_the_journals_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_journal_files_exist`` lists the same directories as ``journal_dirs``: a journal in any of them
    is seen, and then reported by the one-shot."""
    from gputui.actions.journal import journal_dirs

    monkeypatch.setenv("GPUTUI_JOURNAL_DIR", str(tmp_path / "system"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "system").mkdir()
    (tmp_path / "state" / "gputui" / "journal").mkdir(parents=True)
    found = journal_dirs()
    own = tmp_path / "state" / "gputui" / "journal"
    assert tmp_path / "system" in found
    assert (own in found) == (os.geteuid() != 0)  # root never reads a folder other users may write

    def any_journal() -> bool:
        return any(True for d in found for _ in d.glob("*.json"))

    assert cli._journal_files_exist() == any_journal()
    for directory in (tmp_path / "system", own):
        (directory / "migrate-x.json").write_text("{}")
        assert cli._journal_files_exist() == (directory in found)
        (directory / "migrate-x.json").unlink()
        assert cli._journal_files_exist() == any_journal()


def test_the_fast_tables_are_the_parsers_options() -> None:
    """Every option the fast path reads has argparse's destination, converter and action, and the
    defaults it fills in are argparse's: a changed option cannot drift from its fast twin."""
    parser = cli.build_parser(["snapshot"])
    sub = next(a for a in parser._actions if a.dest == "command").choices["snapshot"]  # type: ignore[attr-defined]
    for p, table in ((parser, cli._FAST_TOP), (sub, cli._FAST_SNAPSHOT)):
        by_option = {o: a for a in p._actions for o in a.option_strings}
        for option, (dest, convert) in table.items():
            action = by_option[option]
            assert action.dest == dest, option
            if convert is None:
                assert action.nargs == 0 and action.const is True, option  # store_true
            elif convert == "append":
                assert type(action).__name__ == "_AppendAction" and action.type is None, option
            else:
                assert type(action).__name__ == "_StoreAction" and (action.type or str) is convert, option
    assert vars(parser.parse_args([])) == cli._TOP_DEFAULTS
    assert {k: v for k, v in vars(parser.parse_args(["snapshot"])).items() if k not in cli._TOP_DEFAULTS} \
        == cli._SNAPSHOT_DEFAULTS
