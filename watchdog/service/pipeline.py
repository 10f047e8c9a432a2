"""What the cycle needs of each part it drives, as protocols: the wiring in ``agent`` hands it objects that have
these, and a type checker (or a reader) sees the pipeline from this one page.

sampler → attributor → detector → action runner, then the sinks that report on the tick. The views below them are
what the snapshot shows of the parts that run on their own (the kill switch, the Xid thread, the MQTT publisher).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol

from watchdog.config.action import ActionPolicy
from watchdog.model import ActionReport, Attribution, Finding, InstanceActivity, NodeSample, TickResult


class Sampler(Protocol):
    """``sampling.sampler.NvmlSampler``: one NodeSample per tick, from a worker thread."""

    def sample(self, tick: int) -> NodeSample: ...

    def error_counts(self) -> Mapping[str, int]: ...


class Attributor(Protocol):
    """``service.attributor.NodeAttributor``: who owns what in this sample."""

    def attribute(self, sample: NodeSample, *, tenant_label: str | None) -> Attribution: ...


class FindingDetector(Protocol):
    """``detection.Detector``: findings from one sample, with its memory of earlier ones."""

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        *,
        external_signals: Mapping[str, float] | None = None,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> Iterable[Finding]: ...


class ActionRunner(Protocol):
    """``action.ActionStage``: decide, pace and act on one tick's findings."""

    @property
    def policy(self) -> ActionPolicy: ...

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]: ...

    async def run_cycle(self, findings: Iterable[Finding], attribution: Attribution) -> ActionReport: ...


class TickSink(Protocol):
    """Reports on each tick from its TickResult (the MQTT stream, the trace recorder). ``stage`` names it in the
    error counts when it fails; a failure never reaches the cycle."""

    stage: str

    def tick_done(self, result: TickResult) -> None: ...


class VictimSignalSource(Protocol):
    """``service.prometheus_signals.PrometheusSignals``: tenants' own signals, pod key → value."""

    def values(self) -> Mapping[str, float]: ...


class ActivitySource(Protocol):
    """``service.borrowed_activity.BorrowedActivity``: per-GPU-instance activity from outside NVML."""

    def values(self) -> Mapping[str, InstanceActivity]: ...


class PauseView(Protocol):
    """``action.killswitch.KillSwitch`` as the snapshot shows it."""

    def paused(self) -> bool: ...

    @property
    def unknown(self) -> bool: ...


class EventWatcherView(Protocol):
    """``sampling.xid_watcher.XidWatcher``'s health."""

    @property
    def healthy(self) -> bool: ...


class FlightRecorderView(Protocol):
    """``trace.flight.FlightRecorder``'s own counters, for the exporter."""

    def counters(self) -> Mapping[str, int]: ...


class MqttView(Protocol):
    """``publishing.mqtt.MqttPublisher``'s own counters, for the exporter."""

    def snapshot_counters(self) -> Mapping[str, int]: ...
