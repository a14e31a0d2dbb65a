"""Settings: defaults, overridden by the config file, overridden by flags.

The config file is ``$XDG_CONFIG_HOME/gputui/config.toml`` (default
``~/.config/gputui/config.toml``). A broken file is an error naming the file and
line; gputui never starts with half a config.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from gputui.core.limits import RANGES, NumberError, check_number
from gputui.core.record import fields, record, replace
from gputui.core.safe_text import clean
from gputui.core.statefile import CONFIG_LIMIT, ensure_state_dir, read_regular

MIN_INTERVAL = 0.25
GIB = 1024**3


class ConfigError(Exception):
    """The config file cannot be used. ``str(exc)`` is one sentence naming file and line."""


#: Terminal drivers the dashboard can run (``driver`` key, ``GPUTUI_DRIVER``).
DRIVERS = ("gputui", "textual")


@record
class Settings:
    interval: float = 1.0
    theme: str = "textual-dark"
    read_only: bool = False
    bell: bool = False
    #: terminal driver: "gputui" (sends only changed cells, quiet input thread) or "textual" (Textual's own)
    driver: str = "gputui"
    #: for slow links: sparklines in one colour, redrawn every ``slow_link_graphs`` seconds
    slow_link: bool = False
    slow_link_graphs: float = 5.0
    #: imbalance judge
    imbalance_window: float = 60.0
    util_high: float = 80.0
    util_low: float = 20.0
    util_spread: float = 60.0
    memory_high: float = 90.0
    memory_low: float = 20.0
    #: alerts
    temp_warning: int = 83
    temp_critical: int = 90
    memory_full: float = 95.0
    #: stale detection
    idle_holder_memory: int = GIB
    idle_window: float = 600.0
    idle_cpu: float = 1.0
    #: containers: a granted GPU with no process over this window is an idle grant
    idle_grant_window: float = 600.0
    #: seconds a Docker call may take before the daemon counts as not responding
    docker_timeout: float = 5.0
    #: hysteresis: a change must last this many seconds before a flag is raised or cleared
    imbalance_hold: float = 10.0
    #: hysteresis: once flagged, imbalance thresholds are this many points more lenient
    imbalance_margin: float = 10.0
    alert_hold: float = 10.0
    #: a temperature alert clears this many degrees below its threshold
    temp_hysteresis: int = 5
    #: a memory-full alert clears this many points below memory_full
    memory_hysteresis: float = 5.0
    #: the Prometheus server `gputui fleet` reads (None: give --prometheus)
    prometheus_url: str | None = None
    #: the house rules file (``--rules``; never from the config file): None is GPUTUI_RULES, else
    #: /etc/gputui/rules.toml
    rules_path: str | None = None
    #: containerd's gRPC socket (None: /run/containerd/containerd.sock where it exists)
    containerd_address: str | None = None
    #: the kubelet's pod-resources socket (None: /var/lib/kubelet/pod-resources/kubelet.sock where it exists)
    kubelet_socket: str | None = None
    #: ``[keymap]``: (binding id, keys) pairs that replace the dashboard's keys (``App.set_keymap``)
    keymap: tuple[tuple[str, str], ...] = ()

    def with_overrides(self, **overrides: Any) -> Settings:
        clean = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **clean)

    def order_problem(self) -> tuple[str, str] | None:
        """(key, clause) when two thresholds that rise in step are the wrong way round (a warning at or
        above its critical level, a "low" at or above its "high"); None when they are in order."""
        for low, high in (("temp_warning", "temp_critical"), ("util_low", "util_high"),
                          ("memory_low", "memory_high")):
            a, b = getattr(self, low), getattr(self, high)
            if a >= b:
                return low, f"{low} ({a:g}) must be below {high} ({b:g})"
        return None


#: config-file keys -> Settings fields; sections flatten with their key names.
_SECTIONS = {
    "": {"interval", "theme", "read_only", "bell", "driver", "slow_link", "slow_link_graphs", "prometheus_url",
         "containerd_address", "kubelet_socket"},
    "imbalance": {"window": "imbalance_window", "util_high": "util_high", "util_low": "util_low",
                  "util_spread": "util_spread", "memory_high": "memory_high", "memory_low": "memory_low",
                  "hold": "imbalance_hold", "margin": "imbalance_margin"},
    "alerts": {"temp_warning": "temp_warning", "temp_critical": "temp_critical",
               "memory_full": "memory_full", "bell": "bell", "hold": "alert_hold",
               "temp_hysteresis": "temp_hysteresis", "memory_hysteresis": "memory_hysteresis"},
    "stale": {"idle_memory": "idle_holder_memory", "idle_window": "idle_window", "idle_cpu": "idle_cpu"},
    "containers": {"idle_grant_window": "idle_grant_window", "docker_timeout": "docker_timeout"},
}

_TYPES = {f.name: f.type for f in fields(Settings)}


# Paths here are strings, not pathlib.Path: a one-shot would import pathlib (and urllib.parse,
# ipaddress) for the config file alone, ~2 ms of a start. Callers that build on them wrap them in Path.


def config_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gputui", "config.toml")


def state_home() -> str:
    """``$XDG_STATE_HOME/gputui`` (default ``~/.local/state/gputui``), without creating it."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gputui")


def state_dir() -> str:
    """``state_home()``, created on demand (0700) for writers (audit log, alerts log, journals).

    Raises :class:`~gputui.core.statefile.StateFileError` (an ``OSError``) when the
    folder belongs to another user or others may write to it."""
    return ensure_state_dir(state_home())


def parse_size(text: str | int | float, name: str = "a size") -> int:
    """'24G', '512MiB', '1.5GB', '1048576' -> bytes (binary units)."""
    if isinstance(text, (int, float)):
        return int(check_number(name, text, 0, float(1 << 60), "bytes"))
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a size such as 24G or 512MiB")
    number, unit = float(m.group(1)), m.group(2).upper()
    value = number * 1024 ** " KMGT".index(unit or " ")
    return int(check_number(name, value, 0, float(1 << 60), "bytes"))


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Defaults overridden by the config file, if it exists. Raises ConfigError."""
    path = path or config_path()
    if not os.path.exists(path):
        return Settings()
    try:
        raw = read_regular(path, limit=CONFIG_LIMIT, follow=True, trusted=True)
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Config file {path} is not UTF-8 text (byte {exc.start + 1} is not valid).") from None
    if sys.version_info >= (3, 11):  # imported here: most runs have no config file
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None:
            found = re.search(r"at line (\d+)", str(exc))
            line = int(found.group(1)) if found else None
        where = f" line {line}" if line else ""
        msg = str(exc).split(" (at line")[0].split("\n")[0]
        raise ConfigError(f"Config file {path}{where} is not valid TOML: {msg}.") from None
    except RecursionError:
        raise ConfigError(f"Config file {path} is nested too deeply to be a gputui config.") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "keymap" and isinstance(value, dict):
            values["keymap"] = tuple(_keymap_entry(path, text, k, v) for k, v in value.items())
        elif isinstance(value, dict):
            section = _SECTIONS.get(key)
            if section is None or key == "":
                raise ConfigError(_where(path, text, key, f"unknown section [{key}]"))
            for sub, subval in value.items():
                target = section.get(sub) if isinstance(section, dict) else None
                if target is None:
                    raise ConfigError(_where(path, text, sub, f"unknown key {sub!r} in [{key}]"))
                values[target] = _coerce(path, text, sub, target, subval)
        else:
            if key not in _SECTIONS[""]:
                raise ConfigError(_where(path, text, key, f"unknown key {key!r}"))
            values[key] = _coerce(path, text, key, key, value)
    settings = replace(Settings(), **values)
    if settings.slow_link_graphs <= 0:
        raise ConfigError(_where(path, text, "slow_link_graphs",
                                 "slow_link_graphs must be a positive number of seconds"))
    if settings.driver not in DRIVERS:
        raise ConfigError(_where(path, text, "driver", f"driver must be one of {', '.join(DRIVERS)}"))
    if settings.interval < MIN_INTERVAL:
        raise ConfigError(_where(path, text, "interval", f"interval must be at least {MIN_INTERVAL} seconds"))
    problem = settings.order_problem()
    if problem is not None:
        raise ConfigError(_where(path, text, *problem))
    return settings


def _coerce(path: str | os.PathLike[str], text: str, key: str, target: str, value: Any) -> Any:
    kind = _TYPES[target]
    try:
        if target == "idle_holder_memory":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ValueError("expected a size such as 1G")
            return int(_in_range(target, parse_size(value, key), key))
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError("expected true or false")
            return value
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("expected a number")
            return int(_in_range(target, value, key))
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("expected a number")
            return float(_in_range(target, value, key))
        if target in SOCKET_KEYS:
            if not isinstance(value, str):
                raise ValueError("expected a string")
            return socket_address(value)
        if kind in ("str", "str | None"):
            if not isinstance(value, str):
                raise ValueError("expected a string")
            return value
    except NumberError as exc:  # not finite, or out of range: checked before anything uses it
        raise ConfigError(_where(path, text, key, str(exc))) from None
    except ValueError as exc:
        raise ConfigError(_where(path, text, key, f"{key} has a bad value ({exc})")) from None
    return value


#: settings that name a unix socket (containerd's, the kubelet's)
SOCKET_KEYS = frozenset({"containerd_address", "kubelet_socket"})


def socket_address(value: str) -> str:
    """A unix socket as a path or ``unix://`` address, checked: absolute, no control characters, bounded."""
    path = value[len("unix://"):] if value.startswith("unix://") else value
    if not path.startswith("/") or len(path) > 1024 or any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise ValueError(f"{value[:80]!r} is not the absolute path of a unix socket")
    return path
#: A binding id (``kill``, ``help-close-?``) and the keys given for it (``x``, ``ctrl+k,f9``): Textual's
#: key names, printable ASCII, comma-separated.
_BINDING_ID = re.compile(r"[a-z0-9?!_-]{1,40}")
_KEYS = re.compile(r"[!-~]{1,24}(,[!-~]{1,24}){0,3}")


def _keymap_entry(path: str | os.PathLike[str], text: str, key: str, value: Any) -> tuple[str, str]:
    """One ``[keymap]`` line, checked for shape (which ids exist is the dashboard's to say)."""
    if not _BINDING_ID.fullmatch(key):
        raise ConfigError(_where(path, text, key, f"[keymap] {clean(key)!r} is not a key binding id"))
    keys = re.sub(r"\s*,\s*", ",", value.strip()) if isinstance(value, str) else None
    if keys is None or not _KEYS.fullmatch(keys):
        raise ConfigError(_where(path, text, key, f"[keymap] {key} must be a key name such as \"x\" or "
                                                   f"\"ctrl+k\" (several: \"x,f9\")"))
    return key, keys


def _in_range(target: str, value: float, key: str = "the value") -> float:
    low, high = RANGES[target]
    return check_number(key, value, low, high)


def _where(path: str | os.PathLike[str], text: str, key: str, problem: str) -> str:
    line = None
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if re.match(rf"^\[?\s*{re.escape(key)}\s*(=|\])", stripped):
            line = n
            break
    where = f" line {line}" if line else ""
    return f"Config file {path}{where}: {problem}."
