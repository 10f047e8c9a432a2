"""The one place that wires the agent: it builds every stage from Settings plus the injected device and
cluster, starts the long-running tasks, and runs the cycle on a timer.

Nothing here decides anything. The NVML module (real pynvml or the simulation), the clock, the sleep and the
Kubernetes API client are parameters, so the demo, the tests and a real node run this same code path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from types import ModuleType
from typing import Awaitable, Callable, Sequence

from watchdog.action import ActionStage
from watchdog.action.audit import AuditLog
from watchdog.action.killswitch import KillSwitch
from watchdog.attribution.kubelet import assignments_from_settings, replicas_from_settings
from watchdog.attribution.pods import PodCache
from watchdog.attribution.slices import SliceCache
from watchdog.attribution.proc import ProcReader
from watchdog.attribution.sharing_sources import NodeSharing
from watchdog.attribution.stage import NodeAttributor
from watchdog.config import Policy, Settings, load_policy
from watchdog.config.runtime import RuntimePolicy
from watchdog.detection import Detector
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.eviction_budget import ClusterEvictionBudget
from watchdog.kube.node_labels import NodeLabels
from watchdog.kube.vmis import NodeVmis
from watchdog.kube.pods import PodWatcher
from watchdog.kube.resourceslices import ResourceSliceWatcher
from watchdog.model import TickResult
from watchdog.publishing.api import DecisionLog
from watchdog.publishing.mqtt import MqttPublisher
from watchdog.publishing.server import MetricsServer
from watchdog.sampling.sampler import NvmlSampler
from watchdog.sampling.xid_watcher import XidWatcher
from watchdog.service.clock_watch import ClockStepWatch
from watchdog.service import status_sources
from watchdog.service.cycle import Cycle
from watchdog.service.pipeline import PolicyRecordingSink, TickSink
from watchdog.service.policy_watch import PolicyWatcher
from watchdog.service.borrowed_activity import BorrowedActivity, needs_borrowing
from watchdog.service.prometheus_signals import PrometheusSignals
from watchdog.service.state import AgentState
from watchdog.service.whatif_api import WhatIfServer
from watchdog.service.whatif_jobs import WhatIfJobs, WhatIfWorker
from watchdog.trace.flight import FlightRecorder

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[object]]


class Agent:
    """``await Agent(settings, nvml=…).run()`` — until cancelled. ``start()``/``cycle_once()`` drive it step by step."""

    def __init__(
        self,
        settings: Settings,
        *,
        nvml: ModuleType,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,  # between cycles only; a simulated world moves its clock here
        kube: KubeApi | None = None,
        policy: Policy | None = None,
        sinks: Sequence[TickSink] = (),
        monotonic: Callable[[], float] | None = None,
        whatif_worker: WhatIfWorker | None = None,
    ) -> None:
        """`clock`: wall time (samples', Events' and audit lines' timestamps). `monotonic`: the clock every guarantee
        runs on (cooldowns, hysteresis, the token bucket, backoffs, the decision age); a real node passes
        ``time.monotonic``, a simulated world whose one clock never steps may leave it None (then `clock`).
        `whatif_worker`: the replay the what-if API runs in its worker process (watchdog.evaluation.whatif.run_whatif;
        the agent does not import the evaluation); None: the API, when on, answers 503."""
        self.settings = settings
        self.node = settings.node_name
        self.clock = clock
        self.monotonic = monotonic or clock
        self.clock_steps = ClockStepWatch(wall=clock, monotonic=self.monotonic,
                                          tolerance=max(2.0, settings.sampling.interval_seconds))
        self.sleep = sleep
        self.kube = kube
        # A policy file is read now, so an invalid one stops the start (ConfigError names each field); later
        # edits go through PolicyWatcher, where an invalid one is refused and the last good policy stays.
        self.policy = policy or (load_policy(settings.policy_file) if settings.policy_file else settings.policy)
        self.runtime = self._resolve(self.policy)
        if settings.attribution.tenant_label:
            log.warning("attribution.tenant_label is deprecated: name the tenant label in the policy's "
                        "action.tenant_label (which wins when both are set; docs/action.md, Tenants)")
        self.state = AgentState(node=self.node)
        self.sampler = NvmlSampler(nvml, node=self.node, clock=clock, settings=settings.sampling)
        self.xids = XidWatcher(
            nvml,
            on_event=self._on_event_from_thread,
            clock=clock,
            wait_ms=settings.sampling.event_wait_ms,
            on_mig_change=self.sampler.request_enumeration,
        ) if settings.sampling.events else None
        self.pods = PodCache()
        # The agent's clock stamps its Events too: wall time in a DaemonSet, and in a simulated world the same
        # time line as the fake API server's pods, so `kubectl get events` shows their real age.
        self.evictions = KubeEvictions(kube, clock=clock) if kube is not None else None
        self.kill_switch = KillSwitch(self.evictions, settings=self.runtime.kill_switch, namespace=settings.namespace)
        # Shared by every agent and the controller: a slot per send, kept in a ConfigMap of the agents' namespace.
        self.budget = ClusterEvictionBudget(kube, settings=self.runtime.action.cluster_budget,
                                            namespace=settings.namespace, identity=self.node)
        self.action = ActionStage(
            self.runtime.action,
            self.evictions,
            clock=clock,
            audit=AuditLog.from_setting(settings.audit_log),
            node=self.node,
            kill_switch=self.kill_switch if self.evictions is not None else None,
            budget=self.budget,
            monotonic=self.monotonic,
        )
        self.signals = PrometheusSignals(settings.signals, runtime=self.runtime, clock=clock) \
            if settings.signals.prometheus_url else None
        self.activity = BorrowedActivity(settings.signals, wanted=lambda: needs_borrowing(self.cycle.snapshot.sample),
                                         clock=clock) \
            if settings.signals.prometheus_url and settings.signals.borrowed_activity.enabled else None
        self.detector = Detector(self.runtime.detection)
        self.kubelet = assignments_from_settings(settings.attribution)
        self.pod_watcher = PodWatcher(
            kube,
            node=self.node,
            on_event=self._on_pod_event,
            on_relist=self.pods.replace,
            watch_timeout_seconds=settings.kube.watch_timeout_seconds,
            watch_idle_seconds=settings.kube.watch_idle_seconds,
            backoff_max=settings.kube.watch_backoff_max_seconds,
            gpu_memory_resource=settings.attribution.gpu_memory_request_resource,
        ) if kube is not None else None
        # DRA: the GPU driver's ResourceSlices name the NVML device behind each claimed (driver, pool, device).
        self.slices = SliceCache()
        self.slice_watcher = ResourceSliceWatcher(
            kube,
            node=self.node,
            driver=settings.attribution.dra_driver,
            on_event=self.slices.apply,
            on_relist=self.slices.replace,
            watch_timeout_seconds=settings.kube.watch_timeout_seconds,
            watch_idle_seconds=settings.kube.watch_idle_seconds,
            backoff_max=settings.kube.watch_backoff_max_seconds,
        ) if kube is not None and settings.attribution.dra_driver else None
        # How the device plugin shares each GPU: the kubelet's replica counts and the Node's GFD labels, read slowly
        # off the tick, joined with the settings (attribution/sharing.py).
        sharing = settings.attribution.sharing
        self.replicas = replicas_from_settings(settings.attribution)
        self.node_labels = NodeLabels(kube, node=self.node, refresh_seconds=sharing.refresh_seconds,
                                      backoff_max_seconds=settings.kube.watch_backoff_max_seconds) \
            if kube is not None and self.node else None
        self.sharing = NodeSharing(kubelet=self.replicas, labels=self.node_labels, strategy=sharing.strategy,
                                   replicas=sharing.replicas)
        # The node's KubeVirt VMIs, listed slowly off the tick: who holds each vGPU of a vGPU host (kube/vmis.py).
        self.vmis = NodeVmis(kube, node=self.node, backoff_max_seconds=settings.kube.watch_backoff_max_seconds) \
            if kube is not None and self.node else None
        self.attributor = NodeAttributor(
            kubelet=self.kubelet,
            pods=self.pods,
            pods_ok=self._pods_ok,
            proc=ProcReader(settings.attribution.proc_root),
            clock=clock,
            slices=self.slices,
            slices_ok=self._slices_ok if self.slice_watcher is not None else None,
            sharing=self.sharing,
            vmis=self.vmis,
        )
        self.mqtt = MqttPublisher(settings.mqtt, node=self.node) if settings.mqtt.enabled else None
        # The last hours of ticks on the node's disk, for a replay after an incident (docs/flight-recorder.md).
        self.flight_recorder = FlightRecorder(settings.flight_recorder,
                                              tick_seconds=settings.sampling.interval_seconds) \
            if settings.flight_recorder.enabled else None
        self.decision_log = DecisionLog()  # the last decisions, for the JSON API on the metrics port
        self.cycle = Cycle(
            state=self.state,
            runtime=self.runtime,
            sampler=self.sampler,
            attributor=self.attributor,
            detector=self.detector,
            action=self.action,
            signals=self.signals,
            activity=self.activity,
            status=self._status_sources(),
            sinks=(*sinks, self.decision_log, *((self.mqtt,) if self.mqtt is not None else ()),
                   *((self.flight_recorder,) if self.flight_recorder is not None else ())),
            sample_timeout=settings.sampling.sample_timeout_seconds,
        )
        self._register_error_sources()
        # Every consumer of the runtime policy, handed the same object on every load. The sinks that record it
        # (trace headers) are built before it is known, so they are handed the first load here.
        recorders = [sink for sink in self.cycle.sinks if isinstance(sink, PolicyRecordingSink)]
        for recorder in recorders:
            recorder.apply_runtime(self.runtime)
        self._runtime_consumers = [self.detector, self.cycle, self.action, self.kill_switch, self.budget,
                                   *((self.signals,) if self.signals is not None else ()), *recorders]
        self.server = MetricsServer.from_settings(
            settings.publishing, snapshot_provider=lambda: self.cycle.snapshot, alive=self._alive,
            decisions=self.decision_log,
        )
        # The fleet what-if API, on its own port, only with a token (docs/flight-recorder.md, "Fleet what-if").
        self.whatif = WhatIfServer(settings.whatif, jobs=WhatIfJobs(
            settings.whatif, directory=settings.flight_recorder.directory if settings.flight_recorder.enabled else None,
            worker=whatif_worker, node=self.node, own_namespace=settings.namespace,
            tenant_label=settings.attribution.tenant_label, monotonic=self.monotonic,
        )) if settings.whatif.token_file else None
        self.port: int | None = None
        self.whatif_port: int | None = None
        self.tick = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stack = AsyncExitStack()
        self._running = False
        self._last_progress = time.monotonic()

    # ------------------------------------------------------------------------------------------ wiring

    def _resolve(self, policy: Policy) -> RuntimePolicy:
        """``policy`` as this agent applies it: own namespace protected, tenant label, --mode over every load."""
        return RuntimePolicy.resolve(policy, own_namespace=self.settings.namespace,
                                     tenant_label=self.settings.attribution.tenant_label,
                                     mode_override=self.settings.mode_override)

    def _status_sources(self) -> list[status_sources.Source]:
        """What the parts that run on their own show in each snapshot, read once per cycle."""
        sources = [status_sources.kill_switch(self.kill_switch)]
        if self.xids is not None:
            sources.append(status_sources.xid_events(self.xids))
        if self.mqtt is not None:
            sources.append(status_sources.counters("mqtt", self.mqtt.snapshot_counters))
        if self.flight_recorder is not None:
            sources.append(status_sources.counters("flight_recorder", self.flight_recorder.counters))
        return sources

    def _register_error_sources(self) -> None:
        """Stages that keep their own error tallies are read as they are when each snapshot is frozen."""
        self.state.add_error_source("sampling", self.sampler.error_counts)
        self.state.add_error_source("attribution", self.attributor.error_counts)
        if self.slice_watcher is not None:
            watcher = self.slice_watcher
            self.state.add_error_source("attribution", lambda: watcher.error_counts)
        self.state.add_error_source("action", lambda: {"kill_switch_read": self.kill_switch.failures,
                                                       "eviction_budget": self.budget.failures})
        if self.signals is not None:
            self.state.add_error_source("signals", lambda: self.signals.errors)
        if self.activity is not None:
            self.state.add_error_source("borrowed_activity", lambda: self.activity.errors)
        if self.xids is not None:
            self.state.add_error_source("events", self.xids.error_counts)

    def apply_policy(self, policy: Policy) -> None:
        """Hot reload: one RuntimePolicy for every consumer. Detection keeps its learned baselines, action keeps
        cooldowns and backoffs."""
        self.policy = policy
        self.runtime = self._resolve(policy)
        for consumer in self._runtime_consumers:
            consumer.apply_runtime(self.runtime)

    def _pods_ok(self) -> bool:
        return self.pod_watcher is not None and self.pod_watcher.ok

    def _slices_ok(self) -> bool | None:
        """The slice watch is current; None while the cluster does not serve resource.k8s.io/v1 (no DRA there, so
        no source to be down)."""
        if self.slice_watcher is None or self.slice_watcher.not_served:
            return None
        return self.slice_watcher.ok

    def _on_pod_event(self, kind: str, pod) -> None:
        self.pods.apply(kind, pod)
        if kind in ("ADDED", "DELETED"):
            self.kubelet.request_refresh()  # devices were given or freed: do not wait for the next periodic List

    def _on_event_from_thread(self, event) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.state.add_xid, event)

    def _alive(self) -> bool:
        """Alive while cycles keep completing: a loop stuck for many intervals fails the liveness probe."""
        limit = max(30.0, 10 * self.settings.sampling.interval_seconds)
        return self._running and time.monotonic() - self._last_progress < limit

    # --------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> int:
        """Open NVML, start the event thread and the metrics server; returns the metrics port."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.sampler.open)
        self._stack.callback(self.sampler.close)
        if self.xids is not None:
            self.xids.start()
            # stop() joins the thread (up to one bounded wait): off the loop, and before NVML is shut down.
            self._stack.push_async_callback(asyncio.to_thread, self.xids.stop)
        if self.evictions is not None:
            # A restarted agent remembers this node's recent evictions (cooldowns, evicted pods) from their Events.
            await self.action.restore_from_api()
        self.port = await self.server.start()
        self._stack.push_async_callback(self.server.stop)
        if self.whatif is not None:
            self.whatif_port = await self.whatif.start()
            self._stack.push_async_callback(self.whatif.stop)
        self._stack.push_async_callback(self.kubelet_close)
        if self.flight_recorder is not None:
            self._stack.callback(self.flight_recorder.close)
        self._running = True
        log.info("gpu-watchdog agent on node %s: metrics on port %d, mode %s",
                 self.node, self.port, self.action.policy.mode)
        return self.port

    async def kubelet_close(self) -> None:
        await self.kubelet.close()
        await self.replicas.close()

    async def stop(self) -> None:
        self._running = False
        await self._stack.aclose()

    async def cycle_once(self) -> TickResult:
        step = self.clock_steps.check()
        if step is not None:  # the wall clock jumped (NTP step, VM resume): timestamps only, no guarantee moves
            log.warning("wall clock stepped %+.1fs against the monotonic clock; cooldowns and hysteresis are "
                        "unaffected",
                        step)
            self.state.count_error("clock", "step_forward" if step > 0 else "step_backward")
        result = await self.cycle.run(self.tick)
        self._last_progress = time.monotonic()
        self.tick += 1
        return result

    async def _ticker(self, ticks: int | None = None) -> None:
        """One cycle per interval, forever or for ``ticks`` cycles."""
        interval = self.settings.sampling.interval_seconds
        done = 0
        while ticks is None or done < ticks:
            done += 1
            started = time.monotonic()  # the cycle's own duration, immune to wall-clock steps
            await self.cycle_once()
            await self.sleep(min(interval, max(0.0, interval - (time.monotonic() - started))))

    async def run(self, *, ticks: int | None = None) -> None:
        """Start, run every long-lived task until cancelled (or ``ticks`` cycles), then stop cleanly."""
        if self.port is None:
            await self.start()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.kubelet.refresher(self.clock), name="kubelet-refresher")
                group.create_task(self.replicas.refresher(self.monotonic), name="kubelet-replicas")
                if self.node_labels is not None:
                    group.create_task(self.node_labels.run(), name="node-labels")
                if self.vmis is not None:
                    group.create_task(self.vmis.run(), name="node-vmis")
                if self.pod_watcher is not None:
                    group.create_task(self.pod_watcher.run(), name="pod-watcher")
                if self.slice_watcher is not None:
                    group.create_task(self.slice_watcher.run(), name="resourceslice-watcher")
                if self.evictions is not None:
                    group.create_task(self.kill_switch.watcher(), name="kill-switch")
                    # The one task that talks to the Eviction API, beside the tick: a slow API server never
                    # stalls sampling, detection or /metrics (action/stage.py).
                    group.create_task(self.action.sender(), name="evictor")
                if self.mqtt is not None:
                    group.create_task(self.mqtt.run(), name="mqtt-publisher")
                if self.signals is not None:
                    group.create_task(self.signals.run(), name="victim-signals")
                if self.activity is not None:
                    group.create_task(self.activity.run(), name="borrowed-activity")
                if self.settings.policy_file:
                    watcher = PolicyWatcher(
                        self.settings.policy_file,
                        apply=self.apply_policy,
                        on_result=lambda result: self.state.policy_reloads.update([result]),
                    )
                    group.create_task(watcher.run(), name="policy-watcher")
                if ticks is None:
                    group.create_task(self._ticker(), name="ticker")
                else:
                    await self._ticker(ticks)
                    raise _Done
        except* _Done:
            pass
        finally:
            await self.stop()


class _Done(Exception):
    """Ends the task group after a bounded run."""
