"""Simulated NVML vGPU host calls: a GPU of the scenario with ``vgpu:`` hosts KubeVirt VMs' time-sliced vGPUs.

Signatures and return types mirror pynvml 13.x (nvidia-ml-py's pynvml.py): vGPU instances and type ids are plain
ints (``_nvmlVgpuInstance_t`` and ``nvmlVgpuTypeId_t`` are c_uint), strings come back as ``str``
(``convertStrBytes``), utilisation samples are the real ``c_nvmlVgpuInstanceUtilizationSample_t`` /
``c_nvmlVgpuInstanceUtilizationInfo_v1_t`` structs with percentages in ``uiVal``. Error answers follow the NVML
API reference (docs.nvidia.com/deploy/nvml-api, "vGPU Management" and "vGPU Queries"): on a GPU that is not a
vGPU host every vGPU call answers NotSupported, and ``nvmlDeviceGetVirtualizationMode`` answers
``NVML_GPU_VIRTUALIZATION_MODE_NONE`` (bare metal); a vGPU instance id that names no active vGPU answers NotFound,
id 0 InvalidArgument. MIG handles answer NotSupported: vGPU calls take the physical GPU.

Simplifications, named here so no reader mistakes them for NVML facts: the VMs' load does not feed the GPU's own
readings (utilisation, power, processes); VM ids are the VMI's firmware UUID (KVM's id type, the libvirt domain
UUID; Xen would give domain ids); encoder,
decoder, JPEG and OFA utilisation are 0; the scheduler state carries the policy only (ARR mode default, no time
slice).
"""

from __future__ import annotations

from typing import Any

from watchdog.testbed.curves import CurveEvaluator
from watchdog.testbed.nvml.base import NvmlBase, nvml_call, nvml_error, pynvml
from watchdog.testbed.profiles import VGPU_TYPES, VgpuType, vgpu_type
from watchdog.testbed.scenario import format_uuid, stable_digest
from watchdog.testbed.scenario_parts import VmSpec

_INSTANCES_PER_GPU = 64  # vGPU instance ids: 1 + gpu × this + the VM's position on the GPU
_INVALID_GPU_INSTANCE_ID = 0xFFFFFFFF  # nvml.h: a vGPU that is not MIG-backed has no GPU instance
_POLICIES = {
    "best_effort": pynvml.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT,
    "equal_share": pynvml.NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
    "fixed_share": pynvml.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
}


class _Vm:
    """One VM of a vGPU host GPU, with its curves bound to the scenario's seed."""

    __slots__ = ("gpu", "spec", "kind", "instance", "uuid", "vm_id", "sm", "memory", "dram")

    def __init__(self, *, gpu: int, position: int, spec: VmSpec, kind: VgpuType, seed: int) -> None:
        self.gpu, self.spec, self.kind = gpu, spec, kind
        self.instance = 1 + gpu * _INSTANCES_PER_GPU + position
        self.uuid = format_uuid(stable_digest(seed, "vgpu", gpu, spec.name))
        self.vm_id = spec.firmware_uuid  # the VMI's spec.domain.firmware.uuid, as testbed/cluster/kubevirt.py sets it
        parts = (seed & 0xFFFFFFFF, 0x76, gpu, position)
        self.sm = CurveEvaluator(spec.sm, seed_parts=(*parts, 0), upper=1.0)
        self.memory = CurveEvaluator(spec.memory, seed_parts=(*parts, 1), upper=float(kind.framebuffer_bytes))
        self.dram = CurveEvaluator(spec.dram, seed_parts=(*parts, 2), upper=1.0)


class VgpuCalls(NvmlBase):
    _vm_table: dict[int, _Vm] | None = None  # vGPU instance id → its VM, built on first use

    def _vms(self) -> dict[int, _Vm]:
        if self._vm_table is None:
            scenario = self._node.scenario
            table: dict[int, _Vm] = {}
            for gpu, spec in enumerate(scenario.gpus):
                for position, vm in enumerate(spec.vgpu.vms if spec.vgpu is not None else ()):
                    entry = _Vm(gpu=gpu, position=position, spec=vm, kind=vgpu_type(spec.model, vm.type),
                                seed=scenario.seed)
                    table[entry.instance] = entry
            self._vm_table = table
        return self._vm_table

    def _host(self, handle: Any) -> int:
        """The GPU index of a vGPU host handle; NotSupported for any other GPU and for MIG handles."""
        gpu = self._parent(handle)
        if self._node.scenario.gpus[gpu].vgpu is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _active(self, gpu: int) -> list[_Vm]:
        tick = self._node.tick
        return [vm for vm in self._vms().values() if vm.gpu == gpu and vm.spec.running(tick)]

    def _vm(self, instance: Any) -> _Vm:
        if not isinstance(instance, int) or instance == 0:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        vm = self._vms().get(instance)
        if vm is None or not vm.spec.running(self._node.tick):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        if self._node.is_lost(vm.gpu):
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return vm

    def _stamp(self) -> int:
        return int(round(self._node.tick * self._node.scenario.tick_seconds * 1e6))  # µs, like process samples

    # ------------------------------------------------------------------------------------ host and GPU

    @nvml_call
    def nvmlDeviceGetVirtualizationMode(self, handle):
        gpu = self._parent(handle)
        if self._node.scenario.gpus[gpu].vgpu is None:
            return pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
        return pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU

    @nvml_call
    def nvmlDeviceGetHostVgpuMode(self, handle):
        self._host(handle)
        return pynvml.NVML_HOST_VGPU_MODE_SRIOV  # Ampere and Hopper vGPUs are SR-IOV virtual functions

    @nvml_call
    def nvmlDeviceGetActiveVgpus(self, handle):
        return [vm.instance for vm in self._active(self._host(handle))]

    @nvml_call
    def nvmlDeviceGetVgpuSchedulerState(self, handle):
        gpu = self._host(handle)
        state = pynvml.c_nvmlVgpuSchedulerGetState_t()
        state.schedulerPolicy = _POLICIES[self._node.scenario.gpus[gpu].vgpu.scheduler]
        state.arrMode = pynvml.NVML_VGPU_SCHEDULER_ARR_DEFAULT
        return state

    @nvml_call
    def nvmlDeviceGetVgpuUtilization(self, handle, timeStamp):
        return self._utilisation_samples(pynvml.c_nvmlVgpuInstanceUtilizationSample_t, handle, timeStamp)

    @nvml_call
    def nvmlDeviceGetVgpuInstancesUtilizationInfo(self, handle, timeStamp):
        return self._utilisation_samples(pynvml.c_nvmlVgpuInstanceUtilizationInfo_v1_t, handle, timeStamp)

    def _utilisation_samples(self, struct: Any, handle: Any, last_seen: int) -> list[Any]:
        """The two utilisation calls' answers: one ``struct`` per active vGPU with a sample newer than
        ``last_seen``; the structs differ in type, not in the fields filled here."""
        samples = []
        for vm, stamp in self._utilisation(handle, last_seen):
            sample = struct()
            sample.vgpuInstance = vm.instance
            sample.timeStamp = stamp
            self._fill_utilisation(sample, vm)
            samples.append(sample)
        return samples

    def _utilisation(self, handle: Any, last_seen: int) -> list[tuple[_Vm, int]]:
        active = self._active(self._host(handle))
        if not active:
            return []  # pynvml answers [] when the sizing call succeeds (no active vGPU)
        stamp = self._stamp()
        if last_seen and stamp <= last_seen:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)  # no sample newer than timeStamp
        return [(vm, stamp) for vm in active]

    def _fill_utilisation(self, sample: Any, vm: _Vm) -> None:
        tick = self._node.tick
        sample.smUtil.uiVal = round(100 * vm.sm(tick))
        sample.memUtil.uiVal = round(100 * vm.dram(tick))
        sample.encUtil.uiVal = 0
        sample.decUtil.uiVal = 0

    # ---------------------------------------------------------------------------------- vGPU instances

    @nvml_call
    def nvmlVgpuInstanceGetUUID(self, vgpuInstance):
        return self._vm(vgpuInstance).uuid

    @nvml_call
    def nvmlVgpuInstanceGetVmID(self, vgpuInstance):
        return (self._vm(vgpuInstance).vm_id, pynvml.NVML_VGPU_VM_ID_UUID)

    @nvml_call
    def nvmlVgpuInstanceGetType(self, vgpuInstance):
        return self._vm(vgpuInstance).kind.type_id

    @nvml_call
    def nvmlVgpuInstanceGetFbUsage(self, vgpuInstance):
        # Bytes (nvml.h: unsigned long long *fbUsage). pynvml 13.615.71 passes a c_uint for it, so the real binding
        # keeps the low 32 bits only; the simulation answers what the header promises.
        vm = self._vm(vgpuInstance)
        return int(vm.memory(self._node.tick))

    @nvml_call
    def nvmlVgpuInstanceGetGpuInstanceId(self, vgpuInstance):
        self._vm(vgpuInstance)
        return _INVALID_GPU_INSTANCE_ID  # time-sliced, not MIG-backed

    # --------------------------------------------------------------------------------------- vGPU types

    def _type(self, type_id: Any) -> VgpuType:
        for types in VGPU_TYPES.values():
            for kind in types:
                if kind.type_id == type_id:
                    return kind
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_call
    def nvmlVgpuTypeGetName(self, vgpuTypeId):
        return self._type(vgpuTypeId).name

    @nvml_call
    def nvmlVgpuTypeGetFramebufferSize(self, vgpuTypeId):
        return self._type(vgpuTypeId).framebuffer_bytes
