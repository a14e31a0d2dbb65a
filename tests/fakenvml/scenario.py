"""Drive the fake NVIDIA driver (tests/fakenvml/fakenvml.c) from Python.

A test describes a machine as a plain dict — ``scenario([gpu(0, ...), gpu(1, ...)])`` —
and :class:`FakeNvml` builds ``libnvidia-ml.so.1`` with gcc (cached under
``tests/fakenvml/build/``), writes the scenario where the library reads it, and
runs the real ``gputui`` with ``LD_LIBRARY_PATH`` pointing at the fake. The real
nvidia-ml-py then talks to the fake exactly as it would to a driver.

Scenario keys
-------------
Top level (``scenario(gpus, **top)``): ``init_error`` (None, "driver_not_loaded",
"no_permission", "lib_mismatch", "unknown" or an NVML error code),
``driver_version`` (str), ``cuda_driver_version`` (int, e.g. 12040),
``nvml_version`` (str), ``unsupported`` (system fields: "driver_version",
"cuda_driver_version", "nvml_version", "device_count") and ``errors``
({field: error name}).

Per GPU (``gpu(index, **overrides)``), in the units of gputui's JSON where one
exists: ``name``, ``uuid``, ``pci_bus_id``, ``minor_number``, ``memory_total``,
``memory_used`` (bytes; defaults to the sum of the processes' memory plus 4 MiB),
``memory_reserved`` (bytes; memory_info v1 counts it as used, v2 does not),
``utilization_gpu``, ``utilization_memory`` (%), ``temperature`` (°C),
``power_draw``, ``power_limit`` (W), ``fan_speed`` (%), ``clock_sm``,
``clock_memory``, ``clock_sm_max``, ``clock_memory_max`` (MHz), ``pstate``,
``throttle_reasons`` (an NVML bit mask or a list of gputui's reason names),
``ecc_errors`` (volatile uncorrected), ``ecc_corrected``, ``ecc_mode``,
``persistence_mode`` (bool), ``retired_pages_sbe``, ``retired_pages_dbe``,
``retired_pages_pending``, ``remapped_rows_correctable``,
``remapped_rows_uncorrectable``, ``remapped_rows_pending``,
``remapped_rows_failure``, ``compute_mode``, ``display_active``,
``encoder_utilization``, ``decoder_utilization`` (%), ``memory_temperature`` (°C,
HBM), ``total_energy_consumption`` (mJ since the driver loaded), ``pcie_replay_counter``
(the last three are answered only through ``nvmlDeviceGetFieldValues``, which also answers
power draw, power limit, volatile uncorrected ECC errors and the remapped rows),
``unsupported_field_ids`` (NVML field ids that ``nvmlDeviceGetFieldValues`` answers
NOT_SUPPORTED while the single getter still works, as on drivers older than the id),
``xid_events`` (XID critical error codes that happened, oldest first: an event set
registered for XIDs delivers each one added after it registered, once), ``lost`` (bool: every query on the GPU answers
GPU_IS_LOST), ``processes`` (list of ``{"pid", "used_memory", "sm", "type",
"mem_util"}``; ``used_memory`` None = NVML's "not available" (a negative number
wraps to a huge unsigned value, as an underflowing driver counter does), ``sm`` None = no
utilization sample, ``type`` "compute", "graphics" or "compute+graphics"),
``unsupported`` (field names that answer NOT_SUPPORTED) and ``errors``
({field: "unknown" | "no_permission" | "timeout" | ... | int}).

MIG (A100/H100/H200): ``mig_mode`` — None (the card cannot do MIG: every MIG
query answers NOT_SUPPORTED), a bool (current = pending) or ``(current,
pending)``; ``mig_devices`` — a list of :func:`mig_device` entries (the MIG
devices of a card whose current mode is on; each carries its own processes,
listed on the card with their GPU/compute instance ids as the real driver does);
``sm_count`` (the card's multiprocessor count). In MIG mode the card answers
utilization and process utilization NOT_SUPPORTED, as real drivers do.

Field names for ``unsupported``/``errors``: the GPU keys above, plus
"memory" (= memory_used/memory_total), "utilization" (= both utilizations),
"processes" (= compute and graphics lists), "compute_processes",
"graphics_processes", "process_utilization" (alias "sm_utilization"),
"retired_pages", "remapped_rows", "ecc_mode", "mig_mode", "mig_devices"
(max count and handles), "attributes", "field_values" (the whole
``nvmlDeviceGetFieldValues`` call), "events" (registering for and receiving events).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fakenvml.c"
BUILD_ROOT = HERE / "build"
LIB_NAME = "libnvidia-ml.so.1"
REPO_ROOT = HERE.parent.parent

ERRORS: dict[str, int] = {
    "uninitialized": 1,
    "invalid_argument": 2,
    "not_supported": 3,
    "no_permission": 4,
    "not_found": 6,
    "insufficient_size": 7,
    "driver_not_loaded": 9,
    "timeout": 10,
    "gpu_is_lost": 15,
    "lib_mismatch": 18,
    "lib_rm_version_mismatch": 18,
    "unknown": 999,
}

#: scenario field name -> the fake's field names (what one NVML query answers)
_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "memory_used": ("memory",),
    "memory_total": ("memory",),
    "memory_reserved": ("memory",),
    "utilization_gpu": ("utilization",),
    "utilization_memory": ("utilization",),
    "processes": ("compute_processes", "graphics_processes"),
    "sm_utilization": ("process_utilization",),
    "ecc_corrected": ("ecc_errors",),
}
_GPU_FIELDS = frozenset({
    "name", "uuid", "pci_bus_id", "minor_number", "memory", "utilization", "temperature", "power_draw",
    "power_limit", "fan_speed", "clock_sm", "clock_memory", "clock_sm_max", "clock_memory_max", "pstate",
    "throttle_reasons", "ecc_errors", "ecc_mode", "persistence_mode", "compute_processes", "graphics_processes",
    "process_utilization", "retired_pages", "remapped_rows", "compute_mode", "display_active",
    "encoder_utilization", "decoder_utilization", "mig_mode", "mig_devices", "attributes",
    "memory_temperature", "total_energy_consumption", "pcie_replay_counter", "field_values", "events",
})
_SYSTEM_FIELDS = frozenset({"driver_version", "cuda_driver_version", "nvml_version", "device_count"})

#: scenario key -> (the fake's value name, multiplier)
_VALUES: dict[str, tuple[str, float]] = {
    "minor_number": ("minor_number", 1),
    "memory_total": ("memory_total", 1),
    "memory_used": ("memory_used", 1),
    "memory_reserved": ("memory_reserved", 1),
    "utilization_gpu": ("utilization_gpu", 1),
    "utilization_memory": ("utilization_memory", 1),
    "temperature": ("temperature", 1),
    "power_draw": ("power_draw_mw", 1000),
    "power_limit": ("power_limit_mw", 1000),
    "fan_speed": ("fan_speed", 1),
    "clock_sm": ("clock_sm", 1),
    "clock_memory": ("clock_memory", 1),
    "clock_sm_max": ("clock_sm_max", 1),
    "clock_memory_max": ("clock_memory_max", 1),
    "pstate": ("pstate", 1),
    "throttle_reasons": ("throttle_reasons", 1),
    "ecc_errors": ("ecc_errors", 1),
    "ecc_corrected": ("ecc_corrected", 1),
    "ecc_mode": ("ecc_mode", 1),
    "persistence_mode": ("persistence_mode", 1),
    "retired_pages_sbe": ("retired_sbe", 1),
    "retired_pages_dbe": ("retired_dbe", 1),
    "retired_pages_pending": ("retired_pending", 1),
    "remapped_rows_correctable": ("remapped_correctable", 1),
    "remapped_rows_uncorrectable": ("remapped_uncorrectable", 1),
    "remapped_rows_pending": ("remapped_pending", 1),
    "remapped_rows_failure": ("remapped_failure", 1),
    "compute_mode": ("compute_mode", 1),
    "display_active": ("display_active", 1),
    "encoder_utilization": ("encoder_utilization", 1),
    "decoder_utilization": ("decoder_utilization", 1),
    "lost": ("lost", 1),
    "sm_count": ("sm_count", 1),
    "memory_temperature": ("memory_temperature", 1),
    "total_energy_consumption": ("energy_mj", 1),
    "pcie_replay_counter": ("pcie_replay_counter", 1),
}

_BUS_IDS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")

GiB = 1024**3
MiB = 1024**2


def fake_uuid(index: int) -> str:
    """The deterministic UUID ``gpu(index)`` gets: ``GPU-`` and a hash of the index."""
    h = hashlib.sha1(f"gputui-fake-gpu-{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def fake_bus_id(index: int) -> str:
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else f"{(0xC0 + index) & 0xFF:02X}"
    return f"00000000:{bus}:00.0"


def process(pid: int, used_memory: int | None = 1 * GiB, sm: int | None = None,
            type: str = "compute", mem_util: int = 0) -> dict[str, Any]:
    """One GPU process entry for ``gpu(..., processes=[...])``."""
    return {"pid": pid, "used_memory": used_memory, "sm": sm, "type": type, "mem_util": mem_util}


#: MIG profiles of an A100-80GB/H100-80GB: name -> (SM count, memory in bytes), as nvidia-smi reports them
MIG_PROFILES: dict[str, tuple[int, int]] = {
    "1g.10gb": (14, 9856 * MiB),
    "1g.20gb": (14, 19968 * MiB),
    "2g.20gb": (28, 19968 * MiB),
    "3g.40gb": (42, 40192 * MiB),
    "4g.40gb": (56, 40192 * MiB),
    "7g.80gb": (98, 80896 * MiB),
}


def fake_mig_uuid(gpu_index: int, gpu_instance_id: int, compute_instance_id: int) -> str:
    """The deterministic ``MIG-`` UUID of a MIG device (the format of drivers since R470)."""
    h = hashlib.sha1(f"gputui-fake-mig-{gpu_index}-{gpu_instance_id}-{compute_instance_id}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def mig_device(gpu_instance_id: int, compute_instance_id: int = 0, profile: str = "1g.10gb", *,
               memory_total: int | None = None, memory_used: int | None = None, sm_count: int | None = None,
               uuid: str | None = None, processes: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One MIG device for ``gpu(..., mig_mode=True, mig_devices=[...])``.

    ``memory_used`` defaults to its processes' memory plus 13 MiB (what an empty
    instance shows); ``uuid`` to :func:`fake_mig_uuid` of the GPU it is put on.
    """
    sm, mem = MIG_PROFILES.get(profile, (14, 9856 * MiB))
    procs = [dict(process(0), **p) for p in processes]
    return {
        "gpu_instance_id": gpu_instance_id,
        "compute_instance_id": compute_instance_id,
        "profile": profile,
        "memory_total": mem if memory_total is None else memory_total,
        "memory_used": (sum(p["used_memory"] or 0 for p in procs) + 13 * MiB) if memory_used is None
        else memory_used,
        "sm_count": sm if sm_count is None else sm_count,
        "uuid": uuid,
        "processes": procs,
    }


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """An A100-80GB-like GPU; any key of the module docstring can be overridden."""
    procs = [dict(process(0), **p) for p in overrides.pop("processes", [])]
    g: dict[str, Any] = {
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": fake_uuid(index),
        "pci_bus_id": fake_bus_id(index),
        "minor_number": index,
        "memory_total": 80 * GiB,
        "memory_reserved": 512 * MiB,
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "temperature": 34,
        "power_draw": 62.5,
        "power_limit": 400.0,
        "fan_speed": 30,
        "clock_sm": 1410,
        "clock_memory": 1593,
        "clock_sm_max": 1410,
        "clock_memory_max": 1593,
        "pstate": 0,
        "throttle_reasons": 0,
        "ecc_errors": 0,
        "ecc_corrected": 0,
        "ecc_mode": 1,
        "persistence_mode": True,
        "retired_pages_sbe": 0,
        "retired_pages_dbe": 0,
        "retired_pages_pending": 0,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": 0,
        "remapped_rows_failure": 0,
        "compute_mode": 0,
        "display_active": 0,
        "encoder_utilization": 0,
        "decoder_utilization": 0,
        "memory_temperature": 41,
        "total_energy_consumption": 3_600_000_000,
        "pcie_replay_counter": 0,
        "unsupported_field_ids": [],
        "xid_events": [],
        "lost": False,
        "sm_count": 108,
        "mig_mode": None,
        "mig_devices": [],
        "processes": procs,
        "unsupported": [],
        "errors": {},
    }
    unknown = set(overrides) - set(g) - {"memory_used"}
    if unknown:
        raise KeyError(f"unknown GPU scenario keys: {sorted(unknown)}")
    g.update(overrides)
    migs = [dict(m) for m in g["mig_devices"]]
    for m in migs:
        if m.get("uuid") is None:
            m["uuid"] = fake_mig_uuid(index, m["gpu_instance_id"], m["compute_instance_id"])
    g["mig_devices"] = migs
    if "memory_used" not in g:
        mig_used = sum(m["memory_used"] for m in migs) if _mig_current(g["mig_mode"]) else 0
        g["memory_used"] = sum(p["used_memory"] or 0 for p in procs) + 4 * MiB + mig_used
    return g


def _mig_current(mode: Any) -> bool:
    if mode is None:
        return False
    if isinstance(mode, (tuple, list)):
        return bool(mode[0])
    return bool(mode)


def scenario(gpus: Iterable[Mapping[str, Any]], **top: Any) -> dict[str, Any]:
    """A whole machine: GPUs (NVML index = their ``index``) plus system values."""
    s: dict[str, Any] = {
        "init_error": None,
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "unsupported": [],
        "errors": {},
    }
    unknown = set(top) - set(s)
    if unknown:
        raise KeyError(f"unknown scenario keys: {sorted(unknown)}")
    s.update(top)
    s["gpus"] = sorted((dict(g) for g in gpus), key=lambda g: g.get("index", 0))
    return s


def _error_code(value: str | int) -> int:
    if isinstance(value, int):
        return value
    try:
        return ERRORS[value]
    except KeyError:
        raise ValueError(f"unknown NVML error {value!r}; use one of {sorted(ERRORS)} or an int") from None


def _fields(name: str, allowed: frozenset[str]) -> tuple[str, ...]:
    out = _FIELD_ALIASES.get(name, (name,))
    for f in out:
        if f not in allowed:
            raise ValueError(f"unknown field {name!r}; use one of {sorted(allowed | set(_FIELD_ALIASES))}")
    return out


def _throttle_mask(value: int | Iterable[str]) -> int:
    if isinstance(value, int):
        return value
    from gputui.core.model import THROTTLE_REASONS

    bits = {name: bit for bit, name in THROTTLE_REASONS.items()}
    mask = 0
    for name in value:
        mask |= bits[name]
    return mask


def _line(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"scenario strings cannot contain newlines: {text!r}")
    return text


_PROC_TYPES = {"compute": "c", "graphics": "g", "compute+graphics": "cg", "c": "c", "g": "g", "cg": "cg"}


def render(s: Mapping[str, Any]) -> str:
    """The line format that fakenvml.c reads (see parse_scenario() there)."""
    out = ["# gputui fake NVML scenario (written by tests/fakenvml/scenario.py)"]
    init_error = s.get("init_error")
    out.append(f"init_error {0 if init_error is None else _error_code(init_error)}")
    if s.get("driver_version") is not None:
        out.append(f"driver_version {_line(str(s['driver_version']))}")
    if s.get("nvml_version") is not None:
        out.append(f"nvml_version {_line(str(s['nvml_version']))}")
    if s.get("cuda_driver_version") is not None:
        out.append(f"cuda_driver_version {int(s['cuda_driver_version'])}")
    for name in s.get("unsupported", ()):
        for f in _fields(name, _SYSTEM_FIELDS):
            out.append(f"error {f} 3")
    for name, err in dict(s.get("errors", {})).items():
        for f in _fields(name, _SYSTEM_FIELDS):
            out.append(f"error {f} {_error_code(err)}")
    for g in s.get("gpus", ()):
        out.append("gpu")
        for key in ("name", "uuid", "pci_bus_id"):
            if g.get(key) is not None:
                out.append(f"  {key} {_line(str(g[key]))}")
        for key, (cname, mult) in _VALUES.items():
            value = g.get(key)
            if value is None:
                continue
            if key == "throttle_reasons":
                value = _throttle_mask(value)
            out.append(f"  {cname} {int(round(float(value) * mult)) if mult != 1 else int(value)}")
        for name in g.get("unsupported", ()):
            for f in _fields(name, _GPU_FIELDS):
                out.append(f"  error {f} 3")
        for name, err in dict(g.get("errors", {})).items():
            for f in _fields(name, _GPU_FIELDS):
                out.append(f"  error {f} {_error_code(err)}")
        for fid in g.get("unsupported_field_ids", ()):
            out.append(f"  fi_unsupported {int(fid)}")
        for xid in g.get("xid_events", ()):
            out.append(f"  xid {int(xid)}")
        mode = g.get("mig_mode")
        if mode is not None:
            cur, pend = (mode[0], mode[1]) if isinstance(mode, (tuple, list)) else (mode, mode)
            out.append(f"  mig_mode {int(bool(cur))} {int(bool(pend))}")
        procs = [(p, -1) for p in g.get("processes", ())]
        for slot, m in enumerate(g.get("mig_devices", ())):
            name = f"{g.get('name') or 'NVIDIA GPU'} MIG {m['profile']}"
            out.append(f"  mig {int(m['gpu_instance_id'])} {int(m['compute_instance_id'])} {int(m['sm_count'])} "
                       f"{int(m['memory_total'])} {int(m['memory_used'])} {_line(str(m['uuid'])).split()[0]} "
                       f"{_line(name)}")
            procs += [(p, slot) for p in m.get("processes", ())]
        for p, slot in procs:
            mem = -1 if p.get("used_memory") is None else int(p["used_memory"])
            sm = -1 if p.get("sm") is None else int(p["sm"])
            kind = _PROC_TYPES[p.get("type", "compute")]
            where = f" {slot}" if slot >= 0 else ""
            out.append(f"  proc {int(p['pid'])} {mem} {sm} {kind} {int(p.get('mem_util', 0) or 0)}{where}")
    return "\n".join(out) + "\n"


# -- building the library ---------------------------------------------------------------


def exported_functions() -> tuple[str, ...]:
    """The NVML functions fakenvml.c implements (the names ``without`` may hide)."""
    text = SOURCE.read_text()
    block = text[text.index("#define FAKE_FUNCS(X)"):]
    block = block[: block.index("\n\n")]
    return tuple(re.findall(r"X\((\w+)\)", block))


def build(without: Iterable[str] = (), build_root: Path = BUILD_ROOT) -> Path:
    """Compile the fake (once per source and ``without``) and return the directory holding it."""
    without = tuple(sorted(set(without)))
    known = set(exported_functions())
    unknown = [w for w in without if w not in known]
    if unknown:
        raise ValueError(f"fakenvml does not define {unknown}; it can only leave out {sorted(known)}")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("building the fake libnvidia-ml needs gcc")
    digest = hashlib.sha256(SOURCE.read_bytes() + b"\0" + "\0".join(without).encode()).hexdigest()[:16]
    target = build_root / digest
    if (target / LIB_NAME).exists():
        return target
    build_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=build_root))
    try:
        cmd = [gcc, "-O2", "-Wall", "-shared", "-fPIC", f"-Wl,-soname,{LIB_NAME}", "-o", str(tmp / LIB_NAME),
               str(SOURCE), "-lpthread"]
        if without:
            script = tmp / "exports.map"
            script.write_text("{ global: *; local: " + " ".join(f"{w};" for w in without) + " };\n")
            cmd.insert(-2, f"-Wl,--version-script={script}")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"gcc failed to build the fake libnvidia-ml:\n{res.stderr}")
        (tmp / "without.txt").write_text("\n".join(without) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:  # another process built it first
            if not (target / LIB_NAME).exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class FakeNvml:
    """One fake driver for one test: a built library, a scenario file and a call counter file."""

    def __init__(self, workdir: Path, without: tuple[str, ...] = ()) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.without = tuple(without)
        self.lib_dir = build(self.without)
        self.lib_path = self.lib_dir / LIB_NAME
        self.scenario_path = self.workdir / "fakenvml-scenario.txt"
        self.calls_path = self.workdir / "fakenvml-calls.json"
        self.scenario: dict[str, Any] = {}
        self.write(scenario([gpu(0)]))

    def write(self, s: Mapping[str, Any]) -> None:
        """Replace the scenario atomically; a running process sees it at its next NVML call."""
        text = render(s)
        fd, tmp = tempfile.mkstemp(prefix=".scenario.", dir=self.workdir)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, self.scenario_path)
        (self.workdir / "fakenvml-scenario.json").write_text(json.dumps(s, indent=1, default=str))
        self.scenario = dict(s)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment in which libnvidia-ml.so.1 is this fake."""
        env = dict(os.environ if base is None else base)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{self.lib_dir}:{old}" if old else str(self.lib_dir)
        env["GPUTUI_FAKE_NVML_SCENARIO"] = str(self.scenario_path)
        env["GPUTUI_FAKE_NVML_CALLS"] = str(self.calls_path)
        return env

    def calls(self) -> dict[str, int]:
        """NVML calls per function by the last process that used the fake (written at shutdown/exit)."""
        try:
            return {k: int(v) for k, v in json.loads(self.calls_path.read_text()).items()}
        except FileNotFoundError:
            return {}

    def clear_calls(self) -> None:
        self.calls_path.unlink(missing_ok=True)

    def run_gputui(self, *args: str, timeout: float = 60, env_extra: Mapping[str, str] | None = None,
                   input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``python -m gputui ARGS`` against this fake and capture its output."""
        env = self.env()
        env.setdefault("PYTHONPATH", str(REPO_ROOT))
        if env_extra:
            env.update(env_extra)
        return subprocess.run(
            [sys.executable, "-m", "gputui", *args],
            env=env, capture_output=True, text=True, timeout=timeout,
            input=input, stdin=None if input is not None else subprocess.DEVNULL,
        )

    def snapshot(self, *args: str, docker: bool = False, timeout: float = 60) -> dict[str, Any]:
        """``gputui snapshot --json`` parsed; raises AssertionError with stderr when it fails."""
        extra = () if docker else ("--no-docker",)
        res = self.run_gputui("snapshot", "--json", *extra, *args, timeout=timeout)
        if res.returncode != 0:
            raise AssertionError(f"gputui snapshot exited {res.returncode}: {res.stderr.strip()}")
        return json.loads(res.stdout)

    def probe(self, env_extra: Mapping[str, str] | None = None) -> Probe:
        """A child process running tests/fakenvml/probe.py against this fake (use as a context manager)."""
        env = self.env()
        env.setdefault("PYTHONPATH", str(REPO_ROOT))
        if env_extra:
            env.update(env_extra)
        return Probe(env)


class Probe:
    """Talks to tests/fakenvml/probe.py: one command line in, one JSON line out."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "probe.py")], env=dict(env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )

    def ask(self, command: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"probe died answering {command!r}: {err.strip()}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
