"""Messages from the poll worker thread to the UI thread.

A poll runs in a thread worker and ends by posting exactly one of these; the
handler on the UI thread is the only place that changes widgets. They carry
immutable data only, so nothing is shared between the threads.
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.message import Message

from gputui.core.history import GpuSample
from gputui.core.model import Snapshot


class PollFinished(Message, bubble=False):
    """A poll succeeded: the judged snapshot and a copy of the GPU history it ends."""

    def __init__(self, snapshot: Snapshot, gpu_history: Mapping[int, tuple[GpuSample, ...]], duration: float) -> None:
        super().__init__()
        self.snapshot = snapshot
        #: Per GPU index, every kept sample (History is written by the poll thread, so it is
        #: copied there; tuples of frozen samples are safe to read anywhere).
        self.gpu_history = gpu_history
        #: Seconds the poll took.
        self.duration = duration

    def can_replace(self, message: Message) -> bool:
        # A newer snapshot makes an unhandled older one worthless.
        return isinstance(message, PollFinished)


class PollFailed(Message, bubble=False):
    """A poll raised: one sentence for the status line; polling goes on."""

    def __init__(self, error: str, duration: float) -> None:
        super().__init__()
        self.error = error
        self.duration = duration


class JournalsChecked(Message, bubble=False):
    """The journal check (off the UI thread) finished: one sentence per interrupted action found."""

    def __init__(self, sentences: tuple[str, ...]) -> None:
        super().__init__()
        self.sentences = sentences
