"""The recorder's status file: whether ``gputui record`` is writing its database, and why not.

It lives in the runtime folder (``$XDG_RUNTIME_DIR/gputui``, else ``/run/gputui`` as root, else the
state folder), not beside the database: a full disk under the database must not silence it.
``gputui doctor`` reads it. One small JSON document, replaced atomically.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from gputui.core.config import state_home
from gputui.core.statefile import StateFileError, ensure_state_dir, read_regular

NAME = "recorder.json"


def runtime_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return os.path.join(base, "gputui")
    if os.geteuid() == 0:
        return "/run/gputui"
    return state_home()


def write_recorder_status(db: str, problem: str | None, interval: float) -> None:
    """Say where the recorder writes and whether it can; a failure to say so is not fatal."""
    doc = {"pid": os.getpid(), "db": os.path.abspath(db), "writing": problem is None, "problem": problem,
           "interval": interval, "time": time.time()}
    try:
        folder = ensure_state_dir(runtime_dir())
        tmp = os.path.join(folder, f".{NAME}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc))
        os.replace(tmp, os.path.join(folder, NAME))
    except OSError:
        pass


def read_recorder_status() -> dict[str, Any] | None:
    """The last status a living recorder wrote, or None (none written, or its recorder has exited)."""
    path = os.path.join(runtime_dir(), NAME)
    try:
        doc = json.loads(read_regular(path, limit=64 * 1024))
    except (OSError, StateFileError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        return None
    try:
        os.kill(doc["pid"], 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass
    return doc
