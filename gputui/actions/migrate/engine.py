"""The executor on a real Docker daemon (:class:`DockerMigrationEngine`): locked, journaled, step by
step, undoing in reverse on any failure; ``recover`` finishes or undoes what a crash left.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.actions.container_ops import (
    STOP_GRACE,
    connect_networks,
    running_command,
    wait_stopped,
)
from gputui.actions.journal import Journal, PendingJournal, pending_journals
from gputui.actions.locks import ContainerLock, LockHeld
from gputui.actions.migrate.body import endpoint_macs, keep_endpoint_macs, name_of, policy_text
from gputui.actions.migrate.files import (
    commit_layer,
    drop_layer_image,
    missing_networks,
    read_files,
    rejoin_networks,
    undo_layer,
)
from gputui.actions.migrate.files import (
    layer_audit as _layer_audit,
)
from gputui.actions.migrate.model import (
    BACKUP_INFIX,
    READ_ONLY,
    STEP_TEXT,
    STEPS,
    MigrationHooks,
    MigrationNotFound,
    MigrationPlan,
    MigrationRefused,
    MigrationResult,
    MigrationRun,
    MigrationUnavailable,
    ProgressFn,
)
from gputui.actions.migrate.plan import container_usage, observed_peak, plan_migration, runtime_refusal
from gputui.actions.migrate.record import audit_intent, audit_migration, notify, unreachable
from gputui.actions.migrate.recovery import docker_now, is_successor, own_copy, risky_summary
from gputui.actions.migrate.verify import verify_container
from gputui.core.errors import clause
from gputui.core.model import Snapshot

if TYPE_CHECKING:
    pass


class DockerMigrationEngine:
    """Migrates containers through the Docker Engine API (docker SDK, low-level client)."""

    demo = False

    def __init__(self, client: Any, hooks: MigrationHooks | None = None, read_only: bool = False,
                 poll_interval: float = 0.25, sleep: Callable[[float], None] = time.sleep) -> None:
        #: a ``docker.DockerClient``; its ``.api`` is used
        self.client = client
        self.api = client.api
        self.hooks = hooks or MigrationHooks()
        self.read_only = read_only
        #: --recover --from-journal: the operator reviewed what the journal alone would create and said so
        self.from_journal = False
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._daemon: dict[str, str] | None = None
        #: the running execution's progress callback (the commit of a large layer reports through it)
        self._progress: ProgressFn | None = None

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass

    def daemon(self) -> dict[str, str]:
        """The daemon this engine acts on: ``docker info``'s ID and data root, and the endpoint (recorded in
        each journal)."""
        if self._daemon is None:
            from gputui.core.sources.docker_source import docker_host

            info = self.api.info()
            base = str(getattr(self.api, "base_url", "") or "")
            sock = getattr(getattr(self.api, "_custom_adapter", None), "socket_path", None)
            if isinstance(sock, str) and sock:
                endpoint = f"unix://{sock}"
            else:
                endpoint = docker_host() if base.startswith("http+docker://") or not base else base
            # Docker before 23 derives the ID from /etc/docker/key.json, which two daemons of one host share:
            # the data root tells them apart.
            self._daemon = {"id": str(info.get("ID") or "")[:200], "root": str(info.get("DockerRootDir") or "")[:500],
                            "endpoint": endpoint[:500]}
        return dict(self._daemon)

    def _podman(self) -> bool:
        """Whether the daemon is podman's Docker-compatible service (DOCKER_HOST may point there)."""
        from gputui.core.sources.podman import is_podman

        try:
            return is_podman(self.client.version())
        except Exception:
            return False

    # -- planning ----------------------------------------------------------------
    def inspect(self, container: str) -> dict[str, Any]:
        import docker

        try:
            attrs: dict[str, Any] = self.api.inspect_container(container)
            return attrs
        except docker.errors.NotFound:
            raise MigrationNotFound(f"There is no container named {container!r}.") from None
        except docker.errors.APIError as exc:
            # An id prefix that fits several containers (Docker 20.10 answers 500, later 400): the user's
            # words, not the daemon, are at fault.
            if 400 <= (exc.status_code or 0) < 500 or "multiple ids found" in clause(exc).lower():
                raise MigrationNotFound(f"Docker cannot tell which container {container!r} is: "
                                        f"{clause(exc)}.") from None
            raise MigrationUnavailable(f"Docker could not inspect {container}: {clause(exc)}.") from None
        except Exception as exc:
            raise MigrationUnavailable(unreachable(exc)) from None

    def plan(self, container: str, target: str | int, snapshot: Snapshot | None, *, force: bool = False,
             from_gpu: str | int | None = None, peak_memory: int | None = None,
             discard_changes: bool = False) -> MigrationPlan:
        import docker

        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        attrs = self.inspect(container)
        if self._podman():
            raise MigrationRefused("runtime", runtime_refusal(name_of(attrs), "podman") or "")
        try:
            others = []
            for c in self.api.containers(all=True):
                if c.get("Id") == attrs["Id"]:
                    continue
                try:
                    others.append(self.api.inspect_container(c["Id"]))
                except docker.errors.NotFound:
                    continue
            try:
                tag_id = self.api.inspect_image((attrs.get("Config") or {}).get("Image") or "")["Id"]
            except docker.errors.NotFound:
                tag_id = None
            try:
                image_config = self.api.inspect_image(attrs.get("Image") or "").get("Config") or {}
            except docker.errors.NotFound:
                image_config = None
            files = read_files(self.api, attrs, discard_changes)
        except Exception as exc:
            raise MigrationUnavailable(unreachable(exc)) from None
        gpus = snapshot.gpus if snapshot is not None else ()
        peak = max(peak_memory or 0, observed_peak(snapshot, attrs["Id"]) or 0) or None
        return plan_migration(attrs, gpus, target, others=others, image_tag_id=tag_id, image_config=image_config,
                              peak_memory=peak,
                              usage=container_usage(snapshot, attrs["Id"]), force=force, from_gpu=from_gpu,
                              files=files, api_version=getattr(self.api, "api_version", None))

    # -- execution ---------------------------------------------------------------
    def execute(self, plan: MigrationPlan, progress: ProgressFn | None = None,
                timeout: float = 5.0) -> MigrationResult:
        """Run the plan under the container's lock. Always returns; on failure the original container is
        back (or the journal says why not)."""
        if self.read_only:
            raise MigrationRefused("read-only", READ_ONLY)
        try:
            lock = ContainerLock.acquire("migrate", [plan.container_id, plan.container_name], plan.container_name)
        except LockHeld as exc:
            return self._refused(plan, str(exc), progress)
        except OSError as exc:
            return self._refused(plan, f"Cannot take the migration lock for {plan.container_name}: "
                                       f"{exc.strerror or exc}.", progress)
        for note in lock.notes:
            notify(progress, "journal", "info", note)
        try:
            refusal = self._changed_since(plan)
            if refusal:
                return self._refused(plan, refusal, progress)
            return self._execute(plan, progress, timeout)
        finally:
            lock.release()

    def _refused(self, plan: MigrationPlan, message: str, progress: ProgressFn | None) -> MigrationResult:
        notify(progress, "journal", "failed", message)
        audit_migration("refused", plan, reason=message)
        return MigrationResult(False, "refused", message, plan)

    def _changed_since(self, plan: MigrationPlan) -> str | None:
        """Why the plan no longer fits (checked under the lock: another migration may have just run)."""
        name = plan.container_name
        for pending in pending_journals("migrate"):  # only a journal root trusts may hold a container back
            if pending.trusted and {plan.container_id, name} & set(pending.lock_keys):
                return f"{name} has an interrupted migration; run 'gputui migrate --recover' first."
        now = self._safe_inspect(name)
        if now is None or now.get("Id") != plan.container_id:
            return f"{name} changed since the plan (it was recreated or removed); plan the migration again."
        if bool((now.get("State") or {}).get("Running")) != plan.was_running:
            return f"{name} was started or stopped since the plan; plan the migration again."
        return None

    def _execute(self, plan: MigrationPlan, progress: ProgressFn | None, timeout: float) -> MigrationResult:
        run = MigrationRun(plan=plan, client=self.client)
        self._progress = progress
        step = "journal"
        notify(progress, step, "running", STEP_TEXT[step])
        try:
            self.hooks.before(step, run)
            journal = Journal.create("migrate", plan.container_name, {**_journal_data(plan), "daemon": self.daemon()})
            journal.update(step="journal")
        except (Exception, KeyboardInterrupt) as exc:
            message = f"Migration of {plan.container_name} did not start: could not {STEP_TEXT[step]} ({clause(exc)})."
            notify(progress, step, "failed", message)
            audit_migration("failed", plan, step=step, error=clause(exc))
            return MigrationResult(False, "failed", message, plan, failed_step=step)
        problem = audit_intent(plan)  # on disk before the container is touched: nothing acts without a record
        if problem is not None:
            journal.finish()
            message = f"Migration of {plan.container_name} did not start: {problem}"
            notify(progress, step, "failed", message)
            return MigrationResult(False, "failed", message, plan, failed_step=step)
        notify(progress, step, "done", STEP_TEXT[step])

        runs = plan.was_running or plan.start_stopped
        try:
            for step in STEPS[1:-1]:
                skip = (step == "stop" and not plan.was_running) or (step in ("start", "verify") and not runs)
                if step == "restart-policy" and plan.restart_policy.get("Name") in (None, "", "no"):
                    notify(progress, step, "skipped", "the old container's restart policy is already 'no'")
                    continue
                if skip:
                    notify(progress, step, "skipped", f"{STEP_TEXT[step]}: skipped, it was not running")
                    run.verified = run.verified or step == "verify"
                    journal.update(step=step, verified=run.verified)
                    continue
                notify(progress, step, "running", self._step_text(step, plan, timeout))
                self.hooks.before(step, run)
                getattr(self, "_do_" + step.replace("-", "_"))(run, journal, timeout)
                journal.update(step=step, new_id=run.new_id, verified=run.verified)
                notify(progress, step, "done", self._step_text(step, plan, timeout))
        except (Exception, KeyboardInterrupt) as exc:
            return self._fail(run, journal, step, exc, progress)

        # Verified: from here on the new container stays, whatever happens to the old one.
        step = "remove-old"
        notify(progress, step, "running", STEP_TEXT[step])
        try:
            self.hooks.before(step, run)
            self.api.remove_container(plan.container_id, v=False, force=True)
            drop_layer_image(self.api, plan.attrs)
        except (Exception, KeyboardInterrupt) as exc:
            message = (f"{plan.container_name} now runs on {plan.to_label}, but its backup "
                       f"{plan.backup_name} could not be removed ({clause(exc)}); 'gputui migrate --recover' "
                       f"removes it (keeping its volumes).")
            journal.release()
            notify(progress, step, "failed", message)
            audit_migration("ok", plan, new_id=run.new_id, warning=message)
            return MigrationResult(True, "ok", message, plan, run.new_id, journal=str(journal.path))
        journal.finish()
        notify(progress, step, "done", STEP_TEXT[step])
        message = f"{plan.container_name} moved from {plan.from_label} to {plan.to_label} ({plan.to_uuid})."
        if not runs:
            message += " It was not running, so the copy was not started and nothing was verified."
        elif plan.start_stopped:
            message += " The copy was started, verified and stopped again, as the original was stopped."
        audit_migration("ok", plan, new_id=run.new_id, **_layer_audit(plan, run))
        return MigrationResult(True, "ok", message, plan, run.new_id)

    @staticmethod
    def _step_text(step: str, plan: MigrationPlan, timeout: float) -> str:
        if step == "verify":
            extra = ""
            if plan.has_healthcheck:
                every = ((plan.body.get("Healthcheck") or {}).get("Interval") or 30_000_000_000) / 1e9
                extra = f" and healthy (its healthcheck runs every {every:g} s)"
            again = ", then stop it again" if plan.start_stopped and not plan.was_running else ""
            return f"{STEP_TEXT[step]}: still running after {timeout:g} s{extra}, not restarting{again}"
        if step == "stop":
            return (f"{STEP_TEXT[step]}: {plan.stop_signal}, waiting up to {plan.stop_timeout} s for it to exit "
                    f"before Docker kills it")
        if step == "rename":
            return f"{STEP_TEXT[step]} {plan.backup_name}"
        return STEP_TEXT[step]

    def _safe_inspect(self, cid: str) -> dict[str, Any] | None:
        try:
            attrs: dict[str, Any] = self.api.inspect_container(cid)
            return attrs
        except Exception:
            return None

    # The steps. Each records what it did on ``run`` so a rollback undoes exactly that.
    def _do_restart_policy(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.update_container(run.plan.container_id, restart_policy={"Name": "no", "MaximumRetryCount": 0})
        run.policy_changed = True

    def _do_stop(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        # dockerd sends the container's own StopSignal; the timeout is its StopTimeout (default 10 s).
        # Docker goes on with a stop after we give up or die: undo and recover wait for it (stop_issued_at).
        run.stopped = True  # set first: a stop that fails half-way must still be undone by a start
        run.stop_issued_at = time.time()
        journal.update(stop_issued_at=run.stop_issued_at)
        self.api.stop(run.plan.container_id, timeout=run.plan.stop_timeout)

    def _do_rename(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.rename(run.plan.container_id, run.plan.backup_name)
        run.renamed = True

    def _do_create(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        plan = run.plan
        body, connect = copy.deepcopy(plan.body), copy.deepcopy(list(plan.connect))
        if plan.was_running and endpoint_macs(getattr(self.api, "api_version", None)):
            # API >= 1.44: a stopped container's endpoints show only the MACs the user set.
            stopped = self._safe_inspect(plan.container_id) or {}
            keep_endpoint_macs(body, connect, stopped)
        if plan.layer_image:
            commit_layer(self.api, run, journal, self._progress, self._sleep)
        created = self.api.create_container_from_config(body, plan.container_name)
        run.new_id = created["Id"]
        journal.update(new_id=run.new_id)
        connect_networks(self.api, run.new_id, connect)
        runs = running_command(self.api.inspect_container(run.new_id))
        if plan.command is not None and runs is not None and tuple(runs) != plan.command:
            raise RuntimeError(f"the new container would run {json.dumps(runs)} instead of "
                               f"{json.dumps(list(plan.command))}")

    def _do_start(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        self.api.start(run.new_id)

    def _do_verify(self, run: MigrationRun, journal: Journal, timeout: float) -> None:
        assert run.new_id is not None, "verify follows create, which sets new_id"
        verify_container(self.api, run.new_id, run.plan, timeout, self.poll_interval, self._sleep)
        if not run.plan.was_running:
            self.api.stop(run.new_id, timeout=run.plan.stop_timeout)  # it was stopped: so is the copy
        run.verified = True

    def _fail(self, run: MigrationRun, journal: Journal, step: str, exc: BaseException,
              progress: ProgressFn | None) -> MigrationResult:
        plan = run.plan
        cause = f"could not {STEP_TEXT[step]} ({clause(exc)})"
        if isinstance(exc, KeyboardInterrupt):
            cause = f"was interrupted during '{step}'"
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else clause(exc)
        notify(progress, step, "failed", f"{STEP_TEXT[step]}: {what}")
        problems = self._undo(run, progress)
        if not problems:
            journal.finish()
            state = "running" if plan.was_running else "stopped"
            message = (f"Migration of {plan.container_name} failed: it {cause}; the original container is back "
                       f"({state}, restart policy {policy_text(plan.restart_policy)}).")
            audit_migration("rolled-back", plan, step=step, error=clause(exc))
            return MigrationResult(False, "rolled-back", message, plan, failed_step=step)
        journal.release()
        message = (f"Migration of {plan.container_name} failed: it {cause}, and putting the original back "
                   f"also failed ({'; '.join(problems)}); run 'gputui migrate --recover'.")
        audit_migration("failed", plan, step=step, error=clause(exc), rollback_errors=problems,
                        journal=str(journal.path))
        return MigrationResult(False, "failed", message, plan, run.new_id, failed_step=step,
                               journal=str(journal.path))

    def _undo(self, run: MigrationRun, progress: ProgressFn | None) -> list[str]:
        """Undo what ``run`` did, newest first. Returns what could not be undone (empty = all good)."""
        plan = run.plan
        problems: list[str] = []
        if run.new_id:
            notify(progress, "create", "undoing", "remove the new container")
            try:
                self.api.remove_container(run.new_id, v=False, force=True)
            except Exception as exc:
                if "No such container" not in clause(exc):
                    problems.append(f"removing the new container: {clause(exc)}")
        if plan.layer_image and run.layer_started:
            problem = undo_layer(self.api, run, progress)
            if problem:
                problems.append(problem)
        if run.renamed:
            notify(progress, "rename", "undoing", f"rename the old container back to {plan.container_name}")
            try:
                self.api.rename(plan.container_id, plan.container_name)
            except Exception as exc:
                problems.append(f"renaming it back: {clause(exc)}")
        if run.policy_changed:
            notify(progress, "restart-policy", "undoing", "restore the restart policy")
            try:
                self.api.update_container(plan.container_id, restart_policy=plan.restart_policy)
            except Exception as exc:
                problems.append(f"restoring its restart policy: {clause(exc)}")
        if run.stopped and plan.was_running:
            problem = self._start_again(plan.container_id, plan.container_name, run.stop_issued_at,
                                        plan.stop_timeout, progress)
            if problem:
                problems.append(problem)
        return problems

    def _start_again(self, cid: str, name: str, stop_issued_at: float | None, stop_timeout: float,
                     progress: ProgressFn | None) -> str | None:
        """Start the original again once any stop still in flight has finished; None if it runs."""
        try:
            state = (self._safe_inspect(cid) or {}).get("State") or {}
            if stop_issued_at is not None and state.get("Running"):
                deadline = stop_issued_at + stop_timeout + STOP_GRACE
                left = max(0.0, deadline - time.time())
                if left > 0:
                    notify(progress, "stop", "undoing", f"wait for the stop Docker is still carrying out "
                                                         f"(up to {left:.0f} s) before starting {name} again")
                    wait_stopped(self._safe_inspect, cid, deadline, self._sleep)
            notify(progress, "stop", "undoing", f"start {name} again")
            self.api.start(cid)
            if not self._wait_running(cid):
                return f"starting {name} again: it does not stay running"
        except Exception as exc:
            return f"starting {name} again: {clause(exc)}"
        return None

    def _wait_running(self, cid: str, seconds: float = 2.0) -> bool:
        """Running now and still running ``seconds`` later (a stop landing late would show)."""
        deadline = time.monotonic() + seconds
        while True:
            state = (self._safe_inspect(cid) or {}).get("State") or {}
            if not state.get("Running") or state.get("Restarting"):
                return False
            if time.monotonic() >= deadline:
                return True
            self._sleep(0.1)

    # -- recovery ----------------------------------------------------------------
    def belongs_here(self, pending: PendingJournal) -> bool | None:
        """Was the journal's migration on this engine's daemon? None when the journal does not say (older
        journals): then the containers it names must be found here (see :meth:`_recover`)."""
        theirs = pending.daemon
        if not theirs.get("id"):
            return None
        ours = self.daemon()
        return all(theirs.get(k) == ours.get(k) for k in ("id", "root") if theirs.get(k))

    def recover(self, pending: PendingJournal, progress: ProgressFn | None = None) -> MigrationResult:
        """Finish or undo an interrupted migration, judged from what Docker shows now (under its lock).

        Finish only when the journal says the new container passed verification and
        it still runs; otherwise undo: remove the new container, give the old one its
        name, restart policy and running state back (recreating it from the journal,
        networks and static addresses included, if it is gone). The journal is kept
        until the original verifiably runs.

        Only a journal this process may trust is acted on (:attr:`PendingJournal.trusted`), only on the
        daemon it was written on, and a container is removed only when Docker shows it to be the journal's
        own copy or backup (named so, made from the journal's image and labels): a journal cannot name a
        container for gputui to remove.
        """
        where = str(pending.path)
        if not pending.trusted:
            return MigrationResult(False, "skipped", pending.describe(), journal=where)
        try:
            here = self.belongs_here(pending)
        except Exception as exc:
            return MigrationResult(False, "failed", unreachable(exc), journal=where)
        if here is False:
            d = pending.daemon
            return MigrationResult(False, "other-daemon",
                                   f"The interrupted migration of {pending.container[0] or '?'} belongs to another "
                                   f"Docker daemon (ID {d.get('id')}, {d.get('endpoint') or 'endpoint unknown'}); "
                                   f"run with DOCKER_HOST={d.get('endpoint') or '...'}.", journal=where)
        try:
            lock = ContainerLock.acquire("migrate", pending.lock_keys, str(pending.lock_keys[-1:] or "?"))
        except LockHeld as exc:
            return MigrationResult(False, "busy", str(exc), journal=where)
        except OSError as exc:
            return MigrationResult(False, "failed", f"Cannot take the migration lock: {exc.strerror or exc}.",
                                   journal=where)
        for note in lock.notes:
            notify(progress, "journal", "info", note)
        try:
            return self._recover(Journal.take(pending), pending, progress, here)
        finally:
            lock.release()

    def _recover(self, journal: Journal, pending: PendingJournal, progress: ProgressFn | None,
                 here: bool | None = True) -> MigrationResult:
        d = journal.data
        name = str((d.get("container") or {}).get("name") or "?")
        orig_id = str((d.get("container") or {}).get("id") or "")
        summary = d.get("summary") or name
        try:
            backup = str(d.get("backup_name") or "")
            if not orig_id or not backup.startswith(name + BACKUP_INFIX):
                raise RuntimeError("the journal does not name the container and its backup")
            old = self._safe_inspect(orig_id)
            if old is not None and old.get("Id") != orig_id:
                old = None  # an id prefix that now fits another container: not the original
            if old is not None and name_of(old) not in (name, backup):
                raise RuntimeError(f"container {orig_id[:12]} is named {name_of(old)}, neither {name} nor the "
                                   f"backup name {backup}; nothing was changed")
            if here is None and old is None and self._safe_inspect(backup) is None:
                raise RuntimeError("the journal does not say which Docker daemon it belongs to, and this daemon "
                                   f"has neither {name}'s original ({orig_id[:12]}) nor its backup; run with the "
                                   "DOCKER_HOST of the daemon it was migrated on")
            new = self._find_new(d, name, orig_id, old)
            new_running = bool(new and (new.get("State") or {}).get("Running"))
            if d.get("verified") and new is not None and (new_running or not d.get("was_running", True)):
                if old is not None:
                    notify(progress, "remove-old", "running", f"remove the backup {name_of(old)} (keeping volumes)")
                    self.api.remove_container(orig_id, v=False, force=True)
                drop_layer_image(self.api, d.get("original") or {})
                journal.finish()
                message = f"Finished the interrupted migration: {summary}; the new container was verified."
                audit_migration("finished", None, container=name, container_id=orig_id, new_id=new.get("Id"),
                       recovered=True)
                return MigrationResult(True, "finished", message, new_id=new.get("Id"), journal=str(pending.path))
            missing = missing_networks(self.api, d)
            if missing:
                raise RuntimeError(missing)
            if new is not None and new.get("Id") != orig_id:
                notify(progress, "create", "undoing", "remove the new container")
                self.api.remove_container(new["Id"], v=False, force=True)
            layer = self._recover_layer(d, old is None, progress)
            if old is None:
                orig_id = self._recreate(journal, name, progress, layer)
            else:
                rejoin_networks(self.api, orig_id, old, d, progress)
                if name_of(old) != name:
                    notify(progress, "rename", "undoing", f"rename {name_of(old)} back to {name}")
                    self.api.rename(orig_id, name)
                policy = d.get("restart_policy") or {"Name": "no"}
                current = ((old.get("HostConfig") or {}).get("RestartPolicy") or {})
                if (current.get("Name"), current.get("MaximumRetryCount") or 0) != \
                        (policy.get("Name"), policy.get("MaximumRetryCount") or 0):
                    notify(progress, "restart-policy", "undoing", "restore the restart policy")
                    self.api.update_container(orig_id, restart_policy=policy)
            if d.get("was_running", True):
                problem = self._start_again(orig_id, name, d.get("stop_issued_at") if old is not None else None,
                                            float(d.get("stop_timeout") or 10), progress)
                if problem:
                    raise RuntimeError(problem)
        except Exception as exc:  # Docker's errors, requests' connection errors, ours
            journal.release()
            message = (f"Could not recover the interrupted migration of {name}: {clause(exc)}; "
                       f"the journal is kept at {pending.path}.")
            audit_migration("failed", None, container=name, container_id=orig_id, recovered=True, error=clause(exc))
            return MigrationResult(False, "failed", message, journal=str(pending.path))
        journal.finish()
        state = "running" if d.get("was_running", True) else "stopped"
        message = f"Undid the interrupted migration of {name}: the original container is back ({state})."
        audit_migration("undone", None, container=name, container_id=orig_id, recovered=True)
        return MigrationResult(True, "undone", message, journal=str(pending.path))

    def _find_new(self, d: dict[str, Any], name: str, orig_id: str,
                  old: dict[str, Any] | None) -> dict[str, Any] | None:
        """The copy the interrupted run created, if any: a container Docker shows to be the journal's successor
        (under the container's name, from the journal body's image, with the original's labels, made after
        the original). A journal naming any other container gets it neither finished nor removed."""
        if d.get("new_id"):
            new = self._safe_inspect(str(d["new_id"]))
            if new is None:
                return None
            if not is_successor(new, d, name, orig_id, old):
                raise RuntimeError(f"the journal names container {str(d['new_id'])[:12]} ({name_of(new)}) as the "
                                   f"new copy of {name}, but Docker shows it is not; nothing was changed")
            return new
        if d.get("step") != "rename":
            return None
        # Created, but the process died before journaling its id: the container under the
        # name is ours only if it is the body we posted (same image and labels).
        holder = self._safe_inspect(name)
        if holder is not None and is_successor(holder, d, name, orig_id, old):
            return holder
        return None

    def _recover_layer(self, d: dict[str, Any], keep: bool, progress: ProgressFn | None) -> str | None:
        """The image the interrupted run committed the original's files into: kept (and returned) when the
        original is gone and must be recreated from it, removed otherwise (the original still has them)."""
        image = d.get("layer_image")
        if not image:
            return None
        try:
            found = self.api.inspect_image(image)
        except Exception:
            return None
        if keep:
            return str(found.get("Id") or image)
        notify(progress, "create", "undoing", f"remove the image {image} the original's files were committed into")
        try:
            self.api.remove_image(image)
        except Exception:
            pass  # a container still uses it: it stays, like any image in use
        return None

    def _recreate(self, journal: Journal, name: str, progress: ProgressFn | None, layer: str | None = None) -> str:
        """The original is gone (its backup was removed): create it again from the journal (from the image its
        own files were committed into, when the interrupted run got that far). The copy's id is journaled as
        soon as Docker returns it (and when a recover began), so a later --recover takes a copy this one left
        half-made (e.g. a network was pruned) as its own instead of finding the name taken."""
        d = journal.data
        holder = self._safe_inspect(name)
        if holder is not None:
            if not own_copy(holder, d):
                raise RuntimeError(f"the original container is gone and the name {name} is taken by container "
                                   f"{holder.get('Id', '')[:12]}; rename or remove that one and run --recover "
                                   "again")
            notify(progress, "create", "undoing", f"take over the copy of {name} an earlier --recover made")
            cid = str(holder["Id"])
        else:
            if not self.from_journal:  # Docker keeps neither container: only the journal vouches for the body
                raise RuntimeError(f"the original container {name} and its backup are both gone, and gputui does "
                                   f"not create a container from its journal alone ({risky_summary(d)}); review "
                                   f"that and run 'gputui migrate --recover {name} --from-journal'")
            journal.update(recover_started=docker_now())
            notify(progress, "create", "undoing", f"recreate {name} from the journal")
            body = copy.deepcopy(d.get("original_body") or {})
            if layer:
                body["Image"] = layer
            cid = str(self.api.create_container_from_config(body, name)["Id"])
            journal.update(recreated_id=cid)
        joined = set(((self._safe_inspect(cid) or {}).get("NetworkSettings") or {}).get("Networks") or {})
        connect_networks(self.api, cid, [c for c in d.get("connect") or [] if c and c[0] not in joined])
        return cid


def _journal_data(plan: MigrationPlan) -> dict[str, Any]:
    """What the journal keeps before anything changes: enough for --recover to finish or undo the move."""
    return {
        "summary": f"{plan.summary()} (backup {plan.backup_name})",
        "container": {"id": plan.container_id, "name": plan.container_name},
        "backup_name": plan.backup_name,
        "to_gpu": plan.to_gpu,
        "to_uuid": plan.to_uuid,
        "restart_policy": plan.restart_policy,
        "was_running": plan.was_running,
        "stop_timeout": plan.stop_timeout,
        "stop_issued_at": None,
        "new_id": None,
        "verified": False,
        "original_body": plan.original_body,
        "body": plan.body,
        "connect": [list(c) for c in plan.connect],
        "layer_image": plan.layer_image,
        "layer_image_id": None,
        "networks": plan.networks,
        "plan": plan.to_json(),
        "original": plan.attrs,
    }
