"""Test helpers: agent pods in a fake API server, and the report pairs a what-if agent answers with."""

from __future__ import annotations

from typing import Any

from watchdog.evaluation.report_text import compare
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.testbed.cluster.apiserver_pods import build_pod

TOKEN = "s3cret-what-if-token"


def add_agent_pod(server: FakeApiServer, *, node: str, port: int | None, phase: str = "Running",
                  labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The DaemonSet's pod on ``node`` (its Node too, with ``labels``): pod IP 127.0.0.1 and container port
    ``whatif`` at ``port``; ``port`` None: a pod not yet running, without an IP."""
    server.add_node(node, labels=labels or {}, address="127.0.0.1")
    ports = [{"name": "metrics", "containerPort": 1, "protocol": "TCP"}]
    if port is not None:
        ports.append({"name": "whatif", "containerPort": port, "protocol": "TCP"})
    pod = build_pod(namespace="gpu-watchdog", name=f"gpu-watchdog-{node}", node=node, priority=0, priority_class="",
                    labels={"app.kubernetes.io/name": "gpu-watchdog"}, annotations={}, phase=phase,
                    ready=phase == "Running", containers=[{"name": "agent", "image": "x", "ports": ports}],
                    owner_kind="DaemonSet", qos="Burstable", requests=None)
    if port is not None:
        pod["status"].update(podIP="127.0.0.1", podIPs=[{"ip": "127.0.0.1"}])
    return server.add_pod(pod)


def finding(kind: str, key: str, tick: int, *, culprit: str, victims: list[str]) -> dict[str, Any]:
    return {"kind": kind, "key": key, "reported_tick": tick, "first_tick": tick, "last_tick": tick + 5,
            "severity": "warning", "domain": "GPU-0", "resource": None, "culprit": culprit, "victims": victims,
            "evidence": {}}


def eviction(tick: int, *, pod: str, key: str, result: str = "evicted") -> dict[str, Any]:
    namespace, _, name = pod.partition("/")
    return {"tick": tick, "namespace": namespace, "pod": name, "priority": 0, "result": result, "sent": True,
            "detail": "", "finding": {"kind": "interference", "key": key}}


def report(findings: list[dict], evictions: list[dict], *, source: str) -> dict[str, Any]:
    return {"trace": {"path": "flight", "node": "n"}, "ticks": 100, "first_tick": 0, "last_tick": 99,
            "mode": "enforce", "policy_source": source, "findings": findings, "evictions": evictions}


def result_pair(*, shift: int = 0) -> dict[str, Any]:
    """An agent's result: under the recorded policy (a) one interference episode found late and one eviction at
    tick 40 of batch/train; under the posted one (b) the same episode ``shift`` ticks earlier, that eviction, and one
    more of batch/etl."""
    late = finding("interference", "interference/GPU-0/batch/train", 30, culprit="batch/train",
                   victims=["prod/infer"])
    early = dict(late, reported_tick=30 - shift)
    a = report([late], [eviction(40, pod="batch/train", key=late["key"])], source="trace")
    b = report([early], [eviction(40, pod="batch/train", key=late["key"]),
                         eviction(50, pod="batch/etl", key="quota/batch/memory")], source="posted")
    return {"a": a, "b": b, "diff": compare(a, b)}
