"""Wires one controller replica: the Kubernetes client, the leader Lease, the kill switch, the evictor and the
webhook server, as guarded named tasks that are cancelled together.

Several replicas run behind one Service; only the Lease holder acts (the others answer 503, which Alertmanager
retries), so a replica crash costs at most one lease duration of delay and never a double eviction (handled
firings are recorded in a ConfigMap every replica reads: ledger.py). A clean stop releases the Lease, as client-go's
ReleaseOnCancel does, so a rolling update hands over at once instead of answering 503 for a lease duration. The
evictor's token bucket here is cluster-wide (ControllerSettings.cluster_evictions_per_minute), not per node.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Callable

from aiohttp import web

from watchdog.action import AuditLog, Evictor, KillSwitch, Pacer
from watchdog.config import ActionPolicy, ControllerSettings, KubeSettings, Settings, load_policy
from watchdog.controller.app import WebhookHandler
from watchdog.controller.ledger import ConfigMapLedger
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.lease import LeaseElector
from watchdog.publishing.controller_metrics import ControllerExposition, ControllerStatus

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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.identity = settings.identity or socket.gethostname()
        self._api = api
        self._namespace = namespace
        policy = policy.with_own_namespace(namespace)
        # The cluster-wide bucket replaces the per-node one; every other rule and limit is the agent's.
        paced_policy = policy.model_copy(
            update={
                "node_evictions_per_minute": settings.cluster_evictions_per_minute,
                "node_eviction_burst": settings.cluster_eviction_burst,
            }
        )
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
        self.pacer = Pacer(paced_policy)
        self.evictor = Evictor(
            self.kube,
            policy=paced_policy,
            pacer=self.pacer,
            audit=audit,
            clock=clock,
            node=self.identity,
            paused=self.kill_switch.paused,
            component=COMPONENT,
        )
        self.handler = WebhookHandler(
            settings=settings,
            policy=policy,
            pods=self.kube,
            evictor=self.evictor,
            pacer=self.pacer,
            is_leader=lambda: bool(self.elector.is_leader),
            clock=clock,
            ledger=ConfigMapLedger(api, namespace=settings.lease_namespace, name=settings.handled_configmap,
                                   capacity=settings.handled_entries),
            identity=self.identity,
        )
        self._exposition = ControllerExposition()
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self.url = ""

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
        )

    async def metrics(self, request: web.Request) -> web.Response:
        body, content_type = self._exposition.render(self.status(), accept=request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def start(self) -> str:
        app = self.handler.application()
        app.router.add_get("/metrics", self.metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.listen_host, self.settings.listen_port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # aiohttp exposes the bound port only here
        host = "127.0.0.1" if self.settings.listen_host in ("0.0.0.0", "") else self.settings.listen_host
        self.url = f"http://{host}:{port}"
        self._tasks = [
            asyncio.create_task(self._guarded("leader-elector", self.elector.run), name="leader-elector"),
            asyncio.create_task(self._guarded("kill-switch", self.kill_switch.watcher), name="kill-switch"),
        ]
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
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

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
    if isinstance(settings, Settings):
        kube = kube or settings.kube
        if policy is None:
            policy = load_policy(settings.policy_file).action if settings.policy_file else settings.policy.action
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
    )
    try:
        await controller.start()
        await (stop or asyncio.Event()).wait()
    finally:
        await controller.stop()
        await api.close()
