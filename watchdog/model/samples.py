"""What NVML told the agent in one tick: the sampling stage's output, in base units (``None`` = not available)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

NOT_ATTRIBUTABLE = 0xFFFFFFFF
"""NVML's marker for 'no GPU/compute instance' in process and event records."""

EMPTY: Mapping = MappingProxyType({})

PROCESS_MODES = ("compute", "mps", "graphics")
"""The NVML process lists a ProcessSample's ``mode`` can name, in the order a combined mode lists them."""


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process seen on a device by NVML's process lists (+ ProcessUtilization), merged by PID.

    ``mode`` names the lists that reported the PID, joined by "+" in the fixed order of :data:`PROCESS_MODES`:
    "compute" (nvmlDeviceGetComputeRunningProcesses), "mps" (nvmlDeviceGetMPSComputeRunningProcesses: a client of
    the Multi-Process Service) or "graphics" (nvmlDeviceGetGraphicsRunningProcesses), e.g. "compute+graphics".
    """

    pid: int
    used_memory_bytes: int | None
    gpu_instance: int | None = None  # None when the device is not MIG (NVML's 0xFFFFFFFF)
    compute_instance: int | None = None
    sm_util: float | None = None  # 0–1, only on GPUs not in MIG mode (time-sliced sharing)
    memory_util: float | None = None  # 0–1, share of time the memory controller served this process
    mode: str = "compute"  # the lists that reported it (see the class docstring); absent in old traces


@dataclass(frozen=True, slots=True)
class MigSample:
    """One MIG device (a compute instance inside a GPU instance)."""

    uuid: str
    gpu_index: int
    gpu_instance: int
    compute_instance: int
    profile: str  # text after " MIG " in the device name, e.g. "1g.10gb"
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    dram_bw_util: float | None = None  # 0–1, GPM DRAM_BW_UTIL of the GPU instance
    sm_util: float | None = None  # 0–1, GPM SM_UTIL of the compute instance
    sm_occupancy: float | None = None  # 0–1, GPM SM_OCCUPANCY of the compute instance
    processes: tuple[ProcessSample, ...] = ()
    # GPM PCIE_TX/RX_PER_SEC of the GPU instance (nvmlGpmMigSampleGet), bytes/s; every CI of the GI reports its GI's.
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    # GPM (NVML 12.9+) graphics engine 0 context switching over the sample interval, of its GPU instance:
    # share of the time switching (GR0_CTXSW_ACTIVE_PCT / 100) and requests per second (GR0_CTXSW_REQUESTS / s).
    ctxsw_active: float | None = None
    ctxsw_per_second: float | None = None


VGPU_SCHEDULERS = ("best_effort", "equal_share", "fixed_share")
"""The vGPU scheduler policies a GpuSample's ``vgpu_scheduler`` can name (NVML_VGPU_SCHEDULER_POLICY_*)."""


@dataclass(frozen=True, slots=True)
class VgpuSample:
    """One active vGPU instance on a vGPU host GPU, as NVML's host-side vGPU calls describe it.

    ``vm_id`` is the VM's identity as the hypervisor gives it and ``vm_id_type`` says which kind ("uuid" on KVM,
    hence KubeVirt; "domain_id" on Xen): nvmlVgpuInstanceGetVmID.
    """

    uuid: str
    type_name: str  # nvmlVgpuTypeGetName, e.g. "GRID A100-4C"
    vm_id: str
    vm_id_type: str  # "uuid" | "domain_id"
    fb_used_bytes: int | None = None  # nvmlVgpuInstanceGetFbUsage
    fb_total_bytes: int | None = None  # nvmlVgpuTypeGetFramebufferSize of its type
    gpu_instance: int | None = None  # the GPU instance of a MIG-backed vGPU; None when time-sliced
    sm_util: float | None = None  # 0–1, smUtil of nvmlDeviceGetVgpuInstancesUtilizationInfo (or …GetVgpuUtilization)
    memory_util: float | None = None  # 0–1, memUtil
    encoder_util: float | None = None  # 0–1, encUtil
    decoder_util: float | None = None  # 0–1, decUtil


@dataclass(frozen=True, slots=True)
class VgpuRunlist:
    """One software runlist of a time-sliced vGPU host's scheduler, from nvmlDeviceGetVgpuSchedulerLog (NVML does
    not say which vGPU a runlist serves)."""

    runlist: int  # swRunlistId
    run_seconds: float  # timeRunTotal of its newest entry: GPU time it has run, cumulative (the driver's count)
    slices: int  # its entries in the last log read: time slices it ran in the log's window
    preemption_seconds: float = 0.0  # cumulativePreemptionTime of its newest entry


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One physical GPU, with its MIG devices when MIG is enabled."""

    index: int
    uuid: str
    name: str
    mig_enabled: bool = False
    lost: bool = False  # NVML answered GpuIsLost; every other field is then None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    gpu_util: float | None = None  # 0–1, nvmlDeviceGetUtilizationRates (not in MIG mode)
    memory_util: float | None = None  # 0–1, same call: share of time memory was busy
    dram_bw_util: float | None = None  # 0–1, GPM on the whole GPU (not in MIG mode)
    sm_util: float | None = None  # 0–1, GPM on the whole GPU (not in MIG mode)
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    clock_event_reasons: int | None = None  # nvmlClocksEventReason* bit mask
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    # GPM (NVML 12.9+), whole GPU, not in MIG mode: share of the time graphics engine 0 spent switching contexts
    # (GR0_CTXSW_ACTIVE_PCT / 100) and context-switch requests per second (GR0_CTXSW_REQUESTS over the interval).
    ctxsw_active: float | None = None
    ctxsw_per_second: float | None = None
    # One direction's usable rate of the link as trained now (nvmlDeviceGetCurrPcieLinkGeneration × …Width).
    pcie_link_bytes_per_second: float | None = None
    instances: tuple[MigSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()  # only when not in MIG mode
    # Only on a vGPU host GPU: its active vGPUs and its vGPU scheduler policy (one of VGPU_SCHEDULERS, or "unknown").
    vgpus: tuple[VgpuSample, ...] = ()
    vgpu_scheduler: str | None = None
    # A vGPU host's scheduler state beyond the policy: adaptive round-robin ("enabled", "disabled", "default"), its
    # time slice, and the runlists of its scheduler log (read every few ticks; kept until the next read).
    vgpu_scheduler_arr: str | None = None
    vgpu_timeslice_seconds: float | None = None
    vgpu_runlists: tuple[VgpuRunlist, ...] = ()


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One event from nvmlEventSetWait: an Xid (or ECC / MIG-config-change) on a GPU."""

    gpu_index: int
    gpu_uuid: str
    xid: int  # eventData; 0 for non-Xid events
    event_type: int  # nvmlEventType* bit
    timestamp: float  # seconds, from the agent's clock when the event was received
    gpu_instance: int | None = None  # None when NVML said 0xFFFFFFFF (not attributable)
    compute_instance: int | None = None
    recovery_action: int | None = None  # NVML_GPU_RECOVERY_ACTION_* (field 230 / GpuRecoveryAction event), when known


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reading the plausibility gate refused: no GPU can produce it, so it never reaches detection.

    ``device`` is the UUID of the GPU or MIG device the reading was about ("" when it names no device that exists,
    e.g. an Xid on an absent GPU index); ``check`` is the gate's check name (the ``check`` label of
    ``gpu_watchdog_readings_rejected_total``); ``field`` the sample field; ``value`` the refused value as text."""

    check: str
    device: str
    field: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeSample:
    """Everything NVML told us in one tick."""

    node: str
    tick: int
    timestamp: float
    gpus: tuple[GpuSample, ...]
    xids: tuple[XidEvent, ...] = ()  # events received since the previous tick
    driver_version: str | None = None
    # Bumped by the sampler at every MIG (re-)enumeration: a MIG layout may change only when it changes (or at a
    # MIG-config-change event), which is how the plausibility gate tells a reconfiguration from a bad reading.
    layout_generation: int = 0
    # What the plausibility gate refused this tick (the readings are already dropped from ``gpus``/``xids``), and
    # the GPU and MIG UUIDs it holds in quarantine: detection neither blames nor protects a pod through them.
    rejected: tuple[Rejection, ...] = ()
    quarantined: frozenset[str] = frozenset()
