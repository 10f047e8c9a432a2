"""The eviction policy: every knob that decides whether, whom and how often the agent may evict.

It lives in config (not in watchdog.action) because the policy file, the controller and `gpu-watchdog replay` all
load it, and it must be validated with errors naming the field before any stage runs. Defaults are the safe ones:
dry-run, a priority floor far below system-critical, Xid report-only, a slow node-wide token bucket.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from watchdog.config._base import Section
from watchdog.config.limits import MAX_NAMESPACES
from watchdog.config.names import ConfigMapKey, LabelKey, NamespaceName, ObjectName
from watchdog.model import FindingKind, Mode

PROTECTED_ANNOTATION = "gpu-watchdog.io/protected"
# The built-in PriorityClass system-cluster-critical (kubernetes/website, docs/concepts/scheduling-eviction/
# pod-priority-preemption.md; scheduling/v1 PriorityClass): no policy may set a floor above it, because pods at or
# above it are never evicted whatever the policy says (watchdog.action.floor, which explains the rest of the floor).
SYSTEM_CLUSTER_CRITICAL = 2_000_000_000


class KindPolicy(Section):
    """What the agent does about one kind of finding."""

    enabled: bool = Field(True, description="Whether findings of this kind may lead to an eviction at all.")
    for_seconds: float = Field(
        60.0, ge=0, description="How long a finding must have persisted (since its first tick) before acting."
    )


class XidPolicy(KindPolicy):
    """Xid faults are reported, not acted on, unless a drain is explicitly wanted."""

    enabled: bool = Field(False, description="Evict pods on a GPU/instance that raised an Xid (a drain).")
    for_seconds: float = Field(0.0, ge=0, description="Persistence before draining.")
    drain_all: bool = Field(
        False, description="Drain every pod on the faulted domain (victims too), not only the pod the Xid names."
    )


class KillSwitch(Section):
    """A ConfigMap whose key, when "true", pauses every eviction cluster-wide."""

    enabled: bool = Field(True, description="Read the kill switch ConfigMap at all.")
    namespace: NamespaceName | None = Field(None, description="Namespace of the ConfigMap; None means the agent's own.")
    name: ObjectName = Field("gpu-watchdog-kill-switch", description="Name of the ConfigMap.")
    key: ConfigMapKey = Field("paused", description="Key whose value 'true' pauses evictions.")
    refresh_seconds: float = Field(10.0, gt=0, description="How often the ConfigMap is re-read.")
    stale_after_refreshes: int = Field(
        3, ge=1, description="After this many refresh periods without a good read the state is unknown: no sends."
    )


class ClusterBudget(Section):
    """A ceiling on evictions by every agent and the controller together: at most `max_evictions` sends per
    `window_seconds`, counted in one ConfigMap that each sender updates with a resourceVersion compare-and-swap."""

    enabled: bool = Field(False, description="Take a slot of the cluster-wide budget before every send.")
    max_evictions: int = Field(10, ge=1, le=1000, description="Sends allowed per window, cluster-wide.")
    window_seconds: float = Field(3600.0, gt=0, description="The sliding window the ceiling counts over.")
    namespace: NamespaceName | None = Field(None, description="Namespace of the ConfigMap; None means the agent's own.")
    name: ObjectName = Field("gpu-watchdog-eviction-budget", description="Name of the ConfigMap.")


class VmPolicy(Section):
    """KubeVirt VMs, whose virt-launcher pods KubeVirt answers an eviction for: by live-migrating the VM, by refusing,
    or (no migration possible) by letting the pod go, which stops the VM (docs/action.md, "Virtual machines")."""

    evict_without_migration: bool = Field(
        False,
        description="Evict a virt-launcher pod even when KubeVirt would stop its VM rather than live-migrate it "
        "(evictionStrategy None or unset, LiveMigrateIfPossible on a VM that cannot migrate, or External, whose "
        "outside controller may tear the VM down).",
    )
    passthrough: Literal["report", "evict"] = Field(
        "report",
        description="A VM holding a whole GPU by passthrough cannot live-migrate: report only (never evicted), or "
        "evict, which stops it when its eviction strategy lets the pod go.",
    )
    migration_cooldown_seconds: float = Field(
        600.0, ge=0, description="After a migration of a VMI (requested here or seen ended), leave it alone this long."
    )
    migration_cooldown_max_seconds: float = Field(
        14_400.0, ge=0, description="Each further migration of the same VMI within the window doubles its cooldown, "
        "up to this."
    )
    migration_repeat_window_seconds: float = Field(
        3_600.0, ge=0, description="A migration within this long after the VMI's cooldown ended counts as a repeat."
    )

    @model_validator(mode="after")
    def _max_not_below_base(self) -> "VmPolicy":
        if self.migration_cooldown_max_seconds < self.migration_cooldown_seconds:
            raise ValueError(
                f"migration_cooldown_max_seconds ({self.migration_cooldown_max_seconds:g}) is below "
                f"migration_cooldown_seconds ({self.migration_cooldown_seconds:g}): the cooldown only grows"
            )
        return self


class ActionPolicy(Section):
    """Whether, whom and how often the agent evicts."""

    mode: Mode = Field(Mode.DRY_RUN, description="observe: send nothing; dry-run: dryRun=All only; enforce: evict.")
    priority_floor: int = Field(
        1_000_000,
        description="Never evict a pod whose priority is at or above this; at most 2000000000 (system-cluster-"
        "critical), above which nothing is ever evicted anyway: a larger value can only be a mistake.",
    )
    protected_namespaces: tuple[NamespaceName, ...] = Field(
        ("kube-system",),
        max_length=MAX_NAMESPACES,
        description="Namespaces never evicted from, besides those always protected (watchdog.action.floor: every "
        "kube-* namespace, gpu-watchdog, gpu-watchdog-controller, the running process's own); a policy can add "
        "namespaces, never remove those.",
    )
    protected_annotation: LabelKey = Field(
        PROTECTED_ANNOTATION, description='Pods annotated with this key set to "true" are never evicted.'
    )
    tenant_label: LabelKey | None = Field(
        None,
        description="Pod label whose value names a pod's tenant, for every stage (detection's tenants and quotas, "
        "cooldowns, metrics); a pod without it, or None, counts under its namespace. The one place to set it: "
        "reloads and replays follow it.",
    )
    interference: KindPolicy = Field(
        KindPolicy(for_seconds=120.0), description="Cross-tenant interference (power, SM, DRAM, PCIe)."
    )
    memory_pressure: KindPolicy = Field(KindPolicy(for_seconds=30.0), description="GPU memory pressure.")
    quota: KindPolicy = Field(KindPolicy(for_seconds=120.0), description="Tenant quota breaches.")
    unauthorized: KindPolicy = Field(KindPolicy(for_seconds=30.0), description="Unauthorized device use.")
    xid: XidPolicy = Field(XidPolicy(), description="Xid faults: report only unless enabled (drain).")
    pod_cooldown_seconds: float = Field(600.0, ge=0, description="After an attempt on a pod, leave it alone this long.")
    tenant_cooldown_seconds: float = Field(
        300.0, ge=0, description="After an eviction from a tenant, evict no other pod of that tenant this long."
    )
    node_evictions_per_minute: float = Field(
        2.0, gt=0, description="Token bucket refill rate of attempts per minute (node-wide, or cluster-wide)."
    )
    node_eviction_burst: int = Field(1, ge=1, description="Token bucket capacity.")
    owner_cooldown_max_seconds: float = Field(
        21_600.0,
        ge=0,
        description="An eviction of the same workload (ReplicaSet/Job lineage) again doubles its cooldown (from "
        "pod_cooldown_seconds) up to this.",
    )
    owner_repeat_window_seconds: float = Field(
        3_600.0,
        ge=0,
        description="An eviction within this long after the lineage's previous cooldown ended counts as a repeat.",
    )
    evicted_memory_seconds: float = Field(
        300.0, ge=0, description="How long an evicted pod is remembered as terminating (never evicted twice)."
    )
    grace_seconds: int | None = Field(
        None, ge=0, description="gracePeriodSeconds sent with the eviction; None keeps the pod's own."
    )
    retry_backoff_initial_seconds: float = Field(
        30.0, gt=0, description="First wait after a blocked (PDB) or failed attempt on a pod."
    )
    retry_backoff_max_seconds: float = Field(600.0, gt=0, description="Backoff doubles up to this.")
    max_decision_age_seconds: float = Field(
        5.0,
        gt=0,
        description="A send that would go out longer than this after the tick its finding was judged on (a slow API "
        "server, a queue behind it) is dropped as `stale` instead: never evict on an old reading.",
    )
    vms: VmPolicy = Field(
        VmPolicy(), description="KubeVirt VMs: by default a virt-launcher pod is evicted only when its VM will "
        "live-migrate."
    )
    kill_switch: KillSwitch = Field(KillSwitch(), description="ConfigMap that pauses every eviction.")
    cluster_budget: ClusterBudget = Field(
        ClusterBudget(), description="Cluster-wide ceiling on sends (dry-run sends count too), kept in a ConfigMap."
    )

    @field_validator("priority_floor")
    @classmethod
    def _floor_within_reach(cls, value: int) -> int:
        if value > SYSTEM_CLUSTER_CRITICAL:
            raise ValueError(
                f"{value} is above system-cluster-critical ({SYSTEM_CLUSTER_CRITICAL}); pods at or above it are never "
                "evicted whatever the policy says, so a higher floor can only be a mistake"
            )
        return value

    def for_kind(self, kind: FindingKind) -> KindPolicy:
        """The per-kind policy of a finding kind."""
        return getattr(self, FindingKind(kind).value)

    def with_own_namespace(self, namespace: str | None) -> "ActionPolicy":
        """This policy with the agent's own namespace protected too (added at runtime, from the downward API)."""
        if not namespace or namespace in self.protected_namespaces:
            return self
        return self.model_copy(update={"protected_namespaces": (*self.protected_namespaces, namespace)})
