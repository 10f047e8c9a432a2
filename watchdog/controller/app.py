"""The controller's HTTP face: Alertmanager posts here, and eviction alerts become paced, audited evictions.

Alertmanager retries a notification on any 5xx and not on 4xx (alertmanager notify/webhook: `RetryOnStatus`), so
the answers are chosen for that: 401/400/413 for requests that will never succeed (400 too for a body Python's
json cannot take, or a label that cannot name a pod: never a 500, never a retryable 503), 408 for a body that
trickles in, 503 from a replica that does not hold the Lease (Alertmanager then retries, reaching the leader), 503
when pods could not be listed. One request's work is bounded and a request with nothing to act on never waits for
the lock (intake.py). Decisions go
through the same refusal rules as the node agent (priority floor, protected namespaces, DaemonSet/static pods…)
and the same Evictor, paced by a cluster-wide token bucket.

Leadership is checked again inside the lock and right before every send: a request can wait for the lock, or for
a slow API server, long after the Lease moved to another replica, and only the holder may act. A firing is
recorded in the shared ledger (ledger.py) before its eviction is sent, so a new leader never acts on it twice.
An eviction whose answer was lost (timeout, 5xx) is settled by reading the pod before the firing is forgotten
(outcome.py): a firing evicts at most one pod even when the API server's answer never reached us.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from aiohttp import web

from watchdog.action import Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.intake import SharedPods, take_in
from watchdog.controller.ledger import HandledFirings, MemoryLedger, firing_key
from watchdog.controller.outcome import STILL_THERE, outcome_unknown, parse_unknown_entry, pod_fate, unknown_entry
from watchdog.controller.selection import decide_alert, unplaced
from watchdog.controller.webhook import AlertTarget, Deduper, WebhookError, parse_payload, select_targets
from watchdog.model import ActionOutcome, Decision, EvictionResult, PodInfo
from watchdog.publishing.bearer import TokenFile

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
        clock: Callable[[], float],  # the pacing clock: monotonic in the controller (docs/action.md)
        ledger: HandledFirings | None = None,
        identity: str = "",
    ) -> None:
        self._settings = settings
        self._policy = policy
        self._pods = pods
        self._evictor = evictor
        self._pacer = pacer
        self._is_leader = is_leader
        self._clock = clock
        # None: this process's memory only (one replica, tests).
        self._ledger: HandledFirings = ledger if ledger is not None else MemoryLedger(settings.dedupe_entries)
        self._identity = identity
        self._tokens = TokenFile(settings.token_file)
        self._dedupe = Deduper(settings.dedupe_entries)
        self._lock = asyncio.Lock()
        self._request_pods: SharedPods | None = None  # the pods listed while the request holding the lock is handled
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
        authorization = request.headers.get("Authorization")
        if authorization is not None and not _is_utf8(authorization):
            return _error(400, "the Authorization header is not valid UTF-8")
        if not self._tokens.accepts(authorization):
            return _error(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        try:
            async with asyncio.timeout(self._settings.idle_timeout_seconds):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body larger than {self._settings.max_body_bytes} bytes")
        except TimeoutError:
            return _error(408, f"body not received within {self._settings.idle_timeout_seconds:g} s")
        try:
            targets, skipped = select_targets(parse_payload(body))
        except WebhookError as exc:
            return _error(400, exc.reason)
        if not self._is_leader():
            return _error(503, "not the leader; retry", headers={"Retry-After": "1"})
        intake = take_in(targets, seen=self._dedupe.seen, limit=self._settings.max_alerts_per_request,
                         duplicate=lambda target, seen: _summary(target, "duplicate", f"already handled: {seen}"))
        skipped += intake.skipped
        if not intake.acting:  # resolved, unlabelled or already handled: nothing to wait for the lock for
            return web.json_response({"results": intake.results([]), "skipped": skipped})
        async with self._lock:
            if not self._is_leader():  # the Lease may have moved while this request waited for the lock
                return _error(503, "not the leader; retry", headers={"Retry-After": "1"})
            if any(not target.node for target in targets):
                return await self._refuse_unplaced(targets)
            self._request_pods = SharedPods(self._pods) if self._pods is not None else None
            try:
                results, retry = await self._handle(intake.acting)
            finally:
                self._request_pods = None
        status = 503 if retry else 200
        return web.json_response({"results": intake.results(results), "skipped": skipped}, status=status)

    async def _refuse_unplaced(self, targets: list[AlertTarget]) -> web.Response:
        """400 for a payload with an eviction alert that names no node, and nothing acted on: every delivery of
        it will lack the node too (a rule that aggregates `node` away), so only fixing the rule helps, and 4xx is
        what Alertmanager does not retry. Each such alert is audited and counted (result unsafe, reason alert)."""
        refused = [unplaced(target) for target in targets if not target.node]
        await self._evictor.act(refused)
        return _error(400, "; ".join(decision.detail for decision in refused))

    async def _handle(self, targets: list[AlertTarget]) -> tuple[list[dict], bool]:
        """Each target's summary, and whether Alertmanager must retry (API unreadable or leadership lost)."""
        results: list[dict] = []
        retry = False
        for index, target in enumerate(targets):
            if not self._is_leader():
                detail = "lost the Lease while handling; Alertmanager retries against the new leader"
                results.extend(_summary(t, "not_leader", detail) for t in targets[index:])
                return results, True
            summary, failed = await self._handle_one(target)
            retry |= failed
            results.append(summary)
        return results, retry

    async def _handle_one(self, target: AlertTarget) -> tuple[dict, bool]:
        previous = self._dedupe.seen(target.dedupe_key)
        if previous is not None:
            return _summary(target, "duplicate", f"already handled: {previous}"), False
        key = firing_key(target.fingerprint, target.starts_at)
        try:
            recorded = await self._ledger.lookup(key)
        except Exception as exc:  # unreadable ledger: never act blind on a firing that may have been handled
            log.warning("cannot read handled firings: %r", exc)
            return _summary(target, EvictionResult.ERROR.value, f"cannot read handled firings: {exc}"), True
        if recorded is not None:
            settled = await self._recheck(target, key, recorded)
            if settled is not None:
                return settled
        decision, failed = await self._decide(target)
        paced = self._pacer.pace([decision], now=self._clock())[0]
        sends = paced.result is None and paced.request is not None
        if sends:
            refused = await self._claim(target, key, paced)
            if refused is not None:
                return refused, True
        outcomes = (await self._evictor.act([paced])).outcomes
        if sends and self._request_pods is not None:
            self._request_pods.changed(paced.namespace)  # the next alert there sees the pod terminating
        result = outcomes[0].result if outcomes else (paced.result or EvictionResult.NO_CANDIDATE)
        detail = outcomes[0].detail if outcomes else paced.detail
        if sends and outcomes and outcome_unknown(outcomes[0]):
            return await self._settle_lost_answer(target, key, outcomes[0])
        if sends:
            await self._settle(key, result, paced.namespace, paced.pod)
        if result not in TRANSIENT and not failed:
            self._dedupe.remember(target.dedupe_key, result.value)
        return _summary(target, result.value, detail, pod=paced.pod), failed

    async def _claim(self, target: AlertTarget, key: str, decision: Decision) -> dict | None:
        """Record the firing before its eviction goes out; the summary to answer when it must not go out."""
        where = f"{decision.namespace}/{decision.pod}"
        try:
            await self._ledger.record(key, f"sending {where} by {self._identity}".strip())
        except Exception as exc:
            log.warning("cannot record firing %s: %r", key, exc)
            return _summary(target, EvictionResult.ERROR.value, f"cannot record the firing: {exc}", pod=decision.pod)
        if self._is_leader():
            return None
        await self._settle(key, EvictionResult.ERROR, decision.namespace, decision.pod)  # not sent: forget it
        detail = "lost the Lease before sending; Alertmanager retries against the new leader"
        return _summary(target, "not_leader", detail, pod=decision.pod)

    async def _settle(self, key: str, result: EvictionResult, namespace: str, pod: str) -> None:
        """After the attempt: forget a firing that may be tried again, else note its result (best effort: a
        firing left as "sending" still counts as handled, which errs on the side of not evicting)."""
        try:
            if result in TRANSIENT:
                await self._ledger.forget(key)
            else:
                await self._ledger.record(key, f"{result.value} {namespace}/{pod} by {self._identity}".strip())
        except Exception as exc:
            log.warning("cannot update handled firing %s after %s: %r", key, result.value, exc)

    async def _recheck(self, target: AlertTarget, key: str, recorded: str) -> tuple[dict, bool] | None:
        """A recorded firing is a duplicate, unless its eviction's outcome was left unknown: then the pod is read
        again. None: that eviction did not happen, so the firing is decided afresh."""
        pod = parse_unknown_entry(recorded)
        if pod is None:
            self._dedupe.remember(target.dedupe_key, recorded)
            return _summary(target, "duplicate", f"already handled: {recorded}"), False
        try:
            fate = await pod_fate(self._pods, pod)
        except Exception as exc:
            log.warning("cannot read %s to settle firing %s: %r", pod.key, key, exc)
            detail = f"the eviction of {pod.key} may have happened and the pod cannot be read: {exc}"
            return _summary(target, EvictionResult.ERROR.value, detail, pod=pod.name), True
        if fate == STILL_THERE:
            await self._settle(key, EvictionResult.ERROR, pod.namespace, pod.name)  # it did not happen: forget
            return None
        entry = await self._note_evicted(key, target, pod.key, fate)
        return _summary(target, "duplicate", f"already handled: {entry}", pod=pod.name), False

    async def _settle_lost_answer(self, target: AlertTarget, key: str, outcome: ActionOutcome) -> tuple[dict, bool]:
        """After an eviction whose answer was lost: evicted if the pod is gone, retryable if it is still there, and
        checked again on the next delivery (503) when it cannot be read."""
        pod = outcome.request.pod
        try:
            fate = await pod_fate(self._pods, pod)
        except Exception as exc:
            log.warning("eviction of %s: answer lost and the pod cannot be read: %r", pod.key, exc)
            try:  # best effort: the "sending" entry left otherwise also counts as handled
                await self._ledger.record(key, unknown_entry(pod, self._identity))
            except Exception as ledger_exc:
                log.warning("cannot record firing %s as unknown: %r", key, ledger_exc)
            detail = (f"{outcome.detail}; the eviction may have happened and {pod.key} cannot be read ({exc}): "
                      "nothing more is sent for this firing until the pod is read")
            return _summary(target, EvictionResult.ERROR.value, detail, pod=pod.name), True
        if fate == STILL_THERE:
            await self._settle(key, EvictionResult.ERROR, pod.namespace, pod.name)
            detail = f"{outcome.detail}; {pod.key} is still there (not evicted): a later delivery may try again"
            return _summary(target, EvictionResult.ERROR.value, detail, pod=pod.name), False
        await self._note_evicted(key, target, pod.key, fate)
        detail = f"the eviction answer was lost ({outcome.detail}) but {pod.key} is {fate}: taken as evicted"
        return _summary(target, EvictionResult.EVICTED.value, detail, pod=pod.name), False

    async def _note_evicted(self, key: str, target: AlertTarget, where: str, fate: str) -> str:
        entry = f"{EvictionResult.EVICTED.value} {where} (answer lost; pod {fate}) by {self._identity}".strip()
        self._dedupe.remember(target.dedupe_key, entry)
        try:
            await self._ledger.record(key, entry)
        except Exception as exc:  # the "sending"/"unknown" entry left counts as handled too
            log.warning("cannot update handled firing %s: %r", key, exc)
        return entry

    async def _decide(self, target: AlertTarget) -> tuple[Decision, bool]:
        if self._pods is None:
            return _failed(target, "no Kubernetes API"), True
        try:
            # The whole namespace even for a named pod: the lower-priority rule compares it with its tenant's pods.
            pods = await (self._request_pods or SharedPods(self._pods)).in_namespace(target.namespace)
        except Exception as exc:  # unreachable API: count it, answer 503 so Alertmanager retries; never crash
            log.warning("cannot list pods of %s: %r", target.namespace, exc)
            return _failed(target, f"cannot list pods: {exc}"), True
        return decide_alert(target, pods, policy=self._policy), False


def _failed(target: AlertTarget, detail: str) -> Decision:
    return Decision(target.finding_key, target.kind, None, EvictionResult.ERROR, "alert", target.namespace,
                    target.pod or "", detail, node=target.node)


def _summary(target: AlertTarget, result: str, detail: str, *, pod: str | None = None) -> dict:
    return {
        "alertname": target.alertname,
        "fingerprint": target.fingerprint,
        "namespace": target.namespace,
        "pod": pod if pod is not None else (target.pod or ""),
        "result": result,
        "detail": detail,
    }


def _is_utf8(header: str) -> bool:
    # aiohttp hands over header bytes that are not UTF-8 as lone surrogates (surrogateescape); they cannot be encoded.
    try:
        header.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _error(status: int, reason: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)
