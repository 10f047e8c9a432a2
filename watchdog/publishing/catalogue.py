"""Every metric family gpu-watchdog exposes, in one place.

Metric names and label sets are a contract: dashboards and alert rules query them, and renaming one breaks users
silently (dcgm-exporter's Hostname→hostname rename, NVIDIA/dcgm-exporter#655). Keeping the whole schema in one
table makes a change visible in review and lets docs/metrics.md be checked against it. Naming follows the
Prometheus conventions (https://prometheus.io/docs/practices/naming/): a `gpu_watchdog_` prefix, base units as
suffix, `_total` on counters, lowercase snake_case labels; every series carries `node`.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "gpu_watchdog_"

GPU_LABELS = ("node", "gpu", "gpu_uuid")
MIG_LABELS = GPU_LABELS + ("mig_uuid", "gpu_instance", "compute_instance", "profile")
VGPU_LABELS = GPU_LABELS + ("vgpu_uuid", "vgpu_type", "vm_id", "namespace", "pod", "vmi")
POD_LABELS = ("namespace", "pod", "container")
TENANT_LABEL = "tenant"


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One metric family: the exposed name (with `_total` for counters), its type, help, unit and labels.

    ``attributed`` families get a ``tenant`` label appended when the snapshot's pod index counts tenants by a
    pod label (``series.with_tenant``).
    """

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    attributed: bool = False

    def label_names(self, *, with_tenant: bool) -> tuple[str, ...]:
        if self.attributed and with_tenant:
            return self.labels + (TENANT_LABEL,)
        return self.labels

    @property
    def family_name(self) -> str:
        """The OpenMetrics family name: a counter's name without its `_total` sample suffix."""
        return self.name[: -len("_total")] if self.kind == "counter" else self.name


def _gauge(short: str, help_text: str, labels: tuple[str, ...], *, unit: str = "", attributed: bool = False):
    return FamilySpec(PREFIX + short, "gauge", help_text, labels, unit, attributed)


def _counter(short: str, help_text: str, labels: tuple[str, ...]):
    return FamilySpec(PREFIX + short, "counter", help_text, labels)


# ------------------------------------------------------------------------------------------- per GPU
GPU_INFO = _gauge(
    "gpu_info", "GPU identity; always 1. Join on gpu_uuid for the model.", GPU_LABELS + ("model", "mig_mode")
)
GPU_LOST = _gauge(
    "gpu_lost", "1 when NVML reports the GPU lost (GpuIsLost); its other series are then absent.", GPU_LABELS
)
GPU_MEMORY_TOTAL = _gauge("gpu_memory_total_bytes", "Framebuffer memory of the GPU.", GPU_LABELS, unit="bytes")
GPU_MEMORY_USED = _gauge("gpu_memory_used_bytes", "Framebuffer memory in use on the GPU.", GPU_LABELS, unit="bytes")
GPU_MEMORY_RESERVED = _gauge(
    "gpu_memory_reserved_bytes", "Framebuffer memory reserved by the driver.", GPU_LABELS, unit="bytes"
)
GPU_UTIL = _gauge(
    "gpu_utilization_ratio", "Share of time a kernel ran on the GPU (not in MIG mode).", GPU_LABELS, unit="ratio"
)
GPU_MEMORY_UTIL = _gauge(
    "gpu_memory_utilization_ratio", "Share of time device memory was read or written.", GPU_LABELS, unit="ratio"
)
GPU_DRAM_BW = _gauge(
    "gpu_dram_bandwidth_utilization_ratio", "DRAM bandwidth used, share of the theoretical maximum (GPM).",
    GPU_LABELS, unit="ratio",
)
GPU_SM_UTIL = _gauge("gpu_sm_utilization_ratio", "SM activity of the whole GPU (GPM).", GPU_LABELS, unit="ratio")
GPU_POWER = _gauge("gpu_power_watts", "Power draw of the board.", GPU_LABELS, unit="watts")
GPU_POWER_LIMIT = _gauge("gpu_power_limit_watts", "Enforced power limit of the board.", GPU_LABELS, unit="watts")
GPU_TEMPERATURE = _gauge("gpu_temperature_celsius", "GPU core temperature.", GPU_LABELS, unit="celsius")
GPU_SM_CLOCK = _gauge("gpu_sm_clock_hertz", "Current SM clock.", GPU_LABELS, unit="hertz")
GPU_SM_CLOCK_MAX = _gauge("gpu_sm_clock_max_hertz", "Maximum SM clock.", GPU_LABELS, unit="hertz")
GPU_CLOCK_EVENT_REASONS = _gauge(
    "gpu_clock_event_reasons", "Raw nvmlClocksEventReason bit mask.", GPU_LABELS
)
GPU_THROTTLED = _gauge(
    "gpu_throttled", "1 while the named clock event reason holds the clocks down.", GPU_LABELS + ("reason",)
)
GPU_PCIE_TX = _gauge(
    "gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput of the GPU.", GPU_LABELS, unit="bytes_per_second"
)
GPU_PCIE_RX = _gauge(
    "gpu_pcie_rx_bytes_per_second", "PCIe receive throughput of the GPU.", GPU_LABELS, unit="bytes_per_second"
)
GPU_PCIE_LINK = _gauge(
    "gpu_pcie_link_bytes_per_second", "Data rate of the PCIe link per direction at its current generation and width.",
    GPU_LABELS, unit="bytes_per_second",
)
GPU_CONTEXT_SWITCH_ACTIVE = _gauge(
    "gpu_context_switch_active_ratio",
    "Share of the time the graphics engine spent switching between contexts (GPM, not in MIG mode).",
    GPU_LABELS, unit="ratio",
)
GPU_CONTEXT_SWITCHES = _gauge(
    "gpu_context_switches_per_second", "Context-switch requests per second of the graphics engine (GPM, not in MIG "
    "mode).", GPU_LABELS, unit="per_second",
)
GPU_PROCESSES = _gauge("gpu_processes", "Compute processes on the GPU, MIG instances included.", GPU_LABELS)
GPU_PROCESSES_BY_MODE = _gauge(
    "gpu_processes_by_mode", "Processes on the GPU, MIG instances included, by the NVML lists that reported them: "
    "compute, mps (an MPS client), graphics, joined by + when several did. Only modes present have a series.",
    GPU_LABELS + ("mode",),
)

# ------------------------------------------------------------------------------- per vGPU (vGPU hosts only)
# A KubeVirt VM's vGPU on a vGPU host GPU, labelled with the VMI whose firmware UUID is vm_id (the VM's UUID on KVM),
# its namespace and its virt-launcher pod (attribution/vgpus.py); the three are empty when no VMI was found.
GPU_VGPU_SCHEDULER = _gauge(
    "gpu_vgpu_scheduler_info", "vGPU scheduler policy of a vGPU host GPU (best_effort, equal_share, fixed_share or "
    "unknown); always 1.", GPU_LABELS + ("policy",),
)
GPU_VGPU_SCHEDULER_ARR = _gauge(
    "gpu_vgpu_scheduler_arr_info", "Adaptive round-robin mode of a vGPU host GPU's scheduler (enabled, disabled, "
    "default or unknown; nvmlDeviceGetVgpuSchedulerState arrMode); always 1.", GPU_LABELS + ("arr",),
)
GPU_VGPU_TIMESLICE = _gauge(
    "gpu_vgpu_scheduler_timeslice_seconds", "Time slice of a vGPU host GPU's scheduler, when the driver gives one.",
    GPU_LABELS, unit="seconds",
)
GPU_VGPU_RUNLIST_RUN = _counter(
    "gpu_vgpu_runlist_run_seconds_total", "GPU time a software runlist of the vGPU scheduler has run, as its newest "
    "scheduler log entry counts it (nvmlDeviceGetVgpuSchedulerLog timeRunTotal; read every few ticks).",
    GPU_LABELS + ("runlist",),
)
GPU_VGPU_RUNLIST_SLICES = _gauge(
    "gpu_vgpu_runlist_slices", "Time slices a software runlist of the vGPU scheduler ran in the window of the last "
    "scheduler log read (at most NVML_SCHEDULER_SW_MAX_LOG_ENTRIES over all runlists).", GPU_LABELS + ("runlist",),
)
VGPU_FB_USED = _gauge("vgpu_framebuffer_used_bytes", "Framebuffer in use by the vGPU.", VGPU_LABELS, unit="bytes")
VGPU_FB_TOTAL = _gauge("vgpu_framebuffer_total_bytes", "Framebuffer of the vGPU's type.", VGPU_LABELS, unit="bytes")
VGPU_SM_UTIL = _gauge("vgpu_sm_utilization_ratio", "SM utilisation of the vGPU.", VGPU_LABELS, unit="ratio")
VGPU_MEMORY_UTIL = _gauge(
    "vgpu_memory_utilization_ratio", "Memory controller utilisation of the vGPU.", VGPU_LABELS, unit="ratio"
)
VGPU_ENCODER_UTIL = _gauge("vgpu_encoder_utilization_ratio", "Encoder utilisation of the vGPU.", VGPU_LABELS,
                           unit="ratio")
VGPU_DECODER_UTIL = _gauge("vgpu_decoder_utilization_ratio", "Decoder utilisation of the vGPU.", VGPU_LABELS,
                           unit="ratio")

# ----------------------------------------------------------------------------------- per MIG instance
_MIG_HELP_OWNER = " Pod labels are set when exactly one pod owns the instance, empty otherwise."
MIG_MEMORY_TOTAL = _gauge(
    "mig_memory_total_bytes", "Memory of the MIG instance." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="bytes", attributed=True,
)
MIG_MEMORY_USED = _gauge(
    "mig_memory_used_bytes", "Memory in use on the MIG instance." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="bytes", attributed=True,
)
MIG_MEMORY_RESERVED = _gauge(
    "mig_memory_reserved_bytes", "Memory reserved by the driver on the MIG instance." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="bytes", attributed=True,
)
MIG_DRAM_BW = _gauge(
    "mig_dram_bandwidth_utilization_ratio", "DRAM bandwidth used by the GPU instance (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="ratio", attributed=True,
)
MIG_SM_UTIL = _gauge(
    "mig_sm_utilization_ratio", "SM activity of the compute instance (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="ratio", attributed=True,
)
MIG_SM_OCCUPANCY = _gauge(
    "mig_sm_occupancy_ratio", "SM warp occupancy of the compute instance (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="ratio", attributed=True,
)
MIG_PCIE_TX = _gauge(
    "mig_pcie_tx_bytes_per_second", "PCIe transmit throughput of the GPU instance (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="bytes_per_second", attributed=True,
)
MIG_PCIE_RX = _gauge(
    "mig_pcie_rx_bytes_per_second", "PCIe receive throughput of the GPU instance (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="bytes_per_second", attributed=True,
)
MIG_CONTEXT_SWITCH_ACTIVE = _gauge(
    "mig_context_switch_active_ratio",
    "Share of the time the GPU instance's graphics engine spent switching between contexts (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="ratio", attributed=True,
)
MIG_CONTEXT_SWITCHES = _gauge(
    "mig_context_switches_per_second",
    "Context-switch requests per second of the GPU instance's graphics engine (GPM)." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, unit="per_second", attributed=True,
)
MIG_PROCESSES = _gauge(
    "mig_processes", "Compute processes on the MIG instance." + _MIG_HELP_OWNER,
    MIG_LABELS + POD_LABELS, attributed=True,
)

# --------------------------------------------------------------------------------------------- per pod
_POD_GPU_LABELS = GPU_LABELS + ("mig_uuid",) + POD_LABELS
_POD_HELP = " Summed over the pod's own processes; empty pod labels collect processes no pod owns."
POD_MEMORY_USED = _gauge(
    "pod_gpu_memory_used_bytes", "GPU memory used by the pod's processes." + _POD_HELP,
    _POD_GPU_LABELS, unit="bytes", attributed=True,
)
POD_SM_UTIL = _gauge(
    "pod_sm_utilization_ratio", "SM utilization of the pod's processes (time-sliced GPUs)." + _POD_HELP,
    _POD_GPU_LABELS, unit="ratio", attributed=True,
)
POD_MEMORY_UTIL = _gauge(
    "pod_memory_utilization_ratio", "Memory-controller utilization of the pod's processes." + _POD_HELP,
    _POD_GPU_LABELS, unit="ratio", attributed=True,
)
POD_INFO = _gauge(
    "pod_info", "Pods known to the agent on this node; always 1. Priority lives here, not on every series.",
    ("node", "namespace", "pod", "uid", "priority_class", "qos_class", "priority"), attributed=True,
)
DEVICE_CLAIM = _gauge(
    "device_claim_info",
    "Devices pods got through a Dynamic Resource Allocation ResourceClaim; always 1. Join on the device and pod "
    "labels for the claim (the pod labels of the other series are the same).",
    _POD_GPU_LABELS + ("claim_namespace", "claim_name"), attributed=True,
)

# ------------------------------------------------------------------------------------- faults, findings
XID_ERRORS = _counter(
    "xid_errors_total", "Xid events received since the agent started.",
    GPU_LABELS + ("gpu_instance", "xid"),
)
XID_LAST_SEEN = _gauge(
    "xid_last_seen_timestamp_seconds", "When the Xid was last received (Unix time).",
    GPU_LABELS + ("gpu_instance", "xid"), unit="seconds",
)
FINDINGS = _gauge(
    "findings", "Active findings, one count per victim; gpu_uuid/mig_uuid empty when no single device is meant.",
    ("node", "kind", "severity", "resource", "victim_namespace", "victim_pod", "culprit_namespace", "culprit_pod",
     "gpu_uuid", "mig_uuid"),
)

# ------------------------------------------------------------------------------------------- the agent
EVICTIONS = _counter(
    "evictions_total", "Eviction decisions and attempts by result.", ("node", "result", "reason", "namespace")
)
ERRORS = _counter(
    "errors_total",
    "Errors by stage and kind; the stage degraded but the agent kept running.",
    ("node", "stage", "error"),
)
STAGE_DURATION = _gauge(
    "stage_duration_seconds", "Duration of the pipeline stage in the latest cycle.", ("node", "stage"), unit="seconds"
)
STAGE_SUCCESS = _gauge("stage_success", "1 when the pipeline stage succeeded in the latest cycle.", ("node", "stage"))
BUILD_INFO = _gauge("build_info", "Agent build; always 1.", ("node", "version", "python", "driver_version"))
MODE = _gauge("mode", "1 for the agent's current action mode, 0 for the others.", ("node", "mode"))
EVICTIONS_PAUSED = _gauge("evictions_paused", "1 while the kill switch pauses evictions.", ("node",))
KILL_SWITCH_KNOWN = _gauge(
    "kill_switch_known", "1 once the kill switch was read and its last read is fresh; 0 means no eviction is sent.",
    ("node",),
)
READY = _gauge("ready", "1 once the first full sample is in.", ("node",))
READINGS_REJECTED = _counter(
    "readings_rejected_total", "Readings the plausibility gate refused (no GPU can produce them), by check.",
    ("node", "check"),
)
DEVICES_QUARANTINED = _gauge(
    "devices_quarantined", "GPU and MIG devices detection does not judge this tick (recent implausible reading).",
    ("node",),
)
POLICY_RELOADS = _counter("policy_reloads_total", "Policy file reloads by result.", ("node", "result"))
MQTT_PUBLISHED = _counter("mqtt_messages_published_total", "Events the MQTT broker acknowledged.", ("node",))
MQTT_DROPPED = _counter(
    "mqtt_messages_dropped_total", "Events dropped: queue full while the broker was away, or retries spent.", ("node",)
)
MQTT_CONNECT_FAILURES = _counter("mqtt_connect_failures_total", "Failed connections to the MQTT broker.", ("node",))
MQTT_CONNECTED = _gauge("mqtt_connected", "1 while the MQTT event stream is connected.", ("node",))
FLIGHT_BYTES = _counter(
    "flight_recorder_written_bytes_total", "Bytes the flight recorder wrote to disk (compressed).", ("node",)
)
FLIGHT_TICKS = _counter("flight_recorder_ticks_total", "Ticks the flight recorder wrote.", ("node",))
FLIGHT_DROPPED = _counter(
    "flight_recorder_dropped_ticks_total", "Ticks not recorded because of a disk error (full, deleted, read-only).",
    ("node",),
)
FLIGHT_DELETED = _counter(
    "flight_recorder_deleted_segments_total", "Segments deleted by rotation (max_bytes or max_age_seconds).", ("node",)
)
FLIGHT_SEGMENTS = _gauge("flight_recorder_segments", "Flight recorder segments on disk.", ("node",))
ATTRIBUTION_HEALTHY = _gauge(
    "attribution_healthy", "1 when pods could be attributed this cycle (kubelet and API read).", ("node",)
)
ATTRIBUTION_SOURCE_UP = _gauge(
    "attribution_source_up", "1 when the attribution source answered this cycle.", ("node", "source")
)
CLAIMED_DEVICES_HELD_BACK = _gauge(
    "claimed_devices_held_back",
    "Devices allocated through a DRA ResourceClaim that no ResourceSlice names an NVML UUID for yet; their processes "
    "are held back (not attributed, never unauthorized).",
    ("node",),
)
LAST_SAMPLE = _gauge(
    "last_sample_timestamp_seconds", "When the latest NVML sample was taken (Unix time).", ("node",), unit="seconds"
)

# Every FamilySpec defined above, in definition order: the order families appear in a scrape.
ALL_FAMILIES: tuple[FamilySpec, ...] = tuple(v for v in list(globals().values()) if isinstance(v, FamilySpec))
