"""The per-node dashboard: every GPU and MIG instance of the selected nodes, and who is on them.

MIG-correct by construction. NVML has no whole-GPU utilisation in MIG mode (nvmlDeviceGetUtilizationRates returns
NOT_SUPPORTED, so the agent leaves the series absent, docs/metrics.md), and dcgm-exporter's whole-GPU GPU_UTIL
panel shows an empty or misleading graph on MIG nodes. Here utilisation is shown per MIG instance (GPM per GI/CI)
for MIG GPUs, and the whole-GPU utilisation panels are joined with `gpu_info{mig_mode="disabled"}` so they can
never show a MIG GPU. Board-level signals (clocks, power, temperature, PCIe) are shown per GPU because MIG does
not isolate them: every instance of a board shares its power budget and PCIe link (arXiv 2508.20274).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboard_panels import (
    NAMESPACE,
    NODE,
    PanelIds,
    Query,
    dashboard,
    events_in,
    label_table,
    single_stat,
    time_series,
)

UID = "gpu-watchdog-node"
# Keeps a whole-GPU series only for GPUs that are not in MIG mode (gpu_info is always 1, so values are unchanged).
NOT_MIG = f'* on (node, gpu_uuid) group_left () gpu_watchdog_gpu_info{{{NODE}, mig_mode="disabled"}}'
MIG_SERIES = f"{{{NODE}, {NAMESPACE}}}"
MIG_LEGEND = "{{node}} GPU {{gpu}} GI {{gpu_instance}} CI {{compute_instance}} {{profile}} {{namespace}}/{{pod}}"
GPU_LEGEND = "{{node}} GPU {{gpu}}"


def _overview(ids: PanelIds) -> list:
    return [
        single_stat(ids, span=6, title="GPUs", description="GPUs the agents see.",
                    query=Query(f"count(gpu_watchdog_gpu_info{{{NODE}}})")),
        single_stat(ids, span=6, title="GPUs in MIG mode", description="GPUs partitioned into MIG instances.",
                    query=Query(f'count(gpu_watchdog_gpu_info{{{NODE}, mig_mode="enabled"}}) or vector(0)')),
        single_stat(ids, span=6, title="Lost GPUs now",
                    description="GPUs NVML reports lost (GpuIsLost): reset or drain.",
                    query=Query(f"sum(gpu_watchdog_gpu_lost{{{NODE}}}) or vector(0)"), red_at=1),
        single_stat(ids, span=6, title="Agents not ready",
                    description="Agents without a first full sample (/readyz 503).",
                    query=Query(f"count(gpu_watchdog_ready{{{NODE}}} == 0) or vector(0)"), red_at=1),
        label_table(ids, title="GPU inventory", description="Model and MIG mode of every GPU.", span=16,
                    height=6, query=Query(f"gpu_watchdog_gpu_info{{{NODE}}}")),
        time_series(ids, title="Lost GPUs over time", description="1 while NVML reports the GPU lost; its other "
                    "series are then absent.", span=8, height=6,
                    queries=(Query(f"gpu_watchdog_gpu_lost{{{NODE}}} == 1", GPU_LEGEND),)),
        time_series(ids, title="Readings refused by the plausibility gate", span=16, height=6,
                    description="Readings no GPU can produce (a duplicated UUID, memory used over the total, an Xid "
                    "on an absent GPU …), refused where they entered and never acted on, per check over 5 minutes "
                    "(docs/detection.md, Plausibility gate).",
                    queries=(Query(f"sum by (node, check) (increase(gpu_watchdog_readings_rejected_total{{{NODE}}}"
                                   "[5m]))", "{{node}} {{check}}"),)),
        single_stat(ids, span=8, title="Devices in quarantine", description="GPU and MIG devices detection "
                    "leaves out until they read plausibly again (GpuReadingsImplausible after 10 minutes).",
                    query=Query(f"sum(gpu_watchdog_devices_quarantined{{{NODE}}}) or vector(0)"), red_at=1),
    ]


def _mig_instances(ids: PanelIds) -> list:
    return [
        time_series(ids, title="MIG memory used", unit="bytes", description="Framebuffer in use per MIG "
                    "instance; pod labels are set when exactly one pod owns the instance.",
                    queries=(Query(f"gpu_watchdog_mig_memory_used_bytes{MIG_SERIES}", MIG_LEGEND),)),
        time_series(ids, title="MIG memory used / total", ratio=True, description="Share of the instance's "
                    "memory in use; the MigMemoryNearFull alert fires above 95 % for 10 minutes.",
                    queries=(Query(f"gpu_watchdog_mig_memory_used_bytes{MIG_SERIES} / "
                                   f"gpu_watchdog_mig_memory_total_bytes{MIG_SERIES}", MIG_LEGEND),)),
        label_table(ids, title="MIG instances and owners", unit="bytes", span=24, description="Every MIG "
                    "instance with its profile, owning pod and memory size.",
                    query=Query(f"gpu_watchdog_mig_memory_total_bytes{MIG_SERIES}")),
        time_series(ids, title="MIG DRAM bandwidth", ratio=True, span=8, description="DRAM bandwidth used by "
                    "each GPU instance, share of its maximum (GPM DRAM_BW_UTIL).",
                    queries=(Query(f"gpu_watchdog_mig_dram_bandwidth_utilization_ratio{MIG_SERIES}",
                                   MIG_LEGEND),)),
        time_series(ids, title="MIG SM activity", ratio=True, span=8, description="SM activity per compute "
                    "instance (GPM SM_UTIL); this, not a whole-GPU figure, is a MIG tenant's utilisation.",
                    queries=(Query(f"gpu_watchdog_mig_sm_utilization_ratio{MIG_SERIES}", MIG_LEGEND),)),
        time_series(ids, title="MIG SM occupancy", ratio=True, span=8, description="Warp occupancy per compute "
                    "instance (GPM SM_OCCUPANCY).",
                    queries=(Query(f"gpu_watchdog_mig_sm_occupancy_ratio{MIG_SERIES}", MIG_LEGEND),)),
    ]


def _whole_gpus(ids: PanelIds) -> list:
    return [
        time_series(ids, title="GPU SM activity (GPUs not in MIG mode)", ratio=True, span=8,
                    description="GPM SM_UTIL of whole GPUs; MIG GPUs are excluded (see the MIG rows).",
                    queries=(Query(f"gpu_watchdog_gpu_sm_utilization_ratio{{{NODE}}} {NOT_MIG}", GPU_LEGEND),)),
        time_series(ids, title="GPU kernel time (GPUs not in MIG mode)", ratio=True, span=8,
                    description="nvmlDeviceGetUtilizationRates: share of time a kernel ran. Not supported in "
                    "MIG mode.", queries=(Query(f"gpu_watchdog_gpu_utilization_ratio{{{NODE}}} {NOT_MIG}",
                                                GPU_LEGEND),)),
        time_series(ids, title="GPU DRAM bandwidth (GPUs not in MIG mode)", ratio=True, span=8,
                    description="GPM DRAM_BW_UTIL of whole GPUs.",
                    queries=(Query(f"gpu_watchdog_gpu_dram_bandwidth_utilization_ratio{{{NODE}}} {NOT_MIG}",
                                   GPU_LEGEND),)),
        time_series(ids, title="GPU memory used / total", ratio=True, description="Whole board framebuffer, "
                    "MIG instances included.",
                    queries=(Query(f"gpu_watchdog_gpu_memory_used_bytes{{{NODE}}} / "
                                   f"gpu_watchdog_gpu_memory_total_bytes{{{NODE}}}", GPU_LEGEND),)),
        time_series(ids, title="Compute processes", description="Processes per GPU, MIG instances included.",
                    queries=(Query(f"gpu_watchdog_gpu_processes{{{NODE}}}", GPU_LEGEND),)),
    ]


def _time_sliced_pods(ids: PanelIds) -> list:
    pods = f'{{{NODE}, {NAMESPACE}, mig_uuid=""}}'
    legend = "{{namespace}}/{{pod}} on {{node}} GPU {{gpu}}"
    return [
        time_series(ids, title="Pod SM share (time-sliced GPUs)", ratio=True, span=8, description="Each pod's "
                    "own processes (nvmlDeviceGetProcessUtilization); empty pod = processes no pod owns.",
                    queries=(Query(f"gpu_watchdog_pod_sm_utilization_ratio{pods}", legend),)),
        time_series(ids, title="Pod memory-controller share (time-sliced GPUs)", ratio=True, span=8,
                    description="Memory-controller utilisation of each pod's processes.",
                    queries=(Query(f"gpu_watchdog_pod_memory_utilization_ratio{pods}", legend),)),
        time_series(ids, title="Pod GPU memory used", unit="bytes", span=8, description="Sum over each pod's "
                    "processes, per GPU or MIG instance.",
                    queries=(Query(f"gpu_watchdog_pod_gpu_memory_used_bytes{{{NODE}, {NAMESPACE}}}",
                                   "{{namespace}}/{{pod}} on {{node}} GPU {{gpu}} {{mig_uuid}}"),)),
        time_series(ids, title="Context switching", unit="percentunit", right_unit="reqps", span=24,
                    description="Left: share of the time the graphics engine spent switching between contexts, "
                    "time no pod got (GPM GR0_CTXSW_ACTIVE_PCT); right: context switches per second "
                    "(GR0_CTXSW_REQUESTS). Per whole GPU (not in MIG mode) and per GPU instance; it grows with "
                    "the number of busy contexts sharing the engine. Empty with drivers before NVML 12.9.",
                    queries=(Query(f"gpu_watchdog_gpu_context_switch_active_ratio{{{NODE}}}",
                                   GPU_LEGEND + " switching"),
                             Query(f"gpu_watchdog_mig_context_switch_active_ratio{MIG_SERIES}",
                                   MIG_LEGEND + " switching")),
                    right=(Query(f"gpu_watchdog_gpu_context_switches_per_second{{{NODE}}}",
                                 GPU_LEGEND + " switches/s"),
                           Query(f"gpu_watchdog_mig_context_switches_per_second{MIG_SERIES}",
                                 MIG_LEGEND + " switches/s"))),
    ]


def _vgpus(ids: PanelIds) -> list:
    vgpus = f"{{{NODE}, {NAMESPACE}}}"
    legend = "{{namespace}}/{{vmi}} ({{vgpu_type}}) on {{node}} GPU {{gpu}}"
    return [
        time_series(ids, title="vGPU framebuffer used / total", ratio=True, span=8, description="Each KubeVirt "
                    "VM's vGPU: framebuffer in use over its type's framebuffer (fixed by the type; past it only "
                    "the VM's own allocations fail; alert VgpuNearFramebuffer above 95 %). Empty vmi: no VMI has "
                    "the VM id.",
                    queries=(Query(f"gpu_watchdog_vgpu_framebuffer_used_bytes{vgpus}"
                                   f" / gpu_watchdog_vgpu_framebuffer_total_bytes{vgpus}", legend),)),
        time_series(ids, title="vGPU SM utilisation", ratio=True, span=8, description="Each vGPU's smUtil "
                    "(NVML's vGPU utilisation): on a time-sliced host, the share of the GPU's time its VM got, "
                    "which the scheduler policy bounds (best_effort: none; equal_share: 1/N; fixed_share: 1/max of "
                    "the type); on a MIG-backed vGPU, how busy its GPU instance was.",
                    queries=(Query(f"gpu_watchdog_vgpu_sm_utilization_ratio{vgpus}", legend),)),
        time_series(ids, title="vGPU memory-controller utilisation", ratio=True, span=8,
                    description="Each vGPU's memUtil: share of the time its memory was read or written.",
                    queries=(Query(f"gpu_watchdog_vgpu_memory_utilization_ratio{vgpus}", legend),)),
        label_table(ids, title="vGPU scheduler policy", span=4, description="Each vGPU host GPU's scheduler "
                    "policy (nvmlDeviceGetVgpuSchedulerState): best_effort, equal_share or fixed_share.",
                    query=Query(f"gpu_watchdog_gpu_vgpu_scheduler_info{{{NODE}}}")),
        label_table(ids, title="vGPU adaptive round-robin", span=4, description="Each vGPU host GPU's adaptive "
                    "round-robin mode (nvmlDeviceGetVgpuSchedulerState arrMode).",
                    query=Query(f"gpu_watchdog_gpu_vgpu_scheduler_arr_info{{{NODE}}}")),
        label_table(ids, title="vGPU scheduler time slice", unit="s", span=4, description="Each vGPU host GPU's "
                    "scheduler time slice; none on a host of MIG-backed vGPUs.",
                    query=Query(f"gpu_watchdog_gpu_vgpu_scheduler_timeslice_seconds{{{NODE}}}")),
        time_series(ids, title="vGPU scheduler runlists: GPU time run", unit="percentunit", span=12,
                    description="Per software runlist of the vGPU scheduler, the share of the GPU's time it ran "
                    "(rate of nvmlDeviceGetVgpuSchedulerLog's timeRunTotal, read every few ticks). NVML does not "
                    "say which vGPU a runlist serves.",
                    queries=(Query(f"rate(gpu_watchdog_gpu_vgpu_runlist_run_seconds_total{{{NODE}}}"
                                   "[$__rate_interval])", GPU_LEGEND + " runlist {{runlist}}"),)),
    ]


def _board(ids: PanelIds) -> list:
    return [
        time_series(ids, title="SM clock vs max", unit="hertz", description="Current and maximum SM clock; a gap "
                    "with a power/thermal reason below means the board is holding every tenant back.",
                    queries=(Query(f"gpu_watchdog_gpu_sm_clock_hertz{{{NODE}}}", GPU_LEGEND + " current"),
                             Query(f"gpu_watchdog_gpu_sm_clock_max_hertz{{{NODE}}}", GPU_LEGEND + " max"))),
        time_series(ids, title="Clock event reasons", bars=True, description="Named nvmlClocksEventReason bits "
                    "that hold the clocks down (GpuIdle left out).",
                    queries=(Query(f'gpu_watchdog_gpu_throttled{{{NODE}, reason!="gpu_idle"}} == 1',
                                   GPU_LEGEND + " {{reason}}"),)),
        time_series(ids, title="Power vs limit", unit="watt", description="Board power draw and its enforced "
                    "limit; MIG instances share this budget.",
                    queries=(Query(f"gpu_watchdog_gpu_power_watts{{{NODE}}}", GPU_LEGEND + " draw"),
                             Query(f"gpu_watchdog_gpu_power_limit_watts{{{NODE}}}", GPU_LEGEND + " limit"))),
        time_series(ids, title="Temperature", unit="celsius", description="GPU core temperature.",
                    queries=(Query(f"gpu_watchdog_gpu_temperature_celsius{{{NODE}}}", GPU_LEGEND),)),
        time_series(ids, title="PCIe throughput", unit="Bps", span=24, description="Whole GPU: MIG does not "
                    "isolate PCIe, so this is shared by all instances of the board.",
                    queries=(Query(f"gpu_watchdog_gpu_pcie_tx_bytes_per_second{{{NODE}}}", GPU_LEGEND + " tx"),
                             Query(f"gpu_watchdog_gpu_pcie_rx_bytes_per_second{{{NODE}}}", GPU_LEGEND + " rx"))),
    ]


def _xids(ids: PanelIds) -> list:
    xids = f"gpu_watchdog_xid_errors_total{{{NODE}}}"
    return [
        label_table(ids, title="Xid events in the time range", description="Xids within the dashboard "
                    "range per GPU instance (empty gpu_instance: NVML could not attribute it). A series that "
                    "first appears inside the range counts from its first sample.",
                    query=Query(f"sum by (node, gpu, gpu_instance, xid) ({events_in(xids, '$__range')}) > 0")),
        time_series(ids, title="Xid events", bars=True, description="Xid events per interval, per GPU "
                    "instance and Xid code.",
                    queries=(Query(f"sum by (node, gpu, gpu_instance, xid) ({events_in(xids, '$__rate_interval')})"
                                   " > 0", "{{node}} GPU {{gpu}} GI {{gpu_instance}} Xid {{xid}}"),)),
        label_table(ids, title="Xids since agent start, last seen", unit="dateTimeAsIso", span=24,
                    description="When each Xid was last received (agent clock).",
                    query=Query(f"gpu_watchdog_xid_last_seen_timestamp_seconds{{{NODE}}} * 1000")),
    ]


def build_node_dashboard() -> Dashboard:
    """The node dashboard builder, rows in reading order: overview, MIG, whole GPUs, pods, vGPUs, board, Xids."""
    return dashboard(
        title="gpu-watchdog / Node GPUs and MIG instances",
        uid=UID,
        description="GPUs and MIG instances per node as gpu-watchdog samples them, with the pods on them.",
        tags=["gpu-watchdog", "gpu", "mig"],
        sections=(
            ("Overview", _overview),
            ("MIG instances (per GPU instance / compute instance)", _mig_instances),
            ("Whole GPUs", _whole_gpus),
            ("Time-sliced and shared GPUs: per pod", _time_sliced_pods),
            ("vGPUs (KubeVirt VMs on vGPU host GPUs)", _vgpus),
            ("Board: clocks, power, temperature, PCIe (shared by all MIG instances)", _board),
            ("Xid faults", _xids),
        ),
    )
