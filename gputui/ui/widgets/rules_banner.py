"""One line under the GPU cards while a house rule is broken: the first violation, and how many more.

Every violation is also an alert (``!`` lists them all with their fixes); this line makes sure nobody
misses that the machine's own rules are being broken. It is redrawn only when what it says changes.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gputui.core.model import RuleViolation
from gputui.ui.safe import plain


class RulesBanner(Static):
    DEFAULT_CSS = """
    RulesBanner {
        height: 1;
        display: none;
        background: $error 15%;
        &.-broken { display: block; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown: tuple[str, ...] | None = None

    def show(self, violations: tuple[RuleViolation, ...]) -> bool:
        """Draw the violations; True when the banner appeared or went away (the screen re-divides its room)."""
        key = tuple(v.message for v in violations)  # what the line draws, nothing else
        if key == self._shown:
            return False
        appeared = bool(key) != bool(self._shown)
        self._shown = key
        self.set_class(bool(key), "-broken")
        if key:
            more = f"  (+{len(key) - 1} more: ! alerts)" if len(key) > 1 else "  (! alerts)"
            self.update(Text.assemble((" HOUSE RULES ", "bold reverse"), " ", plain(key[0]),
                                      (more, "dim"), no_wrap=True, overflow="ellipsis"))
        return appeared

    @property
    def lines(self) -> int:
        return 1 if self._shown else 0
