"""What ``gputui doctor`` asks NVML beyond a poll: per-GPU health and the library's identity
(``NvmlSource.library_info``). Kept apart from ``nvml.py``: a poll never runs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gputui.core.record import record
from gputui.core.sources.nvml_query import GPU_IS_LOST, Lost

__all__ = ["DeviceHealth", "NvmlLibraryInfo", "binding_version", "health", "loaded_library_path"]


@record
class DeviceHealth:
    """Per-GPU facts for ``gputui doctor``; None where the GPU cannot say."""

    index: int
    name: str | None
    uuid: str | None
    lost: bool
    persistence_mode: bool | None
    ecc_mode: bool | None
    retired_pages_single_bit: int | None
    retired_pages_double_bit: int | None
    retired_pages_pending: bool | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None


@record
class NvmlLibraryInfo:
    """The NVML library and driver as ``gputui doctor`` reports them."""

    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None
    nvidia_ml_py_version: str | None
    #: where libnvidia-ml.so.1 was loaded from, when it can be found
    library_path: str | None
    #: NVML functions this driver lacks that gputui asked for (fallbacks were used)
    missing_functions: tuple[str, ...]
    #: the process-list struct version in use: "v3", "v2", "v1" or None (none worked yet)
    process_struct: str | None
    devices: tuple[DeviceHealth, ...]


def health(nv: Any, dev: Any) -> DeviceHealth:
    """One GPU's health facts for ``gputui doctor`` (``dev``: the source's device record; ``nv``: the
    bound pynvml). Raises nothing: a lost GPU reads lost."""

    def ask(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == GPU_IS_LOST:
                raise Lost from None
            return None
        except Exception:
            return None

    lost = dev.handle is None
    values: dict[str, Any] = {}
    if not lost:
        h = dev.handle
        try:
            persistence = ask(nv.nvmlDeviceGetPersistenceMode, h)
            ecc = ask(nv.nvmlDeviceGetEccMode, h)
            sbe = ask(nv.nvmlDeviceGetRetiredPages, h, 0)
            dbe = ask(nv.nvmlDeviceGetRetiredPages, h, 1)
            pending = ask(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
            rows = ask(nv.nvmlDeviceGetRemappedRows, h)
            values = dict(
                persistence_mode=bool(persistence) if persistence is not None else None,
                ecc_mode=bool(ecc[0]) if ecc is not None else None,
                retired_pages_single_bit=len(sbe) if sbe is not None else None,
                retired_pages_double_bit=len(dbe) if dbe is not None else None,
                retired_pages_pending=bool(pending) if pending is not None else None,
                remapped_rows_correctable=int(rows[0]) if rows is not None else None,
                remapped_rows_uncorrectable=int(rows[1]) if rows is not None else None,
                remapped_rows_pending=bool(rows[2]) if rows is not None else None,
                remapped_rows_failure=bool(rows[3]) if rows is not None else None,
            )
        except Lost:
            lost = True
    empty = dict.fromkeys(
        ("persistence_mode", "ecc_mode", "retired_pages_single_bit", "retired_pages_double_bit",
         "retired_pages_pending", "remapped_rows_correctable", "remapped_rows_uncorrectable",
         "remapped_rows_pending", "remapped_rows_failure"))
    empty.update(values)
    return DeviceHealth(index=dev.index, name=dev.name, uuid=dev.uuid, lost=lost, **empty)


def binding_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-ml-py")
    except PackageNotFoundError:
        return None


def loaded_library_path(nv: Any) -> str | None:
    """The file libnvidia-ml.so.1 was loaded from, from this process's memory map."""
    del nv
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                if "libnvidia-ml.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        return None
    return None
