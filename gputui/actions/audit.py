"""The audit log: one JSON line per action (migrate, kill), in ``$XDG_STATE_HOME/gputui/audit.jsonl``.

What ``--demo`` does acts on a simulated server: it is never written there. Demo actions go to
``demo-audit.jsonl`` next to it, each record marked ``"demo": true``, so nothing the demo does
can be mistaken for a real kill or migration.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputui.core.config import state_dir
from gputui.core.statefile import append_text


def audit_path(demo: bool = False) -> Path:
    return Path(state_dir()) / ("demo-audit.jsonl" if demo else "audit.jsonl")


def _who() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.geteuid())


def audit(action: str, result: str, **details: Any) -> dict[str, Any]:
    """Append one record and return it. ``result`` is e.g. "ok", "refused", "failed", "rolled-back".
    A record with a true ``demo`` detail goes to the demo log, never the real one."""
    demo = bool(details.pop("demo", False))
    record = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "user": _who(),
        "uid": os.geteuid(),
        "host": socket.gethostname(),
        "action": action,
        "result": result,
        **details,
    }
    if demo:
        record["demo"] = True
    line = json.dumps(record, default=str, sort_keys=False)
    # never through a symlink, never into a FIFO; created 0600 in a folder only this user may write
    append_text(audit_path(demo), line + "\n", sync=True)
    return record
