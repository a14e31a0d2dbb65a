"""``/metrics`` with prometheus-client as the formatter, family by family, reusing what did not change.

Formatting is most of a scrape's CPU: prometheus-client validates and escapes every label of
every sample (the 64 process series of 8 × 64 carry ten labels each). Most families are the same
from one poll to the next — the info series, the process and container series while memory
holds still — so :class:`MetricsApp` formats each family on its own with prometheus-client's own
encoder (the one it negotiates from ``Accept``) and keeps the bytes; a family whose samples equal
the ones formatted last time reuses them. Both encoders format each family independently of the
others (the OpenMetrics one ends the whole text with ``# EOF``, which is taken off each family and
added once), so the body is byte for byte what ``make_wsgi_app`` serves. Compression, ``name[]``
filtering, ``OPTIONS`` and other methods stay prometheus-client's: anything but a plain GET goes
to its app unchanged.
"""

from __future__ import annotations

import gzip
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

#: Content types whose family bytes are kept (a scraper asks for one; a curl now and then for another).
MAX_FORMATS = 4


class _Families:
    """A collector that yields the families given to it (one family, or none for the trailer)."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = families

    def collect(self) -> Iterable[Any]:
        return self._families


def _same(samples: list[Sample], before: list[Sample]) -> bool:
    """Equal samples format alike, except a zero whose sign differs (``-0.0 == 0.0``)."""
    if samples != before:
        return False
    return all(a.value != 0 or math.copysign(1.0, a.value) == math.copysign(1.0, b.value)
               for a, b in zip(samples, before, strict=True))


class _Format:
    """One negotiated format: its encoder, its trailer and the bytes of each family last formatted."""

    def __init__(self, encoder: Callable[[Any], bytes]) -> None:
        self.encoder = encoder
        self.trailer = encoder(_Families(()))  # b"" for text, b"# EOF\n" for OpenMetrics
        #: family name -> (type, documentation, unit, samples, bytes without the trailer, the family
        #: object formatted, its own samples list and that list's length)
        self.kept: dict[str, tuple[str, str, str, list[Sample], bytes, Any, list[Sample], int]] = {}

    def render(self, families: Iterable[Any]) -> bytes:
        kept: dict[str, tuple[str, str, str, list[Sample], bytes, Any, list[Sample], int]] = {}
        parts = []
        cut = len(self.trailer)
        for metric in families:
            old = self.kept.get(metric.name)
            if old is not None and old[5] is metric and old[6] is metric.samples and old[7] == len(metric.samples):
                # The very family formatted last time, handed out again by a collector that keeps its
                # families while their inputs hold (gputui's collector never changes one it handed out).
                kept.setdefault(metric.name, old)
                parts.append(old[4])
                continue
            samples = list(metric.samples)
            if (old is not None and old[0] == metric.type and old[1] == metric.documentation
                    and old[2] == metric.unit and _same(samples, old[3])):
                body = old[4]
            else:
                body = self.encoder(_Families((metric,)))
                if cut:
                    body = body[:-cut]
            if metric.name not in kept:  # a second family of the same name (not ours) is formatted each time
                kept[metric.name] = (metric.type, metric.documentation, metric.unit, samples, body, metric,
                                     metric.samples, len(metric.samples))
            parts.append(body)
        self.kept = kept
        parts.append(self.trailer)
        return b"".join(parts)


class MetricsApp:
    """The WSGI app of ``/metrics``: prometheus-client's, with family bytes kept between scrapes."""

    def __init__(self, registry: CollectorRegistry | Collector) -> None:
        self._registry = registry
        self._fallback = make_wsgi_app(registry)
        self._formats: dict[str, _Format] = {}
        self._lock = threading.Lock()  # scrapes run in their own threads; the kept bytes are shared

    def body(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition for an ``Accept`` header, and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        with self._lock:
            fmt = self._formats.get(content_type)
            if fmt is None:
                if len(self._formats) >= MAX_FORMATS:
                    self._formats.clear()
                fmt = self._formats[content_type] = _Format(encoder)
            return fmt.render(self._registry.collect()), content_type

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        query = environ.get("QUERY_STRING", "")
        if environ.get("REQUEST_METHOD") != "GET" or (query and "name[]" in parse_qs(query)):
            return self._fallback(environ, start_response)
        output, content_type = self.body(environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
            output = gzip.compress(output)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]
