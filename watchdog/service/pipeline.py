"""What the cycle needs of each part it drives, as protocols: the wiring in ``agent`` hands it objects that have
these, and a type checker (or a reader) sees the pipeline from this one page.

sampler → attributor → detector (``detection.Detector``, through ``tick_path``) → action runner, then the sinks
that report on the tick. The status sources are what the snapshot shows of the parts that run on their own (the
kill switch, the Xid thread, the MQTT publisher, the flight recorder), all read through one registered-source
mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

from watchdog.config.action import ActionPolicy
from watchdog.config.runtime import RuntimePolicy
from watchdog.model import ActionReport, Attribution, Decision, Finding, InstanceActivity, NodeSample, TickResult


class Admission(Protocol):
    """``model.plausibility.PlausibilityGate``: a sample with every impossible reading refused and counted."""

    def admit(self, sample: NodeSample) -> NodeSample: ...


class Sampler(Protocol):
    """``sampling.sampler.NvmlSampler``: one NodeSample per tick, from a worker thread, already through its
    plausibility ``gate`` (which the cycle asks again for the Xid events the event thread adds)."""

    @property
    def gate(self) -> Admission: ...

    def sample(self, tick: int) -> NodeSample: ...

    def error_counts(self) -> Mapping[str, int]: ...


class Attributor(Protocol):
    """``attribution.stage.NodeAttributor``: who owns what in this sample."""

    def attribute(self, sample: NodeSample, *, tenant_label: str | None) -> Attribution: ...


class ActionRunner(Protocol):
    """``action.ActionStage``: decide and pace one tick's findings (``plan``, the tick path's planner), then settle
    them and queue the sends for the evictor beside the tick (``dispatch``: never waits on the API server)."""

    @property
    def policy(self) -> ActionPolicy: ...

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]: ...

    def plan(
        self, findings: Iterable[Finding], attribution: Attribution, *, tick: int | None = None
    ) -> tuple[list[Decision], float]: ...

    async def dispatch(self, paced: list[Decision], *, tick: int | None, decided_at: float) -> ActionReport: ...


class TickSink(Protocol):
    """Reports on each tick from its TickResult (the MQTT stream, the trace recorder). ``stage`` names it in the
    error counts when it fails; a failure never reaches the cycle."""

    stage: str

    def tick_done(self, result: TickResult) -> None: ...


@runtime_checkable
class PolicyRecordingSink(Protocol):
    """A TickSink that records the policy in force (``trace.TraceRecorder``, ``trace.flight.FlightRecorder``): the
    agent hands it every load, the first one included, as it hands every other consumer of the runtime policy."""

    def apply_runtime(self, runtime: RuntimePolicy) -> None: ...


class VictimSignalSource(Protocol):
    """``service.prometheus_signals.PrometheusSignals``: tenants' own signals, pod key → value."""

    def values(self) -> Mapping[str, float]: ...


class ActivitySource(Protocol):
    """``service.borrowed_activity.BorrowedActivity``: per-GPU-instance activity from outside NVML."""

    def values(self) -> Mapping[str, InstanceActivity]: ...


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """What a part running on its own shows each cycle: the snapshot fields it fills (``paused``,
    ``kill_switch_known``, ``mqtt``, ``flight_recorder`` …) and its health where it has one (None: no health of its
    own), reported like a stage's under the source's name."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    healthy: bool | None = None
    detail: str = ""


class StatusSource(Protocol):
    """A part that runs on its own, as the cycle reads it once per tick (``service.status_sources`` adapts the kill
    switch, the Xid thread, the MQTT publisher and the flight recorder)."""

    name: str

    def status(self) -> SourceStatus: ...
