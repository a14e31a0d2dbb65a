"""TIME as ``who``/``usage`` read it: ISO 8601 (local time unless an offset is given), epoch
seconds, or a relative ``30m``/``8h``/``7d``/``90s``/``2w`` meaning that long ago."""

from __future__ import annotations

import math
import re
from datetime import datetime

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Earliest and latest instants accepted (1970 .. 2200): anything else is a typo.
_LOW, _HIGH = 0.0, 7258118400.0


def parse_time(text: str, now: float) -> float:
    """POSIX seconds for TIME; ValueError with one sentence when it is none of the three forms."""
    value = text.strip()
    if len(value) > 64:
        raise ValueError("a time is at most 64 characters long")
    m = _RELATIVE.match(value.lower())
    if m:
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
        if seconds > now - _LOW:
            raise ValueError(f"{value!r} reaches back before 1970")
        return now - seconds
    try:
        epoch = float(value)
    except ValueError:
        epoch = math.nan
    if not math.isnan(epoch):
        if not _LOW <= epoch <= _HIGH:
            raise ValueError(f"{value!r} is not an epoch time between 1970 and 2200")
        return epoch
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ValueError(f"{value!r} is not a time: give ISO 8601 (2026-12-01T22:00), epoch seconds or "
                         "a relative 30m, 8h, 7d") from None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # local time
    result = stamp.timestamp()
    if not _LOW <= result <= _HIGH:
        raise ValueError(f"{value!r} is not between 1970 and 2200")
    return result
