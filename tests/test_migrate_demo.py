"""Migration on the demo server: the same planner and steps, acting on the simulation; the CLI's rules."""

from __future__ import annotations

import io
import json
import time

import pytest

from gputui.actions.audit import audit_path
from gputui.actions.migrate import (
    STEPS,
    DemoMigrationEngine,
    MigrationHooks,
    MigrationRefused,
    engine_for,
)
from gputui.cli import main
from gputui.core.config import Settings
from gputui.core.machine import open_machine


@pytest.fixture
def demo():
    machine = open_machine(demo=True, demo_clock=lambda: 1_780_000_000.0)
    poller = machine.poller(Settings())
    yield machine, poller
    poller.close()


def _gpus_of(snapshot, name):
    return sorted({p.gpu_index for p in snapshot.processes if p.container and p.container.name == name})


def test_demo_migration_moves_the_simulated_container_and_is_audited(demo):
    machine, poller = demo
    before = poller.poll()
    assert _gpus_of(before, "bert-finetune") == [0]
    engine = engine_for(machine, Settings())
    assert isinstance(engine, DemoMigrationEngine) and engine.demo
    plan = engine.plan("bert-finetune", "6", before)
    assert plan.demo and plan.from_all and plan.to_gpu == 6
    seen = []
    result = engine.execute(plan, progress=seen.append)
    assert result.ok and "simulated server" in result.message
    assert [p.step for p in seen if p.state == "done"] == list(STEPS)
    after = poller.poll()
    assert _gpus_of(after, "bert-finetune") == [6]
    # The container inventory refreshes on its own thread; an action asks for a refresh at once.
    poller.watcher.refresh_now()
    deadline = time.monotonic() + 5
    while after.container("bert-finetune").gpus == "all" and time.monotonic() < deadline:
        time.sleep(0.05)
        after = poller.poll()
    assert after.container("bert-finetune").gpus == (after.gpu(6).uuid,)
    record = json.loads(audit_path(demo=True).read_text().splitlines()[-1])
    assert record["action"] == "migrate" and record["result"] == "ok" and record["demo"] is True
    assert (record["container"], record["from_gpus"], record["to_gpu"]) == ("bert-finetune", "all", 6)


def test_demo_failure_leaves_the_simulation_alone(demo):
    machine, poller = demo
    snap = poller.poll()

    class FailCreate(MigrationHooks):
        def before(self, step, run):
            if step == "create":
                raise RuntimeError("injected")

    engine = engine_for(machine, Settings(), hooks=FailCreate())
    result = engine.execute(engine.plan("llama-train", "1", snap))  # GPU 5 is a MIG card
    assert not result.ok and result.failed_step == "create"
    assert _gpus_of(poller.poll(), "llama-train") == [0]


def test_demo_refuses_in_read_only_mode(demo):
    machine, poller = demo
    with pytest.raises(MigrationRefused, match="read-only"):
        engine_for(machine, Settings(read_only=True)).plan("bert-finetune", "6", poller.poll())


def run_cli(*argv):
    import contextlib

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_cli_demo_migrate_says_it_is_a_simulation():
    code, out, err = run_cli("migrate", "--demo", "bert-finetune", "--to", "6", "--yes", "--timeout", "0")
    assert code == 0, err
    assert "demo: this acts on the simulated server only" in out
    assert "bert-finetune moved from all GPUs to GPU 6 on the simulated server" in out
    assert "[ok] 8/8 remove the old container (keeping its volumes) (simulated)" in out


def test_cli_dry_run_prints_plan_and_diff_and_changes_nothing():
    code, out, err = run_cli("migrate", "--demo", "llama-train", "--to", "1", "--dry-run")
    assert code == 0, err
    assert '- HostConfig.DeviceRequests[0].DeviceIDs = ["0"]' in out
    assert "Dry run: nothing was changed." in out
    assert "device_ids:" in out  # compose-managed: the compose change is printed
    assert not audit_path().exists() and not audit_path(demo=True).exists()


@pytest.mark.parametrize("argv,code,message", [
    (("--read-only", "bert-finetune", "--to", "6", "--yes"), 1, "Migration is disabled: gputui runs read-only"),
    (("bert-finetune", "--to", "6"), 2, "stdin is not a terminal; add --yes"),
    (("nobody", "--to", "6", "--yes"), 2, "There is no container named 'nobody'"),
    (("bert-finetune", "--to", "12", "--yes"), 2, "There is no GPU '12'"),
    (("vllm-cache", "--to", "0", "--yes"), 1, "use --force to move it anyway"),
    (("bert-finetune",), 2, "gputui migrate CONTAINER --to GPU"),
])
def test_cli_refusals_are_one_sentence_with_the_documented_exit_code(argv, code, message, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    got, out, err = run_cli("migrate", "--demo", *argv)
    assert got == code
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_read_only_from_the_config_file(isolated_xdg):
    cfg = isolated_xdg / "config" / "gputui"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("read_only = true\n")
    code, out, err = run_cli("migrate", "--demo", "bert-finetune", "--to", "6", "--yes")
    assert code == 1 and "read-only" in err
    record = json.loads(audit_path(demo=True).read_text().splitlines()[-1])
    assert record["result"] == "refused"
