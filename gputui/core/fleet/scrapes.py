"""Which targets changed since the live fleet screen's last refresh, asking Prometheus only for that.

A refresh needs every target's ``up`` and every host's row of the hosts query
(:data:`~gputui.core.fleet.queries.Q_HOSTS`: when its newest sample came, or that it is gone) only
to know which hosts to read again: over 2,000 targets that was ~4,000 series (~0.5 MB of JSON)
decoded every 2 s for the ~270 a scraping Prometheus scraped in between. :class:`Targets` keeps
every row as last read, and one query (:func:`delta_query`) asks for

- the rows whose sample is newer than the last refresh's time less :data:`MARGIN`
  (``timestamp(up) > T``, the hosts query's live rows ``> T``): targets scraped since, new or back;
- in full, the few rows that say something else than "answering": ``up != 1`` and the hosts
  query's gone rows (down, or no longer scraped, within the last hour);
- for ``up`` and for the live rows, how many there are and the sum of their times.

The kept rows, updated with the newer ones, must add up to those counts and sums: a series that
vanished (its target dropped from the scrape configuration, its hostname changed, its exporter
stopped sending it) leaves a count too high, and a sample that became visible later than the margin
after the time it carries (a scrape slower than the margin: its samples carry the time it started)
leaves a sum too low, since a series' newest sample only moves forward, by a millisecond at least.
When anything does not add up the rows are listed again in full (:func:`full_query`, the same rows
today's hosts and ``up`` queries return), as they are whenever the caller asks (every
``STATIC_TTL`` seconds, with the GPU models and sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from gputui.core import metric_names
from gputui.core.fleet.prom import Sample

#: The suffix of ``gputui_source`` on a host seen in the last hour but not now.
GONE = "-gone"
#: How far back a host that stopped answering is still listed (as down).
LOOKBACK = "1h"
#: The metric that makes a target a host, per source, and the label naming the host.
HOST_METRICS = (("gputui", "hostname", metric_names.HOST_INFO.name),
                ("dcgm", "Hostname", metric_names.DCGM_FB_USED.name))

#: Which part of :func:`delta_query`'s answer a row is (absent: a row of the hosts query).
PART = "gputui_part"
#: Seconds a scrape's samples may become visible after the time they carry (when the scrape ends:
#: they carry the time it started) and still be in the next refresh's newer rows. Later ones are
#: found by the counts and sums, and the margin grows to the lateness found, up to MARGIN_MAX.
MARGIN = 1.0
MARGIN_MAX = 15.0
#: Sums are of times to the millisecond, less a base near them: a missed sample moves one by 1 ms or
#: more; two orders of float addition differ by far less than half of that.
TOLERANCE = 0.0005

#: A row's identity: its labels.
Ident = frozenset[tuple[str, str]]


def _live(metric: str, by: str, source: str) -> str:
    return f'label_replace(max by (job, instance, {by}) (timestamp({metric})), "gputui_source", "{source}", "", "")'


def _gone(metric: str, by: str, source: str) -> str:
    return (f'label_replace(max by (job, instance, {by}) (last_over_time({metric}[{LOOKBACK}]) unless on (job, '
            f'instance) {metric}), "gputui_source", "{source}{GONE}", "", "")')


#: The hosts query's rows in two (:data:`~gputui.core.fleet.queries.Q_HOSTS` is both): every target that
#: sent its source's host metric in the last hour. Those that send it now come with the time of their
#: newest sample (``timestamp()`` at the instant: one sample per series); the others (down, or gone from
#: the scrape configuration) are marked ``source-gone``, without a time (``last_over_time`` over the raw
#: samples): their last-seen time costs a subquery of ``timestamp()`` (``queries.gone_query``), asked for
#: them only, not for the whole fleet's 240 steps a series.
HOSTS_LIVE = " or ".join(_live(metric, by, source) for source, by, metric in HOST_METRICS)
HOSTS_GONE = " or ".join(_gone(metric, by, source) for source, by, metric in HOST_METRICS)


def _part(name: str, expr: str) -> str:
    return f'label_replace({expr}, "{PART}", "{name}", "", "")'


def full_query() -> str:
    """Every ``up`` series' time and the values that are not 1, and every row of the hosts query."""
    return " or ".join((_part("up", "timestamp(up)"), _part("down", "up != 1"), HOSTS_LIVE, HOSTS_GONE))


def delta_query(since: float, base: float) -> str:
    """The rows newer than ``since``, the rows that are not "answering", and the counts and sums
    (times less ``base``) the kept rows must add up to."""
    t, c = f"{since:.3f}", f"{base:.3f}"
    return " or ".join((
        _part("up", f"timestamp(up) > {t}"), _part("down", "up != 1"),
        f"({HOSTS_LIVE}) > {t}", HOSTS_GONE,
        _part("up_count", "count(up)"), _part("up_sum", f"sum(timestamp(up) - {c})"),
        _part("live_count", f"count({HOSTS_LIVE})"), _part("live_sum", f"sum(({HOSTS_LIVE}) - {c})"),
    ))


class Targets:
    """Every target's ``up`` and every host's row of the hosts query, as Prometheus has them now,
    kept from one refresh to the next and brought up to date by :meth:`refresh`.

    After a refresh, ``changed`` holds the instances whose rows changed otherwise than by a newer
    sample (new, gone, up or down, another hostname) and ``newer`` those that only sent newer samples
    (the time of a live row moved on): both must be read again. None stands for a row without an
    instance label."""

    __slots__ = ("up", "up_at", "down", "live", "gone", "at", "margin", "changed", "newer", "_up_list",
                 "_live_targets", "_index")

    def __init__(self) -> None:
        #: up series -> its row (value: 1, or the value ``up != 1`` said); and the time of its newest sample
        self.up: dict[Ident, Sample] = {}
        self.up_at: dict[Ident, float] = {}
        #: the up series whose value is not 1, and their values
        self.down: dict[Ident, float] = {}
        #: the hosts query's rows: live ones (value: the time of the newest sample), gone ones
        self.live: dict[Ident, Sample] = {}
        self.gone: dict[Ident, Sample] = {}
        #: the query time of the last listing (None: never listed)
        self.at: float | None = None
        #: seconds before the last listing that the next delta looks back to (see MARGIN)
        self.margin = MARGIN
        self.changed: set[str | None] = set()
        self.newer: set[str | None] = set()
        self._up_list: list[Sample] | None = None
        self._live_targets: set[tuple[str, str]] | None = None
        #: by instance: the up rows, the live rows' identities; every job
        self._index: tuple[dict[str | None, list[Sample]], dict[str | None, list[Ident]], set[str]] | None = None

    # -- what the refresh reads --------------------------------------------------------
    def up_rows(self) -> list[Sample]:
        """``up``'s answer, as the query ``up`` returns it (in another order)."""
        if self._up_list is None:
            self._up_list = list(self.up.values())
        return self._up_list

    def seen_rows(self) -> list[Sample]:
        """The hosts query's answer (in another order)."""
        return [*self.live.values(), *self.gone.values()]

    def gone_rows(self) -> list[Sample]:
        return list(self.gone.values())

    def live_targets(self) -> set[tuple[str, str]]:
        """(job, instance) of every target ``up`` says is up."""
        if self._live_targets is None:
            out = set()
            for s in self.up.values():
                instance = s.labels.get("instance")
                if instance and s.value >= 1:
                    out.add((s.labels.get("job", ""), instance))
            self._live_targets = out
        return self._live_targets

    def rows_of(self, instances: Iterable[str | None]) -> tuple[list[Sample], list[Sample]]:
        """The ``up`` rows and the live rows of the hosts query of these instances."""
        up, live, _ = self._indexed()
        rows = self.live
        return ([s for i in instances for s in up.get(i, ())],
                [rows[ident] for i in instances for ident in live.get(i, ())])

    def jobs(self) -> set[str]:
        """Every ``job`` label of a row (a target's key is its job and instance)."""
        return self._indexed()[2] | {s.labels.get("job", "") for s in self.gone.values()}

    def _indexed(self) -> tuple[dict[str | None, list[Sample]], dict[str | None, list[Ident]], set[str]]:
        if self._index is None:
            up: dict[str | None, list[Sample]] = {}
            live: dict[str | None, list[Ident]] = {}
            for s in self.up.values():
                up.setdefault(s.labels.get("instance"), []).append(s)
            for ident, s in self.live.items():
                live.setdefault(s.labels.get("instance"), []).append(ident)
            jobs = {s.labels.get("job", "") for s in (*self.up.values(), *self.live.values())}
            self._index = (up, live, jobs)
        return self._index

    def __len__(self) -> int:
        return len(self.up) + len(self.live) + len(self.gone)

    # -- reading ------------------------------------------------------------------------
    def refresh(self, query: Callable[[str, float], list[Sample]], now: float, *, full: bool = False) -> int:
        """Bring the rows up to ``now`` (``query(promql, at)`` asks Prometheus); returns the number of
        queries sent: 1, or 2 when the newer rows did not add up and everything was listed again."""
        self.changed, self.newer = set(), set()
        if full or self.at is None or now < self.at:
            self._list(query(full_query(), now))
            self.at = now
            return 1
        since = self.at - self.margin
        base = math.floor(since)
        if self._apply(query(delta_query(since, base), now), base):
            self.at = now
            return 1
        self.changed, self.newer = set(), set()
        self._list(query(full_query(), now), since)
        self.at = now
        return 2

    def _list(self, rows: Sequence[Sample], since: float | None = None) -> None:
        """Every row listed: what differs from the kept ones is what changed. ``since``: the newer rows
        asked before did not add up; a newer sample as old as that came late, and the margin grows."""
        up: dict[Ident, Sample] = {}
        up_at: dict[Ident, float] = {}
        live: dict[Ident, Sample] = {}
        gone: dict[Ident, Sample] = {}
        down: dict[Ident, float] = {}
        for s in rows:
            labels = s.labels
            part = labels.pop(PART, None)
            if part is None:
                (gone if labels.get("gputui_source", "").endswith(GONE) else live)[frozenset(labels.items())] = s
            elif part == "up":
                ident = frozenset(labels.items())
                up_at[ident] = s.value
                up[ident] = Sample({"__name__": "up", **labels}, 1.0)
            elif part == "down":
                labels.pop("__name__", None)
                down[frozenset(labels.items())] = s.value
        for ident, value in down.items():
            row = up.get(ident)
            if row is not None:
                up[ident] = Sample(row.labels, value)
        changed, newer = self.changed, self.newer
        if since is not None and self.at is not None:
            late = [t for ident, t in up_at.items() if t <= since and self.up_at.get(ident, t) != t]
            late += [s.value for ident, s in live.items()
                     if s.value <= since and ident in self.live and self.live[ident].value != s.value]
            if late:
                self.margin = min(MARGIN_MAX, max(self.margin, self.at - min(late) + MARGIN))
        for old, new in ((self.live, live), (self.gone, gone), (self.up, up)):
            for ident, s in new.items():
                before = old.get(ident)
                if before is None:
                    changed.add(s.labels.get("instance"))
                elif before.value != s.value:
                    (newer if old is self.live else changed).add(s.labels.get("instance"))
            changed.update(s.labels.get("instance") for ident, s in old.items() if ident not in new)
        self.up, self.up_at, self.down, self.live, self.gone = up, up_at, down, live, gone
        self._up_list = self._live_targets = self._index = None

    def _apply(self, rows: Sequence[Sample], base: float) -> bool:
        """The kept rows with the newer ones of ``rows`` (:func:`delta_query`'s answer), kept only when
        they add up to its counts and sums; False when they do not (nothing is kept then)."""
        up, up_at, live = self.up, self.up_at.copy(), self.live.copy()
        added: dict[Ident, Sample] = {}
        gone: dict[Ident, Sample] = {}
        down: dict[Ident, float] = {}
        checks: dict[str, float] = {}
        changed, newer = self.changed, self.newer
        for s in rows:
            labels = s.labels
            part = labels.pop(PART, None)
            if part is None:
                ident = frozenset(labels.items())
                if labels.get("gputui_source", "").endswith(GONE):
                    gone[ident] = s
                    continue
                before = live.get(ident)
                if before is None:
                    changed.add(labels.get("instance"))
                    self._index = None
                elif before.value != s.value:
                    newer.add(labels.get("instance"))
                else:
                    continue
                live[ident] = s
            elif part == "up":
                ident = frozenset(labels.items())
                if ident not in up_at:
                    added[ident] = Sample({"__name__": "up", **labels}, 1.0)
                up_at[ident] = s.value
            elif part == "down":
                labels.pop("__name__", None)
                down[frozenset(labels.items())] = s.value
            else:
                checks[part] = s.value
        for ident, s in gone.items():  # down or dropped since: its live row is gone with it
            if live.pop(ident, None) is not None or ident not in self.gone:
                changed.add(s.labels.get("instance"))
                self._index = None
        for ident, s in self.gone.items():
            new = gone.get(ident)
            if new is None or new.value != s.value:
                changed.add(s.labels.get("instance"))
        if not (_adds_up(len(up_at), up_at.values(), checks, "up", base)
                and _adds_up(len(live), (s.value for s in live.values()), checks, "live", base)):
            return False
        # up's values: 1 but where up != 1 says otherwise, now or at the last refresh
        fixes: dict[Ident, Sample] = {}
        for ident in {*down, *self.down}:
            row = up.get(ident) or added.get(ident)
            if row is None:
                return False  # a value without a time: the answer is not one state of Prometheus
            value = down.get(ident, 1.0)
            if not row.value == value:
                fixes[ident] = Sample(row.labels, value)
        for s in (*added.values(), *fixes.values()):
            changed.add(s.labels.get("instance"))
        if added or fixes:
            self.up = {**up, **added, **fixes}
            self._up_list = self._live_targets = self._index = None
        self.up_at, self.down, self.live, self.gone = up_at, down, live, gone
        return True


def _adds_up(count: int, times: Iterable[float], checks: dict[str, float], kind: str, base: float) -> bool:
    """Whether ``count`` series whose newest samples came at ``times`` are as many as Prometheus counted
    and sum (less ``base``) as its sum does (both absent: none)."""
    if count != checks.get(f"{kind}_count", 0.0):
        return False
    total = math.fsum(t - base for t in times)
    return abs(total - checks.get(f"{kind}_sum", 0.0)) <= TOLERANCE
