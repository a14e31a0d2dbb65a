"""The imbalance banner you can act on: focus it (Tab or a click) and press ``m``.

It draws what :class:`~gputui.ui.widgets.status.ImbalanceBanner` draws — the
judge's message and its one suggested move — and adds the action: ``m`` (or
Enter) opens the migrate dialog for the suggested container with the suggested
target already chosen. The dialog still shows the plan and asks before
anything happens. A suggestion that names a bare process (no container) cannot
be migrated by gputui; ``m`` then says how to move it by hand. In read-only mode
the migrate binding is disabled (greyed in the footer) and the hint says so.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message

from gputui.core.model import Imbalance
from gputui.ui import keys
from gputui.ui.widgets.status import ImbalanceBanner


class SuggestionBanner(ImbalanceBanner):
    """The imbalance banner, focusable, with ``m`` = migrate as suggested."""

    can_focus = True

    class Refit(Message):
        """The banner's height changed (focus shows the whole text): the screen re-divides its room."""

    class MigrateRequested(Message):
        """``m`` on a suggestion that names a container: the screen opens the migrate dialog."""

        def __init__(self, container: str, target: int) -> None:
            super().__init__()
            self.container = container
            self.target = target

    BINDINGS = keys.BANNER

    DEFAULT_CSS = """
    SuggestionBanner:focus {
        background: $warning 35%;
    }
    """

    def on_click(self, event: events.Click) -> None:
        self.focus()

    def on_focus(self) -> None:
        self._refit()

    def on_blur(self) -> None:
        self._refit()

    def _refit(self) -> None:
        """Focus shows the whole text: the banner's height, and so the panel's room, change."""
        self._wrap_cache = None
        self.refresh(layout=True)
        self.post_message(self.Refit())

    def _suggestion_text(self, imb: Imbalance) -> Text | None:
        sug = imb.suggestion
        if sug is None:
            return None
        what = f"container {sug.container}" if sug.container else f"PID {sug.pid}" if sug.pid else "a job"
        move = self._st("move")
        text = Text.assemble(("  → ", move), (f"move {what} from GPU {sug.from_gpu} to GPU {sug.to_gpu}", move))
        hint = "m: migrate as suggested" if self.has_focus else "tab here, then m: migrate"
        if sug.container is None:
            hint = "m: how to move it" if self.has_focus else "tab here, then m: how to move it"
        elif self._read_only():
            hint = "read-only: migrate is off"
        text.append(f"  [{hint}]", move + Style(dim=not self.has_focus))
        text.append(f"  {sug.reason}", self._st("text"))
        return text

    #: Set by the screen from the settings: read-only mode turns the migrate binding off.
    read_only = False

    def _read_only(self) -> bool:
        return self.read_only

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "migrate_suggestion":
            sug = self.imbalance.suggestion
            # Saying how to move a bare process by hand changes nothing: allowed even read-only.
            if self._read_only() and (sug is None or sug.container is not None):
                return None
        return True

    def action_migrate_suggestion(self) -> None:
        imb = self.imbalance
        sug = imb.suggestion
        if not imb.flagged or sug is None:
            self.notify("The imbalance judge suggests no move right now.", severity="information")
            return
        if sug.container is None:
            self.notify(f"PID {sug.pid} runs outside any container, so gputui cannot move it: restart it with "
                        f"CUDA_VISIBLE_DEVICES={sug.to_gpu}.", severity="information", timeout=8)
            return
        if self._read_only():
            self.notify("gputui is read-only (--read-only or read_only in the config): migrate is off.",
                        severity="warning")
            return
        self.post_message(self.MigrateRequested(sug.container, sug.to_gpu))
