"""Outside text on its way into a widget: the one sanitising rule, plus Rich markup escaping.

Every string someone else chose (command lines, user names, container names,
images, labels, Docker and NVML strings) passes :func:`plain` before it becomes a
``Text``, a ``Segment`` or a table cell, and :func:`markup` where it is
interpolated into a markup string (``notify``, ``Static.update(str)``, string
cells of a ``DataTable`` or a Rich ``Table``, which parse markup).
"""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from gputui.core.safe_text import clean

__all__ = ["markup", "plain", "text"]


def plain(value: object) -> str:
    """``value`` as one terminal-safe line (see :func:`gputui.core.safe_text.clean`)."""
    return clean(value)


def markup(value: object) -> str:
    """``value`` safe to interpolate into a Rich/Textual markup string."""
    return escape(clean(value))


def text(value: object, style: str = "") -> Text:
    """``value`` as a ``Text`` (never parsed as markup), one terminal-safe line."""
    return Text(clean(value), style=style)
