"""The audit log: one JSON line per action (migrate, kill), in ``$XDG_STATE_HOME/gputui/audit.jsonl``."""

from __future__ import annotations

import getpass
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputui.core.config import state_dir


def audit_path() -> Path:
    return state_dir() / "audit.jsonl"


def _who() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.geteuid())


def audit(action: str, result: str, **details: Any) -> dict[str, Any]:
    """Append one record and return it. ``result`` is e.g. "ok", "refused", "failed", "rolled-back"."""
    record = {
        "time": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "user": _who(),
        "uid": os.geteuid(),
        "host": socket.gethostname(),
        "action": action,
        "result": result,
        **details,
    }
    line = json.dumps(record, default=str, sort_keys=False)
    with open(audit_path(), "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return record
