"""The key footer, fitted to the terminal's width instead of cut at its edge.

Textual's ``Footer`` lays its keys out in one row and cuts whatever passes the right edge: at
80 columns the dashboard lost ``k Kill`` and ``q Quit`` with nothing to say so. This footer
measures its keys first; when they do not fit it drops, in turn, the roomy layout (compact
style), the command-palette key (``ctrl+p`` works anyway and the help lists it), and then keys
after the first (help) one by one, never the last (quit), writing ``…`` where keys were left
out (``?`` lists every key).
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel

#: Cells around a key's text ("k Kill"): roomy (key padding 0 1, description padding 0 1 0 0) or
#: compact (a margin of 1 after the key).
_ROOMY, _COMPACT = 2, 1
#: Cells the command-palette key takes beyond its text at most (border, padding).
_PALETTE = 4
#: What stands for the keys left out.
MORE = "…"


def _text_width(key: FooterKey) -> int:
    """Cells of "k Kill" (the key, a space, the description)."""
    return cell_len(key.key_display) + (cell_len(key.description) + 1 if key.description else 0)


def fit(widths: list[int], palette: int, room: int) -> tuple[bool, bool, list[int]]:
    """(compact, palette shown, indices of the keys shown) for keys of ``widths`` (their text) and a
    palette key of ``palette`` cells (0: none) in ``room`` cells. Pure: the footer's whole decision."""
    def need(compact: bool, show_palette: bool, shown: list[int], dropped: bool) -> int:
        pad = _COMPACT if compact else _ROOMY
        total = sum(widths[i] + pad for i in shown)
        if show_palette and palette:
            total += palette + _PALETTE
        if dropped:
            total += cell_len(MORE) + 1
        return total

    every = list(range(len(widths)))
    if need(False, True, every, False) <= room:
        return False, bool(palette), every
    if need(True, True, every, False) <= room:
        return True, bool(palette), every
    if need(True, False, every, False) <= room:
        return True, False, every
    shown = list(every)
    # drop keys after the first (help), never the last (quit), nearest the front first: the
    # actions (migrate, kill) stay longest
    for i in every[1:-1]:
        shown.remove(i)
        if need(True, False, shown, True) <= room:
            break
    return True, False, shown


class FitFooter(Footer):
    """A :class:`Footer` that fits its width (see the module's docstring)."""

    def compose(self) -> ComposeResult:
        items = list(super().compose())
        keys = [w for w in items if isinstance(w, FooterKey) and not w.has_class("-command-palette")]
        palettes = [w for w in items if isinstance(w, FooterKey) and w.has_class("-command-palette")]
        if len(keys) + len(palettes) != len(items):  # grouped keys: Textual's own layout
            yield from items
            return
        room = self.size.width or self.app.size.width
        self._fitted_width = room
        compact, show_palette, shown = fit([_text_width(k) for k in keys],
                                           _text_width(palettes[0]) if palettes else 0, room)
        self.set_reactive(Footer.compact, compact)
        self.set_class(compact, "-compact")
        for n, key in enumerate(keys):
            if n not in shown:
                continue
            if n > 0 and n - 1 not in shown:
                yield FooterLabel(MORE + " ", classes="-more")
            key.compact = compact
            yield key
        if show_palette:
            yield from palettes

    _fitted_width = -1

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)

