"""Simulated NVML calls that enumerate devices and say what they are: init, handles, UUIDs, MIG topology.

Signatures, return types and error codes mirror pynvml 13.x (nvidia-ml-py's pynvml.py: enumeration and MIG
handle calls, the NVMLError subclasses built by nvmlExceptionClass, nvmlInit/nvmlShutdown) and nvml.h (including
its init reference count, nvmlInit_v2). Where nvml.h leaves the error for a case open (a parent handle passed
to a MIG-only call), NotSupported is used, the answer the header gives for "not a MIG device" elsewhere.
"""

from __future__ import annotations

import ctypes
from typing import Any

from watchdog.testbed.nvml.base import NvmlBase, nvml_call, nvml_error, pynvml
from watchdog.testbed.profiles import MAX_MIG_DEVICES


class DeviceCalls(NvmlBase):
    # --------------------------------------------------------------------------------------------- init

    @nvml_call
    def nvmlInit(self):
        return self.nvmlInitWithFlags(0)

    @nvml_call
    def nvmlInitWithFlags(self, flags):
        # NVML counts inits; each needs its own nvmlShutdown (nvml.h, nvmlInit_v2).
        self._init_count += 1
        return None

    @nvml_call
    def nvmlShutdown(self):
        self._init_count -= 1
        return None

    @nvml_call
    def nvmlSystemGetDriverVersion(self):
        return self._node.scenario.driver_version

    @nvml_call
    def nvmlSystemGetNVMLVersion(self):
        # "<CUDA major>.<driver version>", e.g. 12.575.51.03; R580 is the first branch of CUDA 13.0.
        driver = self._node.scenario.driver_version
        branch = driver.split(".", 1)[0]
        return f"{13 if branch.isdigit() and int(branch) >= 580 else 12}.{driver}"

    # ---------------------------------------------------------------------------------------- enumeration

    @nvml_call
    def nvmlDeviceGetCount(self):
        return len(self._gpu_handles)

    @nvml_call
    def nvmlDeviceGetHandleByIndex(self, index):
        if not isinstance(index, int) or not 0 <= index < len(self._gpu_handles):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self._node.is_lost(index):
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)  # nvml.h lists GPU_IS_LOST for this call
        return self._gpu_handles[index]

    @nvml_call
    def nvmlDeviceGetHandleByUUID(self, uuid):
        if isinstance(uuid, bytes):
            uuid = uuid.decode()
        node = self._node
        for gpu, gpu_uuid in enumerate(node.gpu_uuids):
            if uuid == gpu_uuid:
                return self.nvmlDeviceGetHandleByIndex(gpu)
            for instance in node.layout(gpu).instances:
                if uuid == instance.uuid:
                    if node.is_lost(gpu):
                        raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
                    return self._mig_handle(gpu, node.layout(gpu).generation, instance.slot)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    @nvml_call
    def nvmlDeviceGetUUID(self, handle):
        gpu, slot = self._resolve(handle)
        if slot is None:
            return self._node.gpu_uuids[gpu]
        return self._node.layout(gpu).by_slot[slot].uuid

    @nvml_call
    def nvmlDeviceGetName(self, handle):
        gpu, slot = self._resolve(handle)
        name = self._node.models[gpu].name
        if slot is None:
            return name
        return f"{name} MIG {self._node.layout(gpu).by_slot[slot].profile.name}"

    @nvml_call
    def nvmlDeviceGetPersistenceMode(self, handle):
        gpu = self._parent(handle)  # a property of the physical GPU; MIG handles answer NotSupported
        enabled = self._node.scenario.gpus[gpu].persistence_mode
        return pynvml.NVML_FEATURE_ENABLED if enabled else pynvml.NVML_FEATURE_DISABLED

    @nvml_call
    def nvmlDeviceGetIndex(self, handle):
        return self._parent(handle)

    # ------------------------------------------------------------------------------------------------ MIG

    @nvml_call
    def nvmlDeviceGetMigMode(self, device):
        gpu = self._parent(device)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if self._node.layout(gpu).mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    @nvml_call
    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        gpu = self._parent(device)
        return MAX_MIG_DEVICES if self._node.layout(gpu).mig_enabled else 0

    @nvml_call
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        gpu = self._parent(device, mig_error=pynvml.NVML_ERROR_INVALID_ARGUMENT)
        layout = self._node.layout(gpu)
        if not layout.mig_enabled or not isinstance(index, int) or not 0 <= index < MAX_MIG_DEVICES:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index not in layout.by_slot:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)  # sparse slots (nvml.h, nvmlDeviceGetMigDeviceHandleByIndex)
        return self._mig_handle(gpu, layout.generation, index)

    @nvml_call
    def nvmlDeviceIsMigDeviceHandle(self, device):
        _, slot = self._resolve(device)
        return ctypes.c_uint(0 if slot is None else 1)  # pynvml returns the raw c_uint, not an int

    @nvml_call
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        gpu, slot = self._resolve(migDevice)
        if slot is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu_handles[gpu]

    @nvml_call
    def nvmlDeviceGetGpuInstanceId(self, device):
        return self._instance(device).gpu_instance

    @nvml_call
    def nvmlDeviceGetComputeInstanceId(self, device):
        return self._instance(device).compute_instance

    @nvml_call
    def nvmlDeviceGetAttributes(self, device):
        instance = self._instance(device)  # nvml.h: "currently only supports MIG device handles"
        profile = instance.profile
        attributes = pynvml.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = profile.sms
        attributes.gpuInstanceSliceCount = profile.compute_slices
        attributes.computeInstanceSliceCount = profile.compute_slices
        attributes.memorySizeMB = instance.memory_total >> 20
        attributes.sharedCopyEngineCount = max(1, profile.compute_slices)
        attributes.sharedDecoderCount = profile.memory_slices // 2 if profile.compute_slices < 7 else 5
        attributes.sharedEncoderCount = 0
        attributes.sharedJpegCount = 1 if profile.name.endswith("+me") or profile.compute_slices == 7 else 0
        attributes.sharedOfaCount = attributes.sharedJpegCount
        return attributes

    def _instance(self, device: Any):
        gpu, slot = self._resolve(device)
        if slot is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._node.layout(gpu).by_slot[slot]
