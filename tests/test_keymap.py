"""[keymap] in the config remaps the dashboard's keys through Textual's App.set_keymap, and the help
shows the keys as remapped (issue 28, point 7: the docs promised a [keymap] that did not exist)."""

from __future__ import annotations

import pytest

from gputui.core.config import ConfigError, Settings, load_settings
from gputui.ui import keys


def _config(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_config_reads_a_keymap(tmp_path):
    settings = load_settings(_config(tmp_path, '[keymap]\nkill = "x"\nhelp = "f1, h"\n'))
    assert settings.keymap == (("kill", "x"), ("help", "f1,h"))
    assert keys.check_keymap(settings.keymap) is None


@pytest.mark.parametrize("text, fragment", [
    ('[keymap]\nkill = 3\n', "line 2: [keymap] kill must be a key name"),
    ('[keymap]\nkill = "a b c"\n', "[keymap] kill must be a key name"),
    ('[keymap]\nkill = "\\u001b[2J"\n', "[keymap] kill must be a key name"),
    ('[keymap]\n"Kill Me" = "x"\n', "is not a key binding id"),
])
def test_a_keymap_line_of_the_wrong_shape_is_one_sentence(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as err:
        load_settings(_config(tmp_path, text))
    assert fragment in str(err.value) and "\x1b" not in str(err.value)


def test_an_unknown_binding_id_is_named_with_the_ids_there_are():
    problem = keys.check_keymap((("kill", "x"), ("explode", "e")))
    assert problem is not None and "no key binding 'explode'" in problem
    assert "kill" in problem and "kill-stale" in problem and problem.endswith(".")


@pytest.mark.functional
async def test_a_remapped_key_acts_and_the_help_shows_it():
    from gputui.core.demo import FROZEN_EPOCH
    from gputui.core.machine import open_machine
    from gputui.ui.app import make_app
    from gputui.ui.screens.help import HelpScreen, help_sections
    from gputui.ui.screens.kill import KillScreen
    from tests.fixtures.showcase import wait_for_polls

    machine = open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH)
    app = make_app(machine, Settings(keymap=(("kill", "x"), ("help", "f1"))), live=False)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for_polls(pilot)
        await pilot.press("k")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, KillScreen)  # k no longer kills
        await pilot.press("x")
        await pilot.pause(0.2)
        assert isinstance(app.screen, KillScreen)
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("f1")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        rows = dict(dict(help_sections(app))["Dashboard"])
        assert {"x": "Kill", "f1": "Help"}.items() <= {k: v for k, v in rows.items()}.items()
