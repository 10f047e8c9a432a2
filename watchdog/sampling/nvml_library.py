"""The one place that imports pynvml.

Every other sampling module receives the NVML module as a parameter (real ``pynvml`` from here, or the simulated
one from ``watchdog.testbed``), so the pipeline never knows whether a GPU is real. Keeping the import here also lets
the import-linter contract in pyproject.toml hold the line: pynvml appears nowhere else.
"""

from __future__ import annotations

import ctypes
from types import ModuleType


class NvmlLibraryMissing(RuntimeError):
    """The nvidia-ml-py package is not installed in this environment."""


def load() -> ModuleType:
    """Return the real ``pynvml`` module (nvidia-ml-py); it loads libnvidia-ml.so only at ``nvmlInit``."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - the dependency is declared in pyproject.toml
        raise NvmlLibraryMissing("nvidia-ml-py is not installed: pip install nvidia-ml-py") from exc
    _correct(pynvml)
    return pynvml


def _correct(pynvml: ModuleType) -> None:
    """Replace the bindings nvidia-ml-py gets wrong, here where the module is loaded, so every caller gets the fix.

    ``nvmlVgpuInstanceGetFbUsage``: nvml.h declares ``nvmlReturn_t nvmlVgpuInstanceGetFbUsage(nvmlVgpuInstance_t,
    unsigned long long *fbUsage)``, but nvidia-ml-py 13.615.71 hands the driver a 4-byte ``c_uint``: the driver's
    8-byte write runs past it, and a framebuffer use of 4 GiB or more reads wrapped. The corrected binding passes a
    ``c_ulonglong``, through the same function pointer and return check pynvml uses.
    """
    if not hasattr(pynvml, "_nvmlGetFunctionPointer") or not hasattr(pynvml, "_nvmlCheckReturn"):
        return
    if getattr(pynvml, "_watchdog_corrected", False):
        return

    def nvmlVgpuInstanceGetFbUsage(vgpuInstance):  # noqa: N802 - NVML's name
        usage = ctypes.c_ulonglong(0)
        function = pynvml._nvmlGetFunctionPointer("nvmlVgpuInstanceGetFbUsage")
        pynvml._nvmlCheckReturn(function(vgpuInstance, ctypes.byref(usage)))
        return usage.value

    pynvml.nvmlVgpuInstanceGetFbUsage = nvmlVgpuInstanceGetFbUsage
    pynvml._watchdog_corrected = True


def load_usable() -> ModuleType:
    """``load()``, once NVML has answered an init: a node without a driver fails at start with a line that says how
    to run the simulation instead, before anything else (the Kubernetes client, the metrics port) is set up."""
    nvml = load()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlLibraryMissing(
            f"no usable NVML ({exc}). Without a GPU, run the simulation instead: "
            "`gpu-watchdog run --simulate scenarios/demo.yaml` or `gpu-watchdog demo`."
        ) from None
    nvml.nvmlShutdown()  # NVML counts inits: the sampler takes its own
    return nvml
