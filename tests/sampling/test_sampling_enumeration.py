"""MIG enumeration under partial failure: one unreadable slot or identity call costs that slot for one tick only."""

from __future__ import annotations

import pynvml

from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock, SimulatedGpuNode

LOOKUP = "nvmlDeviceGetMigDeviceHandleByIndex"


def _mig_uuids(node: SimulatedGpuNode, gpu: int) -> set[str]:
    return {d.uuid for d in node.device_uuids() if d.gpu_index == gpu and d.slot is not None}


def _found(sampler: NvmlSampler, clock: SimClock, tick: int) -> list[set[str]]:
    sample = sampler.sample(tick)
    clock.advance(1.0)
    return [{mig.uuid for mig in gpu.instances} for gpu in sample.gpus]


def test_identity_refused_on_one_mig_device_spares_its_siblings_and_recovers(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    # The GPU's own UUID was read at open, so the next nvmlDeviceGetUUID on GPU 0 is the first MIG device's.
    node.inject_error("nvmlDeviceGetUUID", pynvml.NVML_ERROR_NO_PERMISSION, device_index=0, times=1)
    everything = _mig_uuids(node, 0)

    first = _found(sampler, clock, 0)[0]
    lookups = node.nvml.calls[LOOKUP]
    second = _found(sampler, clock, 1)[0]
    third = _found(sampler, clock, 2)[0]

    assert len(first) == len(everything) - 1 and first < everything  # only the refusing device is missing
    assert second == third == everything  # asked again without a MIG event, not remembered as unsupported
    assert node.nvml.calls[LOOKUP] > lookups  # the incomplete scan was repeated on its own ...
    assert node.nvml.calls[LOOKUP] == lookups + 7  # ... once: the complete one ends the re-scans (7 slots)
    assert sampler.error_counts() == {"no_permission": 1}


def test_identity_failure_during_a_rescan_keeps_the_known_instance(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    everything = _mig_uuids(node, 0)
    assert _found(sampler, clock, 0)[0] == everything
    node.inject_error("nvmlDeviceGetGpuInstanceId", pynvml.NVML_ERROR_TIMEOUT, device_index=0, times=1)
    sampler.request_enumeration(0)  # a MIG-config event arrived

    assert _found(sampler, clock, 1)[0] == everything  # the unreadable slot kept what the last scan knew
    assert _found(sampler, clock, 2)[0] == everything
    assert sampler.error_counts() == {"timeout": 1}


def test_failing_slot_keeps_its_previous_entry_and_is_scanned_again_without_a_request(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    everything = _mig_uuids(node, 0)
    assert _found(sampler, clock, 0)[0] == everything
    node.inject_error(LOOKUP, pynvml.NVML_ERROR_UNKNOWN, device_index=0, times=1)
    sampler.request_enumeration(0)
    before = node.nvml.calls[LOOKUP]

    during = _found(sampler, clock, 1)[0]
    after_rescan = node.nvml.calls[LOOKUP]
    later = _found(sampler, clock, 2)[0]

    assert during == later == everything
    assert after_rescan - before == 7 and node.nvml.calls[LOOKUP] - after_rescan == 7
    assert sampler.error_counts() == {"enumeration": 1}


def test_sparse_slot_failing_on_the_first_scan_comes_back_without_a_request(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    # Demo GPU 0 as [3g, 2g, 1g, 1g]: MIG slots 0, 4, 3, 6, with 1, 2, 5 empty (NotFound).
    node.reconfigure_mig(0, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    node.inject_error(LOOKUP, pynvml.NVML_ERROR_UNKNOWN, device_index=0, times=1)
    sampler.request_enumeration(0)
    slots = {d.uuid: d.slot for d in node.device_uuids() if d.gpu_index == 0 and d.slot is not None}

    first = _found(sampler, clock, 0)[0]
    second = _found(sampler, clock, 1)[0]

    assert first == {uuid for uuid, slot in slots.items() if slot != 0}  # nothing known for slot 0 yet
    assert second == set(slots)


def test_instance_destroyed_between_lookup_and_description_is_not_kept(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    everything = _mig_uuids(node, 0)
    assert _found(sampler, clock, 0)[0] == everything
    # InvalidArgument from an identity call: the handle went stale under the scan (nvml.h,
    # nvmlDeviceGetMigDeviceHandleByIndex), so the old entry is not kept; the slot is read again next tick, where the
    # simulation still has it.
    node.inject_error("nvmlDeviceGetUUID", pynvml.NVML_ERROR_INVALID_ARGUMENT, device_index=0, times=1)
    sampler.request_enumeration(0)

    during = _found(sampler, clock, 1)[0]
    after = _found(sampler, clock, 2)[0]

    assert len(during) == len(everything) - 1
    assert after == everything
