"""The one rule for outside text on its way to a terminal.

Command lines, user and executable names, container names, images, labels,
environment values, Docker and NVML strings and Prometheus labels are chosen by
someone other than the operator. Written to a terminal unchanged, an escape
sequence in them can retitle the window, recolour or clear the screen, or (OSC 52)
write the operator's clipboard. ``clean()`` turns every character that is not
plain visible text into a visible escape, so one process is one line and a row's
width is what it looks like:

* C0 controls and DEL (tab and newline included) -> caret notation: ``^[``, ``^G``, ``^I``, ``^J``, ``^?``
* C1 controls (U+0080-U+009F) -> ``\\x9b``
* bytes that were not valid UTF-8 (surrogate-escaped by Python) -> ``\\xff``
* format characters (bidi overrides and isolates, zero-width spaces and joiners,
  soft hyphen, BOM), line/paragraph separators, unassigned and private-use code
  points, and combining marks left after NFC normalisation -> ``\\u202e``

JSON output does not use this: ``json.dumps`` already escapes what it must.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any, TextIO

__all__ = ["SafeStream", "clean", "clean_lines", "clean_or_none"]

#: Unicode categories shown as ``\\uXXXX``: format, line/paragraph separators,
#: surrogates (other than surrogate-escaped bytes), private use, unassigned,
#: and combining marks (which would change a row's width from what it looks like).
_ESCAPED_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Cs", "Co", "Cn", "Mn", "Me", "Mc"})


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    if 0x80 <= code <= 0x9F:  # C1 controls
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if unicodedata.category(ch) in _ESCAPED_CATEGORIES:
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return ch


def clean(text: object) -> str:
    """``text`` (any object, read through ``str``) safe to write to a terminal as one line."""
    s = text if isinstance(text, str) else str(text)
    if s.isascii():
        if s.isprintable():
            return s  # the common case costs one scan
        return "".join(_escape_char(ch) if (ch < " " or ch == "\x7f") else ch for ch in s)
    return _clean_unicode(s)


@lru_cache(maxsize=8192)
def _clean_unicode(s: str) -> str:
    # Widgets redraw the same names and command lines every second: remember the answers.
    s = unicodedata.normalize("NFC", s) if not _has_surrogates(s) else s
    return "".join(_escape_char(ch) for ch in s)


def clean_or_none(text: object | None) -> str | None:
    """``clean`` that passes ``None`` through (for fields shown as N/A)."""
    return None if text is None else clean(text)


def _has_surrogates(s: str) -> bool:
    # NFC normalisation cannot encode lone surrogates; leave such strings as they are.
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in s)


def clean_lines(text: str) -> str:
    """``text`` with every line passed through :func:`clean`; the newlines between lines are kept."""
    if text.isascii() and text.replace("\n", "").isprintable():
        return text
    return "\n".join(clean(line) for line in text.split("\n"))


class SafeStream:
    """A text stream that writes everything through :func:`clean_lines`.

    The command-line faces (``--once``, ``snapshot``, ``kill`` and ``migrate``
    confirmations and plans, ``doctor``, ``pick``, error sentences) write to
    these, so outside text cannot reach the terminal raw whichever message it
    travels in. gputui's own output has no control characters but newlines, so
    cleaning it changes nothing; JSON is ASCII-escaped already and passes as is.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean_lines(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding ...
        return getattr(self._stream, name)
