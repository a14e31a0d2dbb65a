"""One-line bars: the status line at the top, the selection bar under the table,
and the imbalance banner.

They change at most once per poll and are one line each, so each renders a
single strip and refreshes only when what it shows changed (no layout pass).
"""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from gputui.core.judges.text import invisible_phrase
from gputui.core.model import Imbalance, Process, Snapshot
from gputui.core.record import record
from gputui.ui import format as fmt
from gputui.ui.widgets.lines import (
    CachedStyles,
    DirectLines,
    LineBuilder,
    SkipIdentityFilter,
    base_style,
    component_style,
    release,
)


@record
class PollStatus:
    """How polling is going, as the status line shows it."""

    interval: float
    last_ok: datetime | None = None
    #: One sentence while polls fail; None once a poll succeeds again.
    error: str | None = None
    #: Seconds the running poll has taken, once it is slow (None otherwise).
    slow_for: float | None = None
    paused: bool = False
    read_only: bool = False
    #: Whether container information was asked for (False with --no-docker).
    containers_enabled: bool = True
    #: One sentence per journal an interrupted action left (``gputui migrate --recover``
    #: handles them); shown until a later check finds none.
    journals: tuple[str, ...] = ()


def snapshot_warnings(snapshot: Snapshot | None, status: PollStatus) -> list[str]:
    """Everything the status line must warn about, most urgent first."""
    out: list[str] = []
    if status.error:
        out.append(status.error)
    if status.slow_for is not None:
        out.append(f"Waiting for the GPU driver: this poll has taken {status.slow_for:.0f} s.")
    out.extend(status.journals)
    if snapshot is not None:
        out.extend(snapshot.warnings)
        if status.containers_enabled and not snapshot.docker.available and snapshot.docker.error:
            out.append(f"containers unavailable: {snapshot.docker.error}")
        if snapshot.slurm is not None and not snapshot.slurm.available:
            out.append(f"Slurm unavailable: {snapshot.slurm.error or 'unknown reason'}")
    return out


class _OneLine(DirectLines, SkipIdentityFilter, CachedStyles, Widget):
    """A one-line Line-API widget whose strip is drawn once and kept until its content,
    its width or the theme changes (subclasses draw it in ``_draw`` and drop
    ``_strip`` when what they show changes). The status line changes every poll (its clock)
    and the selection bar with the cursor: Textual's ANSI-to-truecolor filter is left out
    while it would change nothing (see :class:`SkipIdentityFilter`), and the strip goes to the
    compositor as it is (see :class:`DirectLines`)."""

    _strip: Strip | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drop()

    def _drop(self) -> None:
        """What the line shows changed: draw it again when it is next drawn."""
        if self._strip is not None:
            release((self._strip,))
            self._strip = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._strip is None or self._strip.cell_length != width:
            self._drop()
            self._strip = self._draw(width)
        return self._strip

    def _draw(self, width: int) -> Strip:
        raise NotImplementedError


class StatusLine(_OneLine):
    """Host, driver and CUDA versions, refresh period, last poll, and warnings."""

    COMPONENT_CLASSES = {
        "status-line--brand",
        "status-line--text",
        "status-line--dim",
        "status-line--warning",
        "status-line--error",
        "status-line--paused",
    }
    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        background: $panel;
        & > .status-line--brand { background: $primary; color: $background; text-style: bold; }
        & > .status-line--text { color: $foreground; }
        & > .status-line--dim { color: $foreground 55%; }
        & > .status-line--warning { color: $warning; text-style: bold; }
        & > .status-line--error { background: $error; color: $background; text-style: bold; }
        & > .status-line--paused { background: $warning; color: $background; text-style: bold; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.status = PollStatus(interval=1.0)
        self._key: tuple | None = None
        self._strip: Strip | None = None

    def show(self, snapshot: Snapshot | None, status: PollStatus) -> None:
        key = (
            None if snapshot is None else (snapshot.host, snapshot.time, snapshot.driver_version,
                                           snapshot.cuda_driver_version, len(snapshot.gpus), snapshot.warnings,
                                           snapshot.docker),
            status,
        )
        if key != self._key:
            self._key = key
            self.snapshot, self.status = snapshot, status
            self._drop()
            self.refresh()

    def _draw(self, width: int) -> Strip:
        def st(name: str) -> Style:
            return component_style(self, f"status-line--{name}")

        right = self._right(width, st)
        out = self._left(max(0, width - right.width), st)
        out.pad_to(width - right.width)
        out.extend(right.segments, right.width)
        return out.strip(width).apply_style(base_style(self))

    def _left(self, room: int, st) -> LineBuilder:
        """Host and details, fitted by dropping whole fields (least useful first), never by cutting a
        value: a cut "580.95" would read as a real driver version."""
        snap, status = self.snapshot, self.status
        #: (drop order, label, value); lower drop order goes first when room is short
        fields: list[tuple[int, str, str]] = []
        if snap is not None:
            fields += [(6, "  driver ", snap.driver_version or fmt.NA),
                       (5, "  CUDA ", snap.cuda_driver_version or fmt.NA),
                       (2, "  GPUs ", str(len(snap.gpus)))]
        fields += [(1, "  every ", f"{status.interval:g}s"), (4, "  at ", fmt.clock_time(status.last_ok))]
        if status.read_only:
            fields.append((3, "  read-only: kill and migrate off", ""))
        head = " gputui "
        host = "reading the GPUs…" if snap is None else snap.host
        host_style = st("dim") if snap is None else st("text")

        def width_of(kept: list[tuple[int, str, str]]) -> int:
            return len(head) + 1 + len(host) + sum(len(label) + len(value) for _, label, value in kept)

        kept = list(fields)
        for order in sorted({f[0] for f in fields}):
            if width_of(kept) <= room:
                break
            kept = [f for f in kept if f[0] != order]
        left = LineBuilder().add(head, st("brand")).add(" ")
        host_room = max(0, room - width_of(kept) + len(host))
        if len(host) > host_room:
            left.add_fit(host, host_room, host_style)
        else:
            left.add(host, host_style)
        for _, label, value in kept:
            left.add(label, st("dim"))
            if value:
                left.add(value, st("text"))
        return left

    def _right(self, width: int, st) -> LineBuilder:
        snap, status = self.snapshot, self.status
        right = LineBuilder()
        if status.paused:
            right.add(" ⏸ PAUSED (p resumes) ", st("paused")).add(" ")
        warnings = snapshot_warnings(snap, status)
        if warnings:
            text = warnings[0] + (f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else "")
            style = st("error") if status.error and warnings[0] == status.error else st("warning")
            room = max(0, width - right.width - 1)
            # Warnings win over details: the left part drops fields first.
            room = min(room, max(room - self._left(width, st).width, width * 2 // 3))
            right.add_fit(f" ⚠ {text} ", min(room, len(text) + 4), style).add(" ")
        return right


class SelectionBar(_OneLine):
    """The highlighted process in full: command, container, and why it looks stale."""

    COMPONENT_CLASSES = {"selection-bar--key", "selection-bar--text", "selection-bar--stale", "selection-bar--dim"}
    DEFAULT_CSS = """
    SelectionBar {
        height: 1;
        background: $panel;
        & > .selection-bar--key { color: $accent; text-style: bold; }
        & > .selection-bar--text { color: $foreground; }
        & > .selection-bar--stale { color: $warning; text-style: bold; }
        & > .selection-bar--dim { color: $foreground 55%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.process: Process | None = None
        self._strip: Strip | None = None

    def show(self, process: Process | None) -> None:
        if self._shown(process) != self._shown(self.process):
            self.process = process
            self._drop()
            self.refresh()
        else:
            self.process = process

    @staticmethod
    def _shown(p: Process | None) -> tuple | None:
        """Only what the bar draws: a process's numbers moving must not repaint it."""
        if p is None:
            return None
        return (p.pid, p.gpu_index, p.container, p.job, p.stale, p.visible, p.invisible_reason, p.command)

    def _draw(self, width: int) -> Strip:
        def st(name: str) -> Style:
            return component_style(self, f"selection-bar--{name}")

        p = self.process
        line = LineBuilder().add(" ")
        if p is None:
            line.add("No process selected.", st("dim"))
        else:
            line.add(f"PID {p.pid}", st("key")).add(f" on GPU {p.gpu_index}", st("dim"))
            if p.job is not None:
                line.add("  ", st("dim")).add(p.job.label, st("text"))
                if p.job.name:
                    line.add(f" ({p.job.name})", st("dim"))
            if p.container is not None:
                line.add("  container ", st("dim")).add(p.container.label, st("text"))
                if p.container.image:
                    line.add(f" ({p.container.image})", st("dim"))
            if p.stale:
                line.add("  ● ", st("stale")).add("; ".join(f.message for f in p.stale), st("stale"))
            elif not p.visible:
                line.add(f"  ? {invisible_phrase(p.invisible_reason)}", st("dim"))
            if p.command:
                line.add("  $ ", st("dim")).add(p.command, st("text"))
        return line.strip_cut(width).apply_style(base_style(self))


class ImbalanceBanner(CachedStyles, Widget):
    """Shown only while the imbalance judge flags the machine: what is wrong and one move.

    The message and the move are wrapped at word boundaries, never cut mid-word: up
    to :attr:`MAX_PART_LINES` lines each (the last one ending in "…" when even that is
    not enough), and in full while the banner has focus.
    """

    COMPONENT_CLASSES = {"imbalance-banner--label", "imbalance-banner--text", "imbalance-banner--move"}
    DEFAULT_CSS = """
    ImbalanceBanner {
        height: auto;
        display: none;
        background: $warning 15%;
        &.-flagged { display: block; }
        & > .imbalance-banner--label { background: $warning; color: $background; text-style: bold; }
        & > .imbalance-banner--text { color: $foreground; }
        & > .imbalance-banner--move { color: $warning; text-style: bold; }
    }
    """

    #: Lines the message and the move may each take while the banner is not focused (on a terminal
    #: shorter than SHORT_TERMINAL rows, one less).
    MAX_PART_LINES = 3
    SHORT_TERMINAL = 30

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.imbalance = Imbalance()
        self._wrap_cache: tuple[tuple, list[Strip]] | None = None

    def show(self, imbalance: Imbalance) -> None:
        if imbalance == self.imbalance:
            return
        was = self.imbalance
        self.imbalance = imbalance
        if imbalance.flagged != was.flagged:
            self.set_class(imbalance.flagged, "-flagged")
        width = self.size.width or 80
        # The height follows the wrapped text; a new message of the same height only repaints
        # (a layout pass costs ~100x more).
        old_height = len(self._strips(width, was))
        self._wrap_cache = None
        self.refresh(layout=old_height != len(self._strips(width)) or imbalance.flagged != was.flagged)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._wrap_cache = None

    def lines_needed(self, width: int) -> int:
        """How many lines the banner takes at this width (0 while nothing is flagged)."""
        return len(self._strips(width)) if self.imbalance.flagged else 0

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._strips(width)))

    def _st(self, name: str) -> Style:
        return component_style(self, f"imbalance-banner--{name}")

    def _message_text(self, imb: Imbalance) -> Text:
        label = " IMBALANCED (provisional) " if imb.provisional else " IMBALANCED "
        text = Text.assemble((label, self._st("label")), " ")
        text.append(imb.message or ", ".join(imb.kinds) or "the GPUs are unevenly loaded", self._st("text"))
        return text

    def _suggestion_text(self, imb: Imbalance) -> Text | None:
        sug = imb.suggestion
        if sug is None:
            return None
        what = sug.container and f"container {sug.container}" or (sug.pid and f"PID {sug.pid}") or "a job"
        text = Text.assemble(("  → ", self._st("move")),
                             (f"move {what} from GPU {sug.from_gpu} to GPU {sug.to_gpu}", self._st("move")))
        text.append(f": {sug.reason}", self._st("text"))
        text.append("  (m opens migrate)", self._st("text") + Style(dim=True))
        return text

    def _strips(self, width: int, imbalance: Imbalance | None = None) -> list[Strip]:
        imb = self.imbalance if imbalance is None else imbalance
        full = self.has_focus
        cap = self.MAX_PART_LINES - (1 if self.is_attached and self.app.size.height < self.SHORT_TERMINAL else 0)
        key = (imb, width, full, cap)
        if imbalance is None and self._wrap_cache is not None and self._wrap_cache[0] == key:
            return self._wrap_cache[1]
        strips: list[Strip] = []
        if imb.flagged or imb.message:
            for part in (self._message_text(imb), self._suggestion_text(imb)):
                if part is not None:
                    strips += wrap_text(part, max(1, width), None if full else cap)
        if imbalance is None:
            self._wrap_cache = (key, strips)
        return strips

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strips = self._strips(width)
        base = base_style(self)
        if 0 <= y < len(strips):
            return strips[y].adjust_cell_length(width, base).apply_style(base)
        return Strip.blank(width, base)


def wrap_text(text: Text, width: int, max_lines: int | None = None) -> list[Strip]:
    """``text`` wrapped at word boundaries into strips of ``width`` cells; with ``max_lines``, the
    last kept line ends in "…" when more was left."""
    console = Console(width=width, color_system=None, legacy_windows=False)
    lines = list(text.wrap(console, width, overflow="fold"))
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        last = lines[-1]
        last.rstrip()
        if last.cell_len >= width:
            last.truncate(width - 1)
        last.append("…")
    return [Strip(list(line.render(console, end="")), line.cell_len) for line in lines]
