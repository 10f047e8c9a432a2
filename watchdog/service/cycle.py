"""One pipeline cycle: sample → attribute → detect → decide/act → snapshot, each stage timed and fenced, and one
``TickResult`` handed to whoever reports on the tick.

A stage that fails degrades this cycle and is counted; it never stops the loop, and a failure upstream makes the
stages after it more careful, never bolder: without a sample nothing is detected, and an unhealthy attribution
reaches the action stage marked as such, where it means "do not evict". Everything that happens once per tick —
the Xid drain, the event thread's health, the finding changes, the sinks — happens here and nowhere else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Callable, Sequence

from watchdog.attribution.join import with_claims
from watchdog.config.runtime import RuntimePolicy
from watchdog.model import ActionReport, Attribution, Finding, NodeSample, TickResult, finding_changes
from watchdog.service.attributor import why_unhealthy
from watchdog.service.pipeline import (
    ActionRunner,
    ActivitySource,
    Attributor,
    EventWatcherView,
    FindingDetector,
    FlightRecorderView,
    MqttView,
    PauseView,
    Sampler,
    TickSink,
    VictimSignalSource,
)
from watchdog.service.state import AgentState

log = logging.getLogger(__name__)


class Cycle:
    """Moves one tick's data through the stages. Owns no I/O of its own beyond calling the stages it is given."""

    def __init__(
        self,
        *,
        state: AgentState,
        runtime: RuntimePolicy,
        sampler: Sampler,
        attributor: Attributor,
        detector: FindingDetector,
        action: ActionRunner,
        gate: PauseView,
        signals: VictimSignalSource | None = None,
        activity: ActivitySource | None = None,
        events: EventWatcherView | None = None,
        mqtt: MqttView | None = None,
        flight_recorder: FlightRecorderView | None = None,
        sinks: Sequence[TickSink] = (),
        sample_timeout: float = 10.0,
        to_thread: Callable[..., Any] = asyncio.to_thread,
    ) -> None:
        self.state = state
        self.runtime = runtime
        self.sampler = sampler
        self.attributor = attributor
        self.detector = detector
        self.action = action
        self.gate = gate
        self.signals = signals
        self.activity = activity
        self.events = events
        self.mqtt = mqtt
        self.flight_recorder = flight_recorder
        self.sinks = tuple(sinks)
        self.sample_timeout = sample_timeout
        self.to_thread = to_thread
        self.findings: tuple[Finding, ...] = ()
        self.snapshot = state.snapshot(sample=None, attribution=None, findings=(), evictions={},
                                       mode=runtime.mode, paused=False)
        self._sampling: asyncio.Future | None = None  # the NVML sample in flight, if one outlived its cycle

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A reloaded policy: its tenant label reaches attribution from the next tick on."""
        self.runtime = runtime

    async def run(self, tick: int) -> TickResult:
        self._events_health()
        sample = await self._sample(tick)
        xids = self.state.drain_xids()  # Xids count even in a cycle without a sample: the thread runs apart
        if sample is not None and xids:
            sample = dataclasses.replace(sample, xids=sample.xids + xids)
        attribution = self._attribute(sample) if sample is not None else None
        signals = self.signals.values() if self.signals is not None and sample is not None else None
        activity = self.activity.values() if self.activity is not None and sample is not None else None
        detected = self._detect(sample, attribution, signals, activity) if attribution is not None else None
        findings, changes = (), ()
        if detected is not None:  # a tick that detected nothing changes nothing: no finding is "resolved" by it
            findings, changes = detected, finding_changes(self.findings, detected)
            self.findings = detected
        actions = await self._act(findings, attribution) if attribution is not None else ActionReport()
        if sample is not None and any(not gpu.lost for gpu in sample.gpus):
            self.state.ready = True  # ready after the first sample that saw a working GPU
        self.snapshot = self.state.snapshot(
            sample=sample,
            attribution=attribution,
            findings=findings,
            evictions=self.action.counts,
            mode=self.action.policy.mode,
            paused=self.gate.paused(),
            mqtt=self.mqtt.snapshot_counters() if self.mqtt is not None else None,
            kill_switch_known=not self.gate.unknown,
            flight_recorder=self.flight_recorder.counters() if self.flight_recorder is not None else None,
        )
        result = TickResult(tick=tick, snapshot=self.snapshot, changes=changes, actions=actions, xids=xids,
                            signals=signals, activity=activity)
        self._report(result)
        return result

    # ------------------------------------------------------------------------------------------- stages

    def _events_health(self) -> None:
        """The Xid event thread runs on its own; its health is reported like a stage's, once per cycle."""
        if self.events is None:
            return
        healthy = self.events.healthy  # running, registered on a GPU, last wait ended well
        self.state.stage_done("events", seconds=0.0, success=healthy,
                              detail="" if healthy else "Xid events are not being received")

    async def _sample(self, tick: int) -> NodeSample | None:
        started = time.perf_counter()
        if self._sampling is not None and not self._sampling.done():
            # A hung NVML call (a GPU in a bad state) cannot be interrupted; never stack a second one on it.
            self.state.count_error("sampling", "still_running")
            self.state.stage_done("sampling", seconds=0.0, success=False, detail="previous NVML sample still running")
            return None
        self._sampling = asyncio.ensure_future(self.to_thread(self.sampler.sample, tick))
        try:
            sample = await asyncio.wait_for(asyncio.shield(self._sampling), self.sample_timeout)
        except asyncio.TimeoutError:
            self.state.count_error("sampling", "timeout")
            self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=False,
                                  detail=f"NVML sample took over {self.sample_timeout:g}s")
            return None
        except Exception as exc:  # the sampler guards each device; this is the last fence
            log.exception("sampling failed at tick %d", tick)
            self.state.count_error("sampling", type(exc).__name__.lower())
            self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=False, detail=str(exc))
            return None
        lost = sum(1 for gpu in sample.gpus if gpu.lost)
        self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=not lost,
                              detail=f"{lost} GPU(s) lost" if lost else "")
        return sample

    def _attribute(self, sample: NodeSample) -> Attribution:
        started = time.perf_counter()
        try:
            result = self.attributor.attribute(sample, tenant_label=self.runtime.tenant_label)
        except Exception as exc:
            log.exception("attribution failed")
            self.state.count_error("attribution", type(exc).__name__.lower())
            result = Attribution(healthy=False, kubelet_ok=False, api_ok=False)
        self.state.stage_done("attribution", seconds=time.perf_counter() - started, success=result.healthy,
                              detail="" if result.healthy else why_unhealthy(result))
        return result

    def _detect(
        self, sample: NodeSample, attribution: Attribution, signals, activity
    ) -> tuple[Finding, ...] | None:
        started = time.perf_counter()
        try:
            findings = tuple(self.detector.step(sample, attribution, external_signals=signals,
                                                borrowed_activity=activity))
            findings = with_claims(findings, attribution)  # the DRA claim of the pod each finding is about
        except Exception as exc:
            log.exception("detection failed at tick %d", sample.tick)
            self.state.count_error("detection", type(exc).__name__.lower())
            self.state.stage_done("detection", seconds=time.perf_counter() - started, success=False)
            return None
        self.state.stage_done("detection", seconds=time.perf_counter() - started, success=True)
        return findings

    async def _act(self, findings: tuple[Finding, ...], attribution: Attribution) -> ActionReport:
        started = time.perf_counter()
        try:
            report = await self.action.run_cycle(findings, attribution)
        except Exception as exc:
            log.exception("action stage failed")
            self.state.count_error("action", type(exc).__name__.lower())
            self.state.stage_done("action", seconds=time.perf_counter() - started, success=False)
            return ActionReport()
        self.state.stage_done("action", seconds=time.perf_counter() - started, success=True)
        return report

    def _report(self, result: TickResult) -> None:
        """Log the finding changes, then hand the result to every sink; a failing sink costs only its own output."""
        for change, finding in result.changes:
            log.log(
                logging.WARNING if change == "new" else logging.INFO,
                "finding %s: %s %s victims=%s culprit=%s %s",
                change, finding.kind, finding.key,
                ",".join(v.key for v in finding.victims) or "-",
                finding.culprit.key if finding.culprit else "-",
                finding.message,
            )
        for event in result.xids:
            if event.xid:
                log.warning("Xid %d on GPU %d (%s) GI %s CI %s", event.xid, event.gpu_index, event.gpu_uuid,
                            event.gpu_instance, event.compute_instance)
        for sink in self.sinks:
            try:
                sink.tick_done(result)
            except Exception as exc:
                log.exception("%s failed on tick %d", sink.stage, result.tick)
                self.state.count_error(sink.stage, type(exc).__name__.lower())

