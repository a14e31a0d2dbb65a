"""A two-way latch: the hysteresis shared by the imbalance judge and the alerts.

A flag must neither flicker nor fire on a momentary spike, yet a one-shot
``snapshot --json`` that has a single sample must still judge that sample. Two
mechanisms do it:

* **Levels.** The caller evaluates its condition twice: *strict* (the raise
  threshold, e.g. temperature >= 83 °C) and *relaxed* (the clear threshold, a
  margin lower, e.g. >= 78 °C). An inactive latch looks at the strict verdict, an
  active one at the relaxed one, so a value hovering at the threshold cannot
  toggle the flag.
* **Time.** A change must last ``hold`` seconds: the strict condition must hold
  continuously for ``hold`` seconds before the latch raises, and the relaxed one
  must fail continuously for ``hold`` seconds before it clears.

While the observation itself is shorter than ``hold`` (the first seconds of the
dashboard, a one-shot, ``snapshot --window 5`` with a 10 s hold), there is no way
to tell "sustained" from "momentary" by time, so the time rule is off and the
verdict is whatever the whole observation shows; the judges make that verdict
robust by judging windowed means rather than single samples. Callers get that by
passing ``hold=effective_hold(hold, span)``.

Judges of instantaneous values (the alerts) relax only the raising side: a
first sample can raise (a one-shot must report what it saw), but clearing always
takes the full hold, so a condition that flaps during the first seconds of the
dashboard raises once and stays up instead of flickering — and the alert log
gets one line, not one per flap.
"""

from __future__ import annotations

from gputui.core.record import record


@record
class Latch:
    """State of one flag. ``since`` is when the condition that raised it began."""

    active: bool = False
    #: when the opposite condition started (a pending raise or a pending clear)
    pending_since: float | None = None
    since: float | None = None


#: The idle latch (no flag, nothing pending), shared: a Latch is immutable, and most latches of
#: most polls are idle, so ``advance`` hands this one out instead of building one each time.
IDLE = Latch()


def effective_hold(hold: float, span: float) -> float:
    """The time rule applies only once the observation is at least ``hold`` long."""
    return hold if span >= hold else 0.0


def advance(latch: Latch, now: float, strict: bool, relaxed: bool, hold: float,
            clear_hold: float | None = None) -> Latch:
    """The latch after one more observation at time ``now``.

    ``hold`` is how long the strict condition must last to raise; ``clear_hold``
    (default ``hold``) how long the relaxed one must fail to clear.
    """
    clear_after = hold if clear_hold is None else clear_hold
    # A latch whose state stays the same is handed back as it is (a Latch is immutable): most polls of
    # a raised or pending flag change nothing.
    if not latch.active:
        if not strict:
            return IDLE
        start = latch.pending_since if latch.pending_since is not None else now
        if now - start >= hold:
            return Latch(active=True, pending_since=None, since=start)
        if latch.pending_since is not None and latch.since is None:
            return latch  # == Latch(active=False, pending_since=start)
        return Latch(active=False, pending_since=start)
    if relaxed:
        if latch.pending_since is None:
            return latch  # == Latch(active=True, pending_since=None, since=latch.since)
        return Latch(active=True, pending_since=None, since=latch.since)
    start = latch.pending_since if latch.pending_since is not None else now
    if now - start >= clear_after:
        return IDLE
    if latch.pending_since is not None:
        return latch  # == Latch(active=True, pending_since=start, since=latch.since)
    return Latch(active=True, pending_since=start, since=latch.since)
