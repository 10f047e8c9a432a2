"""The action stage's guarantees as a property: random policies, pods and cycles through the real `plan`.

A world is a policy (any the model accepts, dangerous values included), the agent's namespace, a handful of pods
(system priorities, floor namespaces, DaemonSet, static, annotated, terminating, ended, one workload's replicas …)
and a few cycles (ticks) of random findings at random times, with the wall clock stepping between some of them
(±1 h, ±1 day: NTP, a VM resumed). Pacing runs on the monotonic clock and the tick count, as the agent's does; the
findings' wall-clock `since` moves with every step, and no guarantee may move with it. Each cycle goes through `effective_policy` and `plan` with one
pacer, as replays and scenario runs do; every request let through is then checked against an oracle written here,
not against the code's own helpers: the floor, the policy's own protections, `protects`, rate limits, cooldowns,
hysteresis and the per-cycle limits. Used by tests/action/test_action_property.py and bench/property_action.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from watchdog.action import Pacer, effective_policy, plan
from watchdog.action.lineage import lineage_key
from watchdog.config.action import ActionPolicy
from watchdog.model import Attribution, Decision, Finding, FindingKind, Mode, PodIndex, PodInfo, PodRef, Severity

SYSTEM_CLUSTER_CRITICAL = 2_000_000_000  # kubernetes' built-in PriorityClass; written out: this is the oracle
ALWAYS_PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "gpu-watchdog",
                               "gpu-watchdog-controller")
DEFAULT_ANNOTATION = "gpu-watchdog.io/protected"
USES = (0.0, 0.01, 0.1, 0.12, 0.24, 0.5, 1.0, 4.0)
EPSILON = 1e-6


@dataclass(frozen=True)
class Cycle:
    dt: float  # monotonic seconds since the previous cycle
    step: float  # the wall clock's step just before this cycle (0: none)
    healthy: bool
    terminate: tuple[int, ...]  # pod indices that start terminating before this cycle
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class World:
    policy: ActionPolicy
    own_namespace: str
    pods: tuple[PodInfo, ...]
    cycles: tuple[Cycle, ...]


# ------------------------------------------------------------------------------------------------ strategies
# A world is decoded from one 512-byte genome (see `worlds`): one Hypothesis choice per example instead of
# hundreds, so 10 000 examples fit in seconds, and shrinking still works (smaller bytes pick the first, plainest
# entry of every table below). The tables are weighted toward worlds where something is let through (ordinary
# namespaces, low priorities, enabled kinds, running pods), so the oracle has sends to judge, while every floor case
# stays frequent enough to be drawn thousands of times.

NS_TABLE = ("ml", "batch", "research", "ml", "batch", "research", "infra", "kube-system", "gpu-watchdog",
            "watchdog-elsewhere", "kube-public", "gpu-watchdog-controller", "kube-flannel")
PRIORITY_TABLE = (0, 10, 50, 100, 1_000, 0, 10, 100, 1_000, -5, 999_999, 1_000_000, 1_000_000_000, 1_999_999_999,
                  SYSTEM_CLUSTER_CRITICAL, 2_000_001_000)
OWNER_TABLE = (None, "ReplicaSet", "ReplicaSet", "Job", "StatefulSet", None, "ReplicaSet", "DaemonSet", "Node")
PHASE_TABLE = ("Running",) * 13 + ("Pending", "Succeeded", "Failed")
ANNOTATION_TABLE = ({},) * 11 + ({DEFAULT_ANNOTATION: "true"}, {DEFAULT_ANNOTATION: " True"},
                                 {DEFAULT_ANNOTATION: "false"}, {"example.com/keep": "true"},
                                 {"kubernetes.io/config.mirror": "hash"})
KIND_TABLE = (FindingKind.INTERFERENCE, FindingKind.MEMORY_PRESSURE, FindingKind.QUOTA, FindingKind.INTERFERENCE,
              FindingKind.UNAUTHORIZED, FindingKind.MEMORY_PRESSURE, FindingKind.INTERFERENCE, *FindingKind)
DT_TABLE = (30.0, 0.0, 1.0, 15.0, 59.0, 61.0, 300.0, 601.0)
STEP_TABLE = (0.0,) * 4 + (3600.0, -3600.0, 86400.0, -86400.0)
GHOST = PodRef("ml", "ghost", "uid-ghost")


class Genes:
    """Reads choices off the genome; past its end every choice is the first entry."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        value = self.data[self.at] if self.at < len(self.data) else 0
        self.at += 1
        return value

    def pick(self, table):
        return table[self.byte() % len(table)]

    def one_in(self, n: int) -> bool:
        return self.byte() % n == n - 1

    def count(self, most: int) -> int:
        return self.byte() % (most + 1)


def decode_policy(g: Genes) -> ActionPolicy:
    kind = lambda: {"enabled": not g.one_in(10), "for_seconds": g.pick((0.0, 0.0, 30.0, 120.0))}  # noqa: E731
    return ActionPolicy.model_validate({
        "mode": g.pick(("enforce", "dry-run", "observe")),
        "priority_floor": g.pick((1_000_000, 0, 100, 1_000_000, 1_000_000_000, SYSTEM_CLUSTER_CRITICAL)),
        "protected_namespaces": sorted({g.pick(NS_TABLE) for _ in range(g.count(2))}),
        "protected_annotation": g.pick((DEFAULT_ANNOTATION, "example.com/keep")),
        "tenant_label": g.pick((None, "team")),
        "interference": kind(), "memory_pressure": kind(), "quota": kind(), "unauthorized": kind(),
        "xid": {"enabled": g.one_in(2), "for_seconds": 0.0, "drain_all": g.one_in(2)},
        "pod_cooldown_seconds": g.pick((600.0, 0.0, 60.0)),
        "tenant_cooldown_seconds": g.pick((300.0, 0.0, 60.0)),
        "node_evictions_per_minute": g.pick((60.0, 2.0, 0.5, 600.0)),
        "node_eviction_burst": g.pick((5, 1, 2, 20)),
        "evicted_memory_seconds": g.pick((300.0, 0.0)),
        "owner_cooldown_max_seconds": g.pick((21_600.0, 0.0)),
    })


def decode_pod(g: Genes, index: int) -> PodInfo:
    owner = g.pick(OWNER_TABLE)
    # ReplicaSet and Job pods are named <owner>-<5 generated characters>: replicas of one workload share a lineage.
    name = f"{g.pick(('web', 'train'))}-{g.pick(('bcdfg', 'hjklm', 'npqrs'))}" if owner in ("ReplicaSet", "Job") \
        else f"p{index}"
    team = g.pick((None, "x", "y"))
    return PodInfo(uid=f"uid-{index}", namespace=g.pick(NS_TABLE), name=name, node="node-1",
                   labels={"team": team} if team else {}, annotations=g.pick(ANNOTATION_TABLE),
                   priority=g.pick(PRIORITY_TABLE), owner_kind=owner, mirror=g.one_in(24), phase=g.pick(PHASE_TABLE),
                   deleting=g.one_in(12), created=float(g.count(5)))


def decode_finding(g: Genes, slot: int, refs: list[PodRef]) -> Finding:
    def ref() -> PodRef:
        return GHOST if g.one_in(20) or not refs else refs[g.byte() % len(refs)]

    kind = g.pick(KIND_TABLE)
    culprit = None if g.one_in(16) else ref()
    return Finding(kind=kind, key=f"{kind.value}/{slot}", domain="gpu/GPU-0/power", resource="power",
                   severity=Severity.WARNING if g.one_in(16) else Severity.CRITICAL, first_tick=0, last_tick=0,
                   since=-g.pick((200.0, 0.0, 10.0, 60.0)),  # relative: shifted to the cycle's time when it runs
                   victims=tuple(dict.fromkeys(ref() for _ in range(0 if g.one_in(12) else 1 + g.count(2)))),
                   culprit=culprit,
                   tenant=g.pick((None, None, None, "ml", "batch", "x")),
                   usage={f"{r.namespace}/{r.name}": g.pick(USES) for r in (ref() for _ in range(1 + g.count(3)))},
                   needed=g.pick((None, 0.1, 0.0, 1.0)), observed=not g.one_in(16))


def decode_world(data: bytes) -> World:
    g = Genes(data)
    policy = decode_policy(g)
    own_namespace = g.pick(("gpu-watchdog", "watchdog-elsewhere"))
    pods: dict[str, PodInfo] = {}
    for i in range(1 + g.count(6)):
        pod = decode_pod(g, i)
        pods.setdefault(f"{pod.namespace}/{pod.name}", pod)  # namespace/name is unique on a node
    infos = tuple(pods.values())
    refs = [PodRef(p.namespace, p.name, p.uid) for p in infos]
    cycles = []
    for _ in range(1 + g.count(4)):
        dt, step, healthy = g.pick(DT_TABLE), g.pick(STEP_TABLE), not g.one_in(32)
        terminate = (g.byte() % len(infos),) if g.one_in(6) else ()
        findings = tuple(decode_finding(g, slot, refs) for slot in range(1 + g.count(4)))
        cycles.append(Cycle(dt=dt, step=step, healthy=healthy, terminate=terminate, findings=findings))
    return World(policy, own_namespace, infos, tuple(cycles))


GENOME_BYTES = 512


def worlds() -> st.SearchStrategy[World]:
    """Random worlds, each decoded from a 512-byte genome drawn as one integer: Hypothesis draws `binary` byte by
    byte (a boolean per byte), which cost more than the planning under test; an integer is one choice."""
    return st.integers(0, 2 ** (8 * GENOME_BYTES) - 1).map(lambda n: decode_world(n.to_bytes(GENOME_BYTES, "little")))


# ------------------------------------------------------------------------------------------------ the oracle


@dataclass
class Oracle:
    """What every request let through must satisfy, with the memory the rate limits and cooldowns need."""

    policy: ActionPolicy  # as the agent applies it (own namespace protected)
    own_namespace: str
    tokens: float = -1.0
    updated: float | None = None
    last_pod: dict[str, float] = field(default_factory=dict)
    last_tenant: dict[str, float] = field(default_factory=dict)
    last_lineage: dict[str, float] = field(default_factory=dict)
    tick_times: dict[int, float] = field(default_factory=dict)  # tick → monotonic time it ran at
    sends: int = 0

    def check_cycle(self, now: float, findings: list[Finding], attribution: Attribution,
                    decisions: list[Decision]) -> None:
        p = self.policy
        if self.tokens < 0:
            self.tokens = float(p.node_eviction_burst)
        if self.updated is not None and now > self.updated:
            self.tokens = min(p.node_eviction_burst, self.tokens + (now - self.updated) * p.node_evictions_per_minute
                              / 60.0)
        self.updated = now if self.updated is None else max(self.updated, now)
        by_key = {f.key: f for f in findings}
        sent = [d for d in decisions if d.result is None]
        assert all(d.request is not None for d in sent)
        assert len({d.request.pod.key for d in sent}) == len(sent), "one pod twice in one cycle"
        assert len({d.finding_key for d in sent}) == len(sent), "two evictions for one finding in one cycle"
        assert len(sent) <= p.node_eviction_burst
        for decision in sent:
            finding = by_key[decision.finding_key]
            pod = attribution.pod(decision.request.pod)
            assert pod is not None and pod.uid == decision.request.pod.uid, "a pod the cache does not have"
            self._check_pod(pod)
            self._check_finding(finding, pod, decision, attribution, now=now)
            self._check_pacing(pod, now=now)
            self.sends += 1

    def _check_pod(self, pod: PodInfo) -> None:
        assert self.refused(pod) is None, (self.refused(pod), pod)

    def refused(self, pod: PodInfo) -> str | None:
        """Why the oracle says this pod may never go, or None."""
        p = self.policy
        annotations = {k: str(v).strip().lower() for k, v in pod.annotations.items()}
        floor = [
            ("reserved or project namespace", pod.namespace in ALWAYS_PROTECTED_NAMESPACES
             or pod.namespace == self.own_namespace or pod.namespace.startswith("kube-")),
            ("system-critical priority", pod.priority >= SYSTEM_CLUSTER_CRITICAL),
            ("protected annotation", annotations.get(DEFAULT_ANNOTATION) == "true"),
            ("DaemonSet or static", pod.owner_kind in ("DaemonSet", "Node") or pod.mirror
             or "kubernetes.io/config.mirror" in pod.annotations),
            ("terminating or ended", pod.deleting or pod.phase in ("Succeeded", "Failed")),
            # what the policy adds
            ("policy floor", pod.priority >= p.priority_floor),
            ("policy namespace", pod.namespace in p.protected_namespaces),
            ("policy annotation", annotations.get(p.protected_annotation) == "true"),
        ]
        return next((why for why, hit in floor if hit), None)

    def _check_finding(self, finding: Finding, pod: PodInfo, decision: Decision, attribution: Attribution, *,
                       now: float) -> None:
        p = self.policy
        kind_policy = p.for_kind(finding.kind)
        assert kind_policy.enabled and finding.severity is Severity.CRITICAL and finding.observed
        assert attribution.healthy
        started = self.tick_times[finding.first_tick]  # on the monotonic clock, whatever the wall clock did
        assert now - started >= kind_policy.for_seconds - EPSILON, "acted before the finding persisted"
        protects = {ref.uid: prio for ref, prio in decision.request.protects}
        for uid, prio in protects.items():
            assert attribution.pods[uid].priority == prio and attribution.pods[uid].live
        if finding.kind is FindingKind.INTERFERENCE:
            # Never evict a pod whose priority is not strictly lower than every victim it is evicted to protect.
            assert all(prio > pod.priority for prio in protects.values()), decision
            culprit = attribution.pod(finding.culprit)
            victims = [attribution.pod(v) for v in finding.victims]
            assert culprit is not None and all(v is not None for v in victims)
            expected = {v.uid for v in victims if v.live and v.uid != pod.uid and v.priority > pod.priority}
            assert protects and set(protects) == expected, "protects must list exactly the victims strictly above"
            assert pod.uid == culprit.uid or (pod.uid in {v.uid for v in victims}
                                              and pod.priority <= culprit.priority), "neither culprit nor co-driver"
            # A co-driver only goes first in a relief the culprit itself would bring.
            assert self.refused(culprit) is None and any(v.live and v.priority > culprit.priority for v in victims)
        elif finding.kind is FindingKind.UNAUTHORIZED:
            assert finding.culprit is not None and pod.uid == finding.culprit.uid
        elif finding.kind is FindingKind.XID:
            targets = {finding.culprit.uid} if finding.culprit else set()
            if p.xid.drain_all:
                targets |= {v.uid for v in finding.victims}
            assert pod.uid in targets
        elif finding.kind is FindingKind.QUOTA:
            tenant = finding.tenant
            if tenant is None:
                culprit = attribution.pod(finding.culprit)
                tenant = culprit.tenant(p.tenant_label) if culprit else None
            assert pod.tenant(p.tenant_label) == tenant
        else:
            assert finding.kind is FindingKind.MEMORY_PRESSURE, f"{finding.kind} may never evict"
            # The kubelet's ranking: never above a pod it protects (equal allowed: use above request goes first).
            assert all(prio >= pod.priority for prio in protects.values()), decision
            assert finding.usage.get(f"{pod.namespace}/{pod.name}", 0.0) > 0
            assert pod.uid not in {v.uid for v in finding.victims}

    def _check_pacing(self, pod: PodInfo, *, now: float) -> None:
        p = self.policy
        assert self.tokens >= 1.0 - EPSILON, "token bucket overdrawn"
        self.tokens -= 1.0
        key = f"{pod.namespace}/{pod.name}"
        memory = p.evicted_memory_seconds if p.mode is Mode.ENFORCE else 0.0
        self._gap(self.last_pod, key, now, max(p.pod_cooldown_seconds, memory), "pod cooldown")
        self._gap(self.last_tenant, pod.tenant(p.tenant_label), now, p.tenant_cooldown_seconds, "tenant cooldown")
        lineage = lineage_key(namespace=pod.namespace, name=pod.name, owner_kind=pod.owner_kind)
        self._gap(self.last_lineage, lineage, now, p.pod_cooldown_seconds, "workload cooldown")

    @staticmethod
    def _gap(last: dict[str, float], key: str, now: float, cooldown: float, what: str) -> None:
        if cooldown > 0 and key in last:
            assert now - last[key] >= cooldown - EPSILON, f"{what} broken for {key}: {now - last[key]} < {cooldown}"
        last[key] = now


def run_world(world: World) -> Oracle:
    """Every cycle of the world through effective_policy + plan with one pacer, on the monotonic clock and the tick
    count as the agent paces; raises AssertionError on a breach."""
    policy = effective_policy(world.policy, own_namespace=world.own_namespace, tenant_label=None)
    pacer = Pacer(policy)
    oracle = Oracle(policy, world.own_namespace)
    pods = list(world.pods)
    now, wall_offset = 1_000.0, 1_700_000_000.0
    walls: dict[int, float] = {}
    for tick, cycle in enumerate(world.cycles):
        now += cycle.dt
        wall_offset += cycle.step
        oracle.tick_times[tick], walls[tick] = now, now + wall_offset
        for i in cycle.terminate:
            if i < len(pods):
                pods[i] = replace(pods[i], deleting=True)
        attribution = Attribution(index=PodIndex.of(pods, tenant_label=policy.tenant_label), healthy=cycle.healthy)
        findings = [_started(f, tick=tick, now=now, ticks=oracle.tick_times, walls=walls) for f in cycle.findings]
        decisions = plan(findings, attribution, policy, now, pacer=pacer, tick=tick)
        oracle.check_cycle(now, findings, attribution, decisions)
    return oracle


def _started(finding: Finding, *, tick: int, now: float, ticks: dict[int, float], walls: dict[int, float]) -> Finding:
    """The finding as detection would hand it over: it started on the first tick at or after `now + since` (its
    decoded `since` is relative), and its `since` is that tick's WALL-clock time, steps included."""
    first = min((t for t, at in ticks.items() if at >= now + finding.since), default=tick)
    return replace(finding, first_tick=first, last_tick=tick, since=walls[first])
