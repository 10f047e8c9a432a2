"""Simulated NVML vGPU host calls: a GPU of the scenario with ``vgpu:`` hosts KubeVirt VMs' vGPUs (time-sliced, or
MIG-backed on a GPU in MIG mode).

Signatures and return types mirror pynvml 13.x (nvidia-ml-py's pynvml.py): vGPU instances and type ids are plain
ints (``_nvmlVgpuInstance_t`` and ``nvmlVgpuTypeId_t`` are c_uint), strings come back as ``str``
(``convertStrBytes``), utilisation samples are the real ``c_nvmlVgpuInstanceUtilizationSample_t`` /
``c_nvmlVgpuInstanceUtilizationInfo_v1_t`` structs with percentages in ``uiVal``, the scheduler's state and log the
real ``c_nvmlVgpuSchedulerGetState_t`` / ``c_nvmlVgpuSchedulerLog_t``. Error answers follow the NVML
API reference (docs.nvidia.com/deploy/nvml-api, "vGPU Management" and "vGPU Queries"): on a GPU that is not a
vGPU host every vGPU call answers NotSupported, and ``nvmlDeviceGetVirtualizationMode`` answers
``NVML_GPU_VIRTUALIZATION_MODE_NONE`` (bare metal); a vGPU instance id that names no active vGPU answers NotFound,
id 0 InvalidArgument. MIG handles answer NotSupported: vGPU calls take the physical GPU.

What each VM achieves comes from the host's vGPU scheduler (testbed/vgpu_scheduling.py, which also feeds the
VMs' load into the GPU's utilisation, SM activity and power): ``smUtil`` is that achieved share and ``memUtil`` the
DRAM share, in percent. A MIG-backed VM's ``nvmlVgpuInstanceGetGpuInstanceId`` answers its GPU instance's id.

Simplifications, named here so no reader mistakes them for NVML facts: VM ids are the VMI's firmware UUID (KVM's id
type, the libvirt domain UUID; Xen would give domain ids); encoder, decoder, JPEG and OFA utilisation are 0; the
scheduler runs ARR (adaptive round-robin) with a 2 ms time slice and an averaging factor of 33 on a time-sliced
host, none on a MIG-backed one (a vGPU there owns its GPU instance); the scheduler log's software runlist id is the
VM's position on the GPU (NVML does not say how runlists map to vGPUs), and the log holds one entry per VM per
time slice of the last NVML_SCHEDULER_SW_MAX_LOG_ENTRIES slices, each VM's run time following its achieved share.
"""

from __future__ import annotations

from typing import Any

from watchdog.testbed.curves import CurveEvaluator
from watchdog.testbed.nvml.base import NvmlBase, nvml_call, nvml_error, pynvml
from watchdog.testbed.profiles import VgpuType, all_vgpu_types, vgpu_type
from watchdog.testbed.scenario import format_uuid, stable_digest, vm_mig_devices
from watchdog.testbed.scenario_parts import VmSpec

_INSTANCES_PER_GPU = 64  # vGPU instance ids: 1 + gpu × this + the VM's position on the GPU
_INVALID_GPU_INSTANCE_ID = 0xFFFFFFFF  # nvml.h: a vGPU that is not MIG-backed has no GPU instance
TIMESLICE_NS = 2_000_000  # the simulated ARR time slice (nvmlVgpuSchedDataWithARR_t.timeslice, ns)
ARR_AVERAGING_FACTOR = 33  # nvmlVgpuSchedDataWithARR_t.avgFactor (the simulation's value)
_POLICIES = {
    "best_effort": pynvml.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT,
    "equal_share": pynvml.NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
    "fixed_share": pynvml.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
}


class _Vm:
    """One VM of a vGPU host GPU, with its curves bound to the scenario's seed."""

    __slots__ = ("gpu", "position", "spec", "kind", "instance", "uuid", "vm_id", "memory", "mig_device")

    def __init__(self, *, gpu: int, position: int, spec: VmSpec, kind: VgpuType, seed: int,
                 mig_device: int | None) -> None:
        self.gpu, self.position, self.spec, self.kind, self.mig_device = gpu, position, spec, kind, mig_device
        self.instance = 1 + gpu * _INSTANCES_PER_GPU + position
        self.uuid = format_uuid(stable_digest(seed, "vgpu", gpu, spec.name))
        self.vm_id = spec.firmware_uuid  # the VMI's spec.domain.firmware.uuid, as testbed/cluster/kubevirt.py sets it
        parts = (seed & 0xFFFFFFFF, 0x76, gpu, position)  # sm (0) and dram (2) demand: testbed/vgpu_scheduling.py
        self.memory = CurveEvaluator(spec.memory, seed_parts=(*parts, 1), upper=float(kind.framebuffer_bytes))


class VgpuCalls(NvmlBase):
    _vm_table: dict[int, _Vm] | None = None  # vGPU instance id → its VM, built on first use
    _run_totals: dict[int, tuple[int, dict[str, float]]] | None = None  # GPU → (ticks summed, VM → run seconds)

    def _vms(self) -> dict[int, _Vm]:
        if self._vm_table is None:
            scenario = self._node.scenario
            table: dict[int, _Vm] = {}
            for gpu, spec in enumerate(scenario.gpus):
                vms = spec.vgpu.vms if spec.vgpu is not None else []
                for position, (vm, device) in enumerate(zip(vms, vm_mig_devices(spec))):
                    entry = _Vm(gpu=gpu, position=position, spec=vm, kind=vgpu_type(spec.model, vm.type),
                                seed=scenario.seed, mig_device=device)
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
        moved = getattr(self._node, "migrated_vms", ())  # VMs KubeVirt live-migrated away (testbed/cluster/kubevirt.py)
        return [vm for vm in self._vms().values() if vm.gpu == gpu and vm.spec.running(tick)
                and (vm.spec.namespace, vm.spec.name) not in moved]

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
        self._fill_scheduler(state, gpu)
        return state

    @nvml_call
    def nvmlDeviceGetVgpuSchedulerLog(self, handle):
        gpu = self._host(handle)
        log = pynvml.c_nvmlVgpuSchedulerLog_t()
        log.engineId = pynvml.NVML_VGPU_SCHEDULER_ENGINE_TYPE_GRAPHICS
        self._fill_scheduler(log, gpu)
        active = [vm for vm in self._active(gpu) if vm.mig_device is None]
        if not active:
            log.entriesCount = 0
            return log
        tick = self._node.tick
        now_ns = self._stamp() * 1000
        round_ns = TIMESLICE_NS * len(active)  # one slice per VM per round, in position order
        rounds = pynvml.NVML_SCHEDULER_SW_MAX_LOG_ENTRIES // len(active)
        run_seconds, count = self._run_seconds(gpu, tick), 0
        for order, vm in enumerate(active):
            share = self._node.state().gpus[gpu].vgpus.get(vm.spec.name, (0.0, 0.0))[0]
            ran = min(int(round_ns * share), TIMESLICE_NS)  # what it ran of each of its slices
            total = int(run_seconds.get(vm.spec.name, 0.0) * 1e9)
            for back in range(rounds - 1, -1, -1):
                entry = log.logEntries[count + rounds - 1 - back]
                entry.timestamp = now_ns - back * round_ns - (len(active) - 1 - order) * TIMESLICE_NS
                entry.timeRun = ran
                entry.timeRunTotal = max(total - back * ran, 0)
                entry.swRunlistId = vm.position
                entry.targetTimeSlice = TIMESLICE_NS
                entry.cumulativePreemptionTime = 0
            count += rounds
        log.entriesCount = count
        return log

    def _run_seconds(self, gpu: int, tick: int) -> dict[str, float]:
        """VM name → seconds of GPU time it got in the ticks before ``tick``: its achieved shares summed, memoised
        per GPU so a log read costs the ticks since the last one."""
        if self._run_totals is None:
            self._run_totals = {}
        done, totals = self._run_totals.get(gpu, (0, {}))
        if done > tick:
            done, totals = 0, {}
        totals = dict(totals)
        for past in range(done, tick):
            for name, (sm, _) in self._node.state(past).gpus[gpu].vgpus.items():
                totals[name] = totals.get(name, 0.0) + sm * self._node.scenario.tick_seconds
        self._run_totals[gpu] = (max(done, tick), totals)
        return totals

    def _fill_scheduler(self, state: Any, gpu: int) -> None:
        """Policy, ARR mode and time slice, as nvmlDeviceGetVgpuSchedulerState and …Log report them."""
        spec = self._node.scenario.gpus[gpu]
        state.schedulerPolicy = _POLICIES[spec.vgpu.scheduler]
        if spec.mig is not None:  # MIG-backed vGPUs own their GPU instances: no time slices to report
            state.arrMode = pynvml.NVML_VGPU_SCHEDULER_ARR_DISABLE
            return
        state.arrMode = pynvml.NVML_VGPU_SCHEDULER_ARR_ENABLE
        state.schedulerParams.vgpuSchedDataWithARR.avgFactor = ARR_AVERAGING_FACTOR
        state.schedulerParams.vgpuSchedDataWithARR.timeslice = TIMESLICE_NS

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
        sm, dram = self._node.state().gpus[vm.gpu].vgpus.get(vm.spec.name, (0.0, 0.0))
        sample.smUtil.uiVal = round(100 * sm)
        sample.memUtil.uiVal = round(100 * dram)
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
        vm = self._vm(vgpuInstance)
        if vm.mig_device is None:
            return _INVALID_GPU_INSTANCE_ID  # time-sliced, not MIG-backed
        return self._node.layout(vm.gpu).instances[vm.mig_device].gpu_instance

    # --------------------------------------------------------------------------------------- vGPU types

    def _type(self, type_id: Any) -> VgpuType:
        for kind in all_vgpu_types():
            if kind.type_id == type_id:
                return kind
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_call
    def nvmlVgpuTypeGetName(self, vgpuTypeId):
        return self._type(vgpuTypeId).name

    @nvml_call
    def nvmlVgpuTypeGetFramebufferSize(self, vgpuTypeId):
        return self._type(vgpuTypeId).framebuffer_bytes
