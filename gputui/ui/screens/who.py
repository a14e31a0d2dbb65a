""""Who was on this GPU": every hold of one GPU over the last 24 hours, from the history database
that ``gputui record`` writes. Read on a worker thread (SQLite off the event loop); a database that
is missing or unreadable is one sentence in the dialog."""

from __future__ import annotations

import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from gputui.ui import keys
from gputui.ui.base import GpuModal
from gputui.ui.safe import plain

DAY = 86400.0


def read_day_holders(gpu: int, now: float) -> str:
    """The table of who held ``gpu`` in the 24 hours before ``now`` (or the sentence why not)."""
    from gputui.core.history_text import holders_table
    from gputui.core.sources.history_store import HistoryError, default_db_path, holdings, open_reader

    path = default_db_path()
    try:
        conn = open_reader(path, timeout=2.0)
    except HistoryError as exc:
        return str(exc)
    try:
        items = holdings(conn, now - DAY, now, [gpu])
    except Exception as exc:  # a damaged file: say so in the dialog, never take the app down
        return f"The history database {path} cannot be read ({exc})."
    finally:
        conn.close()
    if not items:
        return f"Nobody held GPU {gpu} in the last 24 hours (history: {path})."
    return holders_table(items)


class WhoScreen(GpuModal[None]):
    """The last 24 hours' holders of one GPU."""

    BINDINGS = keys.WHO

    class Loaded(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, gpu_index: int, now: float | None = None) -> None:
        super().__init__()
        self.gpu_index = gpu_index
        self.now = now

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="who-box"):
            yield Static(Text(f" Who was on GPU {self.gpu_index} in the last 24 hours", style="bold"),
                         id="who-title")
            yield Static("Reading the history…", id="who-text")

    def on_mount(self) -> None:
        self._read(self.gpu_index, self.now if self.now is not None else time.time())

    @work(thread=True, exclusive=True, exit_on_error=False, group="who", description="read the GPU's history")
    def _read(self, gpu: int, now: float) -> None:
        self.post_message(self.Loaded(read_day_holders(gpu, now)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        # users, container names, executables: outside text, through the one rule, never markup
        self.query_one("#who-text", Static).update(Text("\n".join(plain(line) for line in message.text.splitlines())))
