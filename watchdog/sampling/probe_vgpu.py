"""The probe's vGPU part: every NVML vGPU host call on every GPU, and the instance calls on each active vGPU.

A GPU that is no vGPU host answers NotSupported to each of them (nvmlDeviceGetVirtualizationMode answers
NVML_GPU_VIRTUALIZATION_MODE_NONE), which the report shows as plainly as a host's answers: the first run on a
KubeVirt node with the NVIDIA vGPU manager then says which calls its driver answers, and how (NVML API reference,
docs.nvidia.com/deploy/nvml-api, "vGPU Management"; nvidia-ml-py's pynvml.py for the Python signatures).
"""

from __future__ import annotations

from typing import Any, Callable

# Asked on the GPU's handle, in the sampler's order; the utilisation calls with timestamp 0 (every sample buffered).
GPU_CALLS = ("nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetHostVgpuMode", "nvmlDeviceGetActiveVgpus",
             "nvmlDeviceGetVgpuSchedulerState", "nvmlDeviceGetVgpuSchedulerLog")
UTILISATION_CALLS = ("nvmlDeviceGetVgpuUtilization", "nvmlDeviceGetVgpuInstancesUtilizationInfo")
INSTANCE_CALLS = ("nvmlVgpuInstanceGetUUID", "nvmlVgpuInstanceGetVmID", "nvmlVgpuInstanceGetType",
                  "nvmlVgpuInstanceGetFbUsage", "nvmlVgpuInstanceGetGpuInstanceId")
TYPE_CALLS = ("nvmlVgpuTypeGetName", "nvmlVgpuTypeGetFramebufferSize")
MAX_INSTANCES = 32  # a GPU holds at most a few dozen vGPUs (the smallest C-series type: 4 GB on a 40 GB A100 → 10)

Record = Callable[..., Any]


def probe_vgpu(record: Record, *, gpu: dict[str, Any], handle: Any) -> None:
    """Record the GPU-level calls in ``gpu["calls"]`` and, per active vGPU, its own in ``gpu["vgpus"]``."""
    calls = gpu["calls"]
    for function in GPU_CALLS:
        record(calls, function, function, handle)
    for function in UTILISATION_CALLS:
        record(calls, function, function, handle, 0)
    active = calls["nvmlDeviceGetActiveVgpus"].get("value") or []
    for instance in list(active)[:MAX_INSTANCES]:
        entry: dict[str, Any] = {"instance": instance, "calls": {}}
        gpu.setdefault("vgpus", []).append(entry)
        for function in INSTANCE_CALLS:
            record(entry["calls"], function, function, instance)
        type_id = entry["calls"]["nvmlVgpuInstanceGetType"].get("value")
        if type_id is not None:
            for function in TYPE_CALLS:
                record(entry["calls"], function, function, type_id)
