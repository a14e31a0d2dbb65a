"""The fleet's rules for what a host's exporter sends: one label rule, one value rule, and the
sentences that flag a host that broke them (see :mod:`gputui.core.fleet.queries`, "Trust").

* A GPU index or PID label is ASCII digits only and bounded (:func:`label_int`): ``str.isdigit``
  accepts ``"²"`` (which ``int`` refuses) and ``"٣"`` (which ``int`` reads as 3), and a label of
  more than 4,300 digits makes ``int`` raise.
* Text labels are cut at 253 bytes (hostnames) or 256 (:func:`fit`).
* Values pass the driver's rule, :func:`gputui.core.plausible.implausible`.
* :class:`Problems` collects what was left out, cut or shown as N/A, per host, into sentences.
"""

from __future__ import annotations

from gputui.core import metric_names
from gputui.core.fleet.remote import NAME_MAX
from gputui.core.plausible import implausible

MIB = 1024**2

#: A GPU index label is at most this (no host has more GPUs); a PID label at most PID_MAX.
GPU_INDEX_MAX = 1023
PID_MAX = 2**32


def label_int(text: object, limit: int = GPU_INDEX_MAX) -> int | None:
    """A GPU index (or, with ``limit=PID_MAX``, a PID) label as a number: ASCII digits only, at most
    ``limit``; None for anything else (``"²"`` and ``"٣"`` are digits to ``str.isdigit``, not here)."""
    if type(text) is not str or not 0 < len(text) <= 10 or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= limit else None


def fit(text: str, limit: int = NAME_MAX) -> str:
    """``text`` cut to ``limit`` bytes of UTF-8 (with "…"), or itself when it fits."""
    if len(text) <= limit // 4:
        return text
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= limit:
        return text
    return raw[:limit - 3].decode("utf-8", "ignore") + "…"


#: Windowed metrics ``pick --prometheus`` reads -> the plausibility field their values are judged by.
_WINDOW_FIELDS = {
    metric_names.GPU_UTILIZATION.name: ("utilization_gpu", 100.0),
    metric_names.DCGM_GPU_UTIL.name: ("utilization_gpu", 1.0),
    metric_names.GPU_MEMORY_USED.name: ("memory_used", 1.0),
    metric_names.DCGM_FB_USED.name: ("memory_used", float(MIB)),
}


def plausible_window(metric: str, value: float) -> bool:
    """Whether a windowed value (an average or a peak) of ``metric`` is one a GPU can report."""
    field, scale = _WINDOW_FIELDS.get(metric, ("memory_used", 1.0))
    return value == value and not implausible(field, value * scale)


#: How a field reads in the sentence that flags an impossible value.
FIELD_LABEL = {"utilization_gpu": "GPU utilization", "memory_used": "memory used", "memory_total": "total memory",
               "temperature": "temperature"}


class Problems:
    """Counts of series left out (fleet-wide and per host) and per-host flags, turned into sentences."""

    #: Sentences kept per host (more are counted in one last sentence).
    PER_HOST = 12

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        #: host -> {what: (count, first example)}
        self.left_out: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}
        #: host -> sentences, in order, without repeats
        self.flags: dict[tuple[str, str], dict[str, None]] = {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def leave_out(self, k: tuple[str, str], what: str, example: object, verb: str = "left out",
                  plural: str | None = None) -> None:
        """One more ``what`` of host ``k`` (``verb``: what was done with it), ``example`` the first."""
        per = self.left_out.setdefault(k, {})
        key = f"{what}\0{plural or what + 's'}\0{verb}"
        n, first = per.get(key, (0, ""))
        per[key] = (n + 1, first if n else quoted(example))

    def cut(self, k: tuple[str, str], text: str, limit: int = NAME_MAX) -> str:
        """``text`` fit to ``limit`` bytes; a cut one is counted on host ``k``."""
        short = fit(text, limit)
        if short is not text:
            self.leave_out(k, f"label longer than {limit} bytes", text, "shown cut")
        return short

    def flag(self, k: tuple[str, str], sentence: str) -> None:
        self.flags.setdefault(k, {})[sentence] = None

    def sentences(self) -> list[str]:
        return [f"{n} {what} {'was' if n == 1 else 'were'} left out." for what, n in sorted(self.counts.items())]

    def host_sentences(self, k: tuple[str, str]) -> tuple[str, ...]:
        out = list(self.flags.get(k, ()))
        for key, (n, example) in sorted(self.left_out.get(k, {}).items()):
            one, many, verb = key.split("\0")
            out.append(f"{n} {one if n == 1 else many} {'was' if n == 1 else 'were'} {verb} (such as {example}).")
        if len(out) > self.PER_HOST:
            out[self.PER_HOST - 1:] = [f"{len(out) - self.PER_HOST + 1} more problems with this host's data."]
        return tuple(out)


def quoted(value: object) -> str:
    """A label value as an example in a sentence: quoted, its start only when long."""
    if not value:
        return "no label"
    text = value if isinstance(value, str) else repr(value)
    shown = repr(text[:24]) + ("…" if len(text) > 24 else "")
    return f"{shown} ({len(text)} characters)" if len(text) > 24 else shown


def value_text(v: float) -> str:
    """A value as sent, short: ``1e+308``, ``inf``."""
    return f"{v:g}"
