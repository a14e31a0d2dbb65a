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

__all__ = ["clean", "clean_or_none"]

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
    s = unicodedata.normalize("NFC", s) if not _has_surrogates(s) else s
    return "".join(_escape_char(ch) for ch in s)


def clean_or_none(text: object | None) -> str | None:
    """``clean`` that passes ``None`` through (for fields shown as N/A)."""
    return None if text is None else clean(text)


def _has_surrogates(s: str) -> bool:
    # NFC normalisation cannot encode lone surrogates; leave such strings as they are.
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in s)
