"""``who``/``usage --prometheus URL``: the fleet's history through :mod:`gputui.core.fleet.history`,
every Prometheus failure one sentence (exit 2)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputui.context import Context
    from gputui.core.fleet.prom import PromClient
    from gputui.core.sources.history_store import Holding, Usage


def _client(ctx: Context) -> PromClient:
    from gputui.context import UsageError
    from gputui.core.fleet.prom import PromClient

    try:
        return PromClient(ctx.args.prometheus, timeout=30.0)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def prom_holdings(ctx: Context, since: float, until: float, gpus: list[int]) -> list[Holding]:
    from gputui.context import UsageError
    from gputui.core.fleet.history import holdings
    from gputui.core.fleet.prom import PrometheusError

    client = _client(ctx)
    try:
        return holdings(client, since, until, gpus, now=time.time())
    except PrometheusError as exc:
        raise UsageError(str(exc)) from None
    finally:
        client.close()


#: the note ``usage --prometheus`` prints when the recording rules' series answered
RECORDED_NOTE = "from the recording rules' series (contrib/prometheus/gputui-history-rules.yml)"


def prom_usage(ctx: Context, since: float, until: float, by: str) -> tuple[list[Usage], Usage, str]:
    """The figures and which series they come from: the recording rules' where they cover the
    period (one query), else the raw series (three range queries), with the reason."""
    from gputui.context import UsageError
    from gputui.core.fleet.history import usage
    from gputui.core.fleet.prom import PrometheusError
    from gputui.core.recorded_usage import recorded_usage

    client = _client(ctx)
    try:
        recorded = recorded_usage(client, since, until, by)
        if not isinstance(recorded, str):
            return (*recorded, RECORDED_NOTE)
        return (*usage(client, since, until, by), f"from the raw series: {recorded}")
    except PrometheusError as exc:
        raise UsageError(str(exc)) from None
    finally:
        client.close()
