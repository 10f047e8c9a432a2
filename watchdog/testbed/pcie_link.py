"""The simulated PCIe link: one per GPU, shared by every MIG instance, and what a full link does to its users.

MIG partitions SMs, L2 and DRAM between GPU instances but not the host link (NVIDIA MIG user guide; arXiv
2508.20274), so every instance's host↔device copies go through the one link. Past its capacity each stream gets
its proportional part (contention.scale_to_link). A workload marked ``input_bound`` (a training step fed by a host
data loader) computes only as fast as its input arrives: its SM time share shrinks by the part of its PCIe demand
the link did not deliver, which is how a neighbour's copies starve it while its own instance's SMs sit idle.
The delivered rates are kept per instance, which is what GPM's PCIE_TX/RX_PER_SEC per GPU instance report.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from watchdog.testbed.contention import scale_to_link

if TYPE_CHECKING:  # tick_state calls this module while computing its states
    from watchdog.testbed.tick_state import DomainState


def share_link(
    parts: list[tuple[DomainState, float]], streams: list[tuple[float, float]], *, capacity: float
) -> tuple[list[tuple[DomainState, float]], float, float]:
    """Each part's domain with its delivered PCIe and any input-starved SM share; and the link's rx, tx totals.

    ``streams`` holds one (rx, tx) demand per process, in the order of the parts' processes.
    """
    rx = scale_to_link([stream[0] for stream in streams], capacity)
    tx = scale_to_link([stream[1] for stream in streams], capacity)
    result: list[tuple[DomainState, float]] = []
    position = 0
    for domain, share in parts:
        processes, domain_rx, domain_tx, starved = [], 0.0, 0.0, False
        for process in domain.processes:
            (want_rx, want_tx), got_rx, got_tx = streams[position], rx[position], tx[position]
            position += 1
            domain_rx, domain_tx = domain_rx + got_rx, domain_tx + got_tx
            delivered = min(got_rx / want_rx if want_rx > 0 else 1.0, got_tx / want_tx if want_tx > 0 else 1.0)
            if delivered < 1.0 and process.pod.workload.input_bound:
                process = replace(process, sm=process.sm * delivered)
                starved = True
            processes.append(process)
        busy = min(sum(p.sm for p in processes), 1.0) if starved else domain.busy
        result.append((replace(domain, busy=busy, processes=tuple(processes), pcie_rx=domain_rx,
                               pcie_tx=domain_tx), share))
    return result, sum(rx), sum(tx)
