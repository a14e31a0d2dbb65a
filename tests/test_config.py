"""Config file: defaults, overrides, and one sentence with file and line when it is broken."""

import pytest

from gputui.core.config import ConfigError, Settings, load_settings, parse_size


def write(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_missing_file_gives_defaults(tmp_path):
    assert load_settings(tmp_path / "absent.toml") == Settings()


def test_values_and_sections(tmp_path):
    path = write(tmp_path, 'interval = 2\ntheme = "nord"\nread_only = true\n[alerts]\ntemp_warning = 80\n'
                           '[stale]\nidle_memory = "512MiB"\nidle_window = 30\n[imbalance]\nwindow = 120\n')
    s = load_settings(path)
    assert (s.interval, s.theme, s.read_only, s.temp_warning) == (2.0, "nord", True, 80)
    assert s.idle_holder_memory == 512 * 1024**2 and s.idle_window == 30.0 and s.imbalance_window == 120.0


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("interval = 1\ncolour = 'red'\n", "line 2: unknown key 'colour'"),
        ("interval = 0.1\n", "line 1: interval must be between 0.25 and 3600, not 0.1"),
        ("interval = 'fast'\n", "line 1: interval has a bad value"),
        ("[alerts]\ntemp_warning = true\n", "line 2: temp_warning has a bad value"),
        ("[nope]\nx = 1\n", "line 1: unknown section [nope]"),
        ("read_only = maybe\n", "line 1 is not valid TOML"),
    ],
)
def test_broken_file_names_file_and_line(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert str(path) in str(err.value)
    assert fragment in str(err.value)


def test_flags_override_file(tmp_path):
    s = load_settings(write(tmp_path, "interval = 3\n")).with_overrides(interval=0.5, theme=None)
    assert s.interval == 0.5 and s.theme == Settings().theme


@pytest.mark.parametrize("text, value", [("24G", 24 * 1024**3), ("512MiB", 512 * 1024**2),
                                         ("1.5GB", int(1.5 * 1024**3)), ("1048576", 1048576),
                                         (" 2 gib ", 2 * 1024**3)])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_rejects_nonsense():
    with pytest.raises(ValueError):
        parse_size("lots")


def test_readme_example_config_is_valid(tmp_path):
    """The config shown in the README loads as is, and equals the defaults it documents."""
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    settings = load_settings(write(tmp_path, block))
    assert settings == Settings()


@pytest.mark.parametrize("text, fragment", [
    ("[alerts]\ntemp_warning = 95\ntemp_critical = 90\n", "line 2: temp_warning (95) must be below temp_critical (90)"),
    ("[alerts]\ntemp_warning = 90\n", "temp_warning (90) must be below temp_critical (90)"),
    ("[imbalance]\nutil_low = 85\n", "util_low (85) must be below util_high (80)"),
    ("[imbalance]\nmemory_low = 95\n", "memory_low (95) must be below memory_high (90)"),
])
def test_thresholds_the_wrong_way_round_are_refused(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert fragment in str(err.value) and str(err.value).endswith(".")


@pytest.mark.parametrize("argv", [
    ["--temp-warning", "95", "--temp-critical", "90", "--demo", "--once"],
    ["--temp-warning", "92", "--demo", "snapshot"],  # against the default temp_critical 90
    ["--config", "{config}", "--temp-critical", "80", "--demo", "--once"],  # against the file's warning 85
])
def test_threshold_flags_the_wrong_way_round_are_one_sentence_and_exit_2(tmp_path, capsys, argv):
    from gputui.cli import main

    config = write(tmp_path, "[alerts]\ntemp_warning = 85\n")
    assert main([a.format(config=config) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("gputui: Thresholds out of order: temp_warning (")
    assert "must be below temp_critical" in err
