"""The live fleet screen's refresh: per-host aggregates for the list, every series for one host.

Over 2,000 hosts × 8 GPUs, :data:`~gputui.core.fleet.queries.FLEET_QUERIES` answer with
~80,000 GPU series (~17 MB): parsed every refresh, that was about a second of CPU. The host
list needs only each host's figures, so Prometheus sums them (:data:`Q_SUMMARY`: one series per
host and figure, ``count by``, ``sum by``, ``max by``), and the GPUs and processes of the one
host whose screen is open are read with a ``job``/``instance`` matcher (:func:`detail_query`).
dcgm-exporter hosts (their memory total is used + free + reserved, their busy rule reads the
memory percent) keep sending their GPU series, slimmed, to :func:`build_fleet`.

One refresh: the targets scraped since the last refresh (:class:`~gputui.core.fleet.scrapes.Targets`:
one query, two when its counts do not add up), :data:`Q_SUMMARY` and the state query for those
targets only (:func:`read_summary`); GPU counts, totals and names (:data:`Q_SUMMARY_STATIC`) every
:data:`STATIC_TTL` seconds or when a target appears; one query for the open host; one for the
processes while the `/` filter is in use (it matches users, executables and containers); one for
down hosts' last-seen time. Eight at most.

An up host whose figures did not change stays the same object from one refresh to the next (the
screen redraws a row only for another object), with the ``last_seen`` it had then: the list shows
"up" for it, not when its newest sample came.

Trust: values are range-checked in the query by the driver's limits
(:data:`gputui.core.plausible.LIMITS`: an impossible value is not summed, and counted, so its
host is flagged and its screen names it), and the aggregates again here; label matchers take a
GPU index of ASCII digits only; names are cut like every other label.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from gputui.core import metric_names
from gputui.core.fleet.live_memory import Figures, Groups, Kept
from gputui.core.fleet.model import BUSY_UTILIZATION, FleetHost, FleetSnapshot, HostSummary
from gputui.core.fleet.prom import Sample
from gputui.core.fleet.queries import (
    DCGM_GPU_METRICS,
    Q_HOSTS,
    Q_PROCESSES,
    Q_STATE,
    Q_UP,
    STATIC_TTL,
    FleetReader,
    _regex_literal,
    build_fleet,
    names,
    target_key,
)
from gputui.core.fleet.remote import NAME_MAX
from gputui.core.fleet.rules import GPU_INDEX_MAX, Problems, fit, value_text
from gputui.core.fleet.scrapes import Targets
from gputui.core.plausible import LIMITS
from gputui.core.record import replace

_HOST_INFO = metric_names.HOST_INFO.name
_GPU_INFO = metric_names.GPU_INFO.name
_UTIL = metric_names.GPU_UTILIZATION.name
_USED = metric_names.GPU_MEMORY_USED.name
_TOTAL = metric_names.GPU_MEMORY_TOTAL.name
_TEMP = metric_names.GPU_TEMPERATURE.name
_LOST = metric_names.GPU_LOST.name
_PROC = metric_names.PROCESS_GPU_MEMORY.name
_DCGM_FB_USED = metric_names.DCGM_FB_USED.name

#: The label that says which figure a summary series is.
FIELD = "gputui_field"
#: A GPU index label as RE2: ASCII digits, 0-1023 (rules.GPU_INDEX_MAX).
GPU_INDEX_RE = "[0-9]{1,3}|10[01][0-9]|102[0-3]"
_BY = "job, instance"
#: GPU models listed per host for the filter (more are not read).
NAMES_MAX = 16


def _sel(metric: str) -> str:
    return f'{metric}{{gpu=~"{GPU_INDEX_RE}"}}'


def _field(name: str, expr: str) -> str:
    return f'label_replace({expr}, "{FIELD}", "{name}", "", "")'


def _range(field: str, scale: float = 1.0) -> tuple[float, float]:
    low, high, _ = LIMITS[field]
    return low / scale, high / scale


def _at_most(field: str, scale: float = 1.0) -> str:
    return f"<= {_range(field, scale)[1]:.17g}"


#: Busy as FleetGpu.busy says: utilization (rounded to a percent) at BUSY_UTILIZATION or more, or a
#: process on it (lost GPUs are taken off in :func:`summaries`).
_BUSY = (f"count by ({_BY}) (group by ({_BY}, gpu) ({_sel(_UTIL)} >= {(BUSY_UTILIZATION - 0.5) / 100:g} "
         f"{_at_most('utilization_gpu', 100)}) or group by ({_BY}, gpu) ({_sel(_PROC)}))")
_DCGM_SLIM = (f"max by (__name__, {_BY}, gpu, modelName) ({names(DCGM_GPU_METRICS)} "
              f"unless on ({_BY}) {_HOST_INFO})")

#: Every refresh: the figures that change, one series per gputui host and figure, and the GPU
#: series of dcgm-exporter hosts. Each metric is selected once (Prometheus spends ~8 µs a series
#: it selects, whatever is done with it): sums and maxima are range-checked here, not there.
Q_SUMMARY = " or ".join((
    _field("used", f"sum by ({_BY}) ({_sel(_USED)})"),
    _field("hottest", f"max by ({_BY}) ({_sel(_TEMP)})"),
    _field("busy", _BUSY),
    _field("lost", f"count by ({_BY}) ({_sel(_LOST)} == 1)"),
    _DCGM_SLIM,
))
#: What does not change while an exporter runs: GPU models (and so how many GPUs), memory sizes.
Q_SUMMARY_STATIC = " or ".join((
    _field("total", f"sum by ({_BY}) ({_sel(_TOTAL)})"),
    _field("name", f"count by ({_BY}, name) ({_sel(_GPU_INFO)})"),
))
SUMMARY_QUERIES = (Q_UP, Q_HOSTS, Q_SUMMARY, Q_STATE)

#: figure -> (lowest, highest) per GPU, by the driver's limits (a count: 0 or 1 a GPU)
_BOUNDS = {"busy": (0, 1), "lost": (0, 1), "used": LIMITS["memory_used"][:2],
           "total": LIMITS["memory_total"][:2]}
_WHAT = {"busy": "busy GPU count", "lost": "lost GPU count", "used": "GPU memory used", "total": "GPU memory",
         "hottest": "temperature"}


def _quote(text: str) -> str:
    return json.dumps(text)  # a PromQL double-quoted string accepts JSON's escapes


def matcher_ok(text: str) -> bool:
    """Whether a job or instance label can be put in a matcher: bounded, printable text."""
    return len(text) <= NAME_MAX and text.isprintable()


def detail_query(key: tuple[str, str]) -> str | None:
    """Every GPU and process series of one host (its static and live GPU figures, its processes),
    in one query with a ``job``/``instance`` matcher; None when the labels cannot be put in one."""
    job, instance = key
    if not (instance and matcher_ok(job) and matcher_ok(instance)):
        return None
    where = f"job={_quote(job)},instance={_quote(instance)}"
    gputui = "|".join((_GPU_INFO, _TOTAL, _UTIL, _USED, _TEMP, _LOST))
    return (f'max by (__name__, {_BY}, gpu, uuid, name) ({{__name__=~"{gputui}",{where}}}) or '
            f'{{__name__="{_PROC}",{where}}} or '
            f'max by (__name__, {_BY}, gpu, UUID, modelName) ({{__name__=~"{"|".join(DCGM_GPU_METRICS)}",{where}}})')


def parse_figures(samples: Sequence[Sample], dcgm: list[Sample] | None = None) -> Figures:
    """Summary series as per-host figures (a GPU model's series adds its count to ``gpus``);
    dcgm-exporter GPU series go to ``dcgm``."""
    figures: dict[tuple[str, str], dict[str, float]] = {}
    models: dict[tuple[str, str], list[str]] = {}
    for s in samples:  # a few series per host
        labels = s.labels
        field = labels.get(FIELD)
        if field is None:
            if dcgm is not None and labels.get("__name__", "").startswith("DCGM_"):
                dcgm.append(s)
            continue
        k = target_key(labels)
        v = s.value
        if k is None or v != v:
            continue
        per = figures.get(k)
        if per is None:
            per = figures[k] = {}
        if field == "name":  # one series per GPU model: how many GPUs of it
            per["gpus"] = per.get("gpus", 0.0) + v
            name = labels.get("name")
            if name and len(models.setdefault(k, [])) < NAMES_MAX:
                models[k].append(fit(name))  # words the filter matches, never drawn
        else:
            per[field] = v
    return figures, models


def summaries(live: Sequence[Sample], static: Figures, problems: Problems
              ) -> tuple[dict[tuple[str, str], HostSummary], list[Sample]]:
    """The summary queries' answers (``static`` parsed by :func:`parse_figures`) as HostSummary per
    gputui host, and the dcgm GPU series. A sum or maximum no GPUs can add up to (one GPU sent an
    impossible value) is N/A, and its host flagged: its screen reads every GPU and names which."""
    dcgm: list[Sample] = []
    figures, _ = parse_figures(live, dcgm)
    fixed, models = static
    for k, per in fixed.items():
        mine = figures.get(k)
        if mine is None:
            figures[k] = dict(per)
        else:
            mine.update(per)
    out: dict[tuple[str, str], HostSummary] = {}
    for k, per in figures.items():
        gpus = per.get("gpus", 0.0)
        if not 0 <= gpus <= GPU_INDEX_MAX + 1 or gpus != int(gpus):
            problems.flag(k, f"Prometheus counted an impossible number of GPUs ({gpus:g}): shown as none.")
            gpus = 0.0
        n = int(gpus)
        checked: dict[str, int | None] = {}
        for field in ("busy", "lost", "used", "total", "hottest"):
            if field not in per:
                checked[field] = None
                continue
            v = per[field]
            if field == "hottest":
                low, high, _ = LIMITS["temperature"]
            else:
                low, high = _BOUNDS[field]
                low, high = low * n, high * n
            if low <= v <= high:
                checked[field] = round(v)
            else:
                checked[field] = None
                problems.flag(k, f"Its GPUs sent impossible values: the {_WHAT[field]} ({value_text(v)}) is "
                                 f"shown as N/A.")
        used, total = checked["used"], checked["total"]
        if used is not None and total is not None and used > total:
            problems.flag(k, f"Its GPUs report more memory used than they have ({used} of {total} bytes): "
                             f"shown as N/A.")
            used = None
        lost = min(checked["lost"] or 0, n)
        out[k] = HostSummary(gpus=n, busy=min(checked["busy"] or 0, n - lost), lost=lost, memory_used=used,
                             memory_total=total, hottest=checked["hottest"], words=tuple(models.get(k, ())))
    return out, dcgm


def _words(processes: Sequence[Sample], problems: Problems) -> dict[tuple[str, str], tuple[str, ...]]:
    """Per host, what its processes let the `/` filter match."""
    out: dict[tuple[str, str], list[str]] = {}
    for labels, _v in processes:
        k = target_key(labels)
        if k is None:
            continue
        words = out.setdefault(k, [])
        for name in ("user", "exe", "container", "image", "pid"):
            text = labels.get(name)
            if text:
                words.append(fit(text))
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def _changed_only(expr: str, instances: Iterable[str]) -> str:
    """``expr`` for the targets of these instances only (their other series are as last read)."""
    pattern = "|".join(_regex_literal(i) for i in sorted(instances))
    return f'({expr}) and on ({_BY}) {{__name__=~"{_HOST_INFO}|{_DCGM_FB_USED}",instance=~{_quote(pattern)}}}'


def _by_host(samples: Iterable[Sample]) -> Groups:
    out: Groups = {}
    for s in samples:
        k = target_key(s.labels)
        group = out.get(k)
        if group is None:
            out[k] = [s]
        else:
            group.append(s)
    return out


def read_summary(reader: FleetReader, now: float) -> FleetSnapshot:
    """One refresh of the live screen (see the module's docstring). Raises PrometheusError.

    A target's series all carry the time of its newest scrape: the summary and state series are
    asked again only for the targets scraped (or gone, or come) since the last refresh — for all when
    more than a quarter were — and when none was and nothing else is asked for, the last snapshot
    stands. A host whose series are what they were is not built again, nor a host whose GPU models
    and sizes did not change when those are read again."""
    import time

    if reader.kept is None:
        reader.kept = Kept()
    kept = reader.kept
    targets = kept.targets
    stale = time.monotonic() - reader._static_at >= STATIC_TTL
    sent = targets.refresh(reader.client.query, now, full=stale)
    # what a refresh that failed half-way (Prometheus refused a query) had to read again is read now,
    # as changed: its series may have been kept, its host not built again
    targets.changed |= kept.pending
    kept.pending = targets.changed | targets.newer
    return _refresh(reader, kept, now, stale, sent)


def _refresh(reader: FleetReader, kept: Kept, now: float, stale: bool, sent: int) -> FleetSnapshot:
    """read_summary once the targets are listed: ``kept.pending`` are the instances to read again."""
    import time

    targets = kept.targets
    instances = set(kept.pending)
    groups = kept.groups
    detail = detail_query(reader.detail) if reader.detail is not None else None
    last = kept.last
    if (groups is not None and last is not None and not instances and not stale and detail is None
            and not reader.words):
        kept.pending = set()
        return replace(last, time=datetime.fromtimestamp(now, timezone.utc), queries=sent)
    full = groups is None or len(instances) * 4 > len(targets) or None in instances
    queries: list[str] = []
    if full:
        queries += [Q_SUMMARY, Q_STATE]
    elif instances:
        named = {i for i in instances if i is not None}  # a None makes it full
        queries += [_changed_only(Q_SUMMARY, named), _changed_only(Q_STATE, named)]
    if stale:
        queries.append(Q_SUMMARY_STATIC)
    if detail is not None:
        queries.append(detail)
    if reader.words:
        queries.append(Q_PROCESSES)
    rest = reader.run_queries(queries, now) if queries else []
    rebuilt: set[str | None] = instances
    if full:
        groups = (_by_host(rest.pop(0)), _by_host(rest.pop(0)))
        kept.jobs = {k[0] for group in groups for k in group if k is not None}
    elif instances:
        assert groups is not None
        new_groups = (_by_host(rest.pop(0)), _by_host(rest.pop(0)))
        kept.jobs.update(k[0] for group in new_groups for k in group if k is not None)
        # a target's key is (job, instance): its keys are looked up, not searched for among 2,000
        jobs = kept.jobs | targets.jobs()
        # a host that only sent newer samples of the same figures stays as it is (unless its screen is
        # open: that screen reads more than the figures)
        steady = targets.newer - targets.changed - {reader.detail[1] if reader.detail else None}
        for mine, new in zip(groups, new_groups, strict=True):
            old = [k for i in instances for j in jobs if (k := (j, i)) in mine]
            steady.difference_update([k[1] for k in old if k[1] in steady and mine[k] != new.get(k)] +
                                     [k[1] for k in new if k is not None and k[1] in steady and k not in mine])
            for k in old:
                del mine[k]  # scraped again: what it sends now replaces all it sent
            mine.update(new)
        rebuilt = instances - steady
    assert groups is not None
    kept.groups = groups
    static = rest.pop(0) if stale else None
    detailed = rest.pop(0) if detail is not None else None
    processes = rest.pop(0) if reader.words else None
    gone, extra = reader.last_seen(targets.gone_rows(), now)  # the down hosts' last-seen times
    sent += len(queries) + extra
    if static is None and not targets.live_targets() <= reader._static_targets:
        static = reader.client.query(Q_SUMMARY_STATIC, now)  # a new target: its GPUs now
        sent += 1
    if static is not None:
        reader._static = static
        before, kept.static_figures = kept.static_figures, parse_figures(static)
        reader._static_at = time.monotonic()
        reader._static_targets = {target_key(s.labels) for s in (*static, *targets.up_rows())} - {None}  # type: ignore[assignment]
        kept.jobs.update(k[0] for k in kept.static_figures[0])
        # GPU models and sizes seldom change: only the hosts whose did are built again for them
        (sizes, models), (new_sizes, new_models) = before, kept.static_figures
        moved = {k[1] for k in sizes.keys() | new_sizes.keys() if sizes.get(k) != new_sizes.get(k)}
        moved.update(k[1] for k in models.keys() | new_models.keys() if models.get(k) != new_models.get(k))
        rebuilt = rebuilt | moved
        kept.pending |= moved
        full = full or len(moved) * 4 > len(targets)
    snap, only = None, None
    if not full and processes is None and last is not None:
        snap, only = _rebuild_some(reader.client.url, now, last, rebuilt, targets, gone, groups, sent, kept)
    if snap is not None:
        seen: list[Sample] = []
        up = seen
    else:  # every host built again: every host's series
        up, seen = targets.up_rows(), [*targets.live.values(), *gone]
        live = [s for group in groups[0].values() for s in group]
        state = [s for group in groups[1].values() for s in group]
        problems = Problems()
        per_host, dcgm = summaries(live, kept.static_figures, problems)
        if processes is not None:
            for k, words in _words(processes, problems).items():
                if k in per_host:
                    per_host[k] = replace(per_host[k], words=per_host[k].words + words)
        snap = build_fleet(reader.client.url, now, up, seen, dcgm, (), state, queries=sent, summaries=per_host,
                           problems=problems)
    if detailed is not None and reader.detail is not None:
        rows = targets.rows_of((reader.detail[1],))
        snap = _with_detail(snap, reader.detail, rows[0], [*rows[1], *gone], detailed,
                            groups[1].get(reader.detail, []), now)
        only = None
    snap = _reuse(kept, snap, only)
    kept.last, kept.pending = snap, set()
    return snap


def _rebuild_some(url: str, now: float, last: FleetSnapshot, instances: set[str | None], targets: Targets,
                  gone: Sequence[Sample], groups: tuple[Groups, Groups], sent: int, kept: Kept
                  ) -> tuple[FleetSnapshot | None, list[int] | None]:
    """``last`` with the hosts of ``instances`` built again from their new series and the others kept
    as they were, and the places of the hosts built again when every one kept its place (None: look
    at every host); None when that cannot be told apart from a whole build (a series without an
    instance, two targets sharing a hostname: their labels depend on each other)."""
    if not instances:
        return replace(last, time=datetime.fromtimestamp(now, timezone.utc), queries=sent), []
    if None in instances or kept.labelled:
        return None, None
    jobs = kept.jobs | targets.jobs()
    keys = [(j, i) for i in instances if i is not None for j in jobs]

    def grouped(by: Groups) -> list[Sample]:
        return [s for k in keys for s in by.get(k, ())]

    problems = Problems()
    # only the rebuilt hosts' static figures: summaries() makes a summary for every host it is given
    sizes, models = kept.static_figures
    some_static = ({k: sizes[k] for k in keys if k in sizes}, {k: models[k] for k in keys if k in models})
    per_host, dcgm = summaries(grouped(groups[0]), some_static, problems)
    up, live = targets.rows_of(instances)
    some = build_fleet(url, now, up, [*live, *(s for s in gone if s.labels.get("instance") in instances)], dcgm, (),
                       grouped(groups[1]), summaries=per_host, problems=problems)
    if some.warnings:
        return None, None
    # in place when every host built again is one that was there, under the same name (the order is by
    # name): the others do not move
    where = kept.places
    if where is None or any(not (0 <= where.get(k, -1) < len(last.hosts)) or last.hosts[where[k]].key != k
                            for k in (h.key for h in some.hosts)):
        where = kept.places = {h.key: n for n, h in enumerate(last.hosts)}
    before = {where[k] for k in keys if k in where}
    places = [where.get(h.key, -1) for h in some.hosts]
    if (len(places) == len(before) and set(places) == before
            and all(last.hosts[n].host == h.host for n, h in zip(places, some.hosts, strict=True))):
        hosts = list(last.hosts)
        for n, h in zip(places, some.hosts, strict=True):
            hosts[n] = h
        return replace(last, time=some.time, hosts=tuple(hosts), queries=sent), places
    others = [h for h in last.hosts if h.instance not in instances]
    names = {h.host for h in others}
    if any(h.host in names for h in some.hosts):
        return None, None
    kept.places = None
    hosts = sorted((*others, *some.hosts), key=lambda h: (h.host.lower(), h.instance, h.job))
    return replace(last, time=some.time, hosts=tuple(hosts), queries=sent), None


def _reuse(kept: Kept, snap: FleetSnapshot, only: list[int] | None = None) -> FleetSnapshot:
    """``snap`` with every host equal to the previous refresh's being that same object: the screen
    redraws a row only when its host is another object (most are the same between two refreshes).
    ``only``: the places of the hosts that may be new (the others are the previous refresh's)."""
    previous = kept.hosts

    def same(h: FleetHost) -> FleetHost:
        old = previous.get(h.key)
        if old is not None and (old is h or old == h or (old.up and h.up and old.last_seen != h.last_seen
                                             and replace(h, last_seen=old.last_seen) == old)):
            return old  # an up host's newest sample time is not drawn: a new one alone changes nothing
        return h

    if only is not None:
        hosts = list(snap.hosts)
        for n in only:
            hosts[n] = previous[hosts[n].key] = same(hosts[n])
        return replace(snap, hosts=tuple(hosts))
    hosts = [same(h) for h in snap.hosts]
    kept.hosts = {h.key: h for h in hosts}
    kept.places = None
    kept.labelled = any(h.label != h.host for h in hosts)
    return replace(snap, hosts=tuple(hosts))


def _with_detail(snap: FleetSnapshot, key: tuple[str, str], up: Iterable[Sample], seen: Iterable[Sample],
                 detailed: Sequence[Sample], state: Iterable[Sample], now: float) -> FleetSnapshot:
    """``snap`` with the host ``key`` built from every one of its series."""
    listed = snap.host(key)
    if listed is None:
        return snap

    def mine(samples: Iterable[Sample]) -> list[Sample]:
        return [s for s in samples if target_key(s.labels) == key]

    gpus = [s for s in detailed if s.labels.get("__name__") != _PROC]
    procs = [s for s in detailed if s.labels.get("__name__") == _PROC]
    one = build_fleet(snap.prometheus, now, mine(up), mine(seen), gpus, procs, mine(state)).host(key)
    if one is None:
        return snap
    one = replace(one, label=listed.label, problems=tuple(dict.fromkeys((*listed.problems, *one.problems))))
    return replace(snap, hosts=tuple(one if h.key == key else h for h in snap.hosts))
