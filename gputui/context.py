"""What every face of gputui shares below the command line: exit codes, ``UsageError``,
the subcommand ``Context`` and the argparse validators more than one command uses.

``cli.py`` builds the parser and dispatches; ``commands/`` and ``ui/`` import this module,
never ``cli.py``, so the layers stay core < actions < context < commands | ui < cli.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO, cast

from gputui.core.config import Settings, parse_size
from gputui.core.limits import RANGES, SECONDS_RANGE, flag_type
from gputui.core.record import field, record, replace
from gputui.core.safe_text import SafeStream

if TYPE_CHECKING:
    import argparse

    from gputui.core.machine import Machine
    from gputui.core.model import Gpu, Snapshot
    from gputui.core.poller import Poller

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the user; exit 2 with this sentence."""


# -- argparse validators shared by several commands -----------------------------------


#: finite numbers in range, or one sentence and exit 2 (the rule is gputui.core.limits, shared with the config)
interval_arg = flag_type("the value", *RANGES["interval"], unit="seconds")
seconds_arg = flag_type("the value", *SECONDS_RANGE, unit="seconds")
window_arg = flag_type("the value", *RANGES["imbalance_window"], unit="seconds")
celsius_arg = flag_type("the value", *RANGES["temp_warning"], unit="°C", integer=True)


# -- validators of one command each (kept here so every validator has one home) --------


def _bad(sentence: str) -> Exception:
    """argparse's "bad value" error; argparse is imported only when a parser runs (the fast path has none)."""
    import argparse

    return argparse.ArgumentTypeError(sentence)


def count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad(f"--count needs a whole number of GPUs, not {text!r}") from None
    if value < 1:
        raise _bad("--count must be at least 1")
    return value


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise _bad(str(exc)) from None


def percent_arg(text: str) -> float:
    return _max_util(text.rstrip("%"))


_max_util = flag_type("the value", 0.0, 100.0, unit="%")
sample_arg = flag_type("the value", 0.0, 3600.0, unit="seconds")


def pid_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad(f"{text!r} is not a process ID") from None
    return value


def socket_arg(text: str) -> str:
    """--containerd / --kubelet-socket: the absolute path of a unix socket (or ``unix://PATH``)."""
    from gputui.core.config import socket_address

    try:
        return socket_address(text)
    except ValueError as exc:
        raise _bad(f"{exc}.") from None


def signal_arg(text: str) -> str:
    from gputui.actions.kill.model import signal_name

    try:
        return signal_name(text)
    except ValueError as exc:
        raise _bad(str(exc)) from None


def parse_gpu_list(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or []:
        for part in value.split(","):
            part = part.strip()
            if not part:
                raise UsageError("--gpu needs an index or a UUID, e.g. --gpu 0 or --gpu 0,3.")
            if not part.isdigit() and not part.lower().startswith(("gpu-", "mig-")):
                raise UsageError(f"--gpu {part!r} is neither a GPU index nor a UUID (GPU-...).")
            out.append(part)
    return out


# -- context ------------------------------------------------------------------------


@record(frozen=False)
class Context:
    """What a subcommand needs: settings, output streams and a way to open the machine."""

    args: argparse.Namespace
    settings: Settings
    #: every byte a command writes passes the one sanitising rule (gputui.core.safe_text)
    stdout: TextIO = field(default_factory=lambda: cast(TextIO, SafeStream(sys.stdout)))
    stderr: TextIO = field(default_factory=lambda: cast(TextIO, SafeStream(sys.stderr)))
    demo_clock: Callable[[], float] | None = None

    @property
    def demo(self) -> bool:
        return bool(getattr(self.args, "demo", False))

    def open_machine(self, docker: bool | None = None) -> Machine:
        from gputui.core.machine import open_machine

        use_docker = not getattr(self.args, "no_docker", False) if docker is None else docker
        return open_machine(demo=self.demo, docker=use_docker, demo_clock=self.demo_clock, settings=self.settings)

    def gpu_filter(self, gpus: Sequence[Gpu]) -> Callable[[Gpu], bool] | None:
        """A predicate for --gpu, validated against the GPUs present. Raises UsageError."""
        wanted = parse_gpu_list(getattr(self.args, "gpu", None))
        if not wanted:
            return None
        from gputui.core.model import resolve_gpu

        indices: set[int] = set()
        for item in wanted:
            gpu = resolve_gpu(item, gpus)  # the one rule: an index, or a unique UUID prefix of 8 or more
            if gpu is None:
                present = ", ".join(str(g.index) for g in gpus) or "none"
                prefix = "" if item.isdigit() else (" (a UUID prefix must be at least 8 characters and fit "
                                                    "exactly one GPU)")
                raise UsageError(f"There is no GPU {item!r} on this machine{prefix} (GPUs present: {present}).")
            indices.add(gpu.index)
        return lambda g: g.index in indices

    @contextmanager
    def polling(self, docker: bool | None = None, container_wait: float | None = None,
                watch: bool = False, apply_gpu: bool = True) -> Iterator[Polled]:
        """Open the machine, poll it once with --gpu applied, and close everything on exit.

        --gpu is validated against the machine's real GPUs without a second NVML read (raises
        UsageError for a GPU that is not there). The container watcher is stopped right after the
        first poll unless ``watch`` (for :meth:`Polled.observe`); NVML stays open until the exit,
        so the body can keep using ``machine``. ``apply_gpu=False`` ignores --gpu (migrate names its
        GPUs itself). Raises NvmlUnavailable on a machine without NVML."""
        machine = self.open_machine(docker=docker)
        try:
            poller, snap, all_gpus = self.start_polling(machine, container_wait, apply_gpu)
            try:
                if not watch and poller.watcher is not None:
                    poller.watcher.stop()
                if not watch and poller.slurm is not None:
                    poller.slurm.stop()  # no squeue while the body runs: nothing polls again
                yield Polled(machine, poller, snap, all_gpus)
            finally:
                poller.close()
        finally:
            machine.close()

    def start_polling(
        self, machine: Machine, container_wait: float | None = None, apply_gpu: bool = True
    ) -> tuple[Poller, Snapshot, tuple[Gpu, ...]]:
        """A poller for ``machine`` with --gpu applied, its first snapshot (filtered), and every GPU
        that poll saw, for a caller that polls on (the exporter); one-shot commands use
        :meth:`polling`. Raises UsageError for a GPU that is not there (the poller is closed)."""
        wait = min(3.0, self.settings.docker_timeout) if container_wait is None else container_wait
        poller = machine.poller(self.settings, container_wait=wait)
        snap = poller.poll()
        all_gpus = snap.gpus
        if not apply_gpu:
            return poller, snap, all_gpus
        try:
            poller.gpu_filter = self.gpu_filter(all_gpus)
        except UsageError:
            poller.close()
            raise
        if poller.gpu_filter is not None:
            snap = replace(snap, gpus=tuple(g for g in all_gpus if poller.gpu_filter(g)))
        return poller, snap, all_gpus

@record(frozen=False)
class Polled:
    """An open machine, its poller, the latest snapshot (--gpu applied) and every GPU the first poll saw."""

    machine: Machine
    poller: Poller
    snapshot: Snapshot
    all_gpus: tuple[Gpu, ...]

    #: The snapshots :meth:`observe` polled, in order (not the first poll's).
    samples: list[Snapshot] = field(default_factory=list)

    def observe(self, seconds: float, step: float) -> Snapshot:
        """Keep polling every ``step`` seconds for ``seconds``; the last snapshot (also kept here)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(step, max(0.0, end - time.monotonic())))
            self.snapshot = self.poller.poll()
            self.samples.append(self.snapshot)
        return self.snapshot
