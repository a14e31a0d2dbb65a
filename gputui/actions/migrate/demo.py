"""The demo engine (:class:`DemoMigrationEngine`): the same planner against the simulated server of
``--demo``, so the CLI and the UI run one code path there too.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import TYPE_CHECKING, Any

from gputui.actions.migrate.model import (
    READ_ONLY,
    STEP_TEXT,
    STEPS,
    MigrationHooks,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    MigrationResult,
    MigrationRun,
    ProgressFn,
)
from gputui.actions.migrate.plan import container_usage, observed_peak, plan_migration
from gputui.actions.migrate.record import audit_migration, notify
from gputui.core.errors import clause
from gputui.core.model import Snapshot

if TYPE_CHECKING:
    from gputui.core.demo import DemoMachine


def demo_attrs(sim: DemoMachine, name_or_id: str) -> dict[str, Any]:
    """Inspect-shaped data for a simulated container, so the demo runs the real planner."""
    c = sim.container_by_name(name_or_id)
    if c is None:
        raise MigrationNotFound(f"There is no container named {name_or_id!r} on the demo server.")
    env = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"]
    if c.cuda_visible_devices is not None:
        env.append(f"CUDA_VISIBLE_DEVICES={c.cuda_visible_devices}")
    hc: dict[str, Any] = {"NetworkMode": "bridge", "RestartPolicy": {"Name": c.restart_policy,
                                                                      "MaximumRetryCount": 0},
                          "Binds": None, "DeviceRequests": None}
    grant = c.grant
    if c.grant_source == "nvidia_runtime_env":
        hc["Runtime"] = "nvidia"
        env.append("NVIDIA_VISIBLE_DEVICES=" + ("all" if grant == "all" else ",".join(grant)))
    else:
        hc["Runtime"] = "runc"
        hc["DeviceRequests"] = [{"Driver": "", "Count": -1 if grant == "all" else 0,
                                 "DeviceIDs": None if grant == "all" else list(grant),
                                 "Capabilities": [["gpu"]], "Options": {}}]
    labels = dict(c.labels)
    if c.compose_project:
        labels.setdefault("com.docker.compose.project", c.compose_project)
        labels.setdefault("com.docker.compose.service", c.compose_service or c.name)
    image_id = "sha256:" + hashlib.sha256(c.image.encode()).hexdigest()
    return {
        "Id": c.id,
        "Name": "/" + c.name,
        "Image": image_id,
        "State": {"Status": c.state, "Running": c.state == "running", "Paused": c.state == "paused",
                  "Restarting": False, "Dead": False},
        "Config": {"Hostname": c.id[:12], "Image": c.image, "Env": env, "Labels": labels},
        "HostConfig": hc,
        "Mounts": [],
        "NetworkSettings": {"Networks": {"bridge": {"Aliases": None}}},
        "RestartCount": 0,
    }


class DemoMigrationEngine:
    """Migrates containers of the simulated server: same planner, same steps, nothing real changes."""

    demo = True

    def __init__(self, sim: DemoMachine, read_only: bool = False, step_delay: float = 0.05,
                 hooks: MigrationHooks | None = None) -> None:
        self.sim = sim
        self.read_only = read_only
        self.step_delay = step_delay
        self.hooks = hooks or MigrationHooks()
        self._lock = threading.Lock()

    def close(self) -> None:
        pass

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None,
             discard_changes: bool = False) -> MigrationPlan:
        # The simulated containers have no files of their own: there is nothing to carry or discard.
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        attrs = demo_attrs(self.sim, container)
        gpus = snapshot.gpus if snapshot is not None else self.sim.read().gpus
        peak = max(peak_memory or 0, observed_peak(snapshot, attrs["Id"]) or 0) or None
        return plan_migration(attrs, gpus, target, image_tag_id=attrs["Image"], peak_memory=peak,
                              usage=container_usage(snapshot, attrs["Id"]), force=force, from_gpu=from_gpu,
                              demo=True)

    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult:
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        run = MigrationRun(plan=plan)
        with self._lock:
            for step in STEPS:
                text = f"{STEP_TEXT[step]} (simulated)"
                notify(progress, step, "running", text)
                try:
                    self.hooks.before(step, run)
                    if step == "create":
                        self.sim.move_container(plan.container_id, plan.to_gpu, plan.to_mig)
                        run.new_id = plan.container_id
                except Exception as exc:
                    message = (f"Migration of {plan.container_name} failed: it could not {STEP_TEXT[step]} "
                               f"({clause(exc)}); the simulated container was left as it was.")
                    notify(progress, step, "failed", message)
                    audit_migration("rolled-back", plan, step=step, error=clause(exc))
                    return MigrationResult(False, "rolled-back", message, plan, failed_step=step, demo=True)
                if self.step_delay:
                    time.sleep(self.step_delay)
                notify(progress, step, "done", text)
        message = (f"{plan.container_name} moved from {plan.from_label} to {plan.to_label} on the simulated "
                   f"server (demo: nothing real changed).")
        audit_migration("ok", plan, new_id=run.new_id)
        return MigrationResult(True, "ok", message, plan, run.new_id, demo=True)
