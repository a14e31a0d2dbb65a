"""The help screen: every key binding, generated from the ``BINDINGS`` declarations.

Generated rather than written by hand so it cannot drift from the real keys, and
it shows the user's own remaps (``app.get_key_display``).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

#: Keys handled by widgets or Textual itself that are not in our BINDINGS.
_EXTRA = {
    "Dashboard": [("tab / shift+tab", "Move between the GPU panel, imbalance banner and process table")],
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
    """One row per action: keys bound to the same action and description share it ("escape / q")."""
    rows: list[tuple[str, str]] = []
    row_of: dict[tuple[str, str], int] = {}
    digits = [b for b in bindings if b.action.startswith("only_gpu(")]
    for b in bindings:
        if b in digits:
            if b is digits[0]:
                rows.append(("0 … 9", "Only that GPU's processes (again: all GPUs)"))
            continue
        key = app.get_key_display(b) if app is not None else (b.key_display or b.key)
        what = b.description or b.action
        same = row_of.get((b.action, what))
        if same is not None:
            rows[same] = (f"{rows[same][0]} / {key}", what)
            continue
        row_of[(b.action, what)] = len(rows)
        rows.append((key, what))
    return rows


def help_sections(app=None) -> list[tuple[str, list[tuple[str, str]]]]:
    from gputui.ui.screens.containers import ContainersScreen
    from gputui.ui.screens.dashboard import DashboardScreen
    from gputui.ui.screens.detail import GpuDetailScreen
    from gputui.ui.widgets.banner import SuggestionBanner
    from gputui.ui.widgets.gpu_panel import GpuPanel
    from gputui.ui.widgets.process_table import ProcessTable

    def binds(cls) -> list[Binding]:
        return [b for b in cls.BINDINGS if isinstance(b, Binding)]

    return [
        ("Dashboard", _group("Dashboard", binds(DashboardScreen), app) + _EXTRA["Dashboard"]),
        ("Process table", _group("Process table", binds(ProcessTable), app)),
        ("Imbalance banner (tab to focus)", _group("Imbalance banner", binds(SuggestionBanner), app)),
        ("GPU panel (tab to focus)", _group("GPU panel", binds(GpuPanel), app) + [("enter", "Details of the GPU")]),
        ("GPU details", _group("GPU details", binds(GpuDetailScreen), app)),
        ("Containers (c)", _group("Containers", binds(ContainersScreen), app)),
        ("Mouse", _EXTRA["Mouse"]),
        ("Anywhere", _EXTRA["Anywhere"]),
    ]


#: Sections per column of the help, in the order of :func:`help_sections`: the
#: dashboard alone; the table, banner, panel and details; the other views, mouse, anywhere.
COLUMNS = (1, 4, 3)
#: Below this width the sections are stacked in one column (three would be clipped mid-word).
WIDE = 120


class HelpScreen(ModalScreen[None]):
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
