"""The fleet: every server's GPUs, owners and containers, read from Prometheus.

``prom`` is the HTTP client (timeouts, one sentence per failure), ``queries``
turns a fixed set of PromQL queries into one immutable :class:`FleetSnapshot`
(``model``), ``pick`` chooses GPUs across the fleet. Headless: no textual here.
"""
