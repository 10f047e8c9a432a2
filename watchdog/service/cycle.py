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

from watchdog.config.runtime import RuntimePolicy
from watchdog.detection import Detector, ViewUnavailable
from watchdog.model import ActionReport, Attribution, Finding, NodeSample, PodIndex, TickResult, finding_changes
from watchdog.attribution.stage import why_unhealthy
from watchdog.service.pipeline import (
    ActionRunner,
    ActivitySource,
    Attributor,
    Sampler,
    StatusSource,
    TickSink,
    VictimSignalSource,
)
from watchdog.service.state import AgentState
from watchdog.service.tick_path import TickPlan, plan_tick

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
        detector: Detector,
        action: ActionRunner,
        signals: VictimSignalSource | None = None,
        activity: ActivitySource | None = None,
        status: Sequence[StatusSource] = (),
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
        self.signals = signals
        self.activity = activity
        self.status = tuple(status)
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
        sample = await self._sample(tick)
        xids = self.state.drain_xids()  # the event thread runs apart: its events join this tick's sample
        if sample is None:
            self.state.keep_xids(xids)  # judged with the next sample: no GPU list to check them against now
            xids = ()
        elif xids:
            # Through the plausibility gate with the sample (an Xid on an absent GPU, or a number no driver
            # reports, is refused and counted); the gate re-admits a tick without counting it twice.
            sample = self.sampler.gate.admit(dataclasses.replace(sample, xids=sample.xids + xids))
            xids = tuple(event for event in sample.xids if event in xids)
            self.state.count_xids(xids)
        if sample is not None:
            self.state.count_rejections(sample)  # the final admission of the tick: each refusal counted once
        attribution = self._attribute(sample) if sample is not None else None
        signals = self.signals.values() if self.signals is not None and sample is not None else None
        activity = self.activity.values() if self.activity is not None and sample is not None else None
        planned = self._plan(sample, attribution, signals, activity) if attribution is not None else None
        findings, changes = (), ()
        if planned is not None:  # a tick that detected nothing changes nothing: no finding is "resolved" by it
            findings, changes = planned.findings, finding_changes(self.findings, planned.findings)
            self.findings = planned.findings
        actions = await self._act(planned, sample) if planned is not None else ActionReport()
        if sample is not None and any(not gpu.lost for gpu in sample.gpus):
            self.state.ready = True  # ready after the first sample that saw a working GPU
        fields = self._read_status()
        self.snapshot = self.state.snapshot(
            sample=sample,
            attribution=attribution,
            findings=findings,
            evictions=self.action.counts,
            mode=self.action.policy.mode,
            **{"paused": False, **fields},
        )
        result = TickResult(tick=tick, snapshot=self.snapshot, changes=changes, actions=actions, xids=xids,
                            signals=signals, activity=activity)
        self._report(result)
        return result

    # ------------------------------------------------------------------------------------------- stages

    def _read_status(self) -> dict[str, Any]:
        """Every part that runs on its own (the kill switch, the Xid thread, the MQTT stream, the flight recorder) is
        read once per cycle through the one registered-source mechanism: the snapshot fields it contributes, and its
        health, reported like a stage's where it has one. A source that raises costs only its own fields."""
        fields: dict[str, Any] = {}
        for source in self.status:
            try:
                status = source.status()
            except Exception as exc:
                log.exception("status of %s failed", source.name)
                self.state.count_error(source.name, type(exc).__name__.lower())
                continue
            fields.update(status.fields)
            if status.healthy is not None:
                self.state.stage_done(source.name, seconds=0.0, success=status.healthy,
                                      detail="" if status.healthy else status.detail)
        return fields

    async def _sample(self, tick: int) -> NodeSample | None:
        started = time.perf_counter()
        if self._sampling is not None and not self._sampling.done():
            # A hung NVML call (a GPU in a bad state) cannot be interrupted; never stack a second one on it.
            self.state.count_error("sampling", "still_running")
            self.state.stage_done("sampling", seconds=0.0, success=False, detail="previous NVML sample still running")
            return None
        self._sampling = sampling = asyncio.ensure_future(self.to_thread(self.sampler.sample, tick))
        # asyncio.wait, not wait_for(shield(…)): on Python 3.11 wait_for returns the result instead of raising when
        # the cycle is cancelled at the moment the sample completes (CPython gh-86296, fixed in 3.12), and a stop
        # request (SIGTERM, Ctrl-C) landing on a tick's end was then lost. wait never cancels the sample either.
        done, _ = await asyncio.wait({sampling}, timeout=self.sample_timeout)
        if not done:
            self.state.count_error("sampling", "timeout")
            self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=False,
                                  detail=f"NVML sample took over {self.sample_timeout:g}s")
            return None
        try:
            sample = sampling.result()
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
            result = Attribution(healthy=False, kubelet_ok=False, api_ok=False,
                                 index=PodIndex(tenant_label=self.runtime.tenant_label))
        self.state.stage_done("attribution", seconds=time.perf_counter() - started, success=result.healthy,
                              detail="" if result.healthy else why_unhealthy(result))
        return result

    def _plan(
        self, sample: NodeSample, attribution: Attribution, signals, activity
    ) -> TickPlan | None:
        """detect → decide → pace through the tick path replay runs too; each finding source that raised is counted
        as its own stage (``detection/<name>``) and costs only its own findings."""
        started = time.perf_counter()
        try:
            planned = plan_tick(detector=self.detector, planner=self.action, sample=sample, attribution=attribution,
                                signals=signals, activity=activity)
        except Exception as exc:
            log.exception("detection failed at tick %d", sample.tick)
            self.state.count_error("detection", type(exc).__name__.lower())
            self.state.stage_done("detection", seconds=time.perf_counter() - started, success=False)
            return None
        for name, exc in planned.failures:
            # A source skipped for want of a view part names that part's failure as its cause, logged once there.
            trace = None if isinstance(exc, ViewUnavailable) else exc
            log.error("finding source %s failed at tick %d: %r", name, sample.tick, exc, exc_info=trace)
            self.state.count_error(f"detection/{name}", type(exc).__name__.lower())
        failed = ", ".join(name for name, _ in planned.failures)
        self.state.stage_done("detection", seconds=time.perf_counter() - started, success=not failed,
                              detail=f"failed: {failed}" if failed else "")
        if planned.plan_error is not None:
            log.error("decide/pace failed at tick %d: %r", sample.tick, planned.plan_error,
                      exc_info=planned.plan_error)
            self.state.count_error("action", type(planned.plan_error).__name__.lower())
        return planned

    async def _act(self, planned: TickPlan, sample: NodeSample) -> ActionReport:
        """Settle the tick's decisions and queue its sends; the evictor sends beside the tick, so this never waits
        on the API server."""
        started = time.perf_counter()
        if planned.plan_error is not None:
            self.state.stage_done("action", seconds=0.0, success=False, detail="decide/pace failed: nothing acted on")
            return ActionReport()
        try:
            report = await self.action.dispatch(list(planned.decisions), tick=sample.tick,
                                                decided_at=planned.decided_at)
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

