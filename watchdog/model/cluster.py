"""What the isolation audit reads from the cluster, as plain JSON objects, with what could not be read.

The reader (watchdog.kube.cluster_read) and the pure checks (watchdog.isolation) meet here so neither imports the
other: the reader fills it from the API server, a test fills it by hand. Objects stay the API's own JSON (dicts as
``kubectl get -o json`` shows them) rather than typed models, because the checks read a handful of fields from
eight kinds and must survive objects whose values a real server would have refused (a quota of ``"four"`` GPUs).
A kind that could not be listed is recorded in ``errors`` with the API's message, so each check that needs it
says so and the others still run. The agents' own view (who uses which GPU, which driver runs) is optional: the
checks fall back to pods' nodes and node labels without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Kinds listed per namespace (a namespace-scoped Role is enough) and once for the cluster.
NAMESPACED_KINDS = ("pods", "resourcequotas", "limitranges", "networkpolicies", "persistentvolumeclaims",
                    "resourceclaims", "virtualmachineinstances")
CLUSTER_KINDS = ("namespaces", "nodes", "storageclasses", "priorityclasses")


@dataclass(frozen=True, slots=True)
class ReadError:
    """One list that failed: ``kind`` in ``namespace`` ("" for a cluster-scoped kind)."""

    kind: str
    namespace: str
    message: str


@dataclass(slots=True)
class ClusterObjects:
    """Objects by kind; namespaced kinds hold every selected namespace's objects together."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: list[ReadError] = field(default_factory=list)
    # What the node agents published (their Prometheus series), when a Prometheus was given: the namespaces using
    # each GPU, by (node, gpu_uuid), from the agents' attribution; and each node's NVIDIA driver version.
    gpu_users: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    agent_drivers: dict[str, str] = field(default_factory=dict)

    def of(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        items = self.objects.get(kind, [])
        if namespace is None:
            return items
        return [o for o in items if (o.get("metadata") or {}).get("namespace") == namespace]

    def error(self, kind: str, namespace: str = "") -> ReadError | None:
        """The failure that left ``kind`` unread in ``namespace`` (or cluster-wide), if any."""
        for failure in self.errors:
            if failure.kind == kind and failure.namespace in (namespace, ""):
                return failure
        return None
