"""`gpu-watchdog inventory`: a node's GPUs, their MIG layout and who holds each device, as a table or JSON.

`probe` dumps every NVML call raw; an operator asking "what is on this node and whose is it" wants one line per
device: GPU index and model, MIG GPU instance / compute instance, profile, UUID, memory, its processes by mode
(compute, MPS client, graphics), and the pod holding it. The node's agent already knows all of it — its last
sample and the attribution that joined the kubelet's assignments and /proc to pods — and serves it as
`/api/v1/devices` (publishing.api_devices), so the answer is the agent's: named with ``--agent-url``, or found as
its DaemonSet's pod through the kubeconfig (answers.agents; ``--node`` picks one when there are several).
Only where no agent is named or found does the command look for itself: a simulated node (``--simulate``) or this
machine's NVML through the production sampler, holders then unknown. The first line says which of them answered.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import aiohttp

from watchdog.answers.agents import AGENT_NAMESPACE, AgentPod, NoAnswer, find_agents, not_found_message
from watchdog.answers.explain import rfc3339
from watchdog.kube import KubeConfigUnusable, KubeError, connect
from watchdog.model import Snapshot
from watchdog.publishing.api_devices import devices_document
from watchdog.sampling.sampler import NvmlSampler

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Inventory:
    """A DeviceList (docs/api.md) and a line saying who answered."""

    source: str
    document: dict[str, Any]


async def ask_agent(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The agent's DeviceList; NoAnswer when it cannot be had."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{url.rstrip('/')}/api/v1/devices") as response:
                if response.status == 404:
                    raise NoAnswer(f"the agent at {url} serves no /api/v1/devices (older than this command)")
                response.raise_for_status()
                return await response.json()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise NoAnswer(f"cannot ask the agent at {url} ({exc or type(exc).__name__})") from None


def from_nvml(nvml: ModuleType, *, node: str = "") -> dict[str, Any]:
    """One sample of the production sampler (go-nvlib's slot walk included) as a DeviceList without holders;
    NvmlUnavailable when NVML cannot start."""
    sampler = NvmlSampler(nvml, node=node, clock=time.time)
    sampler.open()
    try:
        sample = sampler.sample(0)
    finally:
        sampler.close()
    return devices_document(Snapshot(node=node, sample=sample))


def _pick(agents: list[AgentPod]) -> AgentPod | None:
    """The only agent, or the one on this machine's node ($NODE_NAME, else the host name); NoAnswer if ambiguous."""
    if len(agents) <= 1:
        return agents[0] if agents else None
    here = os.environ.get("NODE_NAME") or socket.gethostname()
    for agent in agents:
        if agent.node == here:
            return agent
    nodes = ", ".join(agent.node for agent in agents[:10]) + (", …" if len(agents) > 10 else "")
    raise NoAnswer(f"{len(agents)} gpu-watchdog agents answer ({nodes}): pass --node NODE")


async def locate(*, kubeconfig: str | None, context: str | None, node: str | None,
                 namespace: str = AGENT_NAMESPACE, port: int | None = None) -> tuple[AgentPod | None, str]:
    """The agent to ask, or None with the reason none was found (no cluster, no agent pod)."""
    try:
        async with await connect(kubeconfig, context=context) as api:
            agents = await find_agents(api, namespace=namespace, node=node, port=port)
    except KubeConfigUnusable:
        raise  # a kubeconfig the user named is wrong: said as such, not skipped
    except KubeError as exc:
        if node or kubeconfig:
            raise
        return None, f"could not look for an agent in a cluster ({exc})"
    agent = _pick(agents)
    if agent is None and node:
        raise NoAnswer(not_found_message(namespace=namespace, node=node))
    return agent, "" if agent else not_found_message(namespace=namespace, node=None)


async def read_inventory(*, agent_url: str | None = None, simulate: str | None = None, kubeconfig: str | None = None,
                         context: str | None = None, node: str | None = None, namespace: str = AGENT_NAMESPACE,
                         port: int | None = None) -> Inventory:
    """The agent's answer when one is named or found; else the simulated node or this machine's NVML."""
    if agent_url:
        return Inventory(f"asked the agent at {agent_url}", await ask_agent(agent_url))
    if simulate:
        from watchdog.testbed import SimClock, SimulatedGpuNode

        simulated = SimulatedGpuNode.from_scenario(simulate, SimClock())
        try:
            document = from_nvml(simulated.nvml, node=simulated.scenario.node)
        finally:
            simulated.close()
        return Inventory(f"a fresh simulation of {simulate}, no agent asked: holders unknown", document)
    agent, reason = await locate(kubeconfig=kubeconfig, context=context, node=node, namespace=namespace, port=port)
    if agent is not None:
        return Inventory(f"asked its agent, pod {namespace}/{agent.name} at {agent.url}", await ask_agent(agent.url))
    from watchdog.sampling.nvml_library import NvmlLibraryMissing, load_usable

    try:
        nvml = load_usable()
    except NvmlLibraryMissing as exc:
        why = str(exc).split(". ")[0]  # its advice (run the demo) is not this command's
        raise NoAnswer(f"{reason}, and no NVML on this machine ({why}); pass --agent-url URL, or --simulate "
                       "SCENARIO for a simulated node") from None
    return Inventory(f"this machine's NVML, no agent asked ({reason}): holders unknown",
                     from_nvml(nvml, node=os.environ.get("NODE_NAME") or socket.gethostname()))


def _memory(item: dict[str, Any]) -> str:
    used, total = item["memoryUsedBytes"], item["memoryTotalBytes"]
    if used is None or total is None:
        return "?"
    return f"{used / GIB:.1f}/{total / GIB:.0f} GiB"


def _processes(item: dict[str, Any]) -> str:
    """Process count per mode, e.g. "2 mps, 1 compute" (the MPS server is listed as a compute process)."""
    counts: dict[str, int] = {}
    for process in item["processes"]:
        counts[process["mode"]] = counts.get(process["mode"], 0) + 1
    return ", ".join(f"{count} {mode}" for mode, count in counts.items()) or "-"


def _held_by(item: dict[str, Any]) -> str:
    """The assigned pods, then any other pod running processes on the device (which the agent reports as
    unauthorized use)."""
    if item["holders"] is None:
        return "?"
    held = [f"{pod['namespace']}/{pod['name']}" for pod in item["holders"]]
    users = {f"{p['pod']['namespace']}/{p['pod']['name']}" for p in item["processes"] if p["pod"]}
    text = ", ".join(held) or "-"
    return text + (f" (also used by {', '.join(sorted(users - set(held)))})" if users - set(held) else "")


def format_table(inventory: Inventory) -> str:
    """A line naming the node and who answered, then aligned columns, kubectl style: GPU, MODEL, GI, CI, PROFILE,
    UUID, MEMORY, PROCESSES, HELD BY."""
    document = inventory.document
    when = f", sample of {rfc3339(document['timestamp'])}" if document.get("timestamp") is not None else ""
    title = f"Node {document.get('node') or '(unnamed)'}: {inventory.source}{when}\n"
    table = [("GPU", "MODEL", "GI", "CI", "PROFILE", "UUID", "MEMORY", "PROCESSES", "HELD BY")]
    for item in document["items"]:
        table.append((
            str(item["gpu"]), item["model"] + (" (lost)" if item["lost"] else ""),
            "-" if item["gpuInstance"] is None else str(item["gpuInstance"]),
            "-" if item["computeInstance"] is None else str(item["computeInstance"]),
            item["profile"] or ("whole GPU" if not item["mig"] else "?"), item["uuid"], _memory(item),
            _processes(item), _held_by(item),
        ))
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return title + "".join("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n"
                           for line in table)
