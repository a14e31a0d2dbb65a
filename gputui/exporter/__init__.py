"""``gputui exporter``: the judged snapshot as Prometheus metrics.

* :mod:`gputui.exporter.metrics` — the metric contract: one judged
  :class:`~gputui.core.model.Snapshot` -> metric families (pure, no I/O).
* :mod:`gputui.exporter.server` — the poll loop on its own thread and the HTTP
  server that hands the newest families to each scrape.

Headless like ``gputui.core``: never imports textual.
"""
