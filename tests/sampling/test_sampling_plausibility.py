"""The plausibility gate alone: every check with good and bad readings, identity, quarantine and continuity."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sampling.plausibility_helpers import GIB, gpu, mig, node, replace_gpu, replace_mig, shared_gpu, xid
from watchdog.model import GpuSample, MigSample, ProcessSample
from watchdog.model import plausibility_checks as full
from watchdog.model.plausibility import CHECKS, PlausibilityGate

MEMORY = ("memory_total_bytes", "memory_used_bytes", "memory_reserved_bytes")


def checks(sample) -> list[str]:
    return [rejection.check for rejection in sample.rejected]


def test_a_plausible_sample_passes_untouched() -> None:
    sample = node()
    admitted = PlausibilityGate().admit(sample)
    assert admitted is sample and admitted.rejected == () and admitted.quarantined == frozenset()


# (field, value, check or None when plausible) on the MIG GPU 0 (80 GiB, 700 W limit, 1980 MHz max, 50 GB/s link)
GPU_TABLE = [
    ("memory_used_bytes", 80 * GIB - GIB // 2, None),
    ("memory_used_bytes", 81 * GIB, "memory"),  # total + 1 GiB
    ("memory_used_bytes", 10**30, "memory"),
    ("memory_used_bytes", -1, "memory"),
    ("memory_total_bytes", 0, "memory"),
    ("memory_total_bytes", 10 * GIB, "memory"),  # below used + reserved
    ("memory_reserved_bytes", 60 * GIB, "memory"),
    ("gpu_util", 1.0, None), ("gpu_util", 1.01, "ratio"), ("gpu_util", -0.1, "ratio"), ("gpu_util", math.nan, "ratio"),
    ("memory_util", math.inf, "ratio"), ("dram_bw_util", 0.0, None), ("sm_util", 2.0, "ratio"),
    ("temperature_celsius", -2731.0, "temperature"), ("temperature_celsius", 95.0, None),
    ("temperature_celsius", -40.0, None), ("temperature_celsius", 151.0, "temperature"),
    ("temperature_celsius", math.nan, "temperature"),
    ("sm_clock_mhz", 1980.0, None), ("sm_clock_mhz", 2500.0, "clock"), ("sm_clock_mhz", 0.0, "clock"),
    ("sm_clock_max_mhz", 0.0, "clock"), ("sm_clock_max_mhz", math.inf, "clock"),
    ("clock_event_reasons", -1, "clock"), ("clock_event_reasons", 1 << 64, "clock"),
    ("clock_event_reasons", 0x44, None),
    ("power_watts", 1000.0, None),  # above the limit, within 1.5 × (a power excursion)
    ("power_watts", 1100.0, "power"), ("power_watts", -5.0, "power"), ("power_watts", math.nan, "power"),
    ("power_limit_watts", 0.0, "power"), ("power_limit_watts", 1e9, "power"),
    ("pcie_tx_bytes_per_second", 99e9, None), ("pcie_tx_bytes_per_second", 101e9, "pcie"),
    ("pcie_rx_bytes_per_second", -1.0, "pcie"), ("pcie_link_bytes_per_second", 1e15, "pcie"),
    ("ctxsw_active", 0.0, None), ("ctxsw_active", 1.0, None), ("ctxsw_active", 1.2, "ratio"),
    ("ctxsw_active", math.nan, "ratio"), ("ctxsw_per_second", 1500.0, None), ("ctxsw_per_second", 1e6, None),
    ("ctxsw_per_second", 2e6, "context_switch"), ("ctxsw_per_second", -1.0, "context_switch"),
    ("ctxsw_per_second", math.inf, "context_switch"), ("ctxsw_per_second", math.nan, "context_switch"),
]


@pytest.mark.parametrize(("field", "value", "check"), GPU_TABLE)
def test_gpu_readings(field: str, value, check: str | None) -> None:
    sample = replace_gpu(node(), 0, **{field: value})
    admitted = PlausibilityGate().admit(sample)
    if check is None:
        assert admitted.rejected == () and admitted.gpus[0] == sample.gpus[0]
        return
    assert checks(admitted) == [check] and admitted.rejected[0].device == "GPU-0"
    dropped = MEMORY if check == "memory" else (field,)
    assert all(getattr(admitted.gpus[0], name) is None for name in dropped)
    # the GPU and every MIG device read through it are quarantined; the other GPU is not
    assert admitted.quarantined == {"GPU-0"} | {m.uuid for m in sample.gpus[0].instances}
    assert admitted.gpus[1] == sample.gpus[1]


MIG_TABLE = [
    ("memory_used_bytes", 11 * GIB, "memory"),  # total + 1 GiB
    ("memory_total_bytes", 0, "memory"),
    ("memory_total_bytes", 81 * GIB, "memory"),  # more than its GPU
    ("memory_used_bytes", 10**30, "memory"),
    ("memory_used_bytes", 10 * GIB - GIB // 64, None),
    ("sm_occupancy", 1.5, "ratio"), ("dram_bw_util", math.nan, "ratio"), ("sm_util", 1.0, None),
    ("pcie_rx_bytes_per_second", 2e12, "pcie"),
    ("ctxsw_active", 0.05, None), ("ctxsw_active", -0.01, "ratio"), ("ctxsw_active", math.inf, "ratio"),
    ("ctxsw_per_second", 0.0, None), ("ctxsw_per_second", 5e6, "context_switch"),
    ("ctxsw_per_second", math.nan, "context_switch"),
]


@pytest.mark.parametrize(("field", "value", "check"), MIG_TABLE)
def test_mig_readings(field: str, value, check: str | None) -> None:
    sample = replace_mig(node(), 0, 1, **{field: value})
    admitted = PlausibilityGate().admit(sample)
    if check is None:
        assert admitted.rejected == ()
        return
    assert checks(admitted) == [check] and admitted.rejected[0].device == "MIG-0-1"
    dropped = MEMORY if check == "memory" else (field,)
    assert all(getattr(admitted.gpus[0].instances[1], name) is None for name in dropped)
    assert admitted.quarantined == {"MIG-0-1"}  # not its GPU, not its siblings


@pytest.mark.parametrize(("changes", "check"), [
    ({"used_memory_bytes": 41 * GIB}, "memory"), ({"sm_util": 2.0}, "ratio"), ({"memory_util": -0.5}, "ratio"),
    ({"used_memory_bytes": 40 * GIB}, None),
])
def test_process_readings(changes: dict, check: str | None) -> None:
    sample = node()
    processes = (dataclasses.replace(sample.gpus[1].processes[0], **changes), sample.gpus[1].processes[1])
    admitted = PlausibilityGate().admit(replace_gpu(sample, 1, processes=processes))
    if check is None:
        assert admitted.rejected == ()
        return
    assert checks(admitted) == [check] and admitted.quarantined == {"GPU-1"}
    assert all(getattr(admitted.gpus[1].processes[0], name) is None for name in changes)
    assert admitted.gpus[1].processes[1] == processes[1]


def test_process_with_an_impossible_pid_is_removed() -> None:
    sample = replace_gpu(node(), 1, processes=(ProcessSample(pid=-1, used_memory_bytes=GIB),))
    admitted = PlausibilityGate().admit(sample)
    assert admitted.gpus[1].processes == () and checks(admitted) == ["identity"]


def test_duplicated_gpu_uuid_removes_and_quarantines_every_bearer_and_their_instances() -> None:
    sample = node(gpus=(gpu(0, instances=2), gpu(1, instances=2, uuid="GPU-0"), shared_gpu(2)))
    admitted = PlausibilityGate().admit(sample)
    assert [g.index for g in admitted.gpus] == [2]
    assert checks(admitted) == ["identity", "identity"]
    assert admitted.quarantined == {"GPU-0", "MIG-0-0", "MIG-0-1", "MIG-1-0", "MIG-1-1"}


def test_duplicated_gpu_index_removes_both() -> None:
    admitted = PlausibilityGate().admit(node(gpus=(gpu(0, instances=1), dataclasses.replace(shared_gpu(1), index=0))))
    assert admitted.gpus == () and admitted.quarantined == {"GPU-0", "GPU-1", "MIG-0-0"}


def test_duplicated_mig_uuid_removes_and_quarantines_every_bearer() -> None:
    sample = replace_mig(node(), 0, 2, uuid="MIG-0-1")  # instance 2 wears instance 1's UUID
    admitted = PlausibilityGate().admit(sample)
    assert [m.uuid for m in admitted.gpus[0].instances] == ["MIG-0-0"]
    assert checks(admitted) == ["identity", "identity"] and admitted.quarantined == {"MIG-0-1"}


@pytest.mark.parametrize("changes", [
    {"gpu_index": 5},  # names no GPU (and not its parent)
    {"gpu_index": 1},  # names another GPU, not the one it is listed under
    {"gpu_instance": 15}, {"gpu_instance": -1}, {"compute_instance": 8},
    {"gpu_instance": 7},  # the GI/CI pair of instance 0
])
def test_mig_device_with_an_impossible_identity_is_removed(changes: dict) -> None:
    admitted = PlausibilityGate().admit(replace_mig(node(), 0, 1, **changes))
    kept = [m.uuid for m in admitted.gpus[0].instances]
    assert "MIG-0-1" not in kept and "MIG-0-2" in kept
    assert set(checks(admitted)) == {"identity"} and "MIG-0-1" in admitted.quarantined
    assert "GPU-0" not in admitted.quarantined


def test_xid_on_an_absent_gpu_is_dropped_and_quarantines_nothing() -> None:
    admitted = PlausibilityGate().admit(node(xids=(xid(3), xid(0, gpu_uuid="GPU-9"), xid(1))))
    assert admitted.xids == (xid(1),)
    assert [(r.check, r.device, r.value) for r in admitted.rejected] == [
        ("identity", "", "(3, 'GPU-3')"), ("identity", "", "(0, 'GPU-9')")]
    assert admitted.quarantined == frozenset()


@pytest.mark.parametrize(("changes", "kept"), [
    ({"number": 2**70}, False), ({"number": 1 << 16}, False), ({"number": -1}, False), ({"number": 0xFFFF}, True),
    ({"number": 79}, True), ({"timestamp": math.nan}, False), ({"gpu_instance": 99}, False),
    ({"gpu_instance": 7, "compute_instance": 0}, True),
])
def test_xid_numbers(changes: dict, kept: bool) -> None:
    event = xid(0, **changes)
    admitted = PlausibilityGate().admit(node(xids=(event,)))
    assert (admitted.xids == (event,)) is kept
    if not kept:
        assert checks(admitted) == ["xid"] and "GPU-0" in admitted.quarantined
        assert len(admitted.rejected[0].value) <= 80


def test_quarantine_lasts_quarantine_ticks_clean_ticks_and_restarts_on_a_new_glitch() -> None:
    gate = PlausibilityGate(quarantine_ticks=3)
    bad = lambda tick: replace_gpu(node(tick), 1, temperature_celsius=-2731.0)  # noqa: E731
    held = []
    for tick in range(1, 12):
        sample = bad(tick) if tick in (1, 6) else node(tick)
        held.append("GPU-1" in gate.admit(sample).quarantined)
    #        1 bad  2     3     4     5 free  6 bad  7     8     9     10 free 11
    assert held == [True, True, True, True, False, True, True, True, True, False, False]


def test_quarantine_of_zero_ticks_holds_only_the_bad_tick() -> None:
    gate = PlausibilityGate(quarantine_ticks=0)
    assert gate.admit(replace_gpu(node(1), 1, power_watts=-1.0)).quarantined == {"GPU-1"}
    assert gate.admit(node(2)).quarantined == frozenset()


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_quarantine_ticks_must_be_a_non_negative_integer(value) -> None:
    with pytest.raises(ValueError, match="quarantine_ticks"):
        PlausibilityGate(quarantine_ticks=value)


def test_layout_change_without_re_enumeration_is_rejected_and_with_one_accepted() -> None:
    moved = lambda tick, generation: replace_mig(node(tick, generation=generation), 0, 1, gpu_instance=3)  # noqa: E731
    gate = PlausibilityGate()
    gate.admit(node(1))
    unannounced = gate.admit(moved(2, 1))
    assert checks(unannounced) == ["continuity"] and "MIG-0-1" in unannounced.quarantined
    assert [m.uuid for m in unannounced.gpus[0].instances] == ["MIG-0-0", "MIG-0-2"]
    assert checks(gate.admit(moved(3, 1))) == ["continuity"]  # still not announced
    re_enumerated = gate.admit(moved(4, 2))
    assert re_enumerated.rejected == () and len(re_enumerated.gpus[0].instances) == 3


def test_new_instance_without_re_enumeration_is_rejected() -> None:
    gate = PlausibilityGate()
    gate.admit(node(1))
    extra = replace_gpu(node(2), 0, instances=node().gpus[0].instances + (mig(0, 3),))
    assert checks(gate.admit(extra)) == ["continuity"]


def test_mig_config_change_event_opens_the_gpu_layout_for_that_tick_and_the_next() -> None:
    gate = PlausibilityGate()
    gate.admit(node(1))
    event = xid(0, number=0, event_type=0x100)
    gate.admit(node(2, xids=(event,)))  # the sampler re-enumerates at the next tick
    changed = gate.admit(replace_mig(node(3), 0, 1, gpu_instance=3, uuid="MIG-new"))
    assert changed.rejected == ()
    assert checks(gate.admit(replace_mig(node(4), 0, 1, gpu_instance=4, uuid="MIG-new"))) == ["continuity"]


def test_instances_vanishing_with_a_lost_gpu_come_back_without_a_rejection() -> None:
    gate = PlausibilityGate()
    gate.admit(node(1))
    lost = dataclasses.replace(gpu(0, instances=0), lost=True, memory_total_bytes=None, memory_used_bytes=None)
    gate.admit(node(2, gpus=(lost, shared_gpu(1))))
    assert gate.admit(node(3)).rejected == ()


def test_second_admit_of_a_tick_replaces_the_first() -> None:
    gate = PlausibilityGate(quarantine_ticks=2)
    bad = replace_gpu(node(1), 1, temperature_celsius=-2731.0)
    first = gate.admit(bad)
    again = gate.admit(dataclasses.replace(first, xids=(xid(0, number=2**70),)))  # the tick's Xids merged in
    assert checks(again) == ["temperature", "xid"] and again.quarantined >= {"GPU-0", "GPU-1"}
    assert gate.admit(again) == again  # idempotent on its own output
    assert "GPU-1" in gate.admit(node(2)).quarantined and "GPU-1" in gate.admit(node(3)).quarantined
    assert "GPU-1" not in gate.admit(node(4)).quarantined  # counted once, not once per admit


def test_regating_a_recording_reproduces_its_rejections_and_quarantine() -> None:
    live = PlausibilityGate(quarantine_ticks=3)
    raw = [replace_mig(node(t), 0, 1, sm_util=7.0) if t in (2, 3) else node(t) for t in range(1, 10)]
    recorded = [live.admit(sample) for sample in raw]
    replay = PlausibilityGate(quarantine_ticks=3)
    assert [replay.admit(sample) for sample in recorded] == recorded


def test_a_huge_value_is_refused_with_bounded_text() -> None:
    admitted = PlausibilityGate().admit(replace_gpu(node(), 1, memory_used_bytes=10**5000))
    assert checks(admitted) == ["memory"] and len(admitted.rejected[0].value) <= 80


def test_every_check_is_named_in_checks() -> None:
    assert set(CHECKS) == {"identity", "continuity", "memory", "ratio", "clock", "power", "temperature", "pcie",
                           "context_switch", "xid"}


def test_a_refused_switching_rate_on_a_time_sliced_gpu_keeps_the_share_and_counts_once() -> None:
    sample = replace_gpu(node(), 1, ctxsw_active=0.04, ctxsw_per_second=float("inf"))
    admitted = PlausibilityGate().admit(sample)
    assert [(r.check, r.device, r.field) for r in admitted.rejected] == [("context_switch", "GPU-1",
                                                                          "ctxsw_per_second")]
    assert (admitted.gpus[1].ctxsw_active, admitted.gpus[1].ctxsw_per_second) == (0.04, None)
    assert admitted.quarantined == {"GPU-1"}


# The straight-line fast paths (``_plausible_gpu``, ``_plausible_mig``) must say "plausible" exactly when the full
# checks would refuse nothing: a reading they let through unchecked would reach detection.


_EDGES = st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 1.0, 1.0001, 1.5, 99.0, 151.0, -41.0, 5e3, 5001.0,
                                               1e4, 10001.0, 256e9, 3e11, float("nan"), float("inf")]))
_BYTES = st.one_of(st.none(), st.sampled_from([-1, 0, 1, 10 << 30, 40 << 30, 80 << 30, 1 << 50, 10**30]))
_SWITCHES = st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 1500.0, 1e6, 1.000001e6, float("nan"), float("inf")]))


@settings(max_examples=400, deadline=None)
@given(total=_BYTES, used=_BYTES, reserved=_BYTES, gpu_util=_EDGES, memory_util=_EDGES, dram=_EDGES, sm=_EDGES,
       power=_EDGES, limit=_EDGES, temperature=_EDGES, clock=_EDGES, maximum=_EDGES, tx=_EDGES, rx=_EDGES,
       link=_EDGES, reasons=st.one_of(st.none(), st.sampled_from([-1, 0, 7, 1 << 64])), switching=_EDGES,
       switches=_SWITCHES)
def test_the_fast_gpu_check_agrees_with_the_full_one(total, used, reserved, gpu_util, memory_util, dram, sm, power,
                                                     limit, temperature, clock, maximum, tx, rx, link, reasons,
                                                     switching, switches):
    gpu = GpuSample(index=0, uuid="GPU-x", name="H100", memory_total_bytes=total, memory_used_bytes=used,
                    memory_reserved_bytes=reserved, gpu_util=gpu_util, memory_util=memory_util, dram_bw_util=dram,
                    sm_util=sm, power_watts=power, power_limit_watts=limit, temperature_celsius=temperature,
                    sm_clock_mhz=clock, sm_clock_max_mhz=maximum, clock_event_reasons=reasons,
                    pcie_tx_bytes_per_second=tx, pcie_rx_bytes_per_second=rx, pcie_link_bytes_per_second=link,
                    ctxsw_active=switching, ctxsw_per_second=switches)
    found = full.Found()
    full.check_gpu(gpu, (), found)
    refused = bool(found.rejections)
    fast = full._plausible_gpu(gpu)
    assert fast != refused, (fast, found.rejections)


@settings(max_examples=300, deadline=None)
@given(total=_BYTES, used=_BYTES, reserved=_BYTES, dram=_EDGES, sm=_EDGES, occupancy=_EDGES, tx=_EDGES, rx=_EDGES,
       switching=_EDGES, switches=_SWITCHES)
def test_the_fast_instance_check_agrees_with_the_full_one(total, used, reserved, dram, sm, occupancy, tx, rx,
                                                          switching, switches):
    gpu = GpuSample(index=0, uuid="GPU-x", name="H100", mig_enabled=True, memory_total_bytes=80 << 30,
                    pcie_link_bytes_per_second=63e9)
    mig = MigSample(uuid="MIG-x", gpu_index=0, gpu_instance=1, compute_instance=0, profile="1g.10gb",
                    memory_total_bytes=total, memory_used_bytes=used, memory_reserved_bytes=reserved,
                    dram_bw_util=dram, sm_util=sm, sm_occupancy=occupancy, pcie_tx_bytes_per_second=tx,
                    pcie_rx_bytes_per_second=rx, ctxsw_active=switching, ctxsw_per_second=switches)
    found = full.Found()
    full.check_gpu(gpu, (mig,), found)
    assert full._plausible_mig(mig, (80 << 30) + full.MEMORY_SLACK_BYTES,
                                 full.PCIE_MARGIN * 63e9) != bool(found.rejections), found.rejections
