"""Series about the hardware: whole GPUs, MIG instances, and each pod's own share of a shared GPU.

Two user complaints against dcgm-exporter shape this module: on time-sliced/MPS GPUs every pod got a *copy* of the
device's values, and MIG instances lacked memory series (dcgm-exporter issues #380 and #512, H100 MIG). Here a
pod's series on a shared GPU are summed from that pod's own processes (NVML per-process memory and
nvmlDeviceGetProcessUtilization), and every MIG instance has its own memory and GPM series. ``None`` in a
sample means NVML could not tell, so the series is left out rather than written as 0.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable

from watchdog.model import GpuSample, NodeSample, PodUsage
from watchdog.publishing import catalogue as c
from watchdog.publishing.series import FamilyBook, Owners, Sample

MHZ_TO_HERTZ = 1e6

# nvmlClocksEventReason* bits (nvml.h, nvmlClocksEventReason* defines). The raw mask is exported as well, so
# bits not named here (BoardLimit, Reliability on older drivers) stay visible.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)

_GPU_VALUES: tuple[tuple[c.FamilySpec, str, float], ...] = (
    (c.GPU_MEMORY_TOTAL, "memory_total_bytes", 1.0),
    (c.GPU_MEMORY_USED, "memory_used_bytes", 1.0),
    (c.GPU_MEMORY_RESERVED, "memory_reserved_bytes", 1.0),
    (c.GPU_UTIL, "gpu_util", 1.0),
    (c.GPU_MEMORY_UTIL, "memory_util", 1.0),
    (c.GPU_DRAM_BW, "dram_bw_util", 1.0),
    (c.GPU_SM_UTIL, "sm_util", 1.0),
    (c.GPU_POWER, "power_watts", 1.0),
    (c.GPU_POWER_LIMIT, "power_limit_watts", 1.0),
    (c.GPU_TEMPERATURE, "temperature_celsius", 1.0),
    (c.GPU_SM_CLOCK, "sm_clock_mhz", MHZ_TO_HERTZ),
    (c.GPU_SM_CLOCK_MAX, "sm_clock_max_mhz", MHZ_TO_HERTZ),
    (c.GPU_CLOCK_EVENT_REASONS, "clock_event_reasons", 1.0),
    (c.GPU_PCIE_TX, "pcie_tx_bytes_per_second", 1.0),
    (c.GPU_PCIE_RX, "pcie_rx_bytes_per_second", 1.0),
    (c.GPU_PCIE_LINK, "pcie_link_bytes_per_second", 1.0),
    (c.GPU_CONTEXT_SWITCH_ACTIVE, "ctxsw_active", 1.0),
    (c.GPU_CONTEXT_SWITCHES, "ctxsw_per_second", 1.0),
)

_MIG_VALUES: tuple[tuple[c.FamilySpec, str], ...] = (
    (c.MIG_MEMORY_TOTAL, "memory_total_bytes"),
    (c.MIG_MEMORY_USED, "memory_used_bytes"),
    (c.MIG_MEMORY_RESERVED, "memory_reserved_bytes"),
    (c.MIG_DRAM_BW, "dram_bw_util"),
    (c.MIG_SM_UTIL, "sm_util"),
    (c.MIG_SM_OCCUPANCY, "sm_occupancy"),
    (c.MIG_PCIE_TX, "pcie_tx_bytes_per_second"),
    (c.MIG_PCIE_RX, "pcie_rx_bytes_per_second"),
    (c.MIG_CONTEXT_SWITCH_ACTIVE, "ctxsw_active"),
    (c.MIG_CONTEXT_SWITCHES, "ctxsw_per_second"),
)


_VGPU_VALUES: tuple[tuple[c.FamilySpec, str], ...] = (
    (c.VGPU_FB_USED, "fb_used_bytes"),
    (c.VGPU_FB_TOTAL, "fb_total_bytes"),
    (c.VGPU_SM_UTIL, "sm_util"),
    (c.VGPU_MEMORY_UTIL, "memory_util"),
    (c.VGPU_ENCODER_UTIL, "encoder_util"),
    (c.VGPU_DECODER_UTIL, "decoder_util"),
)
_VGPU_READ = attrgetter(*(attribute for _, attribute in _VGPU_VALUES))


# A GPU instance's numbers, which every compute instance of a split GI repeats (nvmlDeviceGetMemoryInfo on a CI
# handle answers the GI's memory; GPM DRAM, PCIe and context switching are sampled per GI): on a split GI they name
# no single pod.
_GI_LEVEL = frozenset({c.MIG_MEMORY_TOTAL, c.MIG_MEMORY_USED, c.MIG_MEMORY_RESERVED, c.MIG_DRAM_BW, c.MIG_PCIE_TX,
                       c.MIG_PCIE_RX, c.MIG_CONTEXT_SWITCH_ACTIVE, c.MIG_CONTEXT_SWITCHES})
_MIG_GI_LEVEL = tuple(spec in _GI_LEVEL for spec, _ in _MIG_VALUES)

# One attrgetter per table reads every attribute of a sample in a single C call.
_GPU_READ = attrgetter(*(attribute for _, attribute, _ in _GPU_VALUES))
_MIG_READ = attrgetter(*(attribute for _, attribute in _MIG_VALUES))
_USAGE_READ = attrgetter("memory_bytes", "sm_util", "memory_util")

Append = Callable[[Sample], None]


def add_device_series(book: FamilyBook, *, sample: NodeSample, owners: Owners) -> None:
    """Fill the per-GPU, per-MIG and per-pod families from one NVML sample."""
    # Each family is looked up once per build, not once per series: hashing a FamilySpec (a frozen dataclass)
    # costs a tuple of its six fields every time, and this runs for ~700 series per cycle on a dense MIG node.
    # Samples are appended as Family.add would store them, (labels, value, created=None).
    gpu_appends = tuple(book[spec].samples.append for spec, _, _ in _GPU_VALUES)
    mig_appends = tuple(book[spec].samples.append for spec, _ in _MIG_VALUES)
    mig_processes = book[c.MIG_PROCESSES].samples.append
    share_appends = tuple(book[spec].samples.append for spec in (c.POD_MEMORY_USED, c.POD_SM_UTIL, c.POD_MEMORY_UTIL))
    node = sample.node
    usage = owners.usage(sample)
    for gpu in sample.gpus:
        base = (node, str(gpu.index), gpu.uuid)
        _add_gpu(book, gpu=gpu, base=base, appends=gpu_appends)
        if gpu.lost:
            continue
        split = _split_gpu_instances(gpu)
        for mig in gpu.instances:
            ident = base + (mig.uuid, str(mig.gpu_instance), str(mig.compute_instance), mig.profile)
            owner = owners.device_labels(mig.uuid)
            labels = ident + owner
            if mig.gpu_instance in split:  # the GI's memory once per CI must not read as each CI's pod's own
                shared = ident + ("",) * len(owner)
                for append, gi_level, value in zip(mig_appends, _MIG_GI_LEVEL, _MIG_READ(mig)):
                    if value is not None:
                        append((shared if gi_level else labels, value, None))
            else:
                for append, value in zip(mig_appends, _MIG_READ(mig)):
                    if value is not None:
                        append((labels, value, None))
            mig_processes((labels, len(mig.processes), None))
            _add_pod_shares(base=base + (mig.uuid,), users=usage.get(mig.uuid, ()), owners=owners,
                            appends=share_appends)
            _add_claims(book, base=base + (mig.uuid,), device_uuid=mig.uuid, owners=owners)
        _add_pod_shares(base=base + ("",), users=usage.get(gpu.uuid, ()), owners=owners, appends=share_appends)
        _add_claims(book, base=base + ("",), device_uuid=gpu.uuid, owners=owners)
        if gpu.vgpus or gpu.vgpu_scheduler is not None:
            _add_vgpus(book, gpu=gpu, base=base, owners=owners)


def _split_gpu_instances(gpu: GpuSample) -> frozenset[int]:
    """GI ids of the GPU that hold two or more compute instances (MIG devices)."""
    ids = [mig.gpu_instance for mig in gpu.instances]
    if len(ids) == len(set(ids)):
        return frozenset()
    return frozenset(gi for gi in ids if ids.count(gi) > 1)


def _add_gpu(book: FamilyBook, *, gpu: GpuSample, base: tuple[str, ...], appends: tuple[Append, ...]) -> None:
    book[c.GPU_INFO].add(base + (gpu.name, "enabled" if gpu.mig_enabled else "disabled"), 1)
    book[c.GPU_LOST].add(base, 1 if gpu.lost else 0)
    if gpu.lost:
        return
    for append, (_, _, scale), value in zip(appends, _GPU_VALUES, _GPU_READ(gpu)):
        if value is not None:
            append((base, value * scale if scale != 1.0 else value, None))
    mask = gpu.clock_event_reasons
    if mask is not None:
        throttled = book[c.GPU_THROTTLED]
        for reason, bit in CLOCK_EVENT_REASONS:
            throttled.add(base + (reason,), 1 if mask & bit else 0)
    processes = len(gpu.processes) + sum(len(mig.processes) for mig in gpu.instances)
    book[c.GPU_PROCESSES].add(base, processes)
    if processes:
        modes: dict[str, int] = {}
        for process in gpu.processes:
            modes[process.mode] = modes.get(process.mode, 0) + 1
        for mig in gpu.instances:
            for process in mig.processes:
                modes[process.mode] = modes.get(process.mode, 0) + 1
        by_mode = book[c.GPU_PROCESSES_BY_MODE]
        for mode, count in sorted(modes.items()):
            by_mode.add(base + (mode,), count)


def _add_vgpus(book: FamilyBook, *, gpu: GpuSample, base: tuple[str, ...], owners: Owners) -> None:
    """A vGPU host GPU's scheduler policy and its vGPUs' series (none on any other GPU), each labelled with the
    VMI that holds it and its virt-launcher pod, empty when attribution found none."""
    if gpu.vgpu_scheduler is not None or gpu.vgpus:
        # A host whose driver did not name its scheduler still gets the series, as "unknown": detection then judges
        # no VM's SM share there (detection/vgpu.py), and the dashboard and alerts can say so.
        book[c.GPU_VGPU_SCHEDULER].add(base + (gpu.vgpu_scheduler or "unknown",), 1)
    if gpu.vgpu_scheduler_arr is not None:
        book[c.GPU_VGPU_SCHEDULER_ARR].add(base + (gpu.vgpu_scheduler_arr,), 1)
    if gpu.vgpu_timeslice_seconds is not None:
        book[c.GPU_VGPU_TIMESLICE].add(base, gpu.vgpu_timeslice_seconds)
    for runlist in gpu.vgpu_runlists:  # NVML does not say which vGPU a runlist serves: labelled by its id only
        book[c.GPU_VGPU_RUNLIST_RUN].add(base + (str(runlist.runlist),), runlist.run_seconds)
        book[c.GPU_VGPU_RUNLIST_SLICES].add(base + (str(runlist.runlist),), runlist.slices)
    families = [book[spec] for spec, _ in _VGPU_VALUES]
    for vgpu in gpu.vgpus:
        owner = owners.attribution.vgpus.get(vgpu.uuid)
        vm = (owner.namespace, owner.pod.name if owner.pod else "", owner.vmi) if owner else ("", "", "")
        labels = base + (vgpu.uuid, vgpu.type_name, vgpu.vm_id) + vm
        for family, value in zip(families, _VGPU_READ(vgpu)):
            if value is not None:
                family.add(labels, value)


def _add_claims(book: FamilyBook, *, base: tuple[str, ...], device_uuid: str, owners: Owners) -> None:
    """One ``device_claim_info`` per (device, pod, container) that has the device through a DRA claim. An info
    series rather than two more labels on every pod series: adding labels would change every existing series'
    identity and break the queries built on them (the dcgm-exporter label-rename lesson)."""
    claims = owners.attribution.claims
    if not claims:
        return
    for ref in owners.attribution.devices.get(device_uuid, ()):
        claim = claims.get((device_uuid, ref.key))
        if claim is not None:
            pod = owners.pod_labels(ref)  # namespace, pod, container[, tenant]: the tenant label comes last
            book[c.DEVICE_CLAIM].add(base + pod[:3] + (claim.namespace, claim.name) + pod[3:], 1)


def _add_pod_shares(
    *, base: tuple[str, ...], users: tuple[PodUsage, ...], owners: Owners, appends: tuple[Append, ...]
) -> None:
    """One series per (device, pod, container): the sums attribution made of that pod's own processes, the same
    numbers detection judged. Only measured values: a pod with no per-process numbers gets no series."""
    for user in users:
        labels = base + owners.pod_labels(user.ref)
        for append, value in zip(appends, _USAGE_READ(user)):
            if value is not None:
                append((labels, value, None))
