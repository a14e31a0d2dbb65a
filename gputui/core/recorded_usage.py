"""``usage --prometheus`` from the history recording rules' series, where they cover the period.

``contrib/prometheus/gputui-history-rules.yml`` records each minute, per host and per user (and per
GPU), how many GPUs the key held memory on, how busy and how idle those GPUs were and how much memory
its processes held. Where a Prometheus has them for the whole period, one instant query sums them
(``sum_over_time`` over a few thousand recorded points per key instead of range queries over every
process's raw samples); :func:`recorded_usage` returns the same :class:`Usage` rows as
:func:`gputui.core.fleet.history.usage`, to within one minute per hold (a recorded minute counts the
bucket a hold starts in, the raw figures count from the bucket before), or the reason the raw series
must be read instead:

* ``--by`` other than user, GPU or host: the rules' container and image series leave out processes
  outside containers (which the raw figures count as ``(host)``/``(none)``), and there are none per
  compose project or job;
* a period under :data:`MIN_PERIOD` (the raw series are cheap there);
* no recorded series in the period, or a GPU whose raw series exist at the period's start or end
  without its recorded utilization beside it (the rules were installed, or stopped, within it).
"""

from __future__ import annotations

import math

from gputui.core import metric_names as mn
from gputui.core.fleet.prom import PromClient
from gputui.core.sources.history_store import Usage

#: the --by keys the recorded series answer as the raw ones do
RECORDED_KEYS = ("user", "gpu", "host")
#: shorter periods are read from the raw series
MIN_PERIOD = 600.0
#: a moment's samples: the raw series' last scrape, and one recorded minute, (t - 1 minute, t]
_LOOKBACK = "2m"
_ONE = "59999ms"
_WHY_NOT = {
    "container": "the recording rules' container series leave out processes outside containers",
    "image": "the recording rules' image series leave out processes outside containers",
    "compose": "the recording rules record nothing per compose project",
    "job": "the recording rules record nothing per job",
}


def _figure(name: str, expr: str) -> str:
    return f'label_replace({expr}, "figure", "{name}", "", "")'


def _gap(at_start: str) -> str:
    """GPUs whose raw utilization has a sample at the moment but whose recorded one has none."""
    raw = f"last_over_time({mn.GPU_UTILIZATION.name}[{_LOOKBACK}]{at_start})"
    rec = f"last_over_time({mn.RECORDED_GPU_UTILIZATION}[{_LOOKBACK}]{at_start})"
    return f"(count by (job, instance, gpu) ({raw}) unless on (job, instance, gpu) {rec})"


def query(since: float, until: float, by: str) -> str:
    """The one instant query (at ``until``) that reads every figure and the coverage checks."""
    span = f"{max(1, round(until - since))}s"
    rec = mn.RECORDED_BY_USER if by == "user" else mn.RECORDED_BY_GPU
    group = "job, instance" if by == "host" else rec.label
    parts = [_figure(name, f"sum by ({group}) (sum_over_time({series}[{span}]))")
             for name, series in (("held", rec.held), ("busy", rec.busy), ("idle", rec.idle),
                                  ("memory", rec.memory))]
    parts.append(_figure("peak", f"max_over_time((sum by ({group}) (last_over_time({rec.held}[{_ONE}])))"
                                 f"[{span}:1m])"))
    parts.append(_figure("total_peak", f"max_over_time((sum (last_over_time({mn.RECORDED_BY_GPU.held}[{_ONE}])))"
                                       f"[{span}:1m])"))
    parts.append(_figure("present", f"group(last_over_time({mn.RECORDED_GPU_UTILIZATION}[{span}]))"))
    parts.append(_figure("gap_end", _gap("")))
    parts.append(_figure("gap_start", _gap(f" offset {span}")))
    if by == "host":
        parts.append(_figure("host", f"max by (job, instance, hostname) "
                                     f"(last_over_time({mn.HOST_INFO.name}[{span}]))"))
    return " or ".join(parts)


def recorded_usage(client: PromClient, since: float, until: float, by: str) -> tuple[list[Usage], Usage] | str:
    """The figures from the recorded series, or the clause saying why the raw series must be read."""
    if by not in RECORDED_KEYS:
        return _WHY_NOT.get(by, f"the recording rules record nothing per {by}")
    if until - since < MIN_PERIOD:
        return "a period under ten minutes is read from the raw series"
    answer = client.query(query(since, until, by), at=until)
    figures: dict[str, dict[tuple[str, str], float]] = {}
    names: dict[tuple[str, str], str] = {}
    for sample in answer:
        labels = sample.labels
        figure = labels.get("figure", "")
        if figure == "host":
            if labels.get("hostname"):
                names[(labels.get("job", ""), labels.get("instance", ""))] = labels["hostname"][:253]
            continue
        if not math.isfinite(sample.value) or sample.value < 0:
            continue  # no recorded sum can be negative or infinite: that series is left out
        if by == "host":
            key = (labels.get("job", ""), labels.get("instance", ""))
        else:
            key = (labels.get(by, ""), "")
        figures.setdefault(figure, {})[key] = sample.value
    if "present" not in figures:
        return "this Prometheus has no series of the recording rules (contrib/prometheus/gputui-history-rules.yml)"
    if figures.get("gap_start"):
        return "the recording rules' series begin after the period's start"
    if figures.get("gap_end"):
        return "the recording rules' series end before the period's end"
    return _rows(figures, names, by)


def _name(key: tuple[str, str], names: dict[tuple[str, str], str], by: str) -> str:
    if by == "host":
        return names.get(key) or key[1] or "?"
    if by == "user":
        return key[0] or "(unknown)"
    return key[0]


def _rows(figures: dict[str, dict[tuple[str, str], float]], names: dict[tuple[str, str], str],
          by: str) -> tuple[list[Usage], Usage]:
    per_hour = mn.RECORDED_INTERVAL / 3600
    sums: dict[str, list[float]] = {}
    for key, held in figures.get("held", {}).items():
        name = _name(key, names, by)
        row = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0])
        row[0] += held * per_hour
        row[1] += figures.get("busy", {}).get(key, 0.0) * per_hour
        row[2] += figures.get("memory", {}).get(key, 0.0) * per_hour / 1024**3
        row[3] += figures.get("idle", {}).get(key, 0.0) * per_hour
        row[4] = max(row[4], figures.get("peak", {}).get(key, 0.0))
    rows = [Usage(name, r[0], r[1], r[2], r[3], round(r[4])) for name, r in sums.items()]
    rows.sort(key=lambda u: (-u.gpu_hours_held, u.key))
    peak = max(figures.get("total_peak", {}).values(), default=0.0)
    total = Usage("total", sum(u.gpu_hours_held for u in rows), sum(u.busy_gpu_hours for u in rows),
                  sum(u.memory_gib_hours for u in rows), sum(u.idle_hold_hours for u in rows), round(peak))
    return rows, total
