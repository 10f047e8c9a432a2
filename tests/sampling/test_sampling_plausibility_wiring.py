"""The gate where live readings enter (the sampler), and a property: no reading of the right type breaks it."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling_helpers import run_ticks

from tests.sampling.plausibility_helpers import gpu, node, shared_gpu, xid
from watchdog.config.sampling import SamplingSettings
from watchdog.model import GpuSample, MigSample, NodeSample
from watchdog.model.plausibility import DEFAULT_QUARANTINE_TICKS, PlausibilityGate
from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock, SimulatedGpuNode


def test_the_sampler_drops_an_impossible_temperature_and_quarantines_its_gpu(
    node: SimulatedGpuNode, clock: SimClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sampler = NvmlSampler(node.nvml, node="sim-node-1", clock=clock, settings=SamplingSettings(quarantine_ticks=2))
    sampler.open()
    try:
        real = node.nvml.nvmlDeviceGetTemperature
        glitch = sampler.gpu_handles()[0][2]
        monkeypatch.setattr(node.nvml, "nvmlDeviceGetTemperature",
                            lambda handle, sensor: -2731 if handle is glitch else real(handle, sensor))
        bad = sampler.sample(0)
        monkeypatch.setattr(node.nvml, "nvmlDeviceGetTemperature", real)
        clock.advance(1.0)
        held = [node.gpu_uuids[0] in sampler.sample(tick).quarantined for tick in (1, 2, 3)]
    finally:
        sampler.close()
    assert bad.gpus[0].temperature_celsius is None and bad.gpus[1].temperature_celsius is not None
    assert [(r.check, r.device, r.field, r.value) for r in bad.rejected] == [
        ("temperature", node.gpu_uuids[0], "temperature_celsius", "-2731.0")]
    assert node.gpu_uuids[0] in bad.quarantined and node.gpu_uuids[1] not in bad.quarantined
    assert held == [True, True, False]


def test_every_enumeration_bumps_the_layout_generation_and_a_plain_sample_passes(
    sampler: NvmlSampler, clock: SimClock
) -> None:
    first = run_ticks(sampler, clock, 2)
    sampler.request_enumeration()
    again = run_ticks(sampler, clock, 2, first=2)
    assert first.layout_generation > 0 and again.layout_generation > first.layout_generation
    assert first.rejected == () and again.rejected == () and again.quarantined == frozenset()
    assert sum(len(g.instances) for g in again.gpus) == sum(len(g.instances) for g in first.gpus) > 0


def test_quarantine_ticks_default_and_bounds() -> None:
    assert SamplingSettings().quarantine_ticks == DEFAULT_QUARANTINE_TICKS
    with pytest.raises(ValueError, match="quarantine_ticks"):
        SamplingSettings(quarantine_ticks=-1)


# ------------------------------------------------------------------------------------------------ property

_HUGE = st.sampled_from([2**70, -(2**70), 10**5000, 2**64])
_INT = st.integers(min_value=-(2**40), max_value=2**40) | _HUGE
_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-(2**70), max_value=2**70).map(float)
_BY_TYPE = {"int": _INT, "float": _FLOAT, "bool": st.booleans(), "str": st.text(max_size=12)}


def _value_for(annotation: str) -> st.SearchStrategy | None:
    kinds = [part.strip() for part in annotation.split("|")]
    base = [_BY_TYPE[kind] for kind in kinds if kind in _BY_TYPE]
    if not base:
        return None  # tuples of children: replaced by removal below
    return st.one_of(*base, *([st.none()] if "None" in kinds else []))


def _fields(cls: type) -> list[tuple[str, st.SearchStrategy]]:
    hints = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return [(name, strategy) for name, kind in hints.items() if (strategy := _value_for(kind)) is not None]


_GPU_FIELDS, _MIG_FIELDS = _fields(GpuSample), _fields(MigSample)


@st.composite
def spoiled(draw) -> NodeSample:
    """The plausible node with one GPU or MIG field replaced by any value of its type, or one device removed."""
    sample = node(gpus=(gpu(0, instances=3), gpu(1, instances=2), shared_gpu(2)), xids=(xid(0), xid(2)))
    gpus = list(sample.gpus)
    where = draw(st.integers(min_value=0, max_value=len(gpus) - 1))
    target = gpus[where]
    choice = draw(st.sampled_from(["gpu", "mig", "remove_gpu", "remove_mig"]))
    if choice == "remove_gpu":
        del gpus[where]
    elif choice == "gpu" or not target.instances:
        name, strategy = draw(st.sampled_from(_GPU_FIELDS))
        gpus[where] = dataclasses.replace(target, **{name: draw(strategy)})
    else:
        instances = list(target.instances)
        slot = draw(st.integers(min_value=0, max_value=len(instances) - 1))
        if choice == "remove_mig":
            del instances[slot]
        else:
            name, strategy = draw(st.sampled_from(_MIG_FIELDS))
            instances[slot] = dataclasses.replace(instances[slot], **{name: draw(strategy)})
        gpus[where] = dataclasses.replace(target, instances=tuple(instances))
    return dataclasses.replace(sample, gpus=tuple(gpus))


@settings(max_examples=400, deadline=None)
@given(spoiled())
def test_any_reading_of_its_type_never_breaks_the_gate_and_what_passes_is_plausible(sample: NodeSample) -> None:
    gate = PlausibilityGate()
    gate.admit(node(0, gpus=(gpu(0, instances=3), gpu(1, instances=2), shared_gpu(2))))  # an established layout
    admitted = gate.admit(sample)
    assert all(r.check and len(r.value) <= 80 for r in admitted.rejected)
    # what the gate let through is plausible to a fresh gate: it refuses nothing more
    assert PlausibilityGate().admit(admitted).rejected == admitted.rejected


def test_the_property_covers_every_scalar_field() -> None:
    scalar = {name for name, kind in typing.get_type_hints(GpuSample).items() if "tuple" not in str(kind)}
    assert {name for name, _ in _GPU_FIELDS} == scalar


@settings(max_examples=300, deadline=None)
@given(spoiled())
def test_the_fast_path_agrees_with_the_detailed_checks(sample: NodeSample) -> None:
    # The common case is decided in straight-line code; what it accepts, the detailed checks must accept too.
    from watchdog.model import plausibility_checks as checks

    for device in sample.gpus:
        total, link = 80 * 2**30, 50e9
        for mig in device.instances:
            found = checks.Found()
            detailed = checks._mig(mig, found, gpu_total=total, link=link)
            fast = checks._plausible_mig(mig, total + checks.MEMORY_SLACK_BYTES, checks.PCIE_MARGIN * link)
            assert fast == (detailed == mig and not found.rejections)
