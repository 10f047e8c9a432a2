"""One pipeline cycle: sample → attribute → detect → decide/act → snapshot, each stage timed and fenced.

A stage that fails degrades this cycle and is counted; it never stops the loop, and a failure upstream makes
the stages after it more careful, never bolder: without a sample nothing is detected, and an unhealthy
attribution reaches the action stage marked as such, where it means "do not evict".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from types import MappingProxyType
from typing import Any, Callable, Mapping

from watchdog.attribution.join import attribute, unassigned_processes, unknown_devices, unresolvable_device_ids
from watchdog.detection import Detector, changes
from watchdog.model import Attribution, Finding, NodeSample, Snapshot
from watchdog.service.state import AgentState, CounterDelta

log = logging.getLogger(__name__)

TickHook = Callable[[NodeSample, Attribution, tuple[Finding, ...], Mapping[str, float] | None], None]
"""Called once per cycle with what detection saw: the sample, the attribution, the findings, the tenants' signals."""


class Cycle:
    """Moves one tick's data through the stages. Owns no I/O of its own beyond calling the stages it is given."""

    def __init__(
        self,
        *,
        state: AgentState,
        sampler: Any,
        detector: Detector,
        action: Any,
        clock: Callable[[], float],
        assignments: Any | None = None,
        pods: Any | None = None,
        pods_ok: Callable[[], bool] = lambda: False,
        proc: Any | None = None,
        tenant_label: str | None = None,
        external_signals: Callable[[], Mapping[str, float]] | None = None,
        on_tick: TickHook | None = None,
        paused: Callable[[], bool] = lambda: False,
        mqtt_counters: Callable[[], Mapping[str, int]] | None = None,
        kill_switch_known: Callable[[], bool] = lambda: True,
        to_thread: Callable[..., Any] = asyncio.to_thread,
    ) -> None:
        self.state = state
        self.sampler = sampler
        self.detector = detector
        self.action = action
        self.clock = clock
        self.assignments = assignments
        self.pods = pods
        self.pods_ok = pods_ok
        self.proc = proc
        self.tenant_label = tenant_label
        self.external_signals = external_signals
        self.on_tick = on_tick
        self.paused = paused
        self.mqtt_counters = mqtt_counters
        self.kill_switch_known = kill_switch_known
        self.to_thread = to_thread
        self.findings: tuple[Finding, ...] = ()
        self.last_signals: Mapping[str, float] | None = None
        self.snapshot: Snapshot = state.snapshot(
            sample=None, attribution=None, findings=(), evictions={}, mode=action.policy.mode, paused=False
        )
        self.sample_timeout = 10.0
        self._sampling: asyncio.Future | None = None  # the NVML sample in flight, if one outlived its cycle
        self._pairs_seen: dict[tuple[str, str], float] = {}  # (device, pod) not listed → first seen
        self._unresolvable_logged = False
        self._sampler_errors = CounterDelta()
        self._proc_errors = CounterDelta()

    async def run(self, tick: int) -> Snapshot:
        sample = await self._sample(tick)
        if sample is None:
            self._drain_without_sample()
        attribution = self._attribute(sample) if sample is not None else None
        findings = self._detect(sample, attribution) if sample is not None and attribution is not None else ()
        if attribution is not None:
            await self._act(findings, attribution)
        if sample is not None and attribution is not None and self.on_tick is not None:
            self._fenced("publishing", lambda: self.on_tick(sample, attribution, findings, self.last_signals))
        if sample is not None and any(not gpu.lost for gpu in sample.gpus):
            self.state.ready = True  # ready after the first sample that saw a working GPU
        self.snapshot = self.state.snapshot(
            sample=sample,
            attribution=attribution,
            findings=findings,
            evictions=self.action.counts,
            mode=self.action.policy.mode,
            paused=self.paused(),
            mqtt=self.mqtt_counters() if self.mqtt_counters is not None else None,
            kill_switch_known=self.kill_switch_known(),
        )
        return self.snapshot

    # ------------------------------------------------------------------------------------------- stages

    async def _sample(self, tick: int) -> NodeSample | None:
        started = time.perf_counter()
        if self._sampling is not None and not self._sampling.done():
            # A hung NVML call (a GPU in a bad state) cannot be interrupted; never stack a second one on it.
            self.state.count_errors("sampling", {"still_running": 1})
            self.state.stage_done("sampling", seconds=0.0, success=False, detail="previous NVML sample still running")
            return None
        self._sampling = asyncio.ensure_future(self.to_thread(self.sampler.sample, tick))
        try:
            sample = await asyncio.wait_for(asyncio.shield(self._sampling), self.sample_timeout)
        except asyncio.TimeoutError:
            self.state.count_errors("sampling", {"timeout": 1})
            self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=False,
                                  detail=f"NVML sample took over {self.sample_timeout:g}s")
            return None
        except Exception as exc:  # the sampler guards each device; this is the last fence
            log.exception("sampling failed at tick %d", tick)
            self.state.count_errors("sampling", {type(exc).__name__.lower(): 1})
            self.state.stage_done("sampling", seconds=time.perf_counter() - started, success=False, detail=str(exc))
            return None
        self.state.count_errors("sampling", self._sampler_errors(self.sampler.error_counts()))
        lost = sum(1 for gpu in sample.gpus if gpu.lost)
        self.state.stage_done(
            "sampling",
            seconds=time.perf_counter() - started,
            success=not lost,
            detail=f"{lost} GPU(s) lost" if lost else "",
        )
        events = self.state.drain_xids()
        return dataclasses.replace(sample, xids=sample.xids + events) if events else sample

    def _drain_without_sample(self) -> None:
        """Xids still count when a cycle has no sample (the events thread runs apart from sampling)."""
        self.state.drain_xids()

    def _attribute(self, sample: NodeSample) -> Attribution:
        started = time.perf_counter()
        try:
            assignments = self.assignments.assignments if self.assignments is not None else ()
            kubelet_ok = bool(self.assignments is not None and self.assignments.ok)
            unresolvable = unresolvable_device_ids(assignments)
            if unresolvable:  # nothing can be joined by UUID: the kubelet side is as good as unreadable
                kubelet_ok = False
                if not self._unresolvable_logged:
                    log.error("kubelet device IDs are not NVML UUIDs (%s…): attribution degraded; set the device "
                              "plugin's deviceIDStrategy=uuid", ", ".join(unresolvable[:3]))
                    self._unresolvable_logged = True
            if self.assignments is not None and kubelet_ok:
                now = self.clock()
                for device in unknown_devices(sample, assignments):
                    self.assignments.note_unknown(device, now)
            pids = [p.pid for gpu in sample.gpus for p in gpu.processes]
            pids += [p.pid for gpu in sample.gpus for mig in gpu.instances for p in mig.processes]
            proc = self.proc.read(pids) if self.proc is not None else {}
            if self.proc is not None:
                self.state.count_errors("attribution", self._proc_errors(_proc_failures(self.proc.counters)))
            pods = self.pods.snapshot() if self.pods is not None else {}
            result = attribute(
                sample,
                assignments=assignments,
                pods=pods,
                proc=proc,
                kubelet_ok=kubelet_ok,
                api_ok=self.pods_ok(),
                tenant_label=self.tenant_label,
            )
            result = self._hold_back_unconfirmed(sample, result)
        except Exception as exc:
            log.exception("attribution failed")
            self.state.count_errors("attribution", {type(exc).__name__.lower(): 1})
            result = Attribution(healthy=False, kubelet_ok=False, api_ok=False)
        detail = "" if result.healthy else _why_unhealthy(result)
        self.state.stage_done("attribution", seconds=time.perf_counter() - started, success=result.healthy,
                              detail=detail)
        return result

    def _hold_back_unconfirmed(self, sample: NodeSample, attribution: Attribution) -> Attribution:
        """A process on a device its pod is not (yet) listed for stays unattributed until a kubelet List that
        started after it was first seen still does not list it: a pod that just got the device is not in the last
        List, and must not be called unauthorized for that."""
        if self.assignments is None or not attribution.healthy:
            return attribution
        now, listed_at = self.clock(), self.assignments.listed_at
        pairs = unassigned_processes(sample, attribution)
        seen = {pair: self._pairs_seen.get(pair, now) for pair in pairs.values()}
        if any(pair not in self._pairs_seen for pair in seen):
            self.assignments.request_refresh()
        self._pairs_seen = seen
        held = {pid for pid, pair in pairs.items() if listed_at < seen[pair]}
        if not held:
            return attribution
        kept = {pid: ref for pid, ref in attribution.processes.items() if pid not in held}
        return dataclasses.replace(attribution, processes=MappingProxyType(kept))

    def _detect(self, sample: NodeSample, attribution: Attribution) -> tuple[Finding, ...]:
        started = time.perf_counter()
        try:
            signals = self.external_signals() if self.external_signals is not None else None
            self.last_signals = signals
            findings = tuple(self.detector.step(sample, attribution, external_signals=signals))
        except Exception as exc:
            log.exception("detection failed at tick %d", sample.tick)
            self.state.count_errors("detection", {type(exc).__name__.lower(): 1})
            self.state.stage_done("detection", seconds=time.perf_counter() - started, success=False)
            return ()
        for change, finding in changes(self.findings, findings):
            log.log(
                logging.WARNING if change == "new" else logging.INFO,
                "finding %s: %s %s victims=%s culprit=%s %s",
                change, finding.kind, finding.key,
                ",".join(v.key for v in finding.victims) or "-",
                finding.culprit.key if finding.culprit else "-",
                finding.message,
            )
        self.findings = findings
        self.state.stage_done("detection", seconds=time.perf_counter() - started, success=True)
        return findings

    async def _act(self, findings: tuple[Finding, ...], attribution: Attribution) -> None:
        started = time.perf_counter()
        try:
            await self.action.run_cycle(findings, attribution)
        except Exception as exc:
            log.exception("action stage failed")
            self.state.count_errors("action", {type(exc).__name__.lower(): 1})
            self.state.stage_done("action", seconds=time.perf_counter() - started, success=False)
            return
        self.state.stage_done("action", seconds=time.perf_counter() - started, success=True)

    def _fenced(self, stage: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:
            log.exception("%s hook failed", stage)
            self.state.count_errors(stage, {type(exc).__name__.lower(): 1})


def _proc_failures(counters: Mapping[str, int]) -> dict[str, int]:
    return {f"proc_{k}": v for k, v in counters.items() if k in ("vanished", "denied", "errors")}


def _why_unhealthy(attribution: Attribution) -> str:
    reasons = []
    if not attribution.kubelet_ok:
        reasons.append("kubelet pod-resources unavailable")
    if not attribution.api_ok:
        reasons.append("pod metadata unavailable")
    return "; ".join(reasons)
