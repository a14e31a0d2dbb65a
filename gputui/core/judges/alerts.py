"""Alerts: conditions worth interrupting someone for, with thresholds and hysteresis.

Kinds (one alert per GPU and kind at a time; ``since`` is when its condition began
and stays put while the alert is active, through severity changes):

==============  ========================================================  ===================
kind            raised when                                               severity
==============  ========================================================  ===================
temperature     temperature >= ``temp_warning`` (83 °C) /                 warning / critical
                >= ``temp_critical`` (90 °C); clears ``temp_hysteresis``
                (5 °C) below the threshold
throttle        a thermal or power clock-event reason is active           warning (software
                (:data:`~gputui.core.model.THERMAL_OR_POWER`)              cap) / critical
                                                                          (hardware slowdown)
memory-full     memory >= ``memory_full`` (95%) used; clears              warning
                ``memory_hysteresis`` (5 points) lower; judged for the card
                and for each of its MIG devices
suspect         near-full utilization with no process and next to no      warning
                memory (:mod:`~gputui.core.judges.suspect`)
lost            the GPU fell off the bus or stopped answering             critical
imbalance       the imbalance judge flags (it has its own hysteresis)     warning
==============  ========================================================  ===================

Each condition goes through a :class:`~gputui.core.judges.hysteresis.Latch`:
it must hold ``alert_hold`` seconds (10) to raise and fail as long to clear, so
a DCGM-style alert that fires on every daily spike does not happen here. While
the observation is shorter than the hold (a one-shot), what is seen raises at
once; clearing always takes the full hold. A lost GPU raises at once (there is
nothing to wait for) and clears only after the hold. The imbalance alert mirrors
the imbalance judge, whose own hysteresis already applies.

:class:`AlertJudge` is pure apart from its latches. Turning the alerts of
successive snapshots into events — the session's alert history shown by the
panel, the terminal bell and the JSON-lines log in ``$XDG_STATE_HOME/gputui/`` —
is :class:`AlertRecorder`'s job, which the dashboard calls for every snapshot;
keeping the file out of the judge keeps one-shot commands (``snapshot --json``
run from cron every minute) from re-logging the same alerts on every run, and
keeps the judge testable without a file system.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from operator import is_
from typing import TYPE_CHECKING, Any, Literal

from gputui.core.config import Settings
from gputui.core.history import History
from gputui.core.judges.conditions import Condition
from gputui.core.judges.hysteresis import IDLE, Latch, advance, effective_hold
from gputui.core.judges.imbalance import contrast_head, judged_conditions
from gputui.core.judges.suspect import suspect, suspect_message
from gputui.core.judges.text import join_and, over
from gputui.core.model import THERMAL_OR_POWER, Alert, Gpu, Imbalance, Severity, Snapshot
from gputui.core.record import record
from gputui.core.units import fmt_percent, fmt_size, used_percent

if TYPE_CHECKING:
    from pathlib import Path

#: Plain words for the throttle reasons that alerts call out.
THROTTLE_WORDS = {
    "sw_power_cap": "its power cap",
    "hw_slowdown": "a hardware slowdown (heat or an external power brake)",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "an external power brake",
}
#: Reasons where the hardware itself pulled the clocks down: the card is in trouble.
HARDWARE_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

_SEVERITY_ORDER = {"critical": 0, "warning": 1}
#: the most polls the alert judge waits before keeping a quiet machine's GPUs again after they changed
QUIET_WAIT = 16
#: an imbalance kind's place in the (utilization, memory) conditions
KIND_AT = {"utilization": 0, "memory": 1}


def _throttle_reasons(g: Gpu) -> tuple[str, ...]:
    return tuple(r for r in g.throttle_reasons or () if r in THERMAL_OR_POWER)


class AlertJudge:
    """Alerts for one stream of snapshots. Call :meth:`update` once per poll, in order."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._latches: dict[tuple[int | None, str], Latch] = {}
        #: hottest temperature seen while a temperature alert is active, per GPU
        self._peak: dict[int, int] = {}
        #: throttle reasons last seen while a throttle alert is active, per GPU
        self._reasons: dict[int, tuple[str, ...]] = {}
        self._memory: dict[int, float] = {}
        #: the imbalance alert's last contrasts (:func:`contrast_head`) and the conditions they were made of
        self._summary: tuple[list[Condition], list[str]] | None = None
        #: the GPUs of the last poll on which every GPU was quiet (no latch, every strict verdict false),
        #: and the settings judged with: the very same GPU objects (immutable) under the very same settings
        #: are quiet again
        self._quiet: tuple[tuple[Gpu, ...], Settings] | None = None
        #: polls to judge before keeping the GPUs again, after kept GPUs were not this poll's: a machine
        #: whose figures move gets new GPU objects every poll, and keeping each poll's alive into the next
        #: one costs it more than the check saves (the wait doubles with each miss in a row, up to 16)
        self._quiet_wait = 0
        self._quiet_backoff = 0

    def _step(self, key: tuple[int | None, str], now: float, strict: bool, relaxed: bool, hold: float) -> Latch:
        """Raise after ``hold`` (0 while the observation is shorter than the hold), clear after the full hold."""
        latch = advance(self._latches.get(key, IDLE), now, strict, relaxed, hold, self.settings.alert_hold)
        if latch is IDLE or latch == IDLE:
            self._latches.pop(key, None)
        else:
            self._latches[key] = latch
        return latch

    def update(self, history: History, snapshot: Snapshot, imbalance: Imbalance | None = None) -> tuple[Alert, ...]:
        """The alerts of this poll, each raised and cleared with hysteresis. Long on purpose: one rule per
        alert kind, side by side, sharing the hold and the clock (the rules read best in one place).
        ``imbalance``: this poll's verdict when ``snapshot`` does not carry it yet (the poller's, which then
        copies the snapshot once for both)."""
        s = self.settings
        now = history.now
        if now is None:
            now = snapshot.time.timestamp()
        hold = effective_hold(s.alert_hold, history.span)
        tz = snapshot.time.tzinfo

        def at(ts: float | None) -> datetime:
            return datetime.fromtimestamp(ts if ts is not None else now, tz=tz)

        alerts: list[Alert] = []
        latches = self._latches
        gpus = snapshot.gpus
        quiet = self._quiet
        if quiet is not None and quiet[1] is s and len(quiet[0]) == len(gpus) and all(map(is_, quiet[0], gpus)):
            # every GPU of the last poll was quiet, so none holds a latch, and each is the very same GPU:
            # each is judged quiet again below (nothing is read of them but their figures)
            judged: tuple[Gpu, ...] = ()
            self._quiet_backoff = 0
        else:
            judged = gpus
            if quiet is not None:  # kept, and not these GPUs
                self._quiet = None
                self._quiet_wait = self._quiet_backoff = min(QUIET_WAIT, 2 * self._quiet_backoff or 1)
            # the GPUs with a latch that is not idle (a raised or pending alert); the only key without a GPU
            # is the imbalance latch's
            held = {k[0] for k in latches}
            if len(held) > 1 or None not in held:
                present = {g.index for g in gpus}
                for key in [k for k in latches if k[0] is not None and k[0] not in present]:
                    del latches[key]
        temp_warning, temp_critical, memory_full = s.temp_warning, s.temp_critical, s.memory_full
        loud = False

        for g in judged:
            i = g.index
            if i not in held:
                # Every latch of this GPU is idle: one whose strict verdict is false stays idle (advance()
                # gives IDLE), so a GPU whose every strict verdict is false has nothing to step or say.
                # The verdicts of the rules below, read without building anything.
                t, used, total = g.temperature, g.memory_used, g.memory_total
                if (not g.lost and (t is None or (t < temp_warning and t < temp_critical))
                        and (not g.throttle_reasons or THERMAL_OR_POWER.isdisjoint(g.throttle_reasons))
                        and (g.processes or not suspect(g))
                        and (not total or used is None or 100.0 * used / total < memory_full)
                        and (not g.mig_devices or not g.mig_enabled)):
                    if self._peak or self._reasons:  # what the rules below forget with an idle latch
                        self._peak.pop(i, None)
                        self._reasons.pop(i, None)
                    continue
            loud = True
            # -- lost: raise at once, clear after the hold ------------------------------
            lost_key = (i, "lost")
            latch = self._step(lost_key, now, g.lost, g.lost, 0.0)
            if latch.active:
                msg = (f"GPU {i} ({g.uuid}) is lost: it fell off the bus or stopped answering NVML."
                       if g.lost else f"GPU {i} ({g.uuid}) was lost and answers again.")
                alerts.append(Alert(i, "lost", "critical", msg, at(latch.since)))

            # -- temperature ------------------------------------------------------------
            t = g.temperature
            warn = self._step((i, "temperature-warning"), now,
                              t is not None and t >= s.temp_warning,
                              t is not None and t >= s.temp_warning - s.temp_hysteresis, hold)
            crit = self._step((i, "temperature-critical"), now,
                              t is not None and t >= s.temp_critical,
                              t is not None and t >= s.temp_critical - s.temp_hysteresis, hold)
            if warn.active or crit.active:
                peak = max(self._peak.get(i, t if t is not None else 0), t if t is not None else 0)
                self._peak[i] = peak
                level: Severity = "critical" if crit.active else "warning"
                threshold = s.temp_critical if crit.active else s.temp_warning
                if t is not None and t >= threshold:
                    msg = f"GPU {i} is at {t}°C, at or above the {threshold}°C {level} threshold."
                else:
                    now_text = f"{t}°C" if t is not None else "N/A"
                    msg = (f"GPU {i} reached {peak}°C, above the {threshold}°C {level} threshold, "
                           f"and is at {now_text} now.")
                since = min(x.since for x in (warn, crit) if x.active and x.since is not None)
                alerts.append(Alert(i, "temperature", level, msg, at(since)))
            else:
                self._peak.pop(i, None)

            # -- throttling -------------------------------------------------------------
            reasons = _throttle_reasons(g)
            latch = self._step((i, "throttle"), now, bool(reasons), bool(reasons), hold)
            if latch.active:
                if reasons:
                    self._reasons[i] = reasons
                    shown = reasons
                    msg = f"GPU {i} is slowed down by {join_and([THROTTLE_WORDS[r] for r in shown])}."
                else:
                    shown = self._reasons.get(i, ())
                    msg = (f"GPU {i} was slowed down by {join_and([THROTTLE_WORDS[r] for r in shown])}"
                           f" and is not throttled now.") if shown else f"GPU {i} was throttled and is not now."
                severity: Severity = "critical" if HARDWARE_THROTTLE & set(shown) else "warning"
                alerts.append(Alert(i, "throttle", severity, msg, at(latch.since)))
            else:
                self._reasons.pop(i, None)

            # -- a reading that looks broken (100% busy, no process, no memory) ---------
            latch = self._step((i, "suspect"), now, suspect(g), suspect(g), hold)
            if latch.active:
                msg = suspect_message(g) if suspect(g) else f"GPU {i}'s reading looked broken and is plausible now."
                alerts.append(Alert(i, "suspect", "warning", msg, at(latch.since)))

            # -- memory nearly full -----------------------------------------------------
            mp = g.memory_percent
            latch = self._step((i, "memory-full"), now, mp is not None and mp >= s.memory_full,
                               mp is not None and mp >= s.memory_full - s.memory_hysteresis, hold)
            if latch.active:
                if mp is not None and mp >= s.memory_full:
                    free = g.memory_free
                    left = "nothing free" if not free else f"{fmt_size(free)} free"
                    msg = (f"GPU {i}'s memory is {fmt_percent(used_percent(g.memory_used, g.memory_total))} used "
                           f"({fmt_size(g.memory_used)} of {fmt_size(g.memory_total)}, {left}): "
                           f"new allocations there will fail.")
                else:
                    now_text = f"{mp:.0f}%" if mp is not None else "N/A"
                    msg = f"GPU {i}'s memory was at least {s.memory_full:g}% used and is {now_text} now."
                alerts.append(Alert(i, "memory-full", "warning", msg, at(latch.since)))
            alerts += self._mig_memory(g, now, hold, at)

        # -- imbalance (already hysteretic: mirror it) ------------------------------------
        imb = imbalance if imbalance is not None else snapshot.imbalance
        latch = advance(self._latches.get((None, "imbalance"), IDLE), now, imb.flagged, imb.flagged, 0.0)
        self._latches[(None, "imbalance")] = latch
        if latch.active and imb.message:
            gpu, message = self._imbalance_summary(history, snapshot, imb)
            alerts.append(Alert(gpu, "imbalance", "warning", message, at(latch.since)))
        if loud:
            self._quiet = None
        elif self._quiet_wait:
            self._quiet_wait -= 1
        else:
            self._quiet = (gpus, s)

        if len(alerts) > 1:
            alerts.sort(key=lambda a: (_SEVERITY_ORDER[a.severity], a.gpu is None, a.gpu or 0, a.kind))
        return tuple(alerts)

    def _mig_memory(self, g: Gpu, now: float, hold: float, at: Callable[[float | None], datetime]) -> list[Alert]:
        """memory-full per MIG device: an instance's memory is its own (a full 1g.10gb fails allocations
        while its card looks half empty)."""
        s = self.settings
        out: list[Alert] = []
        for m in g.mig_devices if g.mig_enabled else ():
            mp = m.memory_percent
            latch = self._step((g.index, f"memory-full {m.uuid}"), now, mp is not None and mp >= s.memory_full,
                               mp is not None and mp >= s.memory_full - s.memory_hysteresis, hold)
            if not latch.active:
                continue
            label = f"MIG device {g.index}:{m.index} ({m.profile or 'unknown profile'})"
            if mp is not None and mp >= s.memory_full:
                free = m.memory_free
                left = "nothing free" if not free else f"{fmt_size(free)} free"
                msg = (f"{label}'s memory is {fmt_percent(used_percent(m.memory_used, m.memory_total))} used "
                       f"({fmt_size(m.memory_used)} of {fmt_size(m.memory_total)}, {left}): "
                       "new allocations there will fail.")
            else:
                msg = (f"{label}'s memory was at least {s.memory_full:g}% used and is "
                       f"{f'{mp:.0f}%' if mp is not None else 'N/A'} now.")
            out.append(Alert(g.index, "memory-full", "warning", msg, at(latch.since)))
        return out

    def _imbalance_summary(self, history: History, snapshot: Snapshot, imb: Imbalance) -> tuple[int | None, str]:
        """(hot GPU, a short sentence) for the imbalance alert: the contrast without the causes and
        the move, which the imbalance banner and the ``imbalance`` JSON object carry in full."""
        s = self.settings
        observed = min(s.imbalance_window, history.span)
        relaxed = judged_conditions(history, snapshot, s)[2]
        conds = [c for c in (relaxed[KIND_AT[kind]] for kind in imb.kinds if kind in KIND_AT) if c is not None]
        gpu = imb.suggestion.from_gpu if imb.suggestion is not None else conds[0].hot if conds else None
        if not conds:
            return gpu, imb.message or "The GPUs are unevenly loaded."
        # the contrasts kept while the conditions are the same (all they read but the observation)
        kept = self._summary
        if kept is not None and kept[0] == conds:
            heads = kept[1]
        else:
            heads = [contrast_head(c) for c in conds]
            self._summary = (conds, heads)
        seen = over(observed)
        return gpu, "Unevenly loaded: " + "; ".join([f"{head} {seen}" for head in heads]) + "."


# -- events, the session's history, the bell and the log --------------------------------------

EventKind = Literal["raised", "changed", "cleared"]


@record
class AlertEvent:
    """An alert appearing, changing severity, or clearing, at a snapshot's time."""

    time: datetime
    event: EventKind
    alert: Alert

    @property
    def rings(self) -> bool:
        """Whether this event deserves the terminal bell: a new alert, or one turning critical."""
        return self.event == "raised" or (self.event == "changed" and self.alert.severity == "critical")

    def to_json(self, host: str | None = None) -> dict[str, Any]:
        return {"time": self.time.isoformat(timespec="seconds"), "event": self.event, "host": host,
                **self.alert.to_json()}


def default_log_path() -> Path:
    from pathlib import Path  # here, not at the top: a one-shot never writes the log

    from gputui.core.config import state_dir

    return Path(state_dir()) / "alerts.jsonl"


class AlertRecorder:
    """Turns each snapshot's alerts into events, keeps them for the session, appends them to a log.

    ``path``: the JSON-lines file (default ``$XDG_STATE_HOME/gputui/alerts.jsonl``,
    created on first write), or ``False`` for no file. A log that cannot be
    written never stops the dashboard: :attr:`error` then holds one sentence and
    writing stops. Thread-safe: the poll worker records, the UI reads.
    """

    def __init__(self, path: Path | Literal[False] | None = None, keep: int = 1000) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._active: dict[tuple[int | None, str], Alert] = {}
        self._events: deque[AlertEvent] = deque(maxlen=keep)
        self.error: str | None = None

    @property
    def path(self) -> Path | None:
        if self._path is False:
            return None
        if self._path is None:
            self._path = default_log_path()
        return self._path

    def record(self, snapshot: Snapshot) -> tuple[AlertEvent, ...]:
        """The events since the previous snapshot (also kept and logged)."""
        current = {(a.gpu, a.kind): a for a in snapshot.alerts}
        with self._lock:
            events: list[AlertEvent] = []
            for key, alert in current.items():
                prev = self._active.get(key)
                if prev is None:
                    events.append(AlertEvent(snapshot.time, "raised", alert))
                elif prev.severity != alert.severity:
                    events.append(AlertEvent(snapshot.time, "changed", alert))
            for key, prev in self._active.items():
                if key not in current:
                    events.append(AlertEvent(snapshot.time, "cleared", prev))
            self._active = current
            self._events.extend(events)
        if events:
            self._write(events, snapshot.host)
        return tuple(events)

    @property
    def events(self) -> tuple[AlertEvent, ...]:
        """Every event of this session, oldest first."""
        with self._lock:
            return tuple(self._events)

    @property
    def active(self) -> tuple[Alert, ...]:
        with self._lock:
            return tuple(self._active.values())

    def _write(self, events: list[AlertEvent], host: str) -> None:
        if self.error is not None:
            return
        try:
            path = self.path
            if path is None:
                return
            from gputui.core.statefile import append_text, ensure_state_dir

            ensure_state_dir(path.parent)
            append_text(path, "".join(json.dumps(e.to_json(host), ensure_ascii=False) + "\n" for e in events))
        except OSError as exc:
            self.error = f"Cannot write the alert log {self._path}: {exc.strerror or exc}; alerts are not logged."
