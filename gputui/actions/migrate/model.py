"""What a migration is made of: its steps and their wording, the errors, the plan, progress, the
result, the test hooks, one run's state and the engine protocol. Plain data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gputui.core.grants import GrantForm
from gputui.core.model import Snapshot
from gputui.core.record import field, record
from gputui.core.safe_text import clean as clean_text
from gputui.core.units import fmt_bytes

if TYPE_CHECKING:
    pass


#: The executor's steps, in order. Progress callbacks and hooks receive these names.
STEPS: tuple[str, ...] = ("journal", "restart-policy", "stop", "rename", "create", "start", "verify", "remove-old")

STEP_TEXT = {
    "journal": "write the journal",
    "restart-policy": "set the old container's restart policy to 'no'",
    "stop": "stop the old container",
    "rename": "rename the old container to its backup name",
    "create": "create the new container",
    "start": "start the new container",
    "verify": "verify the new container",
    "remove-old": "remove the old container (keeping its volumes)",
}

#: The infix of backup names: ``<name>-gputui-old-<timestamp>``.
BACKUP_INFIX = "-gputui-old-"
#: The one sentence every read-only refusal of a migration gives (plan, execute, the CLI, the demo).
READ_ONLY = "Migration is disabled: gputui runs read-only (--read-only or read_only in the config file)."

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def size_text(value: int | float | None) -> str:
    """A file size as a person reads it: 12 bytes, 4.0 KiB, 300.0 KiB, 5.0 MiB, 1.0 GiB."""
    if value is None:
        return "size unknown"
    if value < 1024:
        return f"{int(value)} byte{'s' if value != 1 else ''}"
    for unit, scale in (("KiB", 1024), ("MiB", 1024**2)):
        if value < scale * 1024:
            return f"{value / scale:.1f} {unit}"
    return fmt_bytes(value, "GiB")


# -- errors ---------------------------------------------------------------------------


class MigrationRefused(Exception):
    """Preflight said no. ``str(exc)`` is one sentence; ``kind`` is machine-readable."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MigrationNotFound(Exception):
    """The container (or GPU) the user named does not exist. One sentence."""


class MigrationUnavailable(Exception):
    """The container engine cannot be reached. One sentence."""


@record
class MigrationPlan:
    """Everything the executor needs and everything a person should see before saying yes."""

    container_id: str
    container_name: str
    #: The image as the user knows it (the tag), and what the new container is created from.
    image: str
    image_ref: str
    grant_form: GrantForm
    grant_before: str
    grant_after: str
    #: Host GPU indices the container leaves ("all" when it was granted every GPU).
    from_gpus: tuple[int, ...]
    from_all: bool
    to_gpu: int
    to_uuid: str
    backup_name: str
    stop_timeout: int
    stop_signal: str
    restart_policy: dict[str, Any] = field(hash=False, compare=False, repr=False)
    was_running: bool = True
    #: Stopped, but dockerd would start it at its next start (restart policy always): the copy is
    #: started, verified and stopped again, so Docker treats it the same.
    start_stopped: bool = False
    has_healthcheck: bool = False
    #: argv the container runs now; the copy must run the same (checked after create).
    command: tuple[str, ...] | None = None
    #: The create body (inspect-shaped Config + HostConfig + NetworkingConfig) of the new container.
    body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    #: The same body with the original grant: what recreates the original if all else is lost.
    original_body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    #: Networks joined after create (the API takes one at create time): (network, endpoint config).
    connect: tuple[tuple[str, dict[str, Any]], ...] = field(default=(), hash=False, compare=False, repr=False)
    #: "- path = old" / "+ path = new" lines: the grant change and nothing else.
    diff: tuple[str, ...] = ()
    #: What is carried over that a person may want to double-check (volumes, image pin, ...).
    keeps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: For compose-managed containers: the compose-file change that makes the move stick.
    compose_change: str | None = None
    peak_memory: int | None = None
    forced: bool = False
    demo: bool = False
    #: The target MIG device's index on GPU ``to_gpu`` (``to_uuid`` is then its MIG- UUID), None for a whole GPU.
    to_mig: int | None = None
    #: The MIG devices the container leaves ("5:0"), when it held MIG devices.
    from_migs: tuple[str, ...] = ()
    #: The original inspect data, written to the journal before anything changes.
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    #: The container's own filesystem outside volumes: paths changed since the image, their size
    #: (``SizeRw``; None when Docker did not say) and a few of them as ``docker diff`` writes them.
    layer_paths: int = 0
    layer_bytes: int | None = None
    layer_sample: tuple[str, ...] = ()
    #: The image the stopped original is committed into (the copy is created from it); None when
    #: nothing is carried (no changes, or ``--discard-changes``).
    layer_image: str | None = None
    layer_discarded: bool = False
    #: tmpfs mounts: (path, bytes it holds or None, why it could not be measured).
    tmpfs: tuple[tuple[str, int | None, str], ...] = ()
    #: The networks the container is on, as ``docker network inspect`` shows them (name -> facts), so
    #: one removed while a migration was interrupted can be named with the command that recreates it.
    networks: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def from_label(self) -> str:
        if self.from_all:
            return "all GPUs"
        if self.from_migs:
            return "MIG device " + ", ".join(self.from_migs)
        if not self.from_gpus:
            return "an unknown GPU"
        return "GPU " + ", ".join(str(i) for i in self.from_gpus)

    @property
    def to_label(self) -> str:
        """"GPU 6", or "MIG device 5:2" for a MIG device."""
        return f"GPU {self.to_gpu}" if self.to_mig is None else f"MIG device {self.to_gpu}:{self.to_mig}"

    def summary(self) -> str:
        """One line: "bert-finetune: all GPUs -> GPU 6"."""
        return f"{self.container_name}: {self.from_label} -> {self.to_label}"

    def describe(self) -> str:
        """The multi-line plan printed by ``--dry-run`` and shown by the dialog."""
        lines = [
            f"Migrate container {self.container_name} ({self.container_id[:12]}) "
            f"from {self.from_label} to {self.to_label} ({self.to_uuid}).",
            f"  grant now:   {self.grant_before}",
            f"  grant after: {self.grant_after}",
        ]
        if self.peak_memory:
            lines.append(f"  observed peak GPU memory: {fmt_bytes(self.peak_memory)}")
        lines.append("Configuration change (everything else is copied as it is):")
        lines.extend(f"  {d}" for d in self.diff)
        if self.keeps:
            lines.append("Carried over:")
            lines.extend(f"  {k}" for k in self.keeps)
        lines.extend(self.filesystem_lines())
        lines.append("Steps:")
        for n, step in enumerate(STEPS, 1):
            text = STEP_TEXT[step]
            if step == "stop":
                text += f" ({self.stop_signal}, up to {self.stop_timeout} s)"
            if step == "rename":
                text += f" {self.backup_name}"
            if step == "create" and self.layer_image:
                text += f" from {self.layer_image} (first commit the stopped original's own files into it)"
            if step == "remove-old" and self.layer_image:
                text += "; the image it was committed into stays while the copy uses it"
            if step == "restart-policy" and self.restart_policy.get("Name") in (None, "", "no"):
                text += " (already 'no')"
            if step == "stop" and not self.was_running or \
                    step in ("start", "verify") and not (self.was_running or self.start_stopped):
                text += " (skipped: the container is not running)"
            elif step == "verify" and self.start_stopped:
                text += ", then stop it again (the original was stopped)"
            lines.append(f"  {n}. {text}")
        lines.append(f"Logs: 'docker logs' of the copy starts empty; the old container's logs are deleted with "
                     f"it at step {len(STEPS)} (save them first: docker logs {self.container_name} > FILE).")
        for w in self.warnings:
            lines.append(f"Warning: {w}")
        if self.compose_change:
            lines.append("To make the move survive the next 'docker compose up', change the compose file:")
            lines.extend(f"  {ln}" for ln in self.compose_change.splitlines())
        # names, labels and env values are other people's text: one rule before any terminal sees them
        return "\n".join(clean_text(ln) for ln in lines)

    def filesystem_lines(self) -> list[str]:
        """What happens to the files in the container's own filesystem (outside volumes) and its tmpfs."""
        lines = ["Container filesystem (outside volumes):"]
        size = size_text(self.layer_bytes)
        count = f"{self.layer_paths} path{'s' if self.layer_paths != 1 else ''} ({size})"
        if not self.layer_paths:
            lines.append("  no file added, changed or deleted since the image: nothing to carry")
        elif self.layer_discarded:
            lines.append(f"  {count} changed since the image are DISCARDED (--discard-changes): the copy "
                         f"starts from the image {self.image_ref} as it is")
        else:
            lines.append(f"  {count} changed since the image are carried: the stopped original is committed "
                         f"into image {self.layer_image} (deletions, modes, owners and times kept) and the copy "
                         f"is created from it")
        lines.extend(f"    {c}" for c in self.layer_sample)
        if self.layer_paths > len(self.layer_sample) and self.layer_sample:
            lines.append(f"    ... and {self.layer_paths - len(self.layer_sample)} more (docker diff "
                         f"{self.container_name})")
        for path, used, why in self.tmpfs:
            held = (f"holds {size_text(used)}" if used else "empty") if used is not None else f"not measured: {why}"
            lines.append(f"  tmpfs {path}: contents lost ({held})")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container_name,
            "container_id": self.container_id,
            "from_gpus": "all" if self.from_all else list(self.from_gpus),
            "to_gpu": self.to_gpu,
            "to_mig": self.to_mig,
            "to_uuid": self.to_uuid,
            "grant_before": self.grant_before,
            "grant_after": self.grant_after,
            "diff": list(self.diff),
            "warnings": list(self.warnings),
            "compose_change": self.compose_change,
            "demo": self.demo,
            "layer": {"paths": self.layer_paths, "bytes": self.layer_bytes, "image": self.layer_image,
                      "discarded": self.layer_discarded},
            "tmpfs": [{"path": p, "bytes": b, "unmeasured": w or None} for p, b, w in self.tmpfs],
        }


# -- execution ------------------------------------------------------------------------

ProgressState = Literal["running", "done", "skipped", "failed", "undoing", "undone", "info"]


@record
class Progress:
    """One step's state, posted to the progress callback (the UI shows these as a checklist)."""

    step: str
    number: int
    total: int
    state: ProgressState
    message: str

    def line(self) -> str:
        mark = {"running": "..", "done": "ok", "skipped": "--", "failed": "!!", "undoing": "<-", "undone": "<-",
                "info": "  "}[self.state]
        return f"[{mark}] {self.number}/{self.total} {self.message}"


ProgressFn = Callable[[Progress], object]  # what it returns is ignored


@record
class MigrationResult:
    ok: bool
    #: "ok", "rolled-back" (failed, original restored), "failed" (failed and not fully restored: see journal),
    #: "finished" / "undone" (by --recover), "refused" (locked or changed since the plan),
    #: "busy" (--recover: another gputui holds the container's lock)
    result: str
    message: str
    plan: MigrationPlan | None = None
    new_id: str | None = None
    failed_step: str | None = None
    journal: str | None = None
    demo: bool = False


class MigrationHooks:
    """The test seam: called before every step with the step name and the run's state.

    A hook that raises makes that step fail (the executor rolls back). Tests use it
    to fail create, start or verify, or to kill the process between two steps.
    """

    def before(self, step: str, run: MigrationRun) -> None:
        return None


@record(frozen=False)
class MigrationRun:
    """Mutable state of one execution (what has been done, so what to undo)."""

    plan: MigrationPlan
    client: Any = None
    new_id: str | None = None
    policy_changed: bool = False
    stopped: bool = False
    renamed: bool = False
    verified: bool = False
    stop_issued_at: float | None = None
    #: the image id the writable layer was committed into (removed again if the migration is undone)
    layer_image_id: str | None = None
    #: the commit was asked for (so an undo removes its image), the thread carrying it, how long it took
    layer_started: bool = False
    commit_thread: Any = None
    commit_seconds: float | None = None


class MigrationEngine(Protocol):
    """What the CLI and the UI migrate through: Docker on a real machine, the simulation in --demo."""

    demo: bool

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None,
             discard_changes: bool = False) -> MigrationPlan: ...

    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult: ...

    def close(self) -> None: ...
