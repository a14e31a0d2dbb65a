"""The help screen: every key binding, generated from the registry in :mod:`gputui.ui.keys`.

Generated rather than written by hand so it cannot drift from the real keys (the screens take
their ``BINDINGS`` from the same registry), and it shows the user's own remaps
(``app.get_key_display``).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.ui import keys
from gputui.ui.base import GpuModal


def _group(title: str, bindings: list[Binding], app: App[Any] | None) -> list[tuple[str, str]]:
    """One row per action: keys bound to the same action and description share it ("escape / q")."""
    rows: list[tuple[str, str]] = []
    row_of: dict[tuple[str, str], int] = {}
    #: the config's [keymap]: the keys a remapped binding answers to now
    remap = dict(getattr(getattr(app, "settings", None), "keymap", None) or ())
    digits = [b for b in bindings if b.action.startswith("only_gpu(") and b.id not in remap]
    for b in bindings:
        if b in digits:
            if b is digits[0]:
                rows.append(("0 … 9", "Only that GPU's processes (again: all GPUs)"))
            continue
        if app is not None and b.id in remap:
            key = " / ".join(app.get_key_display(Binding(k, b.action, b.description, id=b.id))
                             for k in remap[b.id].split(","))
        else:
            key = app.get_key_display(b) if app is not None else (b.key_display or b.key)
        what = b.description or b.action
        same = row_of.get((b.action, what))
        if same is not None:
            rows[same] = (f"{rows[same][0]} / {key}", what)
            continue
        row_of[(b.action, what)] = len(rows)
        rows.append((key, what))
    return rows


def help_sections(app: App[Any] | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """The help's sections from the bindings registry, with the user's remaps when ``app`` is given."""
    return [(title, _group(title, [b for b in bindings if isinstance(b, Binding)], app) + extra)
            for title, bindings, extra in keys.SECTIONS]


#: Sections per column of the help, in the order of :func:`help_sections`: the
#: dashboard alone; the table, banner, panel and details; the other views, mouse, anywhere.
COLUMNS = (1, 4, 3)
#: Below this width the sections are stacked in one column (three would be clipped mid-word).
WIDE = 120


class HelpScreen(GpuModal[None]):
    """Every key, grouped by where it works."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help-close"),
        Binding("question_mark", "dismiss", "Close", key_display="?", show=False, id="help-close-?"),
        Binding("q", "dismiss", "Close", show=False, id="help-close-q"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(self._render_help(self.app.size.width), id="help-text")

    def on_resize(self, event: events.Resize) -> None:
        wide = event.size.width >= WIDE
        if wide != self._wide:
            self.query_one("#help-text", Static).update(self._render_help(event.size.width))

    _wide: bool | None = None

    def _render_help(self, width: int) -> Table:
        self._wide = wide = width >= WIDE
        layout = COLUMNS if wide else (sum(COLUMNS),)
        outer = Table.grid(padding=(0, 3))
        for _ in layout:
            outer.add_column()
        sections = help_sections(self.app)
        tables = []
        for title, rows in sections:
            keys = Table.grid(padding=(0, 2))
            keys.add_column(style="bold", no_wrap=True, min_width=6)
            keys.add_column()
            for key, what in rows:
                keys.add_row(Text(key, style="bold"), what)
            # The title above the keys, not in their column (a long title would widen it).
            t = Table.grid()
            t.add_row(Text(title, style="bold underline"))
            t.add_row(keys)
            t.add_row("")
            tables.append(t)
        columns = []
        start = 0
        for count in layout:
            col = Table.grid()
            for t in tables[start:start + count]:
                col.add_row(t)
            columns.append(col)
            start += count
        outer.add_row(*columns)
        page = Table.grid()
        page.add_row(Text("gputui keys", style="bold"))
        close = "Escape, ? or q closes this help." + ("" if wide else " ↑/↓ and page keys scroll it.")
        page.add_row(Text(close, style="dim"))
        page.add_row("")
        page.add_row(outer)
        return page
