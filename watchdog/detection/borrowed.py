"""Borrowed activity: the cluster's own per-instance readings, used where NVML has none.

Pure (no I/O). An A100/A30 in MIG mode has no GPM, so its ``MigSample.sm_util`` and ``dram_bw_util`` are None and
the power domain cannot tell which neighbour drew the power that capped the clock. The service hands in what
dcgm-exporter published for each GPU instance (``watchdog.model.InstanceActivity``); this fills exactly the
readings NVML left empty. NVML's value always wins where both exist: it is this tick's, read by us, while the
borrowed one is a scrape interval old at best.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from watchdog.model import GpuSample, InstanceActivity, MigSample, NodeSample, instance_key


def with_borrowed(sample: NodeSample, activity: Mapping[str, InstanceActivity]) -> tuple[NodeSample, frozenset[str]]:
    """The sample with every empty per-instance SM/DRAM reading filled from ``activity`` (keyed by
    ``instance_key``), and the UUIDs of the MIG devices that got at least one borrowed value."""
    if not activity:
        return sample, frozenset()
    filled: set[str] = set()
    gpus: list[GpuSample] = []
    for gpu in sample.gpus:
        if not gpu.mig_enabled or gpu.lost:
            gpus.append(gpu)
            continue
        instances = tuple(_filled(gpu, mig, activity, filled) for mig in gpu.instances)
        changed = any(new is not old for new, old in zip(instances, gpu.instances))
        gpus.append(dataclasses.replace(gpu, instances=instances) if changed else gpu)
    if not filled:
        return sample, frozenset()
    return dataclasses.replace(sample, gpus=tuple(gpus)), frozenset(filled)


def _filled(gpu: GpuSample, mig: MigSample, activity: Mapping[str, InstanceActivity], filled: set[str]) -> MigSample:
    if mig.sm_util is not None and mig.dram_bw_util is not None:
        return mig
    borrowed = activity.get(instance_key(gpu.uuid, mig.gpu_instance))
    if borrowed is None:
        return mig
    # DCGM profiles a GPU instance as a whole; every compute instance in it gets the instance's number, as GPM's
    # per-GI DRAM reading is handed to each CI (domains._device).
    sm = mig.sm_util if mig.sm_util is not None else borrowed.compute
    dram = mig.dram_bw_util if mig.dram_bw_util is not None else borrowed.dram
    if sm is mig.sm_util and dram is mig.dram_bw_util:
        return mig
    filled.add(mig.uuid)
    return dataclasses.replace(mig, sm_util=sm, dram_bw_util=dram)
