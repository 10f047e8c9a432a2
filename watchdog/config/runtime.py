"""The policy as the running agent applies it: resolved once per load, the same object for every stage.

A policy file can change while the agent runs. The values every stage must agree on — the detection thresholds,
the action rules with the agent's own namespace protected and ``--mode`` applied, the tenant label — are resolved
here, once per load, into one frozen ``RuntimePolicy``. The service hands that one object to detection, action,
the victim-signal client and the metrics; a value copied into several constructors at start would go stale in
all but the one a reload remembers to update.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.config.action import ActionPolicy, KillSwitch
from watchdog.config.detection import DetectionPolicy
from watchdog.config.policy import Policy
from watchdog.model import Mode


def resolve_action_policy(
    action: ActionPolicy,
    *,
    own_namespace: str | None,
    tenant_label: str | None,
    mode_override: Mode | None = None,
) -> ActionPolicy:
    """The runtime overlay: the agent's own namespace protected, the tenant label, and ``--mode`` over the policy's
    mode. ``tenant_label`` is the deprecated ``attribution.tenant_label`` setting: the policy's own
    ``action.tenant_label`` (the one declaration) wins, and the setting fills in only when the policy names none."""
    resolved = action.with_own_namespace(own_namespace)
    if resolved.tenant_label is None and tenant_label:
        resolved = resolved.model_copy(update={"tenant_label": tenant_label})
    if mode_override is not None:
        resolved = resolved.model_copy(update={"mode": mode_override})
    return resolved


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    """One load of the policy, resolved. ``policy`` is the file (or inline policy) as written."""

    policy: Policy
    action: ActionPolicy
    own_namespace: str | None = None

    @classmethod
    def resolve(
        cls,
        policy: Policy,
        *,
        own_namespace: str | None = None,
        tenant_label: str | None = None,
        mode_override: Mode | None = None,
    ) -> RuntimePolicy:
        action = resolve_action_policy(policy.action, own_namespace=own_namespace, tenant_label=tenant_label,
                                       mode_override=mode_override)
        return cls(policy=policy, action=action, own_namespace=own_namespace)

    @property
    def detection(self) -> DetectionPolicy:
        return self.policy.detection

    @property
    def tenant_label(self) -> str | None:
        """The pod label naming a tenant (None: the namespace is the tenant), as resolved for this load. The
        attribution stage builds the tick's pod index with it; detection, action and publishing read tenants from
        that index (``PodIndex.tenant``/``tenant_of``), never from here, so no two stages count tenants differently."""
        return self.action.tenant_label

    @property
    def mode(self) -> Mode:
        return self.action.mode

    @property
    def kill_switch(self) -> KillSwitch:
        return self.policy.action.kill_switch
