"""Asking the operator before a destructive action, the same way in every command."""

from __future__ import annotations

import sys
from typing import TextIO


def interactive() -> bool:
    """True when a person can answer on stdin (a terminal, not a pipe or /dev/null)."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def ask(prompt: str, out: TextIO) -> str:
    """Print ``prompt`` and return the answer, stripped and lower-cased ("" on EOF or ^C)."""
    out.write(prompt)
    out.flush()
    try:
        line = sys.stdin.readline()
    except (EOFError, KeyboardInterrupt, OSError, ValueError):
        return ""
    return line.strip().lower()
