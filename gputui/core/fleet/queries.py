"""PromQL for the fleet: a fixed set of queries per refresh, whatever the number of hosts.

One refresh (:meth:`FleetReader.read`) sends exactly ``len(FLEET_QUERIES)`` instant
queries, concurrently; the host screen adds ``len(HOST_RANGE_QUERIES)`` range
queries for its one host (:meth:`FleetReader.host_history`). Each query selects
several metric names at once (``{__name__=~"a|b"}``), so the count does not grow
with hosts, GPUs or metrics. The answers are joined into one snapshot by :func:`build_fleet`
(:mod:`gputui.core.fleet.join`), which is pure: tests feed it answers.

Hosts
-----
A host is a scrape target (``job``, ``instance``) that exported ``gputui_host_info``
(source ``gputui``) or dcgm-exporter's ``DCGM_FI_DEV_*`` (source ``dcgm``) during the
last hour. It is named by its ``hostname`` / ``Hostname`` label, else its instance.
It is up when its target's ``up`` is 1 (or, for series that arrive without a
target of their own, when it has samples now); a down host shows when it was last
seen (the newest sample in the last hour) and no GPU values, since what it last
said is no longer true.

Trust
-----
Labels and values are written by each host's exporter, so any host may send
anything. One label rule: a GPU index or PID is ASCII digits only, and bounded
(``gpu="²"``, ``gpu="٣"`` or a 5,000-digit label is not an index); a hostname is
cut at 253 bytes, other text labels at 256. One value rule, the driver's
(:func:`gputui.core.plausible.implausible`): finite and in range, so an integer
stays bounded. A series or value that breaks a rule is left out or shown as N/A,
and its host carries one sentence saying so (:attr:`FleetHost.problems`); no
answer makes a refresh fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from gputui.core.fleet import names as mn

# the host screen's range queries, re-exported where they were defined before
from gputui.core.fleet.history_host import HOST_RANGE_QUERIES as HOST_RANGE_QUERIES
from gputui.core.fleet.history_host import HostHistory as HostHistory
from gputui.core.fleet.history_host import host_range_queries as host_range_queries
from gputui.core.fleet.history_host import host_selector as host_selector
from gputui.core.fleet.history_host import per_gpu

# the join, re-exported where it was defined before (the live screen's summary imports it from here)
from gputui.core.fleet.join import DCGM_NOTE as DCGM_NOTE
from gputui.core.fleet.join import NO_GPU_NOTE as NO_GPU_NOTE
from gputui.core.fleet.join import ONE_SHOT_QUERIES
from gputui.core.fleet.join import build_fleet as build_fleet
from gputui.core.fleet.join import target_key as target_key
from gputui.core.fleet.live_memory import Kept
from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.fleet.prom import PromClient, PrometheusError, PrometheusUnreachable, Sample
from gputui.core.fleet.scrapes import GONE, HOST_METRICS, HOSTS_GONE, HOSTS_LIVE, LOOKBACK

MIB = 1024**2
#: Resolution of the last-seen time of a host down for longer than RECENT (to the second before).
LAST_SEEN_STEP = "15s"
RECENT = "2m"

GPUTUI_GPU_METRICS = (mn.HOST_INFO, mn.GPU_INFO, mn.GPU_UTILIZATION, mn.GPU_MEMORY_USED, mn.GPU_MEMORY_TOTAL,
                      mn.GPU_TEMPERATURE, mn.GPU_LOST)
DCGM_GPU_METRICS = (mn.DCGM_GPU_UTIL, mn.DCGM_FB_USED, mn.DCGM_FB_FREE, mn.DCGM_FB_RESERVED, mn.DCGM_GPU_TEMP)
STATE_METRICS = (mn.ALERT_ACTIVE, mn.IMBALANCE_FLAGGED, mn.STALE_PROCESSES, mn.STALE_GPU_MEMORY, mn.CONTAINER_FINDING,
                 mn.CONTAINER_GPU_GRANTED, mn.SLURM_JOB_INFO, mn.RULE_VIOLATION, mn.RESERVATION)


def names(metrics: Iterable[str]) -> str:
    """A selector of several metric names: ``{__name__=~"a|b"}``."""
    return '{__name__=~"' + "|".join(metrics) + '"}'


def _seen(metric_selector: str, by: str, source: str) -> str:
    """Newest sample time per target: to the second over the last minutes, to LAST_SEEN_STEP before."""
    recent, hour = (f"max by (job, instance, {by}) (max_over_time(timestamp({metric_selector})[{window}]))"
                    for window in (f"{RECENT}:1s", f"{LOOKBACK}:{LAST_SEEN_STEP}"))
    return f'label_replace({recent} or {hour}, "gputui_source", "{source}", "", "")'


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 pattern matching only itself: every ASCII punctuation mark escaped."""
    return text.translate(_ESCAPES)


_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_ESCAPES = str.maketrans({c: "\\" + c for c in _PUNCTUATION})


def gone_query(seen: Sequence[Sample]) -> str | None:
    """The last-seen times of the hosts :data:`Q_HOSTS` marks gone (None when none is): the old
    subquery, over those targets' instances only."""
    parts = []
    for source, by, metric in HOST_METRICS:
        instances = sorted({s.labels.get("instance", "") for s in seen
                            if s.labels.get("gputui_source") == source + GONE} - {""})
        if instances:
            pattern = "|".join(_regex_literal(i) for i in instances)
            parts.append(_seen(f"{metric}{{instance=~{_quote(pattern)}}}", by, source))
    return " or ".join(parts) or None


def _slim(metrics: Iterable[str], by: str) -> str:
    """The series of ``metrics`` with only the labels the fleet reads (a scrape's other labels —
    the UUID on every GPU series, the target's own labels — would be most of the answer's bytes)."""
    return f"max by (__name__, job, instance, {by}) ({names(metrics)})"


Q_UP = "up"
#: Every host seen in the last hour; the time of its newest sample, for those answering now.
Q_HOSTS = f"{HOSTS_LIVE} or {HOSTS_GONE}"
#: the labels _processes reads (the UUID, compose and MIG UUID labels were a third of the answer)
Q_PROCESSES = (f"max by (job, instance, gpu, pid, user, exe, container, image, runtime, pod, namespace, mig_device) "
               f"({mn.PROCESS_GPU_MEMORY})")
Q_STATE = names(STATE_METRICS)

#: The live screen splits Q_GPUS: what never changes while an exporter runs (GPU names, UUIDs and
#: sizes, host info) is read again only every STATIC_TTL seconds or when a new target appears; what
#: changes is read every refresh, ``gputui_gpu_lost`` only where it is 1.
_STATIC_GPU_METRICS = (mn.HOST_INFO, mn.GPU_INFO, mn.GPU_MEMORY_TOTAL)
Q_GPU_STATIC = " or ".join((_slim((mn.HOST_INFO,), "hostname"), _slim((mn.GPU_INFO,), "gpu, uuid, name"),
                            _slim((mn.GPU_MEMORY_TOTAL,), "gpu")))
Q_GPU_LIVE = " or ".join((_slim((mn.GPU_UTILIZATION, mn.GPU_MEMORY_USED, mn.GPU_TEMPERATURE), "gpu"),
                          names(DCGM_GPU_METRICS), f"max by (__name__, job, instance, gpu) ({mn.GPU_LOST} == 1)"))
LIVE_QUERIES = (Q_UP, Q_HOSTS, Q_GPU_LIVE, Q_PROCESSES, Q_STATE)

#: A one-shot refresh (``fleet --json``, ``pick``) reads every GPU in three queries Prometheus evaluates
#: side by side. Over 2,000 hosts each selected series costs Prometheus ~13 µs and gputui ~3 µs, and a
#: query runs on one core, so each series is selected once and the three are of a size: each GPU's UUID
#: and name once, on its ``gputui_gpu_info`` series, without the metric name (the query says it), with
#: dcgm-exporter's series and ``gputui_gpu_lost`` where it is 1; its total memory and memory used; its
#: temperature and utilization (each one aggregation: no ``or`` to hash them for). Host info is not
#: read again: the hosts query carries every live host's hostname. :func:`one_shot_gpus` turns the
#: answers into the GPU series Q_GPU_STATIC and Q_GPU_LIVE answer.
Q_GPU_INFO = " or ".join((f"max by (job, instance, gpu, uuid, name) ({mn.GPU_INFO})", names(DCGM_GPU_METRICS),
                          f"max by (__name__, job, instance, gpu) ({mn.GPU_LOST} == 1)"))
_VALUE_METRICS = (mn.GPU_UTILIZATION, mn.GPU_MEMORY_USED, mn.GPU_TEMPERATURE)
#: (total memory and memory used; temperature and utilization): Prometheus answers an aggregation's
#: series in its input's order, by metric name, so the two answers one after the other come in the
#: order Q_GPU_STATIC's and Q_GPU_LIVE's did (a GPU's impossible values are named in that order).
Q_GPU_VALUES = (_slim((mn.GPU_MEMORY_TOTAL, mn.GPU_MEMORY_USED), "gpu"),
                _slim((mn.GPU_TEMPERATURE, mn.GPU_UTILIZATION), "gpu"))
FLEET_QUERIES = (Q_UP, Q_HOSTS, Q_GPU_INFO, *Q_GPU_VALUES, Q_PROCESSES, Q_STATE)
assert len(FLEET_QUERIES) == ONE_SHOT_QUERIES  # build_fleet's default count


_new_sample = tuple.__new__


def one_shot_gpus(seen: Sequence[Sample], info: Sequence[Sample], values: Sequence[Sample]) -> list[Sample]:
    """The answers of Q_HOSTS (before :func:`gone_query`'s is added), Q_GPU_INFO and Q_GPU_VALUES as
    the GPU series of Q_GPU_STATIC and Q_GPU_LIVE, for :func:`build_fleet`: the same snapshot. Host
    info from the hosts that Q_HOSTS says answer now (the join reads their hostname, and marks them
    seen now, when a target is not a known host); ``gputui_gpu_info`` named; a lost series left out
    where the GPU has a value series (as Q_GPU_LIVE's ``or`` left it out)."""
    host_info = [_new_sample(Sample, ({"__name__": mn.HOST_INFO} | {k: v for k, v in s.labels.items()
                                                                  if k != "gputui_source"}, 1.0))
                 for s in seen if s.labels.get("gputui_source") == "gputui"]
    lost = False
    for s in info:
        labels = s.labels
        name = labels.get("__name__")
        if name is None:
            labels["__name__"] = mn.GPU_INFO
        elif name == mn.GPU_LOST:
            lost = True
    if lost:
        valued = {(s.labels.get("job"), s.labels.get("instance"), s.labels.get("gpu")) for s in values
                  if s.labels.get("__name__") in _VALUE_METRICS}
        info = [s for s in info if s.labels.get("__name__") != mn.GPU_LOST
                or (s.labels.get("job"), s.labels.get("instance"), s.labels.get("gpu")) not in valued]
    return [*host_info, *info, *values]
STATIC_TTL = 30.0

def _quote(text: str) -> str:
    return json.dumps(text)  # a PromQL double-quoted string accepts JSON's escapes


# -- the reader ---------------------------------------------------------------------------


class FleetReader:
    """Reads the fleet through one :class:`PromClient`. ``read`` blocks: run it in a worker."""

    def __init__(self, client: PromClient, clock: Callable[[], float] = time.time, *, parallel: bool = True) -> None:
        self.client = client
        self.clock = clock
        #: Send a refresh's queries at once (least wall time, for one-shot commands) or one after the
        #: other (least CPU: parsing answers in several threads at once costs more in GIL hand-offs).
        self.parallel = parallel
        #: Read GPU names and sizes again only every STATIC_TTL seconds (see LIVE_QUERIES): set for
        #: the live screen, whose refreshes would otherwise parse them thousands of times over.
        self.cache_static = False
        self._static: list[Sample] = []
        self._static_at = -STATIC_TTL
        self._static_targets: set[tuple[str, str]] = set()
        self._pool: ThreadPoolExecutor | None = None
        #: The live screen's refresh (:func:`gputui.core.fleet.summary.read_summary`, set by the app):
        #: per-host aggregates for the list, every series of the ``detail`` host (the one whose
        #: screen is open), the processes only while ``words`` (the `/` filter is in use).
        self.summary: Callable[[FleetReader, float], FleetSnapshot] | None = None
        self.detail: tuple[str, str] | None = None
        self.words = False
        #: What the live screen's last refresh keeps for the next (made by ``read_summary``).
        self.kept: Kept | None = None

    def run_queries(self, queries: Sequence[str], at: float) -> list[list[Sample]]:
        if not self.parallel:
            return [self.client.query(q, at) for q in queries]
        return self._gather([self._submit(q, at) for q in queries])

    def _submit(self, query: str, at: float) -> Future[list[Sample]]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="gputui-prom")
        return self._pool.submit(self.client.query, query, at)

    @staticmethod
    def _gather(futures: Sequence[Future[list[Sample]]]) -> list[list[Sample]]:
        results: list[list[Sample]] = []
        errors: list[PrometheusError] = []
        for f in futures:
            try:
                results.append(f.result())
            except PrometheusError as exc:
                errors.append(exc)
                results.append([])
        if errors:  # "unreachable" says the most; else the first problem
            raise next((e for e in errors if isinstance(e, PrometheusUnreachable)), errors[0])
        return results

    def read(self) -> FleetSnapshot:
        """One refresh: ``len(FLEET_QUERIES)`` queries (with ``cache_static``: LIVE_QUERIES, plus
        Q_GPU_STATIC when its answer is older than STATIC_TTL or a new target appeared). Raises
        PrometheusError."""
        now = self.clock()
        if self.summary is not None:
            return self.summary(self, now)
        if not self.cache_static and self.parallel:
            # the down hosts' last-seen query goes as soon as the hosts query answers (a tenth of a
            # second), not after the GPU queries (a second over 2,000 hosts)
            futures = [self._submit(q, now) for q in FLEET_QUERIES]
            try:
                hosts = futures[1].result()
            except PrometheusError:
                hosts = []  # _gather raises it
            gone = gone_query(hosts)
            if gone is not None:
                futures.append(self._submit(gone, now))
            up, seen, info, memory, rest, procs, state, *last = self._gather(futures)
            return build_fleet(self.client.url, now, up, seen + (last[0] if last else []),
                               one_shot_gpus(seen, info, memory + rest), procs, state,
                               queries=len(futures))
        if not self.cache_static:
            up, seen, info, memory, rest, procs, state = self.run_queries(FLEET_QUERIES, now)
            gpus = one_shot_gpus(seen, info, memory + rest)
            seen, extra = self.last_seen(seen, now)
            return build_fleet(self.client.url, now, up, seen, gpus, procs, state,
                               queries=len(FLEET_QUERIES) + extra)
        stale = time.monotonic() - self._static_at >= STATIC_TTL
        queries = LIVE_QUERIES + ((Q_GPU_STATIC,) if stale else ())
        results = self.run_queries(queries, now)
        up, seen, live, procs, state = results[:5]
        seen, extra = self.last_seen(seen, now)
        if not stale and any((s.labels.get("job", ""), s.labels.get("instance", "")) not in self._static_targets
                             for s in up if s.value >= 1):
            results.append(self.client.query(Q_GPU_STATIC, now))  # a new target: its GPUs' names now
            stale = True
        if stale:
            self._static = results[5]
            self._static_at = time.monotonic()
            self._static_targets = {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in self._static}
            # a target without gputui series (dcgm-exporter, node_exporter) never has static ones
            self._static_targets |= {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in up}
        return build_fleet(self.client.url, now, up, seen, self._static + live, procs, state,
                           queries=len(results) + extra)

    def last_seen(self, seen: list[Sample], now: float) -> tuple[list[Sample], int]:
        """Q_HOSTS's answer with the last-seen times of the hosts it marks gone (one more query, only
        when some host is down), and the number of queries that took."""
        query = gone_query(seen)
        if query is None:
            return seen, 0
        return seen + self.client.query(query, now), 1

    def host_history(self, host: FleetHost, span: float = 600.0, points: int = 120) -> HostHistory:
        """The last ``span`` seconds of one host's GPUs: :data:`HOST_RANGE_QUERIES` range queries."""
        end = self.clock()
        start, step = end - span, max(1.0, span / points)
        util_q, mem_q = host_range_queries(host)
        util = self.client.query_range(util_q, start, end, step)
        memory = self.client.query_range(mem_q, start, end, step)
        totals = {g.index: g.memory_total for g in host.gpus}
        ratio = host.source == "gputui"

        def mem_percent(index: int, used: float) -> float | None:
            total = totals.get(index)
            if not total:
                return None
            return min(100.0, 100.0 * used * (1 if ratio else MIB) / total)

        return HostHistory(
            key=host.key, start=start, end=end,
            util=per_gpu(util, lambda _i, v: min(100.0, v * 100 if ratio else v)),
            memory=per_gpu(memory, mem_percent),
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.client.close()
