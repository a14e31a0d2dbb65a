"""The shipped history recording rules and the recorder's systemd unit, checked by the tools that
load them (promtool, systemd-analyze)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.prometheus import promtool

pytestmark = pytest.mark.functional

CONTRIB = Path(__file__).resolve().parent.parent / "contrib"
RULES = CONTRIB / "prometheus" / "gputui-history-rules.yml"
UNIT = CONTRIB / "systemd" / "gputui-record.service"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], check=False, capture_output=True, text=True, timeout=120)


def test_history_rules_check_and_their_unit_tests_pass(tmp_path):
    res = _promtool("check", "rules", str(RULES))
    assert res.returncode == 0 and "SUCCESS: 20 rules found" in res.stdout, res.stdout + res.stderr
    res = _promtool("test", "rules", str(RULES.with_name("gputui-history-rules.test.yml")))
    assert res.returncode == 0, res.stdout + res.stderr
    # the unit tests catch a wrong rule: an idle threshold of 50 % makes alice's busy GPU idle
    broken = tmp_path / RULES.name
    broken.write_text(RULES.read_text().replace("< bool 0.05", "< bool 0.9"))
    shutil.copy(RULES.with_name("gputui-history-rules.test.yml"), tmp_path)
    res = _promtool("test", "rules", str(tmp_path / "gputui-history-rules.test.yml"))
    assert res.returncode != 0 and "user_gpus_idle_held" in res.stdout + res.stderr


def test_record_unit_verifies(tmp_path):
    text = UNIT.read_text()
    for directive in ("ProtectSystem=strict", "StateDirectory=gputui", "Restart=on-failure", "UMask=0027",
                      "gputui record --db /var/lib/gputui/history.db"):
        assert directive in text
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace("/usr/local/bin/gputui", str(Path(sys.executable).with_name("gputui"))))
    res = subprocess.run([analyze, "verify", str(unit)], check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert UNIT.name not in res.stderr, res.stderr
