"""The parts of a scenario file: GPUs and their MIG layouts, pods and their workloads, host processes, outages,
Xids, faults, DRA, monitoring and the cluster around the node, each a strict model (an unknown field is an error
that names it).

Kept apart from `scenario`, which checks how the parts refer to each other and loads the file, so each reads on
its own; docs/scenario-format.md documents every field.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from watchdog.testbed.curves import Curve
from watchdog.testbed.profiles import GPU_MODELS, LayoutEntry, place_instances

ModelKey = Literal["A100-SXM4-40GB", "H100-80GB-HBM3", "H200-141GB"]
OwnerKind = Literal["DaemonSet", "ReplicaSet", "StatefulSet", "Job", "Node"]



class Strict(BaseModel):
    """Unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class GpuInstanceSpec(Strict):
    """A GPU instance split into compute instances (``nvidia-smi mig -cci``), each its own MIG device."""

    gi: str = Field(min_length=1)  # GPU instance profile, e.g. "4g.40gb"
    ci: list[str] = Field(min_length=1, max_length=7)  # compute instance sizes, e.g. ["2c", "2c"]


MigLayout = list[str | GpuInstanceSpec]


def layout_entries(mig: MigLayout | list[LayoutEntry]) -> list[LayoutEntry]:
    """The layout as profiles.place_instances takes it."""
    return [(entry.gi, tuple(entry.ci)) if isinstance(entry, GpuInstanceSpec) else entry for entry in mig]


def mig_device_profiles(model: str, mig: MigLayout) -> list[str]:
    """The profile of every MIG device of the layout, in the order pods' ``device.instance`` indexes them."""
    return [placement.profile.name for placement in place_instances(GPU_MODELS[model], layout_entries(mig))]


# KubeVirt's namespace for a VM's stable firmware UUID, uuid5(this, VM name) (CalculateLegacyUUID,
# kubevirt/kubevirt pkg/virt-controller/watch/vm/firmware.go); the domain UUID NVML reports as the vGPU's VM id.
KUBEVIRT_FIRMWARE_UUID_NS = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")


class VmSpec(Strict):
    """One KubeVirt VM (a VirtualMachineInstance and its virt-launcher pod) with a vGPU of ``type`` on a vGPU
    host GPU."""

    name: str = Field(min_length=1)  # the VMI's name; its firmware UUID (NVML's VM id) is derived from it
    namespace: str = Field(default="default", min_length=1)
    priority: int | None = None  # the virt-launcher pod's spec.priority (None: 0)
    eviction_strategy: Literal["LiveMigrate", "None"] = "LiveMigrate"  # the VMI's spec.evictionStrategy
    type: str = Field(min_length=1)  # a vGPU type of the GPU's model (profiles.VGPU_TYPES), e.g. "GRID A100-4C"
    sm: Curve = Curve()  # 0–1 of the vGPU's time slice: nvmlDeviceGetVgpuUtilization smUtil
    memory: Curve = Curve()  # framebuffer used, bytes (at most the type's framebuffer): nvmlVgpuInstanceGetFbUsage
    dram: Curve = Curve()  # 0–1, memory controller busy: memUtil
    start_tick: int = Field(default=0, ge=0)
    end_tick: int | None = Field(default=None, ge=0)

    def running(self, tick: int) -> bool:
        return self.start_tick <= tick and (self.end_tick is None or tick < self.end_tick)

    @property
    def firmware_uuid(self) -> str:
        return str(uuid.uuid5(KUBEVIRT_FIRMWARE_UUID_NS, self.name))


class VgpuSpec(Strict):
    """The GPU is a vGPU host (NVIDIA vGPU manager, as the GPU Operator's sandbox workloads install it): its VMs
    hold time-sliced vGPUs, all of one type (the vGPU user guide: time-sliced vGPUs on one GPU share a type unless
    mixed-size mode is on, which this simulation does not model), scheduled by ``scheduler``."""

    scheduler: Literal["best_effort", "equal_share", "fixed_share"] = "best_effort"
    vms: list[VmSpec] = []


class GpuSpec(Strict):
    model: ModelKey
    mig: MigLayout | None = None  # GPU instance profiles (or {gi, ci} splits); None = MIG disabled
    power_limit_watts: float | None = Field(default=None, gt=0)
    replicas: int | None = Field(default=None, ge=1, le=64)  # time-slicing replicas advertised by the plugin
    # How processes sharing the GPU (or one MIG instance) divide SM time and DRAM bandwidth: max-min fair
    # round-robin time slices, or shares in proportion to demand (MPS clients); testbed/contention.py.
    scheduler: Literal["roundrobin", "proportional"] = "roundrobin"
    # Share of the GPU's time each extra context with work costs in switching, at saturation (time-slicing only;
    # testbed/contention.py `switching`): three busy contexts on the default lose 6 %, so their SM shares sum to 0.94
    # while utilization.gpu reads 100 %. 0 models an ideal scheduler.
    context_switch_overhead: float = Field(default=0.03, ge=0.0, le=0.1)
    # The device plugin's MPS sharing: pods' processes are MPS clients, listed by NVML's MPS call only, and an MPS
    # server process (testbed/mps.py) is listed by the compute call while any client runs. MIG disabled only. With
    # ``replicas`` each client is held to the plugin's limits (1/replicas of the SMs and of the memory); without,
    # clients share SMs as ``scheduler`` says. One context: no switching overhead.
    mps: bool = False
    # False: GPM answers PCIe for the whole GPU only (NotSupported per GPU instance), as DCGM samples it.
    gpm_pcie_per_instance: bool = True
    # False: a driver older than NVML 12.9, whose GPM answers NotSupported for every GR*_CTXSW_* metric slot.
    gpm_ctxsw: bool = True
    # nvmlDeviceGetPersistenceMode's answer (only `gpu-watchdog probe` asks it).
    persistence_mode: bool = True
    # A vGPU host GPU: NVML's vGPU host calls answer from its VMs; None: every vGPU call answers NotSupported.
    vgpu: VgpuSpec | None = None


class DeviceRef(Strict):
    gpu: int = Field(ge=0)
    instance: int | None = Field(default=None, ge=0)  # index into the GPU's MIG devices (every CI of a split GI)
    replica: int | None = Field(default=None, ge=0)


class Workload(Strict):
    memory: Curve = Curve()  # bytes
    sm: Curve = Curve()  # 0–1 of its instance (MIG) or GPU (time-sliced)
    dram: Curve = Curve()  # 0–1 of its instance's / GPU's DRAM bandwidth
    pcie: Curve = Curve()  # host→GPU bytes/s (NVML RX)
    pcie_tx: Curve = Curve()  # GPU→host bytes/s (NVML TX)
    input_bound: bool = False  # computes only as fast as its PCIe input arrives (testbed/pcie_link.py)
    fixed_rate: bool = False  # serves a fixed request rate: short of DRAM bandwidth in a split GI it gets busier


class PodSpec(Strict):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str | None = None
    priority: int = 0
    priority_class: str = ""
    qos_class: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_kind: OwnerKind | None = "ReplicaSet"
    container: str = "main"
    gpu_memory_request_bytes: int | None = Field(default=None, ge=0)
    device: DeviceRef | None = None  # what the kubelet assigned; None = a pod without a GPU
    claim: str | None = Field(default=None, min_length=1)  # DRA node: the ResourceClaim (pod's namespace) of device
    extra_devices: list[DeviceRef] = []  # used without assignment (unauthorized)
    start_tick: int = Field(default=0, ge=0)
    end_tick: int | None = Field(default=None, ge=0)
    pid: int | None = Field(default=None, ge=2, le=4194304)  # pid_max on 64-bit Linux
    workload: Workload = Workload()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def running(self, tick: int) -> bool:
        return self.start_tick <= tick and (self.end_tick is None or tick < self.end_tick)


class HostProcessSpec(Strict):
    """A GPU process in no pod (``docker run --gpus``, a host tool, a node agent): NVML reports it on ``device``,
    its /proc/<pid>/cgroup holds ``cgroup`` and its /proc/<pid>/comm ``command``; no kubelet or API server knows it."""

    command: str = Field(min_length=1, max_length=15)  # the kernel keeps 15 characters of comm (TASK_COMM_LEN 16)
    cgroup: str = Field(pattern=r"^/")
    device: DeviceRef
    start_tick: int = Field(default=0, ge=0)
    end_tick: int | None = Field(default=None, ge=0)
    pid: int | None = Field(default=None, ge=2, le=4194304)
    workload: Workload = Workload()
    # What the simulation reads of a process's owner (namespace/name/uid/container/key) has no pod behind it here.
    namespace: Literal[""] = ""
    uid: Literal[""] = ""
    container: Literal[""] = ""

    @property
    def name(self) -> str:
        return self.command

    @property
    def key(self) -> str:
        return f"host/{self.pid}"

    def running(self, tick: int) -> bool:
        return self.start_tick <= tick and (self.end_tick is None or tick < self.end_tick)


class OutageSpec(Strict):
    """Ticks [start_tick, end_tick) in which the kubelet's PodResources API fails (attribution is unhealthy)."""

    start_tick: int = Field(ge=0)
    end_tick: int = Field(ge=1)

    def covers(self, tick: int) -> bool:
        return self.start_tick <= tick < self.end_tick


class XidSpec(Strict):
    at: int = Field(ge=0)
    gpu: int = Field(ge=0)
    instance: int | None = Field(default=None, ge=0)  # None → GI/CI 0xFFFFFFFF (not attributable)
    xid: int = Field(ge=0)


class FaultSpec(Strict):
    at: int = Field(ge=0)
    gpu: int = Field(ge=0)
    lost: bool = False  # the GPU falls off the bus: every call for it answers GpuIsLost
    mig: MigLayout | None = None  # reconfigure the GPU's instances
    error: int | None = None  # NVML_ERROR_* code injected into ``function``
    function: str | None = None
    times: int | None = Field(default=1, ge=1)  # None → until cleared

    @model_validator(mode="after")
    def _one_kind(self) -> FaultSpec:
        kinds = [self.lost, self.mig is not None, self.error is not None]
        if sum(kinds) != 1:
            raise ValueError("a fault sets exactly one of lost: true, mig: [...], error: CODE")
        if (self.error is None) != (self.function is None):
            raise ValueError("error and function go together")
        return self


class DraSpec(Strict):
    """The node hands out its GPUs through Dynamic Resource Allocation instead of the device plugin."""

    driver: str = Field(default="gpu.nvidia.com", min_length=1)
    slice_lag_ticks: int = Field(default=0, ge=0)  # a new MIG device's UUID reaches the ResourceSlice this late


class LatencySpec(Strict):
    """A serving pod's p99 latency as its tenant's monitoring reports it: base seconds at the full clock, longer in
    proportion as a power cap slows the clock."""

    base: float = Field(gt=0)
    noise: float = Field(default=0.0, ge=0)  # relative, Gaussian


class MonitoringSpec(Strict):
    """What the cluster's monitoring sees besides the agent's NVML (testbed/monitoring.py)."""

    dcgm_exporter: bool = False  # dcgm-exporter's per-GPU-instance DCGM_FI_PROF_* series reach the agent
    latency: dict[str, LatencySpec] = {}  # "ns/name" → its p99 latency, the victim signal its tenant overrides with


class TaintSpec(Strict):
    """A node taint (core/v1 Taint)."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class ClusterSpec(Strict):
    """The cluster around the node besides its pods, as its administrators set it up: namespace labels, the
    node's taints and extra labels, and any other objects (ResourceQuotas, LimitRanges, NetworkPolicies, PVCs,
    StorageClasses, …) as manifests. The test bed's fake API server serves them (testbed/cluster/tenancy.py)."""

    namespaces: dict[str, dict[str, str]] = {}  # namespace → its labels (namespaces of pods exist without an entry)
    node_labels: dict[str, str] = {}  # besides the ones GPU Feature Discovery derives from the GPUs
    node_taints: list[TaintSpec] = []
    objects: list[dict[str, Any]] = []  # Kubernetes manifests: apiVersion, kind, metadata (name, namespace), …

    @model_validator(mode="after")
    def _manifests(self) -> ClusterSpec:
        for index, manifest in enumerate(self.objects):
            meta = manifest.get("metadata")
            if not isinstance(manifest.get("apiVersion"), str) or not isinstance(manifest.get("kind"), str):
                raise ValueError(f"objects.{index}: a manifest needs apiVersion and kind")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise ValueError(f"objects.{index}.metadata.name: required")
        return self
