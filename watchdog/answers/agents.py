"""How `explain` and `inventory` find a node's agent: as any client finds a DaemonSet's pod, through the API server.

The agent runs as the DaemonSet of deploy/daemonset.yaml (the chart renders the same): one pod per GPU node in the
agent's namespace, labelled ``app.kubernetes.io/name=gpu-watchdog``, serving its JSON API on the container port
named ``metrics``. So the pod on a node is one list call away (label selector plus the ``spec.nodeName`` field
selector the API server supports for pods), and its address is the pod's IP and that container port, as a Service
endpoint would be built (Kubernetes docs "Service": a named ``targetPort`` resolves to the pod's container port of
that name). ``--agent-port`` overrides the port for a pod that names none; ``--agent-url`` skips the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watchdog.kube import KubeApi

AGENT_SELECTOR = "app.kubernetes.io/name=gpu-watchdog"
"""Label of the agent DaemonSet's pods (deploy/daemonset.yaml)."""
AGENT_NAMESPACE = "gpu-watchdog"
PORT_NAME = "metrics"
DEFAULT_PORT = 9435


class NoAnswer(Exception):
    """The question cannot be answered as asked; the message says what to pass instead (worded by cli_errors)."""


@dataclass(frozen=True, slots=True)
class AgentPod:
    """One running agent pod and the base URL of its API."""

    name: str
    node: str
    url: str


def container_port(pod: dict[str, Any], name: str = PORT_NAME) -> int | None:
    """The pod's container port called ``name`` (``metrics``: the JSON API; ``whatif``: the what-if listener)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == name and isinstance(port.get("containerPort"), int):
                return port["containerPort"]
    return None


def pod_url(pod: dict[str, Any], *, port_name: str = PORT_NAME, port: int | None = None,
            default_port: int = DEFAULT_PORT) -> str | None:
    """The base URL of a pod's port ``port_name`` as a Service endpoint would reach it (``port`` overrides it, a pod
    that names none gets ``default_port``); None when the pod has no IP yet."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod IP (RFC 3986 §3.2.2)
    return f"http://{host}:{port or container_port(pod, port_name) or default_port}"


async def find_agents(api: KubeApi, *, namespace: str = AGENT_NAMESPACE, node: str | None = None,
                      port: int | None = None) -> list[AgentPod]:
    """The running agent pods (on ``node`` when named) that have an IP, sorted by node."""
    query = {"labelSelector": AGENT_SELECTOR}
    if node:
        query["fieldSelector"] = f"spec.nodeName={node}"
    listing = await api.request_json("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
    found = []
    for pod in listing.get("items") or []:
        url = pod_url(pod, port=port)
        if url is None or (pod.get("status") or {}).get("phase") not in (None, "Running"):
            continue
        found.append(AgentPod(name=(pod.get("metadata") or {}).get("name", ""),
                              node=(pod.get("spec") or {}).get("nodeName") or "", url=url))
    return sorted(found, key=lambda agent: (agent.node, agent.name))


def not_found_message(*, namespace: str, node: str | None) -> str:
    where = f" on node {node}" if node else ""
    return (f"no running gpu-watchdog agent pod{where} in namespace {namespace} (label {AGENT_SELECTOR}); "
            "pass --agent-url")
