"""The help screen: every key binding, generated from the ``BINDINGS`` declarations.

Generated rather than written by hand so it cannot drift from the real keys, and
it shows the user's own remaps (``app.get_key_display``).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

#: Keys handled by widgets or Textual itself that are not in our BINDINGS.
_EXTRA = {
    "Dashboard": [("tab / shift+tab", "Move between the GPU panel and the process table")],
    "Mouse": [
        ("click a card", "Select that GPU; click it again for its details"),
        ("click a row", "Highlight that process; double-click opens its GPU"),
        ("wheel", "Scroll the table or the GPU panel"),
    ],
    "Anywhere": [
        ("ctrl+p", "Command palette: every action by name"),
        ("ctrl+c", "Quit"),
    ],
}


def _group(title: str, bindings: list[Binding], app) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    digits = [b for b in bindings if b.action.startswith("only_gpu(")]
    for b in bindings:
        if b in digits:
            if b is digits[0]:
                rows.append(("0 … 9", "Only that GPU's processes (again: all GPUs)"))
            continue
        key = app.get_key_display(b) if app is not None else (b.key_display or b.key)
        rows.append((key, b.description or b.action))
    return rows


def help_sections(app=None) -> list[tuple[str, list[tuple[str, str]]]]:
    from gputui.ui.screens.dashboard import DashboardScreen
    from gputui.ui.screens.detail import GpuDetailScreen
    from gputui.ui.widgets.gpu_panel import GpuPanel
    from gputui.ui.widgets.process_table import ProcessTable

    def binds(cls) -> list[Binding]:
        return [b for b in cls.BINDINGS if isinstance(b, Binding)]

    return [
        ("Dashboard", _group("Dashboard", binds(DashboardScreen), app) + _EXTRA["Dashboard"]),
        ("Process table", _group("Process table", binds(ProcessTable), app)),
        ("GPU panel (tab to focus)", _group("GPU panel", binds(GpuPanel), app) + [("enter", "Details of the GPU")]),
        ("GPU details", _group("GPU details", binds(GpuDetailScreen), app)),
        ("Mouse", _EXTRA["Mouse"]),
        ("Anywhere", _EXTRA["Anywhere"]),
    ]


class HelpScreen(ModalScreen[None]):
    """Every key, grouped by where it works."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help-close"),
        Binding("question_mark", "dismiss", "Close", key_display="?", show=False, id="help-close-?"),
        Binding("q", "dismiss", "Close", show=False, id="help-close-q"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(self._render_help(), id="help-text")

    def _render_help(self) -> Table:
        outer = Table.grid(padding=(0, 4))
        outer.add_column()
        outer.add_column()
        sections = help_sections(self.app)
        tables = []
        for title, rows in sections:
            t = Table.grid(padding=(0, 2))
            t.add_column(style="bold", no_wrap=True, min_width=10)
            t.add_column()
            t.add_row(Text(title, style="bold underline"), "")
            for key, what in rows:
                t.add_row(Text(key, style="bold"), what)
            t.add_row("", "")
            tables.append(t)
        left, right = tables[:2], tables[2:]
        left_col, right_col = Table.grid(), Table.grid()
        for t in left:
            left_col.add_row(t)
        for t in right:
            right_col.add_row(t)
        outer.add_row(left_col, right_col)
        title = Table.grid()
        title.add_row(Text("gputui keys", style="bold"))
        title.add_row(Text("Escape, ? or q closes this help.", style="dim"))
        title.add_row("")
        title.add_row(outer)
        return title
