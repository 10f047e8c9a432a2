"""The GPU's PCIe link as a contention domain of its MIG instances: the one path MIG does not partition.

Pure (no I/O). MIG gives each GPU instance its own SMs, L2 and DRAM, but every instance's host↔device copies cross
the GPU's one link (NVIDIA MIG user guide; arXiv 2508.20274): one tenant's bulk copies can starve a neighbour's
input pipeline, whose SMs then idle in its own, otherwise isolated, instance (a MIG-backed vGPU stands for its GI:
detection/vgpu.py). So the domain judges

* a victim by its own SM activity (``Domain.victim_activity``: the input it waits for shows as SMs it leaves idle),
  and only a pod that moves data over the link at all (``MIN_VICTIM_LINK_USE``) can be one,
* a culprit by its GPU instance's share of the link (GPM PCIE_TX/RX_PER_SEC per GI through nvmlGpmMigSampleGet,
  as nvidia_gpu_exporter reads them; every CI of a GI reports the GI's rate, counted once),
* contention by the busier direction's throughput over the link's capacity (the link is full duplex), the
  capacity coming from the generation and width it is trained at now (sampling/pcie_link.py).

Where the driver gives PCIe for the whole GPU only (DCGM samples it so), the link's load is still known from
nvmlDeviceGetPcieThroughput but nobody's share is: a degraded victim is then reported with culprit unknown
(detection/blind.py), never blamed on a guess.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from watchdog.detection.domain_types import Device, Domain, DomainKind
from watchdog.model import GpuSample, PodRef

# A pod whose instance moves less than this share of the link over it has no input pipeline on it to starve: its SMs
# idling is its own affair, whatever the link does (1 % of a Gen5 x16 link is ~630 MB/s).
MIN_VICTIM_LINK_USE = 0.01


def pcie_domain(
    gpu: GpuSample,
    devices: Sequence[Device],
    *,
    pods: tuple[PodRef, ...],
    sm_activity: Mapping[str, float | None],
) -> Domain | None:
    """The link of a MIG-enabled GPU shared by ``pods``; ``sm_activity`` is the power domain's (one per GPU).

    None without the link's capacity: "nearly full" cannot be judged, so the domain is not built at all.
    """
    capacity = gpu.pcie_link_bytes_per_second
    if not capacity:
        return None
    per_gi: dict[int, float] = {}
    tx = rx = 0.0
    for device in devices:
        mig = device.mig if device.vgpu_gi is None else device.vgpu_gi  # a MIG-backed vGPU reads its GI's rates
        if mig is None or mig.pcie_tx_bytes_per_second is None or mig.pcie_rx_bytes_per_second is None:
            continue
        if mig.gpu_instance in per_gi:
            continue  # another CI of the same GI: the same numbers again
        tx += mig.pcie_tx_bytes_per_second
        rx += mig.pcie_rx_bytes_per_second
        per_gi[mig.gpu_instance] = max(mig.pcie_tx_bytes_per_second, mig.pcie_rx_bytes_per_second) / capacity
    use: dict[str, float | None] = {ref.key: None for ref in pods}
    counted: set[tuple[str, int]] = set()  # (pod, GI): a pod on two CIs of one GI has the GI's rate once
    owned: set[int] = set()
    for device in devices:
        gi = device.mig.gpu_instance if device.mig is not None else device.vgpu.gpu_instance if device.vgpu else None
        rate = per_gi.get(gi) if gi is not None else None
        if rate is None:
            continue
        for ref in device.pods:
            owned.add(gi)  # type: ignore[arg-type]
            if (ref.key, gi) not in counted:
                counted.add((ref.key, gi))  # type: ignore[arg-type]
                use[ref.key] = min(1.0, (use[ref.key] or 0.0) + rate)
    # A GI nobody was given that still copies (a host process) loads the link but is nobody's share.
    unowned = sum(rate for gi, rate in per_gi.items() if gi not in owned)
    if not per_gi:
        # No share per GI: the link's load from the whole-GPU counters (a 20 ms window, nvml.h), shares unknown.
        whole_tx, whole_rx = gpu.pcie_tx_bytes_per_second, gpu.pcie_rx_bytes_per_second
        tx, rx = (whole_tx, whole_rx) if whole_tx is not None and whole_rx is not None else (None, None)
    return Domain(
        key=f"gpu/{gpu.uuid}/pcie",
        kind=DomainKind.PCIE,
        resource="pcie",
        gpu=gpu,
        pods=pods,
        activity=use,
        share={ref.key: 1.0 for ref in pods},  # no instance owns a part of the link: each may use all of it
        busy=None if tx is None or rx is None else max(tx, rx) / capacity,
        unattributed=unowned if per_gi else None,
        victim_activity={
            key: sm if (link := use.get(key)) is None or link >= MIN_VICTIM_LINK_USE else None
            for key, sm in sm_activity.items()
        },
    )
