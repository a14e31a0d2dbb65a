"""The dashboard's small pure parts: number formats, the fixed-scale sparkline, plot helpers."""

from __future__ import annotations

from rich.style import Style

from gputui.ui import format as fmt
from gputui.ui.plots import downsample, nice_ticks
from gputui.ui.widgets.lines import level_code, sparkline
from gputui.ui.widgets.spans import BARS, MISSING

GIB = 1024**3


def test_sizes_durations_and_missing_values():
    assert fmt.size(34 * GIB) == "34.0G"
    assert fmt.size(600 * 1024**2) == "600M"
    assert fmt.size(None) == "N/A"
    assert fmt.size_pair(int(64.6 * GIB), 80 * GIB) == "64.6/80.0 GiB"
    assert fmt.power_pair(312.4, 400.0) == "312/400 W"
    assert fmt.power_pair(None, 400.0) == "N/A / 400 W"  # N/A stands alone, never glued to a unit
    assert [fmt.duration(s) for s in (5, 59, 60, 3599, 3600 * 5 + 1200, 86400 * 3 + 3600 * 4)] == [
        "<1m", "<1m", "1m", "59m", "5h20m", "3d04h"]
    assert fmt.percent(None) == " N/A"
    assert fmt.throttle_label(("gpu_idle",)) == ""
    assert fmt.throttle_label(("sw_power_cap", "hw_thermal_slowdown")) == "power cap, thermal (HW)"


def _draw(values, width):
    styles = [Style(color=c) for c in ("grey0", "green", "yellow", "red")]
    return "".join(seg.text for seg in sparkline([level_code(v) for v in values], width, *styles))


def test_sparkline_scale_is_fixed_not_stretched_to_the_data():
    # A flat 97-99 % line is a flat full-height line, not wild swings.
    assert set(_draw([97, 99, 98, 97, 99], 5)) == {BARS[8]}
    # A flat 2-3 % line sits on the floor.
    assert set(_draw([2, 3, 2, 3], 4)) == {BARS[1]}
    # Half load is half height, whatever the neighbours are.
    assert _draw([0, 50, 100], 3) == BARS[1] + BARS[4] + BARS[8]


def test_sparkline_pads_old_samples_and_blanks_missing_ones():
    drawn = _draw([100, None, 100], 6)
    assert drawn == BARS[1] * 3 + BARS[8] + " " + BARS[8]
    assert level_code(None) == MISSING
    assert len(_draw(list(range(100)), 10)) == 10  # only the newest samples


def test_sparkline_colour_follows_the_value():
    segs = sparkline([level_code(v) for v in (10, 60, 90)], 3, Style(), Style(color="green"),
                     Style(color="yellow"), Style(color="red"))
    assert [s.style.color.name for s in segs] == ["green", "yellow", "red"]


def test_plot_helpers():
    points = [(float(t), float(t % 7)) for t in range(720)]
    kept = downsample(points, 0.0, 720.0, 120)
    assert len(kept) <= 120
    assert max(v for _, v in kept) == 6.0  # peaks survive
    assert nice_ticks(0, 100, 5) == ([0, 25, 50, 75, 100], ["0", "25", "50", "75", "100"])
    assert nice_ticks(20, 100, 5)[0] == [20, 40, 60, 80, 100]


def test_remembered_texts_are_kept_apart_by_the_type_of_the_number():
    """size, size_pair, power_pair and cpu remember their answers (the same numbers come every poll):
    an int and the float equal to it are written differently, and each gets its own."""
    assert fmt.size(1.0) == "0.0M"
    assert fmt.size(1) == "0M"
    assert fmt.size_pair(5.0 * 1024**2, 80.0 * fmt.GIB) == "5.0 MiB/80.0 GiB"
    assert fmt.size_pair(5 * 1024**2, 80 * fmt.GIB) == "5 MiB/80.0 GiB"
    assert fmt.size(2 * fmt.GIB) == "2.0G" and fmt.size(2.0 * fmt.GIB) == "2.0G"
