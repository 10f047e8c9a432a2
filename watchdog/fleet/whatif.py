"""`gpu-watchdog whatif`'s fan-out: ask every agent to replay its flight recorder under a candidate policy.

Each node keeps its own flight recorder and replays it on its own CPU (the agent's what-if API, docs/api.md); the
question "what would this policy have done across the fleet?" is one POST per agent and a poll until each answers.
This module finds the agents as any client finds a DaemonSet's pods (answers.agents: one list call, the container
port named ``whatif``), sends the POSTs with at most ``concurrency`` requests in flight, follows each node's
progress, and turns every way a node can fail to answer — down, refusing, busy, slow, no data — into a
``NodeOutcome`` with its reason. No node is ever dropped: a pod that is listed ends up answered or failed.

It only reads from the API server (GET list of pods, and of nodes for ``selector``); everything it asks of the
agents is a replay of their past, which changes nothing on the node.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote

import aiohttp

from watchdog.answers.agents import AGENT_NAMESPACE, AGENT_SELECTOR, pod_url
from watchdog.kube import KubeApi

PORT_NAME = "whatif"
DEFAULT_PORT = 9436
API_PATH = "/api/v1/whatif"
CONNECT_SECONDS = 10.0
"""A node whose agent does not accept the connection within this is unreachable (a blackholed pod IP)."""
ANSWERED = "done"
"""The only final state that is a complete answer; ``cancelled`` carries a partial result."""
WITH_RESULT = frozenset({ANSWERED, "cancelled"})
"""The agent's final states that carry a result."""
_STATES = frozenset({"running", "no_data", "failed", *WITH_RESULT})
SCHEMA = "the agent's answer does not match the what-if API (docs/api.md)"

# What an agent's refusal means, and what to do about it (the agent contract, docs/flight-recorder.md).
_REFUSALS = {
    400: "the agent rejected the policy",
    401: "the agent refused the token (401): check --token-file against the agents' whatif.token_file",
    404: "no what-if API at this port (404): the agent predates it or runs without whatif.token_file",
    409: "busy (409): a what-if is already running on this node",
    413: "the request is too big for the agent (413): whatif.max_body_bytes",
    503: "the agent cannot answer (503)",
}


@dataclass(frozen=True, slots=True)
class Target:
    """One agent pod to ask: ``url`` is empty when the pod cannot be asked (``reason`` says why)."""

    node: str
    pod: str
    url: str = ""
    reason: str = ""


@dataclass(slots=True)
class NodeOutcome:
    """What one node answered: ``state`` is the agent's final state (done, cancelled, no_data, failed) or the
    fan-out's own (refused, timeout, unreachable; unlisted: a pod without an IP); ``running`` until then.
    ``answer`` is the agent's last GET body, if any. ``on_progress`` sees it at each poll and once final."""

    node: str
    pod: str
    url: str
    state: str
    reason: str = ""
    answer: dict[str, Any] | None = None
    progress: float = 0.0
    seconds: float = 0.0

    @property
    def result(self) -> dict[str, Any] | None:
        """The agent's result; None unless the node ended done or cancelled (a failed node's answer is not read)."""
        return (self.answer or {}).get("result") if self.state in WITH_RESULT else None


@dataclass(frozen=True, slots=True)
class FanOut:
    """How to ask: the request body, the token, and the bounds (requests in flight, seconds per node)."""

    body: dict[str, Any]
    token: str
    concurrency: int = 16
    timeout: float = 600.0
    poll_seconds: float = 1.0
    max_answer_bytes: int = 256 * 1024 * 1024
    """An agent's answer longer than this fails its node: the command runs in the controller's pod, whose memory
    one misbehaving node must not exhaust (a day's result is megabytes)."""
    on_progress: Callable[[NodeOutcome], None] | None = None


async def find_targets(api: KubeApi, *, namespace: str = AGENT_NAMESPACE, selector: str = "",
                       port: int | None = None) -> list[Target]:
    """Every agent pod of the DaemonSet (on the nodes ``selector`` picks, a node label selector), sorted by node.
    A pod that is not running or has no IP is a Target without a URL: listed as failed, never left out."""
    listing = await api.request_json("GET", f"/api/v1/namespaces/{namespace}/pods",
                                     query={"labelSelector": AGENT_SELECTOR})
    nodes: set[str] | None = None
    if selector:
        picked = await api.request_json("GET", "/api/v1/nodes", query={"labelSelector": selector})
        nodes = {(item.get("metadata") or {}).get("name", "") for item in picked.get("items") or []}
    targets = []
    for pod in _one_pod_per_node(listing.get("items") or []):
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if nodes is not None and node not in nodes:
            continue
        name = (pod.get("metadata") or {}).get("name", "")
        phase = (pod.get("status") or {}).get("phase")
        url = pod_url(pod, port_name=PORT_NAME, port=port, default_port=DEFAULT_PORT)
        if phase not in (None, "Running") or url is None:
            targets.append(Target(node=node, pod=name, reason=f"pod {phase or 'without phase'}, no pod IP"
                                  if url is None else f"pod {phase}"))
            continue
        targets.append(Target(node=node, pod=name, url=url))
    return sorted(targets, key=lambda target: (target.node, target.pod))


def _one_pod_per_node(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent pod to ask on each node. During a DaemonSet rollout a node briefly runs the old pod (terminating)
    and the new one, both reading the same flight recorder: asking both would count the node twice. The running
    pod that can answer (Running, with an IP) wins, the one not being deleted first; a node with no such pod still
    gets one (listed as what it is). Pods not yet scheduled (no node) are each kept."""
    def rank(pod: dict[str, Any]) -> tuple[bool, bool]:
        status = pod.get("status") or {}
        return (status.get("phase") == "Running" and bool(status.get("podIP")),
                not (pod.get("metadata") or {}).get("deletionTimestamp"))

    best: dict[str, dict[str, Any]] = {}
    unscheduled = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if not node:
            unscheduled.append(pod)
        elif node not in best or rank(pod) > rank(best[node]):
            best[node] = pod
    return [*best.values(), *unscheduled]


async def ask_all(targets: list[Target], how: FanOut) -> list[NodeOutcome]:
    """One outcome per target, in the targets' order; nodes run side by side, requests bounded by ``concurrency``."""
    headers = {"Authorization": f"Bearer {how.token}", "Accept": "application/json"}
    connector = aiohttp.TCPConnector(limit=max(1, how.concurrency))
    # No total per request: each node's own deadline (FanOut.timeout) bounds it, whatever its requests.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS)
    async with aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout) as session:
        asking = _Asking(session, how)
        return list(await asyncio.gather(*(asking.ask(target) for target in targets)))


class _TooLong(Exception):
    """An agent's answer is over FanOut.max_answer_bytes."""


class _Asking:
    """One fan-out's session and its bound on requests in flight, shared by every node's conversation."""

    def __init__(self, session: aiohttp.ClientSession, how: FanOut) -> None:
        self.session, self.how = session, how
        self.gate = asyncio.Semaphore(max(1, how.concurrency))

    async def ask(self, target: Target) -> NodeOutcome:
        how = self.how
        outcome = NodeOutcome(node=target.node, pod=target.pod, url=target.url,
                              state="running" if target.url else "unlisted", reason=target.reason)
        if not target.url:
            self.report(outcome)
            return outcome
        started = time.monotonic()
        try:
            # The node's deadline starts when its POST is sent, not while it waits for a place among the requests
            # in flight (``request`` sets it): a large fleet must not time out nodes it has not asked yet.
            async with asyncio.timeout(None) as deadline:
                await self.follow(target, outcome, deadline)
        except aiohttp.ConnectionTimeoutError:
            outcome.state = "unreachable"
            outcome.reason = f"cannot connect to {target.url}: no answer within {CONNECT_SECONDS:g} s"
        except TimeoutError:
            done = f", {100 * outcome.progress:.0f} % replayed" if outcome.answer else ", no answer to the POST"
            outcome.state, outcome.reason = "timeout", f"no final answer within {how.timeout:g} s{done}"
        except aiohttp.ClientConnectorError as exc:  # refused, no route, DNS: the node or its agent is down
            outcome.state = "unreachable"
            outcome.reason = f"cannot connect to {target.url}: {exc.os_error.strerror or exc.os_error}"
        except (aiohttp.ClientError, OSError) as exc:  # a connection reset or an answer cut short
            outcome.state, outcome.reason = "unreachable", f"{target.url}: {exc or type(exc).__name__}"
        except _TooLong:
            outcome.answer = None
            outcome.state = "failed"
            outcome.reason = f"the agent answered over {how.max_answer_bytes} bytes: not read"
        outcome.seconds = time.monotonic() - started
        self.report(outcome)
        return outcome

    async def follow(self, target: Target, outcome: NodeOutcome, deadline: asyncio.Timeout) -> None:
        """POST, then GET the job until its state is final; ``outcome`` is filled as answers come, so a timeout
        keeps the last progress seen."""
        status, body = await self.request("POST", target.url + API_PATH, json_body=self.how.body, deadline=deadline)
        if status != 202 or not isinstance(body.get("id"), str):
            outcome.state, outcome.reason = "refused", _refusal(status, body)
            return
        # The job's URL is built from its id on the agent's own address, never from the href it sends: the token
        # goes nowhere an agent names (an href such as "@host/…" glued to "http://ip:port" reads as another host).
        url = f"{target.url}{API_PATH}/{quote(body['id'], safe='')}"
        while True:
            status, body = await self.request("GET", url)
            if status != 200:
                gone = "the job is gone (404): the agent restarted or the result expired" if status == 404 else None
                outcome.state, outcome.reason = "failed", gone or _refusal(status, body)
                return
            outcome.answer = body
            problem = _envelope_problem(body)
            if problem:
                outcome.state, outcome.reason = "failed", f"{SCHEMA}: {problem}"
                return
            outcome.progress = float((body.get("progress") or {}).get("fraction") or 0.0)
            state = body["state"]
            if state != "running":
                outcome.state = state
                outcome.reason = _final_reason(body)
                return
            self.report(outcome)
            await asyncio.sleep(self.how.poll_seconds)

    async def request(self, method: str, url: str, *, json_body: Any = None,
                      deadline: asyncio.Timeout | None = None) -> tuple[int, dict[str, Any]]:
        async with self.gate:
            if deadline is not None:
                deadline.reschedule(asyncio.get_running_loop().time() + self.how.timeout)
            async with self.session.request(method, url, json=json_body) as response:
                raw = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    raw += chunk
                    if len(raw) > self.how.max_answer_bytes:
                        raise _TooLong
        try:
            parsed = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes
            parsed = {"error": raw[:200].decode("utf-8", "replace")}
        return response.status, parsed if isinstance(parsed, dict) else {"error": str(parsed)[:200]}

    def report(self, outcome: NodeOutcome) -> None:
        if self.how.on_progress is not None:
            self.how.on_progress(outcome)


def _envelope_problem(body: dict[str, Any]) -> str | None:
    """What in a GET answer's state and progress the fan-out cannot read; the result is checked by the report."""
    state, progress = body.get("state"), body.get("progress")
    if not isinstance(state, str) or state not in _STATES:
        return f"state {_short(state)} is not one of {', '.join(sorted(_STATES))}"
    if progress is not None and not isinstance(progress, dict):
        return f"progress {_short(progress)} is not an object"
    fraction = (progress or {}).get("fraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))):
        return f"progress.fraction {_short(fraction)} is not a number"
    result = body.get("result")
    # A cancelled what-if carries what it had, which is nothing when it was stopped before its window's first tick.
    if (state == ANSWERED or result is not None) and state in WITH_RESULT and not isinstance(result, dict):
        return f"a {state} answer without a result object"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _refusal(status: int, body: dict[str, Any]) -> str:
    said = body.get("error") or body.get("message") or body.get("reason") or ""
    if isinstance(said, dict):
        said = ": ".join(str(part) for part in (said.get("field"), said.get("reason")) if part) or str(said)
    if body.get("field"):  # a 400 naming the policy field
        said = f"{body['field']}: {body.get('reason') or said}"
    base = _REFUSALS.get(status, f"HTTP {status}")
    return f"{base}: {said}" if said else base


def _final_reason(body: dict[str, Any]) -> str:
    state = body.get("state")
    if body.get("error") is not None and not isinstance(body["error"], str):
        body = {**body, "error": json.dumps(body["error"])[:200]}
    if state == "no_data":
        return body.get("error") or "no flight-recorder ticks in the window"
    if state == "cancelled":
        return body.get("error") or "cancelled on the agent: the result covers part of the window"
    if state == "failed":
        return body.get("error") or "the replay failed on the agent"
    return ""
