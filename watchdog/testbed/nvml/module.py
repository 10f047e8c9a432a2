"""The simulated NVML module object: what a sampler receives instead of ``pynvml``.

The sampler is handed a module-like object and never asks whether it is real: the device is injected, never
imported. So this object carries everything the sampler reads from pynvml — every ``NVML_*`` constant, every
``nvml*`` flag value, every ``NVMLError*`` class, every ``c_nvml*`` struct, ``nvmlMemory_v2`` — copied from the
real module, and one bound method per simulated call with pynvml's exact positional signature. A pynvml function
the simulation does not implement answers FunctionNotFound, as it would against a driver that lacks the symbol,
so a sampler's fallback path runs instead of an AttributeError.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from watchdog.testbed.nvml.base import nvml_error, pynvml
from watchdog.testbed.nvml.devices import DeviceCalls
from watchdog.testbed.nvml.gpm_events import GpmEventCalls
from watchdog.testbed.nvml.telemetry import TelemetryCalls
from watchdog.testbed.nvml.vgpu import VgpuCalls

_COPIED_PREFIXES = ("NVML", "nvml", "c_nvml", "struct_c_nvml", "c_metricInfo")


def _copyable(name: str, value: Any) -> bool:
    if name.startswith("_") or isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
        return False
    if isinstance(value, type):
        return name.startswith(_COPIED_PREFIXES)
    return isinstance(value, (int, float, str, tuple)) or type(value).__module__ == "ctypes"


class SimulatedNvml(DeviceCalls, TelemetryCalls, GpmEventCalls, VgpuCalls):
    """pynvml, answered by a :class:`~watchdog.testbed.gpu_node.SimulatedGpuNode`. ``calls`` counts calls per function."""

    def simulated_functions(self) -> list[str]:
        """Names of the nvml* functions this object really simulates (not FunctionNotFound stubs)."""
        return sorted(name for name, member in inspect.getmembers(type(self))
                      if name.startswith("nvml") and getattr(member, "__sim_nvml__", False))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally: unsimulated pynvml functions become FunctionNotFound stubs.
        real = getattr(pynvml, name, None)
        if not name.startswith("nvml") or not isinstance(real, types.FunctionType):
            raise AttributeError(f"simulated NVML has no attribute {name!r}")

        @functools.wraps(real)
        def not_in_this_driver(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        return not_in_this_driver


for _name, _value in vars(pynvml).items():
    if _copyable(_name, _value) and not hasattr(SimulatedNvml, _name):
        setattr(SimulatedNvml, _name, _value)
