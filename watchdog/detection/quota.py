"""Per-tenant quota breaches on this node, found by observation rather than by intercepting allocations.

Pure (no I/O). HAMi (Project-HAMi/HAMi) caps GPU memory with an LD_PRELOAD shim and its users report false OOMs;
we only watch what NVML reports and let a breach that *persists* (for_ticks) become a finding, with `needed` = the
excess so the action stage can free exactly that. Limits: GPU memory summed over a tenant's pods (a VM's vGPU
counts its whole framebuffer: detection/vgpu.py), DRAM time share on each time-sliced GPU (Σ per-process memory
util; MIG isolates DRAM so it is not checked there), and MIG instances held per profile. A MIG instance filling up
is not a quota breach: it gets a WARNING of its own kind, MIG_MEMORY_WARNING (report only, never acted on), so
`quota` always means a configured quota was exceeded.
Missing numbers never clear or start anything: a tenant whose usage could not be fully read this tick keeps its run,
and its open breach is reported unobserved (`observed=False`, `last_tick` = the last tick it was seen) until it can
be judged again or `stale_ticks` pass. A limit removed by a policy reload closes its breach at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.domain_types import Device
from watchdog.detection.runs import Run, Runs
from watchdog.detection.view import DEVICES, POOLS, TickView
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity


Limit = tuple[str, str, str]  # (tenant or "", "memory" | "dram" | "instances" | "mig-memory", profile or "")


@dataclass(slots=True)
class _Open:
    finding: Finding  # as of last_observed
    last_observed: int


class QuotaDetector:
    name = "quota"
    needs = frozenset({DEVICES, POOLS})

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy
        self._tenant_of = tenant_of
        self._runs = Runs()
        self._open: dict[str, _Open] = {}
        self._limits: dict[str, Limit] = {}  # key of every run or open breach → the limit it checks
        self._tick, self._timestamp = 0, 0.0
        self._refs: dict[str, PodRef] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        self._policy = policy
        self._drop_unconfigured()

    def step(self, view: TickView) -> list[Finding]:
        """Memory and instance counts per tenant over the tick's pools and devices, DRAM share per time-sliced GPU,
        and the "instance nearly full" warning per pool."""
        policy = self._policy.quota
        if not policy.enabled:
            self._runs, self._open, self._limits = Runs(), {}, {}
            return []
        attribution, tick = view.attribution, view.tick
        devices, pools = view.devices or (), view.pools or ()
        self._tick, self._timestamp = tick, view.timestamp
        self._refs = {ref.key: ref for device in devices for ref in device.pods}
        self._drop_unconfigured()
        if policy.tenants:  # per-tenant sums only when some tenant has a quota (most nodes: none)
            self._memory(pools, attribution, present={device.uuid for device in devices})
            self._dram(devices)
            if attribution.healthy:  # instance counts come from the kubelet's assignments: only trust a fresh list
                self._instances(devices, attribution)
        self._warnings(pools)
        findings = []
        for key, entry in list(self._open.items()):
            if tick - entry.last_observed > policy.stale_ticks:
                self._end(key)
            elif entry.last_observed == tick:
                findings.append(entry.finding)
            else:
                findings.append(replace(entry.finding, observed=False))
        return findings

    def _drop_unconfigured(self) -> None:
        """Runs and breaches of limits the policy no longer sets end now: nothing is breached without a limit."""
        for key, limit in list(self._limits.items()):
            if not self._configured(limit):
                self._end(key)

    def _configured(self, limit: Limit) -> bool:
        tenant, resource, profile = limit
        policy = self._policy.quota
        if resource == "mig-memory":
            return policy.memory_warning_ratio is not None
        quota = policy.tenants.get(tenant)
        if quota is None:
            return False
        if resource == "memory":
            return quota.gpu_memory_bytes is not None
        if resource == "dram":
            return quota.dram_share is not None
        return profile in quota.instances

    def _end(self, key: str) -> None:
        self._runs.end(key)
        self._open.pop(key, None)
        self._limits.pop(key, None)

    # ------------------------------------------------------------------------------------------- the checks

    def _memory(self, devices: Sequence[Device], attribution: Attribution, *, present: set[str]) -> None:
        """``devices`` with split GIs pooled, so a pod's bytes count once; ``present``: every device UUID sampled."""
        usage: dict[str, dict[str, float]] = {}
        incomplete: set[str] = set()  # a pod's bytes unreadable: a sum over the limit is still a breach
        # A device the kubelet assigned but the sample lacks (its GPU lost or absent this tick): the tenant's sum
        # is unknown in both directions, so its run neither starts, advances nor ends.
        unseen = {
            self._tenant_of(ref) for uuid, refs in attribution.devices.items() if uuid not in present for ref in refs
        }
        for device in devices:
            # A vGPU's framebuffer is reserved whole for its VM when the VM starts (NVIDIA Virtual GPU Software
            # User Guide, "Virtual GPU Types"): the VM holds its size, whatever the guest has allocated of it.
            for ref in device.pods:
                tenant = self._tenant_of(ref)
                held = device.memory_total if device.vgpu is not None else device.pod_memory.get(ref.key)
                if held is not None:
                    per_pod = usage.setdefault(tenant, {})
                    per_pod[ref.key] = per_pod.get(ref.key, 0.0) + held
                else:
                    incomplete.add(tenant)
        tenants = self._policy.quota.tenants
        for tenant in self._to_judge(usage.keys() | incomplete | unseen, "memory"):
            quota = tenants[tenant]
            if quota.gpu_memory_bytes is None:
                continue
            per_pod = usage.get(tenant, {})
            total, limit = sum(per_pod.values()), quota.gpu_memory_bytes
            key = f"quota/{tenant}/memory"
            if tenant in unseen:
                breached = None
            else:
                breached = None if total <= limit and tenant in incomplete else total > limit
            run = self._check(key, breached, limit=(tenant, "memory", ""))
            if run is not None:
                self._open_breach(key, self._finding(
                    run, key=key, domain=f"tenant/{tenant}", resource="memory", tenant=tenant, usage=per_pod,
                    culprit=self._largest(per_pod), needed=total - limit, evidence={"usage": total, "limit": limit},
                    message=f"tenant {tenant} uses {total / 2**30:.2f} GiB of GPU memory, "
                            f"limit {limit / 2**30:.2f} GiB",
                ))

    def _dram(self, devices: Sequence[Device]) -> None:
        for device in devices:
            if device.mig is not None or len(device.pods) < 2:
                continue
            shares: dict[str, dict[str, float]] = {}
            present: set[str] = set()
            for ref in device.pods:
                tenant = self._tenant_of(ref)
                present.add(tenant)
                if ref.key in device.pod_dram:
                    shares.setdefault(tenant, {})[ref.key] = device.pod_dram[ref.key]
            suffix = f"/dram/{device.uuid}"
            tenants = self._policy.quota.tenants
            for tenant in self._to_judge(present, "dram", suffix=suffix):
                quota = tenants[tenant]
                if quota.dram_share is None:
                    continue
                per_pod = shares.get(tenant, {})
                total, limit = sum(per_pod.values()), quota.dram_share
                key = f"quota/{tenant}{suffix}"
                has_pod = tenant in present
                run = self._check(key, total > limit if per_pod or not has_pod else None, limit=(tenant, "dram", ""))
                if run is not None:
                    self._open_breach(key, self._finding(
                        run, key=key, domain=f"tenant/{tenant}", resource="dram", tenant=tenant, usage=per_pod,
                        culprit=self._largest(per_pod), needed=total - limit, gpu_uuid=device.uuid,
                        evidence={"usage": round(total, 4), "limit": limit, "gpu_uuid": device.uuid},
                        message=f"tenant {tenant} takes {total:.0%} of DRAM time on {device.uuid}, limit {limit:.0%}",
                    ))

    def _instances(self, devices: Sequence[Device], attribution: Attribution) -> None:
        held: dict[tuple[str, str], dict[str, PodRef]] = {}  # (tenant, profile) → MIG uuid → holder
        for device in devices:
            if device.profile is None:
                continue
            for ref in device.assigned:
                held.setdefault((self._tenant_of(ref), device.profile), {})[device.uuid] = ref
        tenants = self._policy.quota.tenants
        for tenant in self._to_judge({tenant for tenant, _ in held}, "instances"):
            for profile, limit in tenants[tenant].instances.items():
                holders = held.get((tenant, profile), {})
                usage: dict[str, float] = {}
                for ref in holders.values():
                    usage[ref.key] = usage.get(ref.key, 0.0) + 1
                key = f"quota/{tenant}/instances/{profile}"
                run = self._check(key, len(holders) > limit, limit=(tenant, "instances", profile))
                if run is not None:
                    # The newest holder is the one whose instance pushed the tenant over its limit.
                    newest = max(holders.values(), key=lambda ref: _created(attribution, ref))
                    self._open_breach(key, self._finding(
                        run, key=key, domain=f"tenant/{tenant}", resource="instances", tenant=tenant, usage=usage,
                        culprit=newest, needed=float(len(holders) - limit),
                        evidence={"usage": len(holders), "limit": limit, "profile": profile},
                        message=f"tenant {tenant} holds {len(holders)} {profile} instances, limit {limit} "
                                f"instance{'' if limit == 1 else 's'}",
                    ))

    def _warnings(self, devices: Sequence[Device]) -> None:
        ratio = self._policy.quota.memory_warning_ratio
        if ratio is None:
            return
        for device in devices:
            if device.mig is None or not device.memory_total or device.memory_used is None:
                continue
            used = device.memory_used / device.memory_total
            key = f"mig-memory/{device.uuid}"  # a split GI: once for its pool (gi/<gpu>/<gi>), never per CI
            run = self._check(key, used > ratio, limit=("", "mig-memory", ""))
            if run is not None:
                usage = {k: float(v) for k, v in device.pod_memory.items()}
                top = max(device.pods, key=lambda ref: usage.get(ref.key, 0.0), default=None)
                pool = bool(device.compute_instances)
                extra = {"compute_instances": ",".join(device.compute_instances)} if pool else {}
                self._open_breach(key, self._finding(
                    run, kind=FindingKind.MIG_MEMORY_WARNING, key=key,
                    domain=device.uuid if pool else f"mig/{device.uuid}", resource="memory",
                    gpu_uuid=device.gpu.uuid, mig_uuid="" if pool else device.uuid,
                    tenant=self._tenant_of(top) if top else None, usage=usage, culprit=top,
                    needed=device.memory_used - ratio * device.memory_total, severity=Severity.WARNING,
                    evidence={"usage": round(used, 4), "limit": ratio, "profile": device.profile or "", **extra},
                    message=f"{device.profile} {'GPU instance' if pool else 'instance'} {device.uuid} is "
                            f"{used:.0%} full, warning above {ratio:.0%}",
                ))

    # -------------------------------------------------------------------------------------------- plumbing

    def _to_judge(self, seen: Iterable[str], resource: str, *, suffix: str = "") -> list[str]:
        """The configured tenants to judge this tick for ``resource``: those seen on the node now, and those with a
        run or a breach of it still open (judged so it can end). A configured tenant that is neither has nothing
        to start or end, so a policy of thousands of tenants costs only the node's own tenants per tick."""
        tenants = self._policy.quota.tenants
        wanted = {tenant for tenant in seen if tenant in tenants}
        wanted.update(tenant for key, (tenant, kind, _profile) in self._limits.items()
                      if kind == resource and key.endswith(suffix) and tenant in tenants)
        return sorted(wanted)

    def _check(self, key: str, breached: bool | None, *, limit: Limit) -> Run | None:
        """The active run when the breach held long enough; None = could not tell, so nothing changes."""
        if breached is None:
            return None
        if not breached:
            self._end(key)
            return None
        self._limits[key] = limit
        run = self._runs.hold(key, tick=self._tick, timestamp=self._timestamp, for_ticks=self._policy.quota.for_ticks)
        return run if run.active else None

    def _open_breach(self, key: str, finding: Finding) -> None:
        self._open[key] = _Open(finding, self._tick)

    def _largest(self, usage: dict[str, float]) -> PodRef | None:
        return self._refs.get(max(usage, key=usage.__getitem__)) if usage else None

    def _finding(
        self,
        run: Run,
        *,
        kind: FindingKind = FindingKind.QUOTA,
        key: str,
        domain: str,
        resource: str,
        tenant: str | None,
        usage: dict[str, float],
        culprit: PodRef | None,
        needed: float,
        evidence: dict[str, float | int | str],
        message: str,
        severity: Severity = Severity.CRITICAL,
        gpu_uuid: str = "",
        mig_uuid: str = "",
    ) -> Finding:
        return Finding(
            kind=kind,
            key=key,
            domain=domain,
            resource=resource,
            severity=severity,
            first_tick=run.first_tick,
            last_tick=self._tick,
            since=run.since,
            culprit=culprit,
            tenant=tenant,
            evidence={**evidence, "ticks": run.ticks},
            usage=dict(usage),
            needed=float(needed),
            message=message,
            gpu_uuid=gpu_uuid,
            mig_uuid=mig_uuid,
        )


def _created(attribution: Attribution, ref: PodRef) -> float:
    info = attribution.pod(ref)
    return info.created if info else 0.0
