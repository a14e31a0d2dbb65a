"""Issue 13, "fidelity and first impressions": one test per point, at the layer where it lives.

Formatting rules (power, N/A, memory, units) are unit tests of :mod:`gputui.core.units`; the
judges are fed synthetic polls; the faces are checked through ``render_text``, the CLI and
Textual's Pilot. Real-world driver cases replayed through the fake driver are in
``test_fidelity_fakenvml.py``.
"""

from __future__ import annotations

import io
import itertools
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from gputui.core import units
from gputui.core.config import GIB, Settings
from gputui.core.demo import FROZEN_EPOCH
from gputui.core.judges.suspect import activity, suspect
from gputui.core.judges.text import invisible_phrase
from gputui.core.machine import Machine, open_machine
from gputui.core.model import Gpu, GpuReading, Process
from gputui.core.record import replace
from gputui.core.render import render_text
from gputui.ui import format as fmt
from gputui.ui.app import make_app
from tests.fixtures.showcase import wait_for_polls
from tests.fixtures.synthetic import Feed, gpu, proc, snapshot

MIB = 1024**2
REPO = Path(__file__).resolve().parent.parent


# -- 1, 4: power and N/A ------------------------------------------------------------------------

def test_power_of_1000_w_boards_keeps_cap_and_unit():
    assert units.fmt_power_pair(192.0, 1000.0) == "192 / 1000 W"
    assert units.fmt_power_pair(1006.4, 1000.0) == "1006 / 1000 W"
    # the card form is compact but never cut: the panel reserves exactly its width
    from gputui.ui.widgets.gpu_panel import POWER_W
    assert fmt.power_pair(1006.4, 1000.0) == "1006/1000 W" and len(fmt.power_pair(1006.4, 1000.0)) <= POWER_W


def test_na_stands_alone_never_glued_to_a_unit():
    shown = [units.fmt_power_pair(145.0, None), units.fmt_power_pair(None, 400.0), units.fmt_power_pair(None, None),
             units.fmt_pstate(None), units.fmt_mhz_pair(None, None), units.fmt_mhz_pair(1410, None),
             units.fmt_mhz(None), units.fmt_size_pair(None, 80 * GIB), fmt.power_pair(145.0, None)]
    assert shown[0] == "145 W / N/A"  # a missing cap is said, not dropped
    for text in shown:
        assert not re.search(r"N/A\s?[A-Za-z]|[A-Za-z]N/A|N/A/", text), text
    assert units.fmt_pstate(3) == "P3"


# -- 3: cut values look cut --------------------------------------------------------------------

def test_truncation_is_visible():
    assert units.truncate("580.95.05", 6) == "580.9…"
    assert units.truncate("CUDA", 4) == "CUDA"


@pytest.mark.functional
async def test_status_line_drops_whole_fields_instead_of_cutting_versions():
    from gputui.ui.widgets.status import StatusLine

    for width in (40, 60, 80, 100, 120):
        app = make_app(open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH), Settings(), live=False)
        async with app.run_test(size=(width, 30)) as pilot:
            await wait_for_polls(pilot)
            text = app.screen.query_one(StatusLine).render_line(0).text
            snap = app.snapshot
            m = re.search(r"driver (\S+)", text)
            assert m is None or m.group(1) == snap.driver_version, text
            m = re.search(r"CUDA (\S+)", text)
            assert m is None or m.group(1) == snap.cuda_driver_version, text
            assert re.search(r"\bCU\b|\bCUD\b", text) is None
            if width >= 80:
                assert f"driver {snap.driver_version}" in text and f"CUDA {snap.cuda_driver_version}" in text


# -- 5: throttle reasons not reported are null --------------------------------------------------

def test_throttle_reasons_not_reported_are_null_not_none_active():
    g = Gpu(index=0, uuid="GPU-x", name="x", throttle_reasons=None)
    assert g.to_json()["throttle_reasons"] is None
    assert Gpu(index=0, uuid="GPU-x", name="x", throttle_reasons=()).to_json()["throttle_reasons"] == []


# -- 6: memory precision -----------------------------------------------------------------------

def test_small_amounts_in_mib_and_a_non_full_card_never_reads_100_percent():
    assert units.fmt_size_pair(50 * MIB, 80 * GIB) == "50 MiB / 80.0 GiB"
    assert units.fmt_size_pair(32426 * MIB, 32510 * MIB) == "31.6 / 31.7 GiB"
    assert units.fmt_percent(units.used_percent(32426 * MIB, 32510 * MIB)) == "99%"
    assert units.fmt_size_pair(143770 * MIB, 143771 * MIB) == "143770 / 143771 MiB"
    assert units.fmt_percent(units.used_percent(80 * GIB, 80 * GIB)) == "100%"
    assert fmt.size_pair(50 * MIB, 80 * GIB) == "50 MiB/80.0 GiB"
    assert fmt.mem_percent(32426 * MIB, 32510 * MIB) == " 99%"


def test_memory_full_alert_says_what_is_still_free():
    feed = Feed()
    snap = feed.step([gpu(0, used_gib=32426 / 1024, total_gib=32510 / 1024), gpu(1)])
    alert = next(a for a in snap.alerts if a.kind == "memory-full")
    assert "99% used" in alert.message and "84 MiB free" in alert.message and "100%" not in alert.message


# -- 7: a card that looks broken is suspect, not a pile-up ---------------------------------------

def test_full_load_with_no_process_and_no_memory_is_suspect_not_imbalance():
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=100, used_gib=0.004)] + [gpu(i, util=0, used_gib=0.5)
                                                                           for i in range(1, 4)])
    last = snaps[-1]
    assert not any(s.imbalance.flagged for s in snaps)
    alerts = [a for a in last.alerts if a.kind == "suspect"]
    assert [a.gpu for a in alerts] == [0] and "gputui doctor" in alerts[0].message
    # The same load with the memory a real job holds is real work, and is judged.
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=100, used_gib=40)] + [gpu(i, util=0) for i in range(1, 4)])
    assert snaps[-1].imbalance.flagged and not [a for a in snaps[-1].alerts if a.kind == "suspect"]


# -- 2: busy with no visible process is not "idle" -----------------------------------------------

def test_activity_words():
    assert activity(gpu(0, util=0)) == "idle"
    assert activity(gpu(0, util=68, used_gib=40)) == "busy, no visible process"
    assert suspect(gpu(0, util=100, used_gib=0.01)) and activity(gpu(0, util=100, used_gib=0.01)).startswith("suspect")
    assert activity(gpu(0, util=90, procs=[proc(1, 0)])) == "idle"  # callers ask only when no process is listed


class _Busy:
    """GPU 0 at 95% and 495 W with 60 GiB used but no process listed; GPU 1 idle."""

    def read(self) -> GpuReading:
        gpus = (Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3",
                    utilization_gpu=95, memory_used=60 * GIB, memory_total=80 * GIB, temperature=60,
                    power_draw=495.0, power_limit=700.0),
                Gpu(index=1, uuid="GPU-00000001-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3",
                    utilization_gpu=0, memory_used=1 * MIB, memory_total=80 * GIB, temperature=30,
                    power_draw=70.0, power_limit=700.0))
        return GpuReading("580.95.05", "13.0", gpus, {})

    def facts(self, pids):
        return {}

    def close(self) -> None:
        pass


@pytest.mark.functional
async def test_card_header_says_busy_with_no_visible_process_not_idle():
    from gputui.ui.widgets.gpu_panel import GpuPanel

    src = _Busy()
    app = make_app(Machine(gpu=src, processes=src, containers=None), Settings(), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_polls(pilot)
        panel = app.screen.query_one(GpuPanel)
        assert panel.mode == "cards"
        tops = [panel.render_line(0).text]
        assert "busy, no visible process" in tops[0] and " idle " in tops[0]  # card 0 busy, card 1 idle
        assert tops[0].index("busy") < tops[0].index(" idle ")
        # the 1000 W-class number and the small memory read right on the card too
        body = "\n".join(panel.render_line(y).text for y in range(5))
        assert "495/700 W" in body and "1 MiB/80.0 GiB" in body


# -- 8: an invisible PID --------------------------------------------------------------------------

def test_an_invisible_pid_is_not_visible_from_here_with_why():
    assert invisible_phrase("vanished") == ("not visible from here: no such PID in this PID namespace (it exited, "
                                            "or it runs in another one)")
    assert "another PID namespace" in invisible_phrase("other-namespace")
    p = Process(pid=4242, gpu_index=0, type="compute", gpu_memory=GIB, sm_utilization=None, visible=False,
                invisible_reason="vanished")
    snap = snapshot(FROZEN_EPOCH, [replace(gpu(0, util=50), processes=(p,))])
    text = render_text(snap)
    assert "[not visible from here: no such PID in this PID namespace" in text
    assert "exited while being read" not in text and "vanished" not in text


# -- 11: single-sample verdicts are provisional --------------------------------------------------

def test_first_samples_are_provisional_until_the_hold_has_passed():
    feed = Feed(Settings(imbalance_hold=10.0))
    def piled(t):
        return [gpu(0, util=95, used_gib=10)] + [gpu(i, util=5, used_gib=10) for i in (1, 2, 3)]

    first = feed.step(piled(0))
    assert first.imbalance.flagged and first.imbalance.provisional
    assert first.imbalance.to_json()["provisional"] is True
    assert "IMBALANCE (provisional" in render_text(first)
    later = feed.run(70, piled)[-1]
    assert later.imbalance.flagged and not later.imbalance.provisional
    assert "IMBALANCE: " in render_text(later)


def test_readme_documents_provisional_verdicts_next_to_the_settings():
    readme = (REPO / "README.md").read_text()
    assert "provisional" in readme and "imbalance_hold" in readme


# -- 16: one unit rule in --once ------------------------------------------------------------------

def test_once_uses_one_unit_rule_for_gpus_and_processes():
    procs = [proc(101, 0, mem_gib=0.5), proc(102, 0, mem_gib=17.25)]
    snap = snapshot(FROZEN_EPOCH, [gpu(0, util=50, procs=procs), gpu(1, used_gib=0.05)])
    text = render_text(snap)
    row = {int(line.split()[1]): line for line in text.splitlines() if re.match(r"\s+0\s+10[12]\s", line)}
    assert " 512 MiB " in row[101] and " 17.2 GiB " in row[102]
    assert "51 MiB / 80.0 GiB" in text and "MiB  " not in text.split("\n\n")[1].replace("MiB /", "")
    assert "18.2 / 80.0 GiB" in text


# -- 9, 13, 14, 15: the command line --------------------------------------------------------------

def run(*argv: str) -> tuple[int, str, str]:
    from gputui.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # --help
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.functional
def test_help_lists_the_exit_codes():
    code, out, _ = run("--help")
    assert code == 0
    for line in ("0  done", "1  ran, and the answer is \"no\"", "2  bad usage or config", "3  the machine could not"):
        assert line in out, line


@pytest.mark.functional
def test_not_found_is_exit_2_everywhere():
    assert run("--demo", "kill", "99999", "--yes")[0] == 2
    assert run("--demo", "migrate", "nosuch", "--to", "1", "--yes")[0] == 2
    assert run("--demo", "--gpu", "42", "--once")[0] == 2


@pytest.mark.functional
def test_snapshot_help_has_a_description_and_window_means_one_thing():
    code, out, _ = run("snapshot", "--help")
    assert code == 0
    assert "Read every GPU, its processes and their containers" in out
    assert "--observe SECONDS" in out and "--window" not in out
    code, top, _ = run("--help")
    assert "--imbalance-window SECONDS" in top and "--window" not in top.replace("--imbalance-window", "")
    # the older spellings still work
    assert run("--demo", "snapshot", "--window", "0", "--json")[0] == 0
    assert run("--demo", "--window", "30", "--once")[0] == 0


def test_readme_documents_migrate_from_and_observe():
    readme = (REPO / "README.md").read_text()
    assert "--from" in readme and "snapshot --json [--observe S]" in readme
    assert "Exit codes (also in `gputui --help`)" in readme and "no such PID" in readme


# -- 18: the test set-up leaves the README's .venv alone -----------------------------------------

def test_the_test_scripts_never_install_into_the_readmes_venv():
    for script in ("scripts/test.sh", "scripts/install-dev.sh", ".ci/run"):
        text = (REPO / script).read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"(?<![\w-])\.venv(?![\w-])", code), script
    assert ".venv-test" in (REPO / "scripts/install-dev.sh").read_text()
    assert ".venv-test" in (REPO / "README.md").read_text()


# -- 12: every press of v changes what is on screen -----------------------------------------------

@pytest.mark.functional
@pytest.mark.parametrize("size", [(160, 48), (100, 24)])
async def test_every_press_of_v_changes_the_panel(size):
    from gputui.ui.widgets.gpu_panel import GpuPanel

    app = make_app(open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH), Settings(), live=False)
    async with app.run_test(size=size) as pilot:
        await wait_for_polls(pilot)
        panel = app.screen.query_one(GpuPanel)
        modes = [panel.mode]
        for _ in range(4):
            await pilot.press("v")
            await pilot.pause()
            modes.append(panel.mode)
        assert all(a != b for a, b in itertools.pairwise(modes)), modes
        assert panel.mode_choice == "auto"  # every second press is back to auto, which follows resizes


# -- 17: small terminals ---------------------------------------------------------------------------

def _screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


@pytest.mark.functional
async def test_at_60x15_the_migrate_dialog_keeps_its_keys_and_help_is_not_clipped():
    from gputui.ui.screens.help import HelpScreen
    from gputui.ui.screens.migrate import MigrateScreen
    from gputui.ui.widgets.banner import SuggestionBanner

    app = make_app(open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH), Settings(), live=False)
    async with app.run_test(size=(60, 15)) as pilot:
        await wait_for_polls(pilot)
        app.screen.query_one(SuggestionBanner).focus()
        await pilot.press("m")
        for _ in range(200):
            await pilot.pause(0.02)
            if isinstance(app.screen, MigrateScreen) and app.screen.plan is not None:
                break
        await pilot.pause(0.1)
        text = "\n".join(_screen_lines(app))
        assert "y migrate" in text and "escape cancel" in text
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        text = "\n".join(_screen_lines(app)[:-1])  # the footer below marks the keys it leaves out with "…"
        assert "Sort by previous column" in text  # one column: whole descriptions, no "pro…" stubs
        assert "…" not in text


@pytest.mark.functional
async def test_toasts_stay_off_the_selection_bar_and_footer():
    from textual.widgets import Footer
    from textual.widgets._toast import ToastRack

    from gputui.ui.widgets.status import SelectionBar

    app = make_app(open_machine(demo=True, demo_clock=lambda: FROZEN_EPOCH), Settings(), live=False)
    async with app.run_test(size=(60, 15), notifications=True) as pilot:
        await wait_for_polls(pilot)
        app.notify("Killed PID 5388 (carol): exited after SIGTERM; 3.0 GiB freed on GPU 0.", timeout=5)
        await pilot.pause(0.3)
        rack = app.screen.get_child_by_type(ToastRack)
        bar = app.screen.query_one(SelectionBar).region
        footer = app.screen.query_one(Footer).region
        toasts = [t.region for t in rack.query("Toast") if t.region.height]
        assert toasts
        for region in toasts:
            assert not region.overlaps(bar) and not region.overlaps(footer)
