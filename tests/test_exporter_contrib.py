"""The shipped alerting rules and systemd unit: checked by the tools that will load them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.prometheus import promtool

pytestmark = pytest.mark.functional  # promtool and systemd-analyze in subprocesses

CONTRIB = Path(__file__).resolve().parent.parent / "contrib"
RULES = CONTRIB / "prometheus" / "gputui-rules.yml"
UNIT = CONTRIB / "systemd" / "gputui-exporter.service"


def test_rules_pass_promtool_check():
    res = subprocess.run([promtool(), "check", "rules", str(RULES)], check=False, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 6 rules found" in res.stdout


def test_rules_unit_tests_pass(tmp_path):
    res = subprocess.run([promtool(), "test", "rules", str(RULES.with_name("gputui-rules.test.yml"))],
                         check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # The unit tests can fail: a rule that never fires makes promtool report it.
    broken = tmp_path / "gputui-rules.yml"
    broken.write_text(RULES.read_text().replace("gputui_gpu_lost == 1", "gputui_gpu_lost == 2"))
    shutil.copy(RULES.with_name("gputui-rules.test.yml"), tmp_path)
    res = subprocess.run([promtool(), "test", "rules", str(tmp_path / "gputui-rules.test.yml")],
                         check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "GpuLost" in res.stdout + res.stderr


def test_systemd_unit_verifies_and_is_confined(tmp_path):
    text = UNIT.read_text()
    for directive in ("NoNewPrivileges=yes", "ProtectSystem=strict", "Restart=on-failure", "User=gputui",
                      "LimitNOFILE=", "--listen 127.0.0.1:9835"):
        assert directive in text
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    gputui = str(Path(sys.executable).with_name("gputui"))  # the console script of the venv running the tests
    unit = tmp_path / "gputui-exporter.service"
    unit.write_text(text.replace("/usr/local/bin/gputui", gputui))  # verify checks that the binary exists
    res = subprocess.run([analyze, "verify", str(unit)], check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gputui-exporter.service" not in res.stderr, res.stderr  # no warning about our unit


def test_the_shipped_unit_is_what_print_systemd_unit_writes_for_usr_local_bin():
    from gputui.exporter.systemd import unit

    assert UNIT.read_text() == unit(["/usr/local/bin/gputui"], ["--listen", "127.0.0.1:9835", "--interval", "1"])


def test_print_systemd_unit_runs_this_gputui_and_verifies(tmp_path):
    """The unit names the gputui that printed it (not /usr/local/bin), keeps the options given, and
    ``systemd-analyze verify`` accepts it where gputui is installed."""
    gputui = str(Path(sys.executable).with_name("gputui"))
    res = subprocess.run([gputui, "exporter", "--print-systemd-unit", "--listen", "0.0.0.0:9835", "--dcgm-names",
                          "--no-docker"], check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert f"\nExecStart={gputui} exporter --listen 0.0.0.0:9835 --interval 1 --dcgm-names --no-docker\n" in text
    assert "\nLimitNOFILE=65536\n" in text and "/usr/local/bin" not in text
    bad = subprocess.run([gputui, "exporter", "--print-systemd-unit", "--hostname", "a $(b)"], check=False,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1  # refused, not quoted
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "gputui-exporter.service"
    unit.write_text(text)
    res = subprocess.run([analyze, "verify", str(unit)], check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gputui-exporter.service" not in res.stderr, res.stderr
