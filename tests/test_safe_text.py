"""The pure rules behind issue 18: terminal-safe text, finite numbers, plausible driver values,
GPU identifiers and safely opened state files."""

from __future__ import annotations

import io
import math
import os
import stat
from pathlib import Path

import pytest

from gputui.core.limits import RANGES, NumberError, check_number, parse_number
from gputui.core.model import Gpu, GpuReading, RawProcess, resolve_gpu
from gputui.core.plausible import JSON_SAFE_INT, plausible_reading
from gputui.core.safe_text import SafeStream, clean, clean_lines
from gputui.core.statefile import (
    StateFileError,
    append_text,
    check_state_dir,
    read_regular,
)

HOSTILE = "\x1b]0;PWNED-TITLE\x07\x1b[31mRED\x1b[0m\x1b[2J\x1b[HEVIL-CLEAR\x1b]52;c;aGk=\x07\x9b31m\u202eevil\tx\ny\x7f"


def test_clean_turns_every_control_into_a_visible_escape_on_one_line():
    out = clean(HOSTILE)
    assert out == ("^[]0;PWNED-TITLE^G^[[31mRED^[[0m^[[2J^[[HEVIL-CLEAR^[]52;c;aGk=^G\\x9b31m\\u202eevil^Ix^Jy^?")
    assert out.isprintable() and "\n" not in out


def test_clean_keeps_plain_and_wide_text_and_escapes_zero_width_and_combining():
    assert clean("python3 train.py --lr 0.1") == "python3 train.py --lr 0.1"
    assert clean("训练 café │ █") == "训练 café │ █"
    assert clean("e\u0301") == "é"  # composes under NFC: same width as it looks
    assert clean("a\u200bb\u0489") == "a\\u200bb\\u0489"
    assert clean(b"\xffab".decode("utf-8", "surrogateescape")) == "\\xffab"


def test_clean_lines_keeps_newlines_between_lines_only():
    assert clean_lines("one\x1b[2J\ntwo\x07") == "one^[[2J\ntwo^G"
    assert clean_lines("plain\ntext\n") == "plain\ntext\n"


def test_safe_stream_writes_clean_text_and_forwards_the_rest():
    raw = io.StringIO()
    stream = SafeStream(raw)
    print("PID 7", HOSTILE, file=stream)  # type: ignore[arg-type]
    stream.flush()
    written = raw.getvalue()
    assert written.endswith("\n") and written.count("\n") == 2  # gputui's newline, and the ^J-split of the input
    assert "\x1b" not in written and "\x07" not in written and "\x9b" not in written and "\u202e" not in written
    assert stream.isatty() is False


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, -1.0])
def test_check_number_refuses_non_finite_and_out_of_range(value):
    with pytest.raises(NumberError) as err:
        check_number("interval", value, *RANGES["interval"])
    assert str(err.value).startswith("interval must be")


def test_parse_number_reads_text_and_names_the_problem():
    assert parse_number("x", "2.5", 0, 10) == 2.5
    assert parse_number("x", "7", 0, 10, integer=True) == 7
    with pytest.raises(NumberError, match="must be a whole number"):
        parse_number("x", "nan", 0, 10, integer=True)
    with pytest.raises(NumberError, match="must be a finite number, not nan"):
        parse_number("x", "nan", 0, 10)


def _gpu(**kw) -> Gpu:
    base = dict(index=0, uuid="GPU-11111111-aaaa", name="A100", memory_total=80 * 2**30, memory_used=2**30,
                temperature=40, utilization_gpu=10, power_draw=100.0)
    base.update(kw)
    return Gpu(**base)  # type: ignore[arg-type]


def test_impossible_driver_values_become_na_with_one_warning_naming_them():
    reading = GpuReading("550", "12.4", (_gpu(temperature=4294967295, utilization_gpu=250, power_draw=5e6,
                                              memory_used=81 * 2**30),),
                         processes={0: (RawProcess(9, "compute", 2**64 - 104857600),
                                        RawProcess(10, "compute", 2**30))})
    out = plausible_reading(reading)
    g = out.gpus[0]
    assert (g.temperature, g.utilization_gpu, g.power_draw, g.memory_used) == (None, None, None, None)
    assert g.memory_total == 80 * 2**30
    assert [p.gpu_memory for p in out.processes[0]] == [None, 2**30]
    (warning,) = out.errors
    for field in ("temperature (4294967295)", "GPU utilization (250)", "power draw", "memory used",
                  "GPU memory of PID 9 (18446744073604694016 bytes)"):
        assert field in warning
    assert JSON_SAFE_INT == 2**53


def test_a_plausible_reading_is_returned_as_is():
    reading = GpuReading("550", "12.4", (_gpu(),), processes={0: (RawProcess(9, "compute", 2**30),)})
    assert plausible_reading(reading) is reading


def test_one_gpu_identifier_rule():
    gpus = [_gpu(index=0, uuid="GPU-11111111-aaaa"), _gpu(index=1, uuid="GPU-11111111-bbbb"),
            _gpu(index=2, uuid="GPU-22222222-cccc")]
    assert resolve_gpu("1", gpus).index == 1  # type: ignore[union-attr]
    assert resolve_gpu("gpu-22222222-CCCC", gpus).index == 2  # type: ignore[union-attr]
    assert resolve_gpu("GPU-2222", gpus).index == 2  # type: ignore[union-attr]  # 8 characters, unique
    assert resolve_gpu("GPU-", gpus) is None  # too short: would match every GPU
    assert resolve_gpu("GPU-222", gpus) is None  # 7 characters
    assert resolve_gpu("GPU-11111111", gpus) is None  # ambiguous
    assert resolve_gpu("7", gpus) is None


def test_state_files_refuse_symlinks_fifos_and_foreign_folders(tmp_path: Path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    link = state / "audit.jsonl"
    link.symlink_to(outside)
    with pytest.raises(StateFileError, match="symbolic link"):
        append_text(link, "{}\n")
    assert outside.read_text() == "precious\n"

    fifo = state / "journal.json"
    os.mkfifo(fifo)
    with pytest.raises(StateFileError, match="not a regular file"):
        read_regular(fifo)
    with pytest.raises(StateFileError, match="not a regular file"):
        append_text(fifo, "x")

    fresh = state / "alerts.jsonl"
    append_text(fresh, "one\n")
    append_text(fresh, "two\n")
    assert fresh.read_text() == "one\ntwo\n"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600

    big = state / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(StateFileError, match="larger than 1 KiB"):
        read_regular(big, limit=1024)

    check_state_dir(state)
    state.chmod(0o777)
    with pytest.raises(StateFileError, match="writable by other users"):
        check_state_dir(state)
    state.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)
        with pytest.raises(StateFileError, match="belongs to uid 65534"):
            check_state_dir(state)


def test_a_state_folder_inside_another_users_folder_is_refused(tmp_path: Path):
    from gputui.core.statefile import ensure_state_dir

    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(StateFileError, match="which other users may write to"):
        ensure_state_dir(home / "gputui")
    home.chmod(0o1777)  # sticky, like /tmp: others cannot rename what is not theirs
    assert ensure_state_dir(home / "gputui").is_dir()
    if os.geteuid() == 0:
        home.chmod(0o755)
        os.chown(home, 65534, 65534)
        with pytest.raises(StateFileError, match="inside .* which belongs to uid 65534"):
            ensure_state_dir(home / "other")


def test_markup_in_outside_text_is_shown_literally_in_the_dashboard():
    from rich.console import Console
    from rich.text import Text

    from gputui.ui.safe import markup, text

    hostile = "[bold red]PWNED[/] [link=file:///etc/passwd]x[/link] \x1b[2J"
    rendered = Text.from_markup(f"container {markup(hostile)}")
    assert rendered.plain == "container [bold red]PWNED[/] [link=file:///etc/passwd]x[/link] ^[[2J"
    assert not rendered.spans
    console = Console(record=True, width=200, color_system=None)
    console.print(text(hostile))
    assert console.export_text().rstrip("\n") == "[bold red]PWNED[/] [link=file:///etc/passwd]x[/link] ^[[2J"


def test_every_numeric_setting_has_a_range():
    """A new numeric config key without a range would be a KeyError at load time, not a sentence."""
    from gputui.core.config import Settings
    from gputui.core.record import fields

    numeric = {f.name for f in fields(Settings) if f.type in ("int", "float")}
    assert numeric <= set(RANGES), sorted(numeric - set(RANGES))
