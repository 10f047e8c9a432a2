"""Property: any single reading of a recorded tick replaced by an arbitrary value of its type, or removed, never
raises and never creates a decision the unmodified tick would not have created.

A recording of the demo scenario is replayed up to a tick where findings are open; that agent (detector, pacer) and
its plausibility gate are copied for every example, the tick's sample is changed in one place, and the changed tick
goes through the same path replay takes (the gate, then ``OfflineAgent.step``: detect → decide → pace).
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import itertools
import typing
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from watchdog.config import Policy
from watchdog.evaluation import OfflineAgent, simulate
from watchdog.model import GpuSample, MigSample, NodeSample, ProcessSample, XidEvent
from watchdog.model.plausibility import PlausibilityGate
from watchdog.trace import TraceHeader, TraceWriter, read_trace

ROOT = Path(__file__).resolve().parents[2]
# The agent's state holds read-only mappings; copying one agent per example is far cheaper than replaying to it.
copyreg.pickle(MappingProxyType, lambda proxy: (MappingProxyType, (dict(proxy),)))
TICKS = 90  # the demo's first findings are open and pending by then
POLICY = Policy.model_validate({"action": {"interference": {"for_seconds": 0}, "memory_pressure": {"for_seconds": 0},
                                           "unauthorized": {"for_seconds": 0}, "quota": {"for_seconds": 0},
                                           "xid": {"enabled": True}}})


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """(agent, gate) after every tick but the last, and the last tick's record."""
    path = tmp_path_factory.mktemp("property") / "demo.jsonl"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for sample, attribution in itertools.islice(simulate(str(ROOT / "scenarios" / "demo.yaml")), TICKS):
            # One Xid on the tick under test, so events are among the readings changed.
            if sample.tick == TICKS - 1 and sample.gpus:
                gpu = sample.gpus[0]
                event = XidEvent(gpu_index=gpu.index, gpu_uuid=gpu.uuid, xid=13, event_type=8,
                                 timestamp=sample.timestamp)
                sample = dataclasses.replace(sample, xids=(event,))
            writer.write(sample, attribution)
    records = list(read_trace(path))
    agent, gate = OfflineAgent(POLICY, tick_seconds=1.0), PlausibilityGate()
    for record in records[:-1]:
        agent.step(gate.admit(record.sample), record.attribution)
    return agent, gate, records[-1]


def value_of(annotation) -> st.SearchStrategy:
    """An arbitrary value of a field's declared type (None included where the field allows it)."""
    options = []
    for kind in typing.get_args(annotation) or (annotation,):
        if kind is type(None):
            options.append(st.none())
        elif kind is bool:
            options.append(st.booleans())
        elif kind is int:
            options.append(st.integers(min_value=-(2**80), max_value=2**80))
        elif kind is float:
            options.append(st.floats(allow_nan=True, allow_infinity=True))
        elif kind is str:
            options.append(st.text(max_size=40))
    return st.one_of(*options) if options else st.nothing()


HINTS = {cls: typing.get_type_hints(cls) for cls in (GpuSample, MigSample, ProcessSample, XidEvent)}
SCALAR = {cls: [name for name, hint in hints.items() if value_of(hint) is not st.nothing()
                and not typing.get_origin(hint) is tuple] for cls, hints in HINTS.items()}


def changed(sample: NodeSample, data: st.DataObject) -> NodeSample:
    """`sample` with one reading replaced by an arbitrary value of its type, or one element removed."""

    def replace_field(obj):
        name = data.draw(st.sampled_from(SCALAR[type(obj)]), label="field")
        return dataclasses.replace(obj, **{name: data.draw(value_of(HINTS[type(obj)][name]), label="value")})

    def edit(items: tuple, what: str) -> tuple:
        """One of `items` with a field replaced, or removed (the draw decides)."""
        listed = list(items)
        k = data.draw(st.integers(0, len(listed) - 1), label=what)
        if data.draw(st.booleans(), label=f"remove {what}"):
            del listed[k]
        else:
            listed[k] = replace_field(listed[k])
        return tuple(listed)

    targets = ["gpus"] + (["xids"] if sample.xids else [])
    if data.draw(st.sampled_from(targets), label="target") == "xids":
        return dataclasses.replace(sample, xids=edit(sample.xids, "event"))
    i = data.draw(st.integers(0, len(sample.gpus) - 1), label="gpu")
    gpu = sample.gpus[i]
    owners = [owner for owner in (gpu, *gpu.instances) if owner.processes]
    inside = ["gpu"] + (["instances"] if gpu.instances else []) + (["processes"] if owners else [])
    where = data.draw(st.sampled_from(inside), label="inside")
    if where == "gpu":
        return dataclasses.replace(sample, gpus=edit(sample.gpus, "gpu"))
    if where == "instances":
        gpu = dataclasses.replace(gpu, instances=edit(gpu.instances, "instance"))
    else:
        owner = data.draw(st.sampled_from(owners), label="owner")
        edited = dataclasses.replace(owner, processes=edit(owner.processes, "process"))
        gpu = edited if owner is gpu else dataclasses.replace(
            gpu, instances=tuple(edited if m is owner else m for m in gpu.instances))
    return dataclasses.replace(sample, gpus=tuple(gpu if k == i else g for k, g in enumerate(sample.gpus)))


def acted(step) -> set[tuple[str, str]]:
    """(finding, pod) of every decision that names a pod to evict, sent or waiting its turn."""
    return {(d.finding_key, f"{d.namespace}/{d.pod}") for d in step.decisions if d.request is not None}


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_changed_reading_never_raises_and_never_adds_a_decision(before, data):
    agent, gate, record = before
    unchanged = copy.deepcopy(agent).step(copy.deepcopy(gate).admit(record.sample), record.attribution)
    mutated = changed(record.sample, data)
    step = copy.deepcopy(agent).step(copy.deepcopy(gate).admit(mutated), record.attribution)
    assert acted(step) <= acted(unchanged), acted(step) - acted(unchanged)
    assert step.sent <= unchanged.sent


def test_the_tick_under_test_has_decisions_to_lose(before):
    """The property would hold vacuously on a quiet tick: this one has pods named for eviction and a fresh Xid."""
    agent, gate, record = before
    step = copy.deepcopy(agent).step(copy.deepcopy(gate).admit(record.sample), record.attribution)
    assert acted(step)
    assert record.sample.xids
