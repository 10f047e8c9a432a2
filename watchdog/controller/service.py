"""Wires one controller replica: the Kubernetes client, the leader Lease, the kill switch, the evictor and the
webhook server, as guarded named tasks that are cancelled together.

Several replicas run behind one Service; only the Lease holder acts (the others answer 503, which Alertmanager
retries), so a replica crash costs at most one lease duration of delay and never a double eviction (handled
firings are recorded in a ConfigMap every replica reads: ledger.py). A clean stop releases the Lease, as client-go's
ReleaseOnCancel does, so a rolling update hands over at once instead of answering 503 for a lease duration. The
evictor's token bucket here is cluster-wide (ControllerSettings.cluster_evictions_per_minute), not per node.

The policy file is the agents' ConfigMap (deploy/controller.yaml), watched as the agents watch it
(watchdog.service.policy_watch): an operator's switch to `mode: observe` holds here too from the next alert on, not
from the next restart. Each reload gets the same overlay as the first load: the own namespace protected, the
cluster-wide bucket in place of the per-node one.

The webhook and /metrics are served over HTTPS from `tls_cert_file`/`tls_key_file`, followed as cert-manager renews
them (tls.py); plain HTTP only with `plain_http: true`. Idle connections are closed and concurrent ones capped
(watchdog.publishing.listener).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from typing import Callable

from aiohttp import web

from watchdog.action import AuditLog, Evictor, KillSwitch, Pacer
from watchdog.config import ActionPolicy, ControllerSettings, KubeSettings, Policy, Settings, load_policy
from watchdog.isolation import AuditSettings
from watchdog.controller.app import WebhookHandler
from watchdog.controller.isolation_audit import IsolationAuditor
from watchdog.controller.ledger import ConfigMapLedger
from watchdog.controller.tls import ReloadingServerContext
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.eviction_budget import ClusterEvictionBudget
from watchdog.kube.lease import LeaseElector
from watchdog.publishing.controller_metrics import ControllerExposition, ControllerStatus
from watchdog.publishing.listener import LimitedListener
from watchdog.service.policy_watch import PolicyWatcher

log = logging.getLogger(__name__)
COMPONENT = "gpu-watchdog-controller"


class Controller:
    """One replica: `url = await start()`, then `await stop()`."""

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        api: KubeApi,
        policy: ActionPolicy,
        audit: AuditLog,
        namespace: str,
        policy_file: str | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        """`policy_file`: the file `policy` was loaded from, watched and applied again when it changes. `clock`
        stamps Events and audit lines; `monotonic` (``time.monotonic`` when `clock` is the wall clock, else `clock`
        itself: a test's one clock) runs the pacer's cooldowns, token bucket and backoffs (docs/action.md)."""
        self.settings = settings
        self.identity = settings.identity or socket.gethostname()
        self._api = api
        self._namespace = namespace
        self._clock = clock
        self._monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        # Both of the project's namespaces are protected: the agents' (`namespace`, where the kill switch and the
        # budget live) and the controller's own (where its Lease is), as the admission policy also guarantees.
        policy = policy.with_own_namespace(namespace).with_own_namespace(settings.lease_namespace)
        paced_policy = self._cluster_paced(policy)
        self.kube = KubeEvictions(api)
        self.elector = LeaseElector(
            api,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=self.identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
        )
        self.kill_switch = KillSwitch(self.kube, settings=policy.kill_switch, namespace=namespace)
        # The agents' ceiling, shared: the controller's sends take their slots from the same ConfigMap.
        self.budget = ClusterEvictionBudget(api, settings=policy.cluster_budget, namespace=namespace,
                                            identity=self.identity)
        self.pacer = Pacer(paced_policy)
        self.evictor = Evictor(
            self.kube,
            policy=paced_policy,
            pacer=self.pacer,
            audit=audit,
            clock=clock,
            node=self.identity,  # the Events' reporting instance; audit lines name the alert's node
            controller=self.identity,
            kill_switch=self.kill_switch,
            component=COMPONENT,
            budget=self.budget,
            monotonic=self._monotonic,
        )
        self.handler = WebhookHandler(
            settings=settings,
            policy=policy,
            pods=self.kube,
            evictor=self.evictor,
            pacer=self.pacer,
            is_leader=lambda: bool(self.elector.is_leader),
            clock=self._monotonic,
            ledger=ConfigMapLedger(api, namespace=settings.lease_namespace, name=settings.handled_configmap,
                                   capacity=settings.handled_entries),
            identity=self.identity,
        )
        self.policy_reloads: Counter[str] = Counter()  # "success" | "failure" → n
        self.policy_watcher: PolicyWatcher | None = None
        if policy_file:
            self.policy_watcher = PolicyWatcher(
                policy_file, apply=self.apply_policy, on_result=lambda result: self.policy_reloads.update([result])
            )
        self.isolation: IsolationAuditor | None = None
        if settings.isolation_audit_minutes > 0:  # the leader audits tenant isolation (isolation_audit.py)
            self.isolation = IsolationAuditor(
                api, interval=settings.isolation_audit_minutes * 60,
                settings=AuditSettings(tenant_label=settings.isolation_tenant_label),
                namespace_selector=settings.isolation_namespace_selector,
                prometheus_url=settings.isolation_prometheus_url, is_leader=lambda: self.is_leader,
                poll=settings.retry_period_seconds,
            )
        self._exposition = ControllerExposition()
        self._listener: LimitedListener | None = None
        self.tls: ReloadingServerContext | None = None
        self._tasks: list[asyncio.Task] = []
        self.url = ""

    def _cluster_paced(self, policy: ActionPolicy) -> ActionPolicy:
        """The cluster-wide bucket in place of the per-node one; every other rule and limit is the agent's."""
        return policy.model_copy(
            update={
                "node_evictions_per_minute": self.settings.cluster_evictions_per_minute,
                "node_eviction_burst": self.settings.cluster_eviction_burst,
            }
        )

    def apply_policy(self, policy: Policy) -> None:
        """Hot reload (from the policy watcher): refusal rules, mode, limits and kill-switch location from the next
        alert on; the pacer keeps its cooldowns, backoffs and spent tokens, the ledger its handled firings."""
        action = policy.action.with_own_namespace(self._namespace).with_own_namespace(self.settings.lease_namespace)
        paced = self._cluster_paced(action)
        self.evictor.set_policy(paced)
        self.pacer.set_policy(paced, now=self._monotonic())
        self.handler.set_policy(action)
        self.kill_switch.set_settings(action.kill_switch, namespace=self._namespace)
        self.budget.set_settings(action.cluster_budget, namespace=self._namespace)
        log.info("controller policy applied: mode %s", paced.mode.value)

    @property
    def is_leader(self) -> bool:
        return bool(self.elector.is_leader)

    def status(self) -> ControllerStatus:
        """This replica's state for /metrics."""
        return ControllerStatus(
            evictions=self.evictor.counts,
            paused=bool(self.kill_switch.paused()),
            leader=self.is_leader,
            webhook_requests=dict(self.handler.requests),
            **self._isolation_status(),
        )

    def _isolation_status(self) -> dict:
        auditor = self.isolation
        if auditor is None:
            return {}
        latest = auditor.latest
        return {
            "isolation": latest.scorecard() if latest else {},
            "isolation_gpu_pods": dict(latest.gpu_pods) if latest else {},
            "isolation_audits": dict(auditor.runs),
        }

    async def metrics(self, request: web.Request) -> web.Response:
        body, content_type = self._exposition.render(self.status(), accept=request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def start(self) -> str:
        app = self.handler.application()
        app.router.add_get("/metrics", self.metrics)
        settings = self.settings
        if not settings.plain_http:  # HTTPS unless plain HTTP was asked for; no certificate, no start
            self.tls = ReloadingServerContext(settings.tls_cert_file, settings.tls_key_file)
        self._listener = LimitedListener(
            app, host=settings.listen_host, port=settings.listen_port, idle_timeout=settings.idle_timeout_seconds,
            max_connections=settings.max_connections, ssl_context=self.tls.context if self.tls else None,
        )
        port = await self._listener.start()
        host = "127.0.0.1" if settings.listen_host in ("0.0.0.0", "") else settings.listen_host
        self.url = f"{'http' if settings.plain_http else 'https'}://{host}:{port}"
        self._tasks = [
            asyncio.create_task(self._guarded("leader-elector", self.elector.run), name="leader-elector"),
            asyncio.create_task(self._guarded("kill-switch", self.kill_switch.watcher), name="kill-switch"),
        ]
        if self.isolation is not None:
            auditor = self.isolation
            self._tasks.append(asyncio.create_task(self._guarded("isolation-auditor", auditor.run),
                                                   name="isolation-auditor"))
        if self.policy_watcher is not None:
            watcher = self.policy_watcher
            self._tasks.append(asyncio.create_task(self._guarded("policy-watcher", watcher.run), name="policy-watcher"))
        log.info("controller %s listening on %s", self.identity, self.url)
        return self.url

    async def stop_electing(self) -> None:
        """Stop taking part in the election (as a crashed replica would); the webhook keeps answering 503."""
        task = self._tasks[0] if self._tasks else None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def stop(self) -> None:
        """Stop electing, release the Lease if held (a peer takes over at once), then stop serving."""
        await self.stop_electing()
        try:
            await self.elector.release()
        except Exception:  # shutting down: an unreleased Lease merely expires
            log.exception("releasing the Lease failed")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None

    async def _guarded(self, name: str, agent: Callable) -> None:
        """Keeps a long-running agent alive: a crash is logged and the agent restarts after a pause."""
        while True:
            try:
                await agent()
                log.warning("%s returned; restarting", name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed; restarting", name)
            await asyncio.sleep(self.settings.retry_period_seconds)


async def run_controller(
    settings: Settings | ControllerSettings,
    *,
    kube: KubeSettings | None = None,
    policy: ActionPolicy | None = None,
    namespace: str | None = None,
    audit_log: str | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """`gpu-watchdog controller`: run one replica until cancelled (or `stop` is set)."""
    policy_file = None
    if isinstance(settings, Settings):
        kube = kube or settings.kube
        if policy is None and settings.policy_file:
            policy_file = settings.policy_file  # watched: a reload applies here as in the agents
            policy = (await asyncio.to_thread(load_policy, policy_file)).action  # parsing a large file: off the loop
        elif policy is None:
            policy = settings.policy.action
        namespace = namespace or settings.namespace
        audit_log = audit_log if audit_log is not None else settings.audit_log
        settings = settings.controller
    api = await KubeApi.from_settings(kube or KubeSettings())
    if api is None:
        raise ValueError("the controller needs Kubernetes access (kube.access must not be 'none')")
    controller = Controller(
        settings,
        api=api,
        policy=policy or ActionPolicy(),
        audit=AuditLog.from_setting(audit_log),
        namespace=namespace or settings.lease_namespace,
        policy_file=policy_file,
    )
    try:
        await controller.start()
        await (stop or asyncio.Event()).wait()
    finally:
        await controller.stop()
        await api.close()
