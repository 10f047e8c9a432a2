"""`gpu-watchdog explain NAMESPACE/POD`: why gpu-watchdog flagged, spared or evicted one pod, in words.

A tenant whose pod disappeared asks one question, and the answer is spread over four places: the pod itself (its
node, priority, GPU requests), the agent of that node (the findings naming the pod, every decision about it and the
devices it uses, on its JSON API, docs/api.md) and the pod's Events (what the agent told the cluster). This module
gathers them — the cluster through ``watchdog.kube`` with the user's kubeconfig, as kubectl does; the agent over
plain HTTP, found as its DaemonSet's pod on the pod's node (answers.agents) — and words them. It only reads. An
agent it cannot reach costs the agent's part of the answer, said in the output, never the rest.

Every time is printed as RFC 3339 in UTC to the second (``2026-05-01T12:00:00Z``), the form the API server writes
Events in, so the agent's times and the cluster's sort and compare as one time line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import aiohttp

from watchdog.answers.agents import AGENT_NAMESPACE, find_agents, not_found_message
from watchdog.kube import KubeApi, KubeError

_GPU_RESOURCE = re.compile(r"^(nvidia\.com/|gpu-watchdog\.io/)")
GIB = 2**30


@dataclass
class Explanation:
    """Everything known about one pod, ready to print (``render_text``) or dump (``asdict``)."""

    namespace: str
    name: str
    node: str = ""
    phase: str = ""
    priority: int | None = None
    priority_class: str = ""
    gpu_requests: dict[str, str] = field(default_factory=dict)
    agent: str = ""
    agent_error: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, str]] = field(default_factory=list)


def rfc3339(moment: float | str | None) -> str:
    """Unix seconds or an RFC 3339 text (any zone, any fraction) as ``YYYY-MM-DDTHH:MM:SSZ``; text that is not a
    time is returned as it is, and nothing as ""."""
    if moment is None or moment == "":
        return ""
    if isinstance(moment, (int, float)):
        when = datetime.fromtimestamp(moment, tz=timezone.utc)
    else:
        try:
            when = datetime.fromisoformat(moment.replace("Z", "+00:00"))
        except ValueError:
            return moment
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _named(pod: dict[str, Any] | None, namespace: str, name: str) -> bool:
    return pod is not None and (pod.get("namespace"), pod.get("name")) == (namespace, name)


def pod_devices(items: list[dict[str, Any]], *, namespace: str, name: str) -> list[dict[str, Any]]:
    """The devices of a DeviceList the pod holds or runs processes on, one entry per device (a MIG device is one
    device, whatever series or lists name it)."""
    found = []
    for item in items:
        holders = item.get("holders") or []
        mine = [p for p in item.get("processes") or () if _named(p.get("pod"), namespace, name)]
        assigned = any(_named(holder, namespace, name) for holder in holders)
        if not assigned and not mine:
            continue
        found.append({
            "gpu": item["gpu"], "gpuUuid": item["gpuUuid"], "uuid": item["uuid"], "profile": item["profile"],
            "gpuInstance": item["gpuInstance"], "memoryUsedBytes": item["memoryUsedBytes"], "assigned": assigned,
            "otherHolders": [f"{h['namespace']}/{h['name']}" for h in holders if not _named(h, namespace, name)],
            "processes": len(mine), "processMemoryBytes": sum(p.get("usedMemoryBytes") or 0 for p in mine),
        })
    return found


async def _get(session: aiohttp.ClientSession, url: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    async with session.get(url, params=params) as response:
        response.raise_for_status()
        return await response.json()


async def _from_agent(session: aiohttp.ClientSession, explanation: Explanation) -> None:
    e = explanation
    params = {"namespace": e.namespace, "pod": e.name}
    for item in (await _get(session, f"{e.agent}/api/v1/findings", params))["items"]:
        roles = ["culprit"] if _named(item.get("culprit"), e.namespace, e.name) else []
        roles += ["victim"] if any(_named(v, e.namespace, e.name) for v in item.get("victims", [])) else []
        e.findings.append({**item, "roles": roles})
    e.decisions = (await _get(session, f"{e.agent}/api/v1/decisions", params))["items"]
    devices = await _get(session, f"{e.agent}/api/v1/devices")
    e.devices = pod_devices(devices["items"], namespace=e.namespace, name=e.name)


async def _agent_url(api: KubeApi, *, node: str, namespace: str, port: int | None) -> str:
    agents = await find_agents(api, namespace=namespace, node=node, port=port) if node else []
    if not agents:
        raise LookupError(not_found_message(namespace=namespace, node=node or "(not scheduled)"))
    return agents[0].url


async def explain(api: KubeApi, *, namespace: str, name: str, agent_url: str | None = None,
                  agent_namespace: str = AGENT_NAMESPACE, agent_port: int | None = None,
                  timeout: float = 10.0) -> Explanation:
    """The pod's story; a KubeError when the pod cannot be read (nothing to explain without it)."""
    pod = await api.request_json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    explanation = Explanation(namespace=namespace, name=name, node=spec.get("nodeName") or "",
                              phase=status.get("phase") or "", priority=spec.get("priority"),
                              priority_class=spec.get("priorityClassName") or "")
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for resource, amount in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if _GPU_RESOURCE.match(resource):
                explanation.gpu_requests[resource] = str(amount)
    events = await api.request_json("GET", f"/api/v1/namespaces/{namespace}/events", query={
        "fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={name}"})
    for item in events.get("items") or []:
        explanation.events.append({
            "time": rfc3339(item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp")),
            "type": item.get("type") or "", "reason": item.get("reason") or "",
            "source": (item.get("source") or {}).get("component") or item.get("reportingComponent") or "",
            "message": item.get("message") or "",
        })
    explanation.events.sort(key=lambda event: event["time"])
    try:
        explanation.agent = agent_url or await _agent_url(api, node=explanation.node, namespace=agent_namespace,
                                                          port=agent_port)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            await _from_agent(session, explanation)
    except (LookupError, KubeError, aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
        explanation.agent_error = str(exc) or type(exc).__name__
    return explanation


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"


def _device_line(device: dict[str, Any]) -> str:
    where = f"GPU {device['gpu']} ({device['gpuUuid']})"
    if device["profile"]:
        where += f", MIG {device['profile']} GPU instance {device['gpuInstance']} ({device['uuid']})"
    others = device["otherHolders"]
    if device["profile"]:
        text = f"{where}: {_gib(device['memoryUsedBytes'])} used"
        if device["processes"]:
            text += f", {_gib(device['processMemoryBytes'])} of it by its {device['processes']} process(es)"
    else:
        text = (f"{where}, whole GPU: {_gib(device['processMemoryBytes'])} used by its {device['processes']} "
                f"process(es), of {_gib(device['memoryUsedBytes'])} in all")
    if device["assigned"]:
        return text + (f"; assigned to it, shared with {', '.join(others)}" if others else "; assigned to it")
    return text + f"; not assigned to it (the kubelet gave it {', '.join(others) or 'no pod'})"


def render_text(explanation: Explanation) -> str:
    """The explanation in sentences, one fact per line."""
    e = explanation
    lines = [f"Pod {e.namespace}/{e.name} ({e.phase or 'phase unknown'}) on node {e.node or '(not scheduled)'}, "
             f"priority {e.priority if e.priority is not None else 'unset'}"
             + (f" (class {e.priority_class})" if e.priority_class else "") + "."]
    requests = ", ".join(f"{resource}: {amount}" for resource, amount in sorted(e.gpu_requests.items()))
    lines.append(f"GPU resources it asks for: {requests or 'none'}.")
    if e.agent_error:
        lines.append(f"The node's agent could not be asked ({e.agent_error}); findings and decisions unknown.")
    else:
        lines.append(f"GPU devices the agent ({e.agent}) sees it use:" if e.devices
                     else f"The agent ({e.agent}) sees it use no GPU device right now.")
        lines += [f"  - {_device_line(device)}" for device in e.devices]
        lines.append(f"Open findings naming it ({len(e.findings)}):" if e.findings else "No open finding names it.")
        for finding in e.findings:
            role = " and ".join(finding["roles"]) or "named"
            lines.append(f"  - {role} of a {finding['severity']} {finding['kind']} finding since "
                         f"{rfc3339(finding['since'])}: {finding['message']}")
        if not e.decisions:
            lines.append("The agent has decided nothing about it (since it started).")
        else:
            lines.append(f"Decisions about it, newest first ({len(e.decisions)}):")
        for decision in e.decisions:
            status = f", HTTP {decision['httpStatus']}" if decision.get("httpStatus") else ""
            lines.append(f"  - {rfc3339(decision['timestamp'])}: {decision['result']} for the {decision['reason']} "
                         f"finding ({decision['mode']} mode{status}): {decision['detail'] or 'no detail'}")
    lines.append(f"Events on the pod ({len(e.events)}):" if e.events else "No Events on the pod.")
    lines += [f"  - {event['time']} {event['type']} {event['reason']} ({event['source'] or 'unknown source'}): "
              f"{event['message']}" for event in e.events]
    return "\n".join(lines) + "\n"


def as_json(explanation: Explanation) -> dict[str, Any]:
    return asdict(explanation)
