"""`gpu-watchdog explain NAMESPACE/POD`: why gpu-watchdog flagged, spared or evicted one pod, in words.

A tenant whose pod disappeared asks one question, and the answer is spread over four places: the pod itself (its
node, priority, GPU requests), the agent of that node (the findings naming the pod and every decision about it, on
its JSON API, docs/api.md), the devices the agent attributes to the pod (its /metrics series) and the pod's Events
(what the agent told the cluster). This module gathers them — the cluster through ``watchdog.kube`` with the user's
kubeconfig, as kubectl does; the agent over plain HTTP — and words them. It only reads. An agent it cannot reach
costs the agent's part of the answer, said in the output, never the rest.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import aiohttp

from watchdog.kube import KubeApi, KubeError

AGENT_SELECTOR = "app.kubernetes.io/name=gpu-watchdog"
"""Label of the agent DaemonSet's pods (deploy/daemonset.yaml)."""
DEVICE_FAMILIES = ("gpu_watchdog_mig_memory_used_bytes", "gpu_watchdog_pod_gpu_memory_used_bytes")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_GPU_RESOURCE = re.compile(r"^(nvidia\.com/|gpu-watchdog\.io/)")


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
    devices: list[dict[str, str]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, str]] = field(default_factory=list)


def device_series(metrics_text: str, *, namespace: str | None = None,
                  name: str | None = None) -> list[dict[str, str]]:
    """Labels and value of the per-device memory series of pods (of one pod when named): one per GPU or MIG
    instance a pod uses, from the agent's /metrics text (0.0.4)."""
    found = []
    for line in metrics_text.splitlines():
        family = line.split("{", 1)[0]
        if family not in DEVICE_FAMILIES:
            continue
        labels_text, _, value = line.partition("{")[2].rpartition("}")
        labels = dict(_LABEL.findall(labels_text))
        if not labels.get("pod") or namespace not in (None, labels.get("namespace")) or name not in (None,
                                                                                                 labels["pod"]):
            continue
        found.append({**labels, "memory_used_bytes": value.strip().split()[0]})
    return found


async def _agent_url(api: KubeApi, *, node: str, agent_namespace: str, agent_port: int) -> str:
    """http://<agent pod IP>:<port> of the agent DaemonSet's pod on ``node``."""
    listing = await api.request_json("GET", f"/api/v1/namespaces/{agent_namespace}/pods", query={
        "labelSelector": AGENT_SELECTOR, "fieldSelector": f"spec.nodeName={node}"})
    for item in listing.get("items") or []:
        ip = (item.get("status") or {}).get("podIP")
        if ip:
            return f"http://{ip}:{agent_port}"
    raise LookupError(f"no running gpu-watchdog agent pod on node {node} in namespace {agent_namespace} "
                      f"(label {AGENT_SELECTOR}); pass --agent-url")


async def _from_agent(session: aiohttp.ClientSession, explanation: Explanation) -> None:
    params = {"namespace": explanation.namespace, "pod": explanation.name}
    async with session.get(f"{explanation.agent}/api/v1/findings", params=params) as response:
        response.raise_for_status()
        for item in (await response.json())["items"]:
            roles = ["culprit"] if (item.get("culprit") or {}).get("name") == explanation.name else []
            roles += ["victim"] if any(v.get("name") == explanation.name for v in item.get("victims", [])) else []
            explanation.findings.append({**item, "roles": roles})
    async with session.get(f"{explanation.agent}/api/v1/decisions", params=params) as response:
        response.raise_for_status()
        explanation.decisions = (await response.json())["items"]
    async with session.get(f"{explanation.agent}/metrics", headers={"Accept": "text/plain"}) as response:
        response.raise_for_status()
        explanation.devices = device_series(await response.text(), namespace=explanation.namespace,
                                            name=explanation.name)


async def explain(api: KubeApi, *, namespace: str, name: str, agent_url: str | None = None,
                  agent_namespace: str = "gpu-watchdog", agent_port: int = 9435,
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
            "time": item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp") or "",
            "type": item.get("type") or "", "reason": item.get("reason") or "",
            "source": (item.get("source") or {}).get("component") or item.get("reportingComponent") or "",
            "message": item.get("message") or "",
        })
    explanation.events.sort(key=lambda event: event["time"])
    try:
        explanation.agent = agent_url or await _agent_url(api, node=explanation.node, agent_namespace=agent_namespace,
                                                          agent_port=agent_port)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            await _from_agent(session, explanation)
    except (LookupError, KubeError, aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
        explanation.agent_error = str(exc) or type(exc).__name__
    return explanation


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _device_line(device: dict[str, str]) -> str:
    used = f"{float(device['memory_used_bytes']) / 2**30:.1f} GiB used"
    if device.get("mig_uuid") and device.get("profile"):
        return (f"GPU {device.get('gpu')} ({device.get('gpu_uuid')}), MIG {device['profile']} GPU instance "
                f"{device.get('gpu_instance')} ({device['mig_uuid']}): {used}")
    if device.get("mig_uuid"):
        return (f"GPU {device.get('gpu')} ({device.get('gpu_uuid')}), MIG device {device['mig_uuid']}: {used} "
                "by its processes")
    return f"GPU {device.get('gpu')} ({device.get('gpu_uuid')}), shared (time-sliced): {used} by its processes"


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
                         f"{_when(finding['since'])}: {finding['message']}")
        if not e.decisions:
            lines.append("The agent has decided nothing about it (since it started).")
        else:
            lines.append(f"Decisions about it, newest first ({len(e.decisions)}):")
        for decision in e.decisions:
            status = f", HTTP {decision['httpStatus']}" if decision.get("httpStatus") else ""
            lines.append(f"  - {_when(decision['timestamp'])}: {decision['result']} for the {decision['reason']} "
                         f"finding ({decision['mode']} mode{status}): {decision['detail'] or 'no detail'}")
    lines.append(f"Events on the pod ({len(e.events)}):" if e.events else "No Events on the pod.")
    lines += [f"  - {event['time']} {event['type']} {event['reason']} ({event['source'] or 'unknown source'}): "
              f"{event['message']}" for event in e.events]
    return "\n".join(lines) + "\n"


def as_json(explanation: Explanation) -> dict[str, Any]:
    return asdict(explanation)
