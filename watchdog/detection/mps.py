"""MPS as what it is: clients with a fixed slice of the SMs and of the memory, sharing L2 and DRAM bandwidth.

Pure (no I/O). With the device plugin's MPS sharing (``sharing.mps``) every client runs with an active-thread
percentage of 100/replicas and a pinned device-memory limit of the GPU's memory / replicas (NVIDIA
k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go; model/sharing.py). SM time is then not time-sliced (one
context, the MPS server's, holds every client) and no client can take another's SMs, so the time-slice domain's
question — did a neighbour take my share? — does not arise. What the clients still share is the L2 and the DRAM
bandwidth: a client slowed while the GPU's DRAM bandwidth (GPM DRAM_BW_UTIL, whole GPU) is saturated is the
interference MPS leaves open (the higher of GPM's DRAM bandwidth and ``utilization.memory``). Its victim signal is the client's SM activity against its own slice (a memory-bound
kernel starved of bandwidth leaves its SMs waiting); a culprit is named only from a neighbour's measured share of
the memory controller (``nvmlDeviceGetProcessUtilization`` memUtil), else the victim is reported with culprit
unknown (detection/blind.py).

A GPU counts as MPS-limited when the plugin's sharing says ``mps`` (GFD label, policy) or, with the strategy
unknown, when NVML lists any of its processes through the MPS call (``ProcessSample.mode``). A GPU whose clients
run under MPS without the plugin's limits (replicas unknown) stays a time-sliced domain with the scheduler learned
(detection/scheduler_model.py): MPS without limits shares SMs in proportion to demand.
"""

from __future__ import annotations

from watchdog.detection.domain_types import Device, Domain, DomainKind
from watchdog.model import Attribution, DeviceSharing, GpuSample, ProcessSample


def mps_limits(gpu: GpuSample, processes: tuple[ProcessSample, ...], attribution: Attribution) -> DeviceSharing | None:
    """The plugin's MPS limits on ``gpu``, or None when its clients are not known to run under them."""
    sharing = attribution.sharing.get(gpu.uuid) if attribution.sharing else None
    if sharing is None or sharing.replicas < 2 or gpu.mig_enabled:
        return None
    if sharing.strategy == "mps":
        return sharing
    if sharing.strategy == "unknown" and any("mps" in process.mode for process in processes):
        return sharing
    return None


def mps_domain(device: Device) -> Domain | None:
    """The DRAM-bandwidth domain of an MPS-limited GPU's clients; None with fewer than two pods on it."""
    limits = device.mps
    if limits is None or len(device.pods) < 2:
        return None
    gpu = device.gpu
    slice_ = limits.thread_share
    # GPM's DRAM bandwidth covers the interval since its previous sample and utilization.memory the driver's last
    # sample period: at an onset one of them lags a tick behind the clients' own samples, so the higher one counts.
    readings = [reading for reading in (gpu.dram_bw_util, gpu.memory_util) if reading is not None]
    busy = max(readings) if readings else None
    own: dict[str, float | None] = {}
    for ref in device.pods:
        sm = device.pod_sm.get(ref.key)
        own[ref.key] = None if sm is None else min(1.0, sm / slice_)
    return Domain(
        key=f"mps/{gpu.uuid}",
        kind=DomainKind.MPS,
        resource="dram",
        gpu=gpu,
        pods=device.pods,
        # The culprit search reads each client's share of the memory controller; the victim's signal its SMs.
        activity={ref.key: device.pod_dram.get(ref.key) for ref in device.pods},
        share={ref.key: slice_ for ref in device.pods},
        busy=busy,
        victim_activity=own,
    )
