"""Issue 18: every number from a flag or the config file is finite and in range, or it is one sentence and
exit 2, checked before anything acts; one rule for GPU identifiers everywhere."""

from __future__ import annotations

import pytest

from gputui.cli import main
from gputui.core.config import _SECTIONS, ConfigError, load_settings

BAD = ("nan", "inf", "-inf", "1e308")

#: Every flag that takes a number: (argv before the value, argv after it).
FLAGS = [
    (["--interval"], ["--demo", "--once"]),
    (["--window"], ["--demo", "--once"]),
    (["--imbalance-window"], ["--demo", "--once"]),
    (["--temp-warning"], ["--demo", "--once"]),
    (["--temp-critical"], ["--demo", "--once"]),
    (["snapshot", "--window"], ["--demo"]),
    (["snapshot", "--observe"], ["--demo"]),
    (["kill", "--timeout"], ["--demo", "--yes", "5388"]),
    (["migrate", "bert-finetune", "--to", "6", "--timeout"], ["--demo", "--yes"]),
    (["pick", "--sample"], ["--demo"]),
    (["pick", "--max-util"], ["--demo"]),
    (["pick", "--min-free"], ["--demo"]),
    (["exporter", "--interval"], ["--demo", "--listen", "127.0.0.1:0"]),
]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("before,after", FLAGS, ids=[" ".join(f[0]) for f in FLAGS])
def test_every_numeric_flag_refuses_non_finite_and_huge_values(before, after, value, capsys):
    assert main([*before, value, *after]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing ran: no table, no plan, no kill
    (line,) = err.splitlines()
    assert line.startswith("gputui: ") and "Traceback" not in line


def _keys() -> list[tuple[str, str]]:
    out = []
    for section, keys in _SECTIONS.items():
        names = keys if isinstance(keys, set) else set(keys)
        for key in sorted(names):
            if key not in ("theme", "read_only", "bell"):
                out.append((section, key))
    return out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "-1"])
@pytest.mark.parametrize("section,key", _keys(), ids=[f"{s or 'top'}.{k}" for s, k in _keys()])
def test_every_numeric_config_key_refuses_non_finite_and_out_of_range_values(tmp_path, section, key, value):
    path = tmp_path / "config.toml"
    path.write_text((f"[{section}]\n" if section else "") + f"{key} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    message = str(err.value)
    assert message.startswith(f"Config file {path} line {2 if section else 1}: {key}") and message.endswith(".")


def test_a_bad_config_value_stops_the_cli_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text("[containers]\ndocker_timeout = nan\n")
    assert main(["--config", str(path), "kill", "--demo", "--yes", "5388"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "docker_timeout must be a finite number, not nan" in err


def test_good_values_still_load(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("interval = 2\n[alerts]\ntemp_warning = 80\n[stale]\nidle_memory = \"2G\"\n"
                    "[containers]\ndocker_timeout = 0.5\n")
    s = load_settings(path)
    assert (s.interval, s.temp_warning, s.idle_holder_memory, s.docker_timeout) == (2.0, 80, 2 * 1024**3, 0.5)


@pytest.mark.parametrize("ident", ["GPU-", "gpu-", "GPU-123", "MIG-"])
def test_gpu_accepts_only_an_index_or_a_unique_uuid_prefix_of_8_characters(ident, capsys):
    assert main(["--demo", "--once", "--gpu", ident]) == 2
    _, err = capsys.readouterr()
    assert f"There is no GPU {ident!r} on this machine" in err and "at least 8 characters" in err


def test_gpu_by_unique_uuid_prefix_still_works(capsys):
    from gputui.core.demo import _uuid

    assert main(["--demo", "--once", "--gpu", _uuid(3)[:12]]) == 0
    out, _ = capsys.readouterr()
    rows = [ln for ln in out.splitlines() if ln[:5].strip().isdigit()]
    assert rows and all(ln.split()[0] == "3" for ln in rows)
