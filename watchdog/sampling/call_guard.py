"""How one NVML call fails without taking the tick down with it.

NVML answers per device and per call: a GPU without MIG says NotSupported to MIG calls forever, a busy one times
out once, a fallen-off-the-bus one says GpuIsLost to everything. The sampler must keep every other device and
every other metric flowing, so each call goes through :class:`CallGuard`, which turns an error into ``None``,
counts it under a stable snake_case name, remembers calls that will never work on a device (so they are not
asked again every tick), and lifts the two errors that change what the sampler does next (GPU lost, stale MIG
handle) into exceptions of its own.
"""

from __future__ import annotations

import logging
import re
import threading
from types import ModuleType
from typing import Any, Hashable

log = logging.getLogger(__name__)

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# Error codes from nvml.h (nvmlReturn_t); read from the module when it has them so a simulated module that
# mirrors pynvml is used as-is, with the header's values as the fallback.
_HEADER_CODES = {
    "NVML_SUCCESS": 0,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
}


def nvml_code(nvml: ModuleType, constant: str) -> int:
    """The value of an ``NVML_ERROR_*`` constant from the module, or from nvml.h when the module lacks it."""
    return int(getattr(nvml, constant, _HEADER_CODES[constant]))


def error_name(nvml: ModuleType, exc: BaseException) -> str:
    """A stable snake_case name for an NVML failure, used as a metric label and a counter key.

    pynvml generates one ``NVMLError_<CamelCase>`` subclass per ``NVML_ERROR_*`` constant (pynvml.py,
    ``_extractNVMLErrorsAsClasses``), so the class name is the portable source. NVMLLibraryMismatchError is
    raised by pynvml when a versioned symbol is missing and is *not* an NVMLError subclass.
    """
    if isinstance(exc, getattr(nvml, "NVMLLibraryMismatchError", ())):
        return "library_mismatch"
    if isinstance(exc, nvml.NVMLError):
        suffix = type(exc).__name__.removeprefix("NVMLError").lstrip("_")
        if suffix:
            return _CAMEL_BOUNDARY.sub("_", suffix).lower()
        return f"nvml_error_{getattr(exc, 'value', 'unknown')}"
    return "unexpected"


class GpuLost(Exception):
    """NVML said GpuIsLost for a call on this GPU (or one of its MIG devices)."""


class StaleHandle(Exception):
    """A MIG handle answered NotFound/InvalidArgument: its instance was destroyed or reconfigured."""


class ErrorCounts:
    """Cumulative error counts by name; written by sampling threads, read from the event loop."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class CallGuard:
    """Calls NVML by function name, per device, with the error policy of the sampling stage.

    ``device_key`` is any stable name of the device (its UUID); ``label`` names the metric when one function
    serves two purposes (memory v2 vs v1). Calls that answered NotSupported, NoPermission, FunctionNotFound or
    ArgumentVersionMismatch are remembered per (device, label) and not made again until :meth:`forget`.
    """

    def __init__(self, nvml: ModuleType, counts: ErrorCounts) -> None:
        self._nvml = nvml
        self.counts = counts
        self._nvml_error = nvml.NVMLError
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
        self._lost = nvml_code(nvml, "NVML_ERROR_GPU_IS_LOST")
        self._permanent = frozenset(
            nvml_code(nvml, name)
            for name in (
                "NVML_ERROR_NOT_SUPPORTED",
                "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
            )
        )
        self._stale = frozenset(nvml_code(nvml, n) for n in ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT"))
        self._unsupported: set[tuple[Hashable, str]] = set()
        self._warned: set[tuple[str, str]] = set()
        self.last_error_code: int | None = None  # code of the latest NVMLError, for callers with a fallback

    def is_unsupported(self, device_key: Hashable, label: str) -> bool:
        return (device_key, label) in self._unsupported

    def forget(self, device_key: Hashable) -> None:
        """Ask everything again on this device (its MIG mode changed, so what it supports changed too)."""
        self._unsupported = {entry for entry in self._unsupported if entry[0] != device_key}

    def call(
        self,
        device_key: Hashable,
        function: str,
        *args: Any,
        label: str | None = None,
        mig: bool = False,
        strict: bool = False,
        quiet_codes: tuple[int, ...] = (),
        remember: bool = True,
    ) -> Any:
        """``nvml.<function>(*args)``, or ``None`` when it failed; raises GpuLost / StaleHandle (MIG handles).

        ``strict`` lets NVMLLibraryMismatchError through to a caller that has a fallback; ``quiet_codes`` are
        answers that mean "nothing new" for this call (NotFound from process utilisation) and are not counted;
        ``remember=False`` asks again next time even after NotSupported/NoPermission (identity calls, whose
        failure on one device must not hide others that share its key).
        """
        label = label or function
        if (device_key, label) in self._unsupported:
            return None
        try:
            return getattr(self._nvml, function)(*args)
        except self._nvml_error as exc:
            # NVMLError.__eq__ compares .value and raises on foreign types: compare codes, never instances.
            code = self.last_error_code = getattr(exc, "value", None)
            if code in quiet_codes:
                return None
            self._count(function, exc)
            if code == self._lost:
                raise GpuLost(str(device_key)) from exc
            if code in self._permanent and remember:
                self._unsupported.add((device_key, label))
            elif mig and code in self._stale:
                raise StaleHandle(str(device_key)) from exc
            return None
        except self._mismatch as exc:
            if strict:
                raise
            self._count(function, exc)
            if remember:
                self._unsupported.add((device_key, label))
            return None
        except Exception as exc:  # a broken binding must cost one value, never the tick
            self._count(function, exc)
            return None

    def _count(self, function: str, exc: BaseException) -> None:
        name = error_name(self._nvml, exc)
        self.counts.add(name)
        if (function, name) not in self._warned:
            self._warned.add((function, name))
            log.info("NVML %s failed: %s (%s); further failures are only counted", function, name, exc)
