"""Alerts over synthetic histories (thresholds, hysteresis, since), the event recorder and its
JSON-lines log, and thresholds taken from the config file and flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputui.core.config import Settings, load_settings
from gputui.core.judges.alerts import AlertRecorder
from tests.fixtures.synthetic import Feed, gpu


def two(temp=40, throttle=(), used=10.0, lost=False):
    return [gpu(0, util=50, used_gib=used, temp=temp, throttle=throttle, lost=lost), gpu(1, util=50, used_gib=10)]


def of(snap, kind, index=0):
    found = [a for a in snap.alerts if a.kind == kind and a.gpu == index]
    return found[0] if found else None


def test_temperature_warning_needs_the_hold_escalates_and_keeps_since():
    feed = Feed()
    feed.run(30, lambda t: two(temp=70))
    hot = feed.run(15, lambda t: two(temp=85))
    assert of(hot[5], "temperature") is None, "85°C for 5 s is not yet an alert"
    a = of(hot[-1], "temperature")
    assert a.severity == "warning" and "85°C" in a.message and "83°C warning" in a.message
    started = a.since
    assert started == hot[0].time

    crit = feed.run(12, lambda t: two(temp=92))
    assert of(crit[3], "temperature").severity == "warning"
    c = of(crit[-1], "temperature")
    assert c.severity == "critical" and "90°C critical" in c.message
    assert c.since == started, "since is when the alert started and stays while it is active"

    # 86°C is within the 5°C hysteresis of the critical threshold: it stays critical.
    assert all(of(s, "temperature").severity == "critical" for s in feed.run(30, lambda t: two(temp=86)))
    # 80°C: below 85 for the hold -> back to warning (within 78: still a warning).
    cooling = feed.run(30, lambda t: two(temp=80))
    assert of(cooling[5], "temperature").severity == "critical"
    assert of(cooling[-1], "temperature").severity == "warning"
    assert "reached 92°C" in of(cooling[-1], "temperature").message
    # 76°C: clears after the hold.
    cold = feed.run(20, lambda t: two(temp=76))
    assert of(cold[5], "temperature") is not None
    assert of(cold[-1], "temperature") is None


def test_a_temperature_spike_does_not_alert():
    feed = Feed()
    feed.run(30, lambda t: two(temp=70))
    snaps = feed.run(4, lambda t: two(temp=95)) + feed.run(30, lambda t: two(temp=70))
    assert not any(of(s, "temperature") for s in snaps)


def test_a_one_shot_judges_its_single_sample():
    snap = Feed().step(two(temp=93))
    a = of(snap, "temperature")
    assert a.severity == "critical"


def test_throttle_alerts_for_thermal_or_power_reasons_only():
    feed = Feed()
    snaps = feed.run(15, lambda t: two(throttle=("sw_power_cap",)))
    a = of(snaps[-1], "throttle")
    assert a.severity == "warning" and "power cap" in a.message
    snaps = feed.run(15, lambda t: two(throttle=("hw_thermal_slowdown",)))
    assert of(snaps[-1], "throttle").severity == "critical"
    snaps = feed.run(15, lambda t: two(throttle=("gpu_idle",)))
    assert "not throttled now" in of(snaps[3], "throttle").message
    assert of(snaps[-1], "throttle") is None

    idle = Feed().run(30, lambda t: two(throttle=("gpu_idle", "applications_clocks_setting")))
    assert not any(of(s, "throttle") for s in idle)


def test_flapping_throttle_does_not_alert():
    feed = Feed()
    feed.run(15, lambda t: two())
    snaps = feed.run(60, lambda t: two(throttle=("sw_power_cap",) if int(t) // 3 % 2 else ()))
    assert not any(of(s, "throttle") for s in snaps)


def test_memory_full_with_hysteresis():
    feed = Feed()
    snaps = feed.run(15, lambda t: two(used=77))  # 96%
    a = of(snaps[-1], "memory-full")
    assert a.severity == "warning" and "96% used (77.0 GiB of 80.0 GiB, 3.0 GiB free)" in a.message
    assert all(of(s, "memory-full") for s in feed.run(30, lambda t: two(used=74)))  # 92.5%: within 5 points
    snaps = feed.run(15, lambda t: two(used=60))
    assert of(snaps[5], "memory-full") is not None
    assert of(snaps[-1], "memory-full") is None


def test_a_lost_gpu_alerts_at_once_and_clears_after_the_hold():
    feed = Feed()
    feed.run(20, lambda t: two())
    snap = feed.step(two(lost=True))
    a = of(snap, "lost")
    assert a.severity == "critical" and "is lost" in a.message
    assert a.since == snap.time
    back = feed.run(15, lambda t: two())
    assert "answers again" in of(back[2], "lost").message
    assert of(back[-1], "lost") is None


def test_imbalance_becomes_a_warning_on_the_hot_gpu():
    feed = Feed()
    snaps = feed.run(30, lambda t: [gpu(0, util=95, used_gib=10), gpu(1, util=2, used_gib=10)])
    a = of(snaps[-1], "imbalance")
    assert a is not None and a.severity == "warning"
    # Short: the contrast only; the cause and the move are in the imbalance object and the banner.
    assert a.message == "Unevenly loaded: GPU 0 at 95% while GPU 1 is at 2% over 29 s."
    first = next(s for s in snaps if s.imbalance.flagged)
    assert a.since == first.time


def test_alerts_come_critical_first_and_serialise_to_the_schema():
    feed = Feed()
    snap = feed.step([gpu(0, util=50, used_gib=78, temp=85), gpu(1, lost=True)])
    kinds = [(a.severity, a.gpu, a.kind) for a in snap.alerts]
    assert kinds[0] == ("critical", 1, "lost")
    doc = snap.to_json()["alerts"]
    assert set(doc[0]) == {"gpu", "kind", "severity", "message", "since"}
    assert doc[0]["since"].endswith("+00:00")


def test_config_file_and_flags_set_the_thresholds(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[alerts]\ntemp_warning = 60\ntemp_critical = 70\nhold = 0\nmemory_full = 50\n")
    s = load_settings(cfg)
    assert (s.temp_warning, s.temp_critical, s.alert_hold, s.memory_full) == (60, 70, 0.0, 50.0)
    feed = Feed(s)
    feed.run(3, lambda t: two(temp=50))
    snap = feed.step(two(temp=65, used=45))
    assert of(snap, "temperature").severity == "warning"
    assert of(snap, "memory-full") is not None


def test_temperature_flag_on_the_command_line(capsys):
    from gputui.cli import main

    assert main(["--temp-warning", "20", "--temp-critical", "99", "snapshot", "--demo", "--json",
                 "--no-docker"]) == 0
    doc = json.loads(capsys.readouterr().out)
    temps = {a["gpu"] for a in doc["alerts"] if a["kind"] == "temperature"}
    assert temps == set(range(8))


# -- the recorder: events, bell, log --------------------------------------------------------


def test_recorder_turns_snapshots_into_events_and_appends_json_lines():
    feed = Feed()
    rec = AlertRecorder()
    events = []
    for s in feed.run(30, lambda t: two()):
        events += rec.record(s)
    assert events == []
    for s in feed.run(15, lambda t: two(temp=85)):
        events += rec.record(s)
    for s in feed.run(15, lambda t: two(temp=91)):
        events += rec.record(s)
    for s in feed.run(30, lambda t: two(temp=60)):
        events += rec.record(s)
    assert [(e.event, e.alert.severity) for e in events] == [("raised", "warning"), ("changed", "critical"),
                                                              ("cleared", "critical")]
    assert [e.rings for e in events] == [True, True, False]
    assert rec.events == tuple(events)
    assert rec.active == ()

    log = Path(os.environ["XDG_STATE_HOME"]) / "gputui" / "alerts.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["event"] for x in lines] == ["raised", "changed", "cleared"]
    assert lines[0]["kind"] == "temperature" and lines[0]["gpu"] == 0 and lines[0]["host"] == "synthetic"
    assert lines[0]["since"] == events[0].alert.since.isoformat(timespec="seconds")
    assert rec.error is None


def test_recorder_without_a_file_and_with_an_unwritable_one(tmp_path):
    snap = Feed().step(two(temp=95))
    quiet = AlertRecorder(path=False)
    assert [e.event for e in quiet.record(snap)] == ["raised"]

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    broken = AlertRecorder(path=blocker / "alerts.jsonl")
    assert [e.event for e in broken.record(snap)] == ["raised"]  # the dashboard goes on
    assert broken.error is not None and broken.error.startswith("Cannot write the alert log")
    assert broken.error.count(".") >= 1 and "\n" not in broken.error


def test_unchanged_alerts_are_not_logged_twice():
    rec = AlertRecorder(path=False)
    feed = Feed()
    a = feed.step(two(temp=95))
    b = feed.step(two(temp=96))
    assert len(rec.record(a)) == 1
    assert rec.record(b) == ()


@pytest.mark.parametrize("hold", [0.0, 10.0])
def test_hold_setting_is_respected(hold):
    feed = Feed(Settings(alert_hold=hold))
    feed.run(30, lambda t: two(temp=60))
    snap = feed.step(two(temp=88))
    assert (of(snap, "temperature") is not None) is (hold == 0.0)


def test_flapping_from_the_first_sample_raises_once_and_does_not_flicker():
    # The dashboard's first seconds: a one-sample verdict raises, but clearing needs the full hold.
    feed = Feed()
    rec = AlertRecorder(path=False)
    events = []
    for i in range(40):
        events += rec.record(feed.step(two(throttle=("sw_power_cap",) if i % 2 == 0 else ())))
    assert [e.event for e in events] == ["raised"]
    events = []
    for s in feed.run(15, lambda t: two()):
        events += rec.record(s)
    assert [e.event for e in events] == ["cleared"]
