"""The cluster-wide eviction budget as the evictor sees it: one slot taken right before each send.

The budget itself (watchdog.kube.eviction_budget.ClusterEvictionBudget) lives with the Kubernetes client, because
it is kept in a ConfigMap every agent and the controller update; the evictor knows it only through this protocol,
so the action stage never imports the client. Dry-run sends take a slot too, as the descheduler counts its dry-run
evictions against maxPodsToEvictTotal (kubernetes-sigs/descheduler pkg/descheduler/evictions/evictions.go): a
dry run then shows what enforce would do, ceiling included. Observe mode sends nothing and takes nothing.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class SendBudget(Protocol):
    """watchdog.kube.eviction_budget.ClusterEvictionBudget: None when a slot was taken, else why not to send."""

    async def take(self, pod_key: str) -> str | None: ...


async def take_slot(budget: SendBudget | None, pod_key: str) -> str | None:
    """One slot for a send about `pod_key`: None to send, else the refusal. Never raises: a budget that fails
    in an unexpected way is an unknown budget, and nothing is sent."""
    if budget is None:
        return None
    try:
        return await budget.take(pod_key)
    except Exception as exc:  # the budget promises not to raise; if it does, nothing is sent
        log.warning("cluster eviction budget check raised: %r", exc)
        return f"cluster eviction budget unknown: the check raised {type(exc).__name__}"
