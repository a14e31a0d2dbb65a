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


def prom_usage(ctx: Context, since: float, until: float, by: str) -> tuple[list[Usage], Usage]:
    from gputui.context import UsageError
    from gputui.core.fleet.history import usage
    from gputui.core.fleet.prom import PrometheusError

    client = _client(ctx)
    try:
        return usage(client, since, until, by)
    except PrometheusError as exc:
        raise UsageError(str(exc)) from None
    finally:
        client.close()
