"""The controller's HTTP face: Alertmanager posts here, and eviction alerts become paced, audited evictions.

Alertmanager retries a notification on any 5xx and not on 4xx (alertmanager notify/webhook: `RetryOnStatus`), so
the answers are chosen for that: 401/400/413 for requests that will never succeed, 503 from a replica that does not
hold the Lease (Alertmanager then retries, reaching the leader), 503 when pods could not be listed. Decisions go
through the same refusal rules as the node agent (priority floor, protected namespaces, DaemonSet/static pods…)
and the same Evictor, paced by a cluster-wide token bucket.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from typing import Callable, Protocol

from aiohttp import web

from watchdog.action import Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.selection import decide_alert
from watchdog.controller.webhook import AlertTarget, Deduper, WebhookError, parse_payload, select_targets
from watchdog.model import Decision, EvictionResult, PodInfo

log = logging.getLogger(__name__)

# Results after which a redelivery of the same alert may try again (the pacer's backoff still applies).
TRANSIENT = frozenset(
    {
        EvictionResult.ERROR,
        EvictionResult.BLOCKED_PDB,
        EvictionResult.BLOCKED,
        EvictionResult.RATE_LIMITED,
        EvictionResult.PAUSED,
        EvictionResult.COOLDOWN,
    }
)


class PodLister(Protocol):
    """watchdog.kube's pod listing: raises when the API cannot be read."""

    async def list_pods(
        self, *, label_selector: str | None = None, field_selector: str | None = None, namespace: str | None = None
    ) -> list[PodInfo]: ...


class TokenFile:
    """The bearer token, re-read whenever the file changes (a rotated Secret updates the mounted file)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token: bytes | None = None

    def current(self) -> bytes | None:
        """The token now in force; None (every request refused) when the file is missing or empty."""
        try:
            stat = os.stat(self._path)
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                with open(self._path, "rb") as handle:
                    self._token = handle.read().strip() or None
                self._stamp = stamp
        except OSError as exc:
            log.warning("webhook token file %s unreadable: %s", self._path, exc)
            self._stamp, self._token = None, None
        return self._token

    def accepts(self, header: str | None) -> bool:
        token = self.current()
        if token is None or not header or not header.startswith("Bearer "):
            return False
        # Constant-time comparison: the token must not leak through response timing.
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token)


class WebhookHandler:
    """Turns an authenticated webhook into decisions and hands them to the evictor, once per alert firing."""

    def __init__(
        self,
        *,
        settings: ControllerSettings,
        policy: ActionPolicy,
        pods: PodLister | None,
        evictor: Evictor,
        pacer: Pacer,
        is_leader: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._policy = policy
        self._pods = pods
        self._evictor = evictor
        self._pacer = pacer
        self._is_leader = is_leader
        self._clock = clock
        self._tokens = TokenFile(settings.token_file)
        self._dedupe = Deduper(settings.dedupe_entries)
        self._lock = asyncio.Lock()
        self.requests: dict[int, int] = {}

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self._settings.max_body_bytes)
        app.router.add_post("/api/v1/alertmanager", self.alertmanager)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        return app

    def set_policy(self, policy: ActionPolicy) -> None:
        self._policy = policy

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        ready = self._tokens.current() is not None
        body = {"ready": ready, "leader": self._is_leader()}
        return web.json_response(body, status=200 if ready else 503)

    async def alertmanager(self, request: web.Request) -> web.Response:
        response = await self._answer(request)
        self.requests[response.status] = self.requests.get(response.status, 0) + 1
        return response

    async def _answer(self, request: web.Request) -> web.Response:
        if not self._tokens.accepts(request.headers.get("Authorization")):
            return _error(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body larger than {self._settings.max_body_bytes} bytes")
        try:
            payload = parse_payload(body)
        except WebhookError as exc:
            return _error(400, exc.reason)
        if not self._is_leader():
            return _error(503, "not the leader; retry", headers={"Retry-After": "1"})
        targets, skipped = select_targets(payload)
        async with self._lock:
            results, api_failed = await self._handle(targets)
        status = 503 if api_failed else 200
        return web.json_response({"results": results, "skipped": skipped}, status=status)

    async def _handle(self, targets: list[AlertTarget]) -> tuple[list[dict], bool]:
        results: list[dict] = []
        api_failed = False
        for target in targets:
            previous = self._dedupe.seen(target.dedupe_key)
            if previous is not None:
                results.append(_summary(target, "duplicate", f"already handled: {previous}"))
                continue
            decision, failed = await self._decide(target)
            api_failed |= failed
            paced = self._pacer.pace([decision], now=self._clock())
            outcomes = await self._evictor.act(paced)
            result = outcomes[0].result if outcomes else (paced[0].result or EvictionResult.NO_CANDIDATE)
            detail = outcomes[0].detail if outcomes else paced[0].detail
            if result not in TRANSIENT and not failed:
                self._dedupe.remember(target.dedupe_key, result.value)
            results.append(_summary(target, result.value, detail, pod=paced[0].pod))
        return results, api_failed

    async def _decide(self, target: AlertTarget) -> tuple[Decision, bool]:
        if self._pods is None:
            return _failed(target, "no Kubernetes API"), True
        selector = f"metadata.name={target.pod}" if target.pod else None
        try:
            pods = await self._pods.list_pods(namespace=target.namespace, field_selector=selector)
        except Exception as exc:  # unreachable API: count it, answer 503 so Alertmanager retries; never crash
            log.warning("cannot list pods of %s: %r", target.namespace, exc)
            return _failed(target, f"cannot list pods: {exc}"), True
        return decide_alert(target, pods, policy=self._policy), False


def _failed(target: AlertTarget, detail: str) -> Decision:
    return Decision(target.finding_key, target.kind, None, EvictionResult.ERROR, "alert", target.namespace,
                    target.pod or "", detail)


def _summary(target: AlertTarget, result: str, detail: str, *, pod: str | None = None) -> dict:
    return {
        "alertname": target.alertname,
        "fingerprint": target.fingerprint,
        "namespace": target.namespace,
        "pod": pod if pod is not None else (target.pod or ""),
        "result": result,
        "detail": detail,
    }


def _error(status: int, reason: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)
