"""Small wording helpers shared by the judges' one-sentence messages."""

from __future__ import annotations

from collections.abc import Iterable

from gputui.core.units import fmt_bytes


def gib(value: int | float | None) -> str:
    """Bytes as "18.0 GiB" (always GiB: messages compare sizes, so one unit reads best)."""
    return fmt_bytes(value, "GiB")


def duration(seconds: float) -> str:
    """How long something was observed: "45 s", "10 min", "2 h 5 min"."""
    s = max(0.0, seconds)
    if s < 10:
        return f"{s:.1f} s".replace(".0 s", " s")
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    h, m = divmod(int(round(s / 60)), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def over(observed: float) -> str:
    """The observation: "over 60 s", or "in one sample" when there is only one."""
    return f"over {duration(observed)}" if observed > 0 else "in one sample"


def index_ranges(indices: Iterable[int]) -> str:
    """[1,2,3,5,6,7] -> "1-3, 5-7"."""
    items = sorted(set(indices))
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{items[i]}-{items[j]}")
        else:
            parts.extend(str(x) for x in items[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def gpus_phrase(indices: Iterable[int]) -> str:
    """A GPU list in words: "GPU 3" or "GPUs 1-3, 5" ("no GPU" for none)."""
    items = sorted(set(indices))
    if not items:
        return "no GPU"
    return f"GPU {items[0]}" if len(items) == 1 else f"GPUs {index_ranges(items)}"


def join_and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


#: Why a GPU process listed by NVML cannot be read here, in words (``Process.invisible_reason``).
_INVISIBLE = {
    "other-namespace": "not visible from here: its PID belongs to another PID namespace",
    "vanished": "not visible from here: no such PID in this PID namespace (it exited, or it runs in another one)",
    "hidden": "not visible from here: /proc hides other users' processes (hidepid)",
}


def invisible_phrase(reason: str | None) -> str:
    """"not visible from here: …" and why, for a process NVML lists but this /proc does not show."""
    return _INVISIBLE.get(reason or "", "not visible from here")
