"""The PCIe link's capacity from what NVML says it trained to: the denominator of "the link is nearly full".

MIG partitions SMs, L2 and DRAM but not the GPU's PCIe link, so the link is a contention domain for every
instance (detection/domains.py). Whether it is contended needs its capacity, which NVML gives only as the
generation and lane count the link runs at now (nvmlDeviceGetCurrPcieLinkGeneration / …Width, nvml.h). The
current, not the maximum: an idle link trains down to save power (ASPM) and back up under load, so a link judged
at its maximum while running at Gen1 would never look full.

Per-lane data rate per direction, after line encoding, from the PCI Express Base Specification (PCI-SIG):
Gen1 2.5 GT/s and Gen2 5 GT/s with 8b/10b; Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s with 128b/130b; Gen6 64 GT/s
PAM4 with 242/256-byte FLITs. TLP headers and flow control take a further 10–20 % in practice, which the
detection policy's ``pcie_saturation`` allows for.
"""

from __future__ import annotations

GIGA = 1e9
LANE_BYTES_PER_SECOND: dict[int, float] = {
    1: 2.5 * GIGA * 8 / 10 / 8,
    2: 5.0 * GIGA * 8 / 10 / 8,
    3: 8.0 * GIGA * 128 / 130 / 8,
    4: 16.0 * GIGA * 128 / 130 / 8,
    5: 32.0 * GIGA * 128 / 130 / 8,
    6: 64.0 * GIGA * 242 / 256 / 8,
}


def link_bytes_per_second(generation: object, width: object) -> float | None:
    """One direction's data rate of a link at ``generation`` × ``width`` lanes; None when either is unknown.

    An unknown generation (a newer one than this table, or NVML's answer missing) gives None rather than a guess:
    a wrong capacity would make the link look full, or never full.
    """
    if not isinstance(generation, int) or not isinstance(width, int) or width <= 0:
        return None
    lane = LANE_BYTES_PER_SECOND.get(generation)
    return None if lane is None else lane * width
