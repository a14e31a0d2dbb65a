"""The host screen's range queries: one host's GPU load and memory over the last minutes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence

from gputui.core import metric_names
from gputui.core.fleet.model import FleetHost
from gputui.core.fleet.prom import RangeSeries
from gputui.core.fleet.rules import label_int
from gputui.core.record import record

__all__ = ["HOST_RANGE_QUERIES", "HostHistory", "host_range_queries", "host_selector", "per_gpu"]

_GPU_UTILIZATION = metric_names.GPU_UTILIZATION.name
_GPU_MEMORY_USED = metric_names.GPU_MEMORY_USED.name
_DCGM_GPU_UTIL = metric_names.DCGM_GPU_UTIL.name
_DCGM_FB_USED = metric_names.DCGM_FB_USED.name


def _quote(text: str) -> str:
    return json.dumps(text)  # a PromQL double-quoted string accepts JSON's escapes



def host_selector(host: FleetHost, metrics: Iterable[str]) -> str:
    return ('{__name__=~"' + "|".join(metrics) + f'",job={_quote(host.job)},instance={_quote(host.instance)}}}')


def host_range_queries(host: FleetHost) -> tuple[str, str]:
    """(utilization, memory used) of every GPU of ``host``, in the host's own metric names."""
    if host.source == "gputui":
        return (host_selector(host, (_GPU_UTILIZATION,)),
                host_selector(host, (_GPU_MEMORY_USED,)))
    return (host_selector(host, (_DCGM_GPU_UTIL,)), host_selector(host, (_DCGM_FB_USED,)))


HOST_RANGE_QUERIES = 2


@record
class HostHistory:
    """Load and memory (percent) per GPU index of one host, oldest first."""

    key: tuple[str, str]
    start: float
    end: float
    util: dict[int, tuple[tuple[float, float], ...]]
    memory: dict[int, tuple[tuple[float, float], ...]]


def per_gpu(series: Sequence[RangeSeries], scale: Callable[[int, float], float | None]
             ) -> dict[int, tuple[tuple[float, float], ...]]:
    out: dict[int, tuple[tuple[float, float], ...]] = {}
    for s in series:
        index = label_int(s.labels.get("gpu"))
        if index is None:
            continue
        points = []
        for t, v in s.points:
            scaled = scale(index, v) if math.isfinite(v) else None
            if scaled is not None and 0.0 <= scaled <= 100.0:  # a percent: anything else is no reading
                points.append((t, scaled))
        out[index] = tuple(points)
    return out


