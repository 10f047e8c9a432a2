"""The sampling stage: NVML → NodeSample, plus the Xid event watcher and the read-only probe.

The NVML module is always a parameter (real pynvml via ``nvml_library.load()``, or ``watchdog.testbed``'s node.nvml),
so nothing here knows whether the GPU is real.
"""

from watchdog.sampling.call_guard import ErrorCounts, error_name
from watchdog.sampling.xid_watcher import XidWatcher
from watchdog.sampling.probe import probe
from watchdog.sampling.sampler import NvmlSampler, NvmlUnavailable

__all__ = ["ErrorCounts", "NvmlSampler", "NvmlUnavailable", "XidWatcher", "error_name", "probe"]
