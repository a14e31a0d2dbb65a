"""Bugs told apart from faults of the outside world.

A failure the outside world causes — the driver (NVML), a source that cannot work
(:class:`SourceUnavailable`), Docker, Prometheus, a file or a socket (``OSError``) — is
expected: every face says it in one sentence and goes on. Anything else is a bug in
gputui: the face says so in one sentence that points at the log
("gputui hit a bug; details in ~/.local/state/gputui/gputui.log"), and the traceback
goes to that log (in the state folder, 0600, never through a symlink, rotated at
:data:`LOG_LIMIT` bytes keeping :data:`LOG_KEEP` old files) and, when debugging
(``--debug`` or ``GPUTUI_DEBUG=1``), to stderr as well.

Loaded by the long-running faces (the dashboards, the exporter) only; ``--debug`` sets
``GPUTUI_DEBUG=1`` so the CLI itself never imports this module.
"""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from typing import Any

from gputui.core.config import state_dir, state_home
from gputui.core.errors import clause
from gputui.core.statefile import open_regular

LOG_NAME = "gputui.log"
LOG_LIMIT = 1024 * 1024
LOG_KEEP = 3

#: Modules whose exceptions are the outside world failing (the driver, Docker's client and its HTTP stack).
_OUTSIDE_MODULES = frozenset({"pynvml", "docker", "requests", "urllib3"})
#: gputui's own exception classes that carry an expected failure as one sentence.
_EXPECTED_CLASSES = frozenset({
    ("gputui.core.sources", "SourceUnavailable"),
    ("gputui.core.fleet.prom", "PrometheusError"),
})

#: (type, text, file, line) of each bug logged so far.
_reported: set[tuple[str, str, str, int]] = set()
#: Tracebacks kept for stderr while a full-screen app owns the terminal (see :func:`hold_stderr`).
_held: list[str] | None = None


def expected(exc: BaseException) -> bool:
    """Whether ``exc`` is the outside world failing (one sentence) rather than a bug in gputui."""
    if isinstance(exc, OSError):  # files, sockets, timeouts, the state folder's checks
        return True
    for cls in type(exc).__mro__:
        if cls.__module__.split(".")[0] in _OUTSIDE_MODULES or (cls.__module__, cls.__name__) in _EXPECTED_CLASSES:
            return True
    return False


def debugging() -> bool:
    """``--debug`` or ``GPUTUI_DEBUG=1``: tracebacks of bugs go to stderr too."""
    return os.environ.get("GPUTUI_DEBUG", "").strip() not in ("", "0")


def log_path() -> str:
    return os.path.join(state_home(), LOG_NAME)


def report(exc: BaseException, doing: str) -> str:
    """Record the bug ``exc`` (raised while ``doing``, e.g. "polling the GPUs"): its traceback in the
    log file, and on stderr when debugging. Returns the sentence the face shows."""
    logger = _logger()
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (type(exc).__qualname__, str(exc), tb.tb_frame.f_code.co_filename if tb else "", tb.tb_lineno if tb else 0)
    if where not in _reported or _file_error is not None:  # a bug met on every poll is logged once
        _reported.add(where)
        logger.error("gputui hit a bug while %s", doing, exc_info=(type(exc), exc, exc.__traceback__))
    if _file_error is not None:
        return f"gputui hit a bug; its log could not be written ({_file_error}); run with --debug to see it."
    path, home = log_path(), os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + "/"):
        path = "~" + path[len(home):]
    return f"gputui hit a bug; details in {path}."


def describe(exc: BaseException, failed: str, doing: str) -> str:
    """One sentence for a failure: ``"<failed>: <why>."`` when the outside world failed (``failed``
    like "Could not read the GPUs"), the bug sentence of :func:`report` otherwise."""
    if expected(exc):
        return f"{failed}: {clause(exc)}."
    return report(exc, doing)


class hold_stderr:
    """While a full-screen app owns the terminal, keep debug tracebacks and write them to stderr
    when it has let go (``with hold_stderr(): app.run()``)."""

    def __enter__(self) -> None:
        global _held
        _held = []

    def __exit__(self, *exc: object) -> None:
        global _held
        held, _held = _held or [], None
        for text in held:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


_file_error: str | None = None
#: The log file the logger writes to (set up on the first report, again if the state folder moves).
_configured: str | None = None


def _logger() -> logging.Logger:
    global _configured, _file_error
    logger = logging.getLogger("gputui.bugs")
    path = log_path()
    if _configured == path:
        return logger
    for old in list(logger.handlers):  # the state folder moved (XDG_STATE_HOME changed): a new log
        logger.removeHandler(old)
        old.close()
    _configured, _file_error = path, None
    _reported.clear()
    logger.propagate = False
    logger.setLevel(logging.ERROR)
    try:
        state_dir()  # created 0700 and checked (owner, mode) before anything is written in it
        handler = _LogFile(path, maxBytes=LOG_LIMIT, backupCount=LOG_KEEP, encoding="utf-8", delay=True)
    except OSError as exc:
        _file_error = clause(exc)
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s pid %(process)d %(threadName)s: %(message)s"))
        logger.addHandler(handler)
    stderr = _Stderr()
    stderr.setFormatter(logging.Formatter("gputui: %(message)s"))
    logger.addHandler(stderr)
    return logger


class _LogFile(RotatingFileHandler):
    """The rotated log, each file opened 0600 and never through a symlink."""

    def _open(self) -> Any:
        fd = open_regular(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")

    def emit(self, record: logging.LogRecord) -> None:
        global _file_error
        _file_error = None
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        """The log cannot be written (a symlink, another owner, a full disk): the face says so."""
        global _file_error
        _file_error = clause(sys.exc_info()[1] or "it could not be written")


class _Stderr(logging.Handler):
    """stderr, when debugging (held while a full-screen app runs)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not debugging():
            return
        try:
            text = self.format(record)
            if _held is not None:
                _held.append(text)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # a closed stderr must not turn one bug into two
            self.handleError(record)
