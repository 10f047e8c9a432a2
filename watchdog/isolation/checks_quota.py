"""Scheduling boundaries on quantity: ResourceQuotas on GPU resources and on storage, and LimitRanges on GPUs.

ResourceQuota semantics (Kubernetes docs "Resource Quotas"): an extended resource is capped by ``requests.<name>``
(or the bare name); quota items with the ``limits.`` prefix are not allowed for extended resources because they
cannot be overcommitted ("Resource quota for extended resources"), so a quota that names only ``limits.`` caps
nothing and is warned. Storage is capped by ``requests.storage`` or
``<class>.storageclass.storage.k8s.io/requests.storage`` ("Storage Resource Quota"). Several quotas in one
namespace all apply, so their hard limits are merged, the tightest winning. Each fix is a new object with the
tenant's current use as its limit, so applying it changes nothing for running work and stops growth.
LimitRanges: only ``max`` is required. A LimitRange ``default`` for an extended resource is applied to every
container that sets no limit for it (plugin/pkg/admission/limitranger), CPU-only sidecars included, so a GPU default
is warned rather than asked for. GPUs allocated through Dynamic Resource Allocation are capped per device class
(``<class>.deviceclass.resource.k8s.io/devices``, counted over the namespace's ResourceClaims: isolation.claims) and
checked in the same row. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from watchdog.isolation.claims import claimed_gpu_devices, quota_key
from watchdog.isolation.inventory import Inventory, Tenant, meta
from watchdog.isolation.quantity import QuantityError, format_quantity, parse_quantity
from watchdog.isolation.results import ERROR, FAIL, PASS, WARN, CheckResult

_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"  # docs "Change the default StorageClass"


def _hard_limits(inventory: Inventory, namespace: str) -> tuple[dict[str, Decimal], list[str]]:
    hard: dict[str, Decimal] = {}
    problems = []
    for quota in inventory.cluster.of("resourcequotas", namespace):
        for key, value in ((quota.get("spec") or {}).get("hard") or {}).items():
            try:
                amount = parse_quantity(value)
            except QuantityError as error:
                problems.append(f"ResourceQuota {namespace}/{meta(quota).get('name')}: spec.hard[{key}]: {error}")
                continue
            hard[key] = min(amount, hard.get(key, amount))
    return hard, problems


def _quota(*, namespace: str, name: str, hard: dict[str, Decimal]) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {k: format_quantity(v) for k, v in sorted(hard.items())}}}


def check_gpu_quota(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = (inventory.unread("resourcequotas", tenant) or inventory.unread("pods", tenant)
              or inventory.unread("resourceclaims", tenant))
    if unread:
        return [CheckResult(tenant.name, "gpu-quota", ERROR, unread)]
    results = []
    for namespace in tenant.namespaces:
        claimed = claimed_gpu_devices(inventory.cluster.of("resourceclaims", namespace))
        used: dict[str, Decimal] = defaultdict(Decimal)
        for pod in inventory.gpu_pods(tenant.name):
            if meta(pod.pod).get("namespace") == namespace:
                for name, amount in pod.gpu.items():
                    used[name] += amount
        hard, problems = _hard_limits(inventory, namespace)
        capped, limits_only, uncapped = [], [], {}
        for name, amount in sorted(used.items()):
            cap = hard.get(f"requests.{name}", hard.get(name))
            if cap is not None:
                capped.append(f"{name} {format_quantity(amount)} requested of {format_quantity(cap)}")
            else:
                uncapped[f"requests.{name}"] = amount
                if f"limits.{name}" in hard:
                    limits_only.append(name)
        unclaimed_cap: dict[str, Decimal] = {}  # DRA: device-class quota key -> devices the claims request
        for device_class, amount in sorted(claimed.by_class.items()):
            cap = hard.get(quota_key(device_class))
            if cap is not None:
                capped.append(f"{device_class} devices {format_quantity(amount)} claimed of {format_quantity(cap)}")
            else:
                unclaimed_cap[quota_key(device_class)] = amount
        lines = [p for p in problems if "nvidia.com" in p] + list(claimed.problems)
        lines += [f"{namespace}: a ResourceClaim takes every {c} device it matches (allocationMode All): its count "
                  "is not known before allocation" for c in sorted(claimed.uncounted)]
        if not used and not claimed.by_class:
            result, lines = PASS, [*lines, f"{namespace}: no pod requests a GPU resource"]
        elif uncapped or unclaimed_cap:
            result = FAIL if len(limits_only) < len(uncapped) or unclaimed_cap else WARN
            lines += [f"{namespace}: not capped: " + ", ".join(
                [f"{k.removeprefix('requests.')} ({format_quantity(v)} requested)" for k, v in uncapped.items()]
                + [f"{k} ({format_quantity(v)} claimed)" for k, v in unclaimed_cap.items()])]
            lines += [f"{namespace}: limits.{n} is not enforced for an extended resource; cap requests.{n}"
                      for n in limits_only]
        else:
            result, lines = (WARN if lines else PASS), [*lines, f"{namespace}: " + "; ".join(capped)]
        uncapped.update(unclaimed_cap)
        fix = _quota(namespace=namespace, name="gpu-watchdog-gpu-quota", hard=uncapped) if uncapped else None
        results.append(CheckResult(tenant.name, "gpu-quota", result, "; ".join(lines), fix))
    return results


def check_gpu_limit_range(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("limitranges", tenant) or inventory.unread("pods", tenant)
    if unread:
        return [CheckResult(tenant.name, "gpu-limit-range", ERROR, unread)]
    results = []
    for namespace in tenant.namespaces:
        largest: dict[str, Decimal] = {}
        for pod in inventory.gpu_pods(tenant.name):
            if meta(pod.pod).get("namespace") == namespace:
                for name, amount in pod.per_container_max.items():
                    if name in pod.gpu:
                        largest[name] = max(largest.get(name, amount), amount)
        maxima: dict[str, Decimal] = {}
        defaults, problems = [], []
        for limit_range in inventory.cluster.of("limitranges", namespace):
            for item in (limit_range.get("spec") or {}).get("limits") or ():
                if item.get("type") != "Container":
                    continue
                for name, value in (item.get("max") or {}).items():
                    try:
                        maxima[name] = min(parse_quantity(value), maxima.get(name, parse_quantity(value)))
                    except QuantityError as error:
                        problems.append(f"LimitRange {namespace}/{meta(limit_range).get('name')}: max[{name}]: "
                                        f"{error}")
                defaults += [n for n in (item.get("default") or {}) if n in largest or n.startswith("nvidia.com/")]
        missing = {n: v for n, v in sorted(largest.items()) if n not in maxima}
        lines = list(problems)
        if not largest:
            result, lines = PASS, [*lines, f"{namespace}: no pod requests a GPU resource"]
        elif missing:
            result = FAIL
            lines.append(f"{namespace}: no per-container max for " + ", ".join(missing))
        else:
            result = WARN if problems else PASS
            lines.append(f"{namespace}: max per container " + ", ".join(
                f"{n} {format_quantity(maxima[n])}" for n in sorted(largest)))
        if defaults:
            result = WARN if result == PASS else result
            lines.append(f"{namespace}: a default for {', '.join(sorted(set(defaults)))} is given to every "
                         "container without a limit, CPU-only ones too")
        fix = None
        if missing:
            fix = {"apiVersion": "v1", "kind": "LimitRange",
                   "metadata": {"name": "gpu-watchdog-gpu-limits", "namespace": namespace},
                   "spec": {"limits": [{"type": "Container",
                                        "max": {n: format_quantity(v) for n, v in missing.items()}}]}}
        results.append(CheckResult(tenant.name, "gpu-limit-range", result, "; ".join(lines), fix))
    return results


def _storage_class(claim: dict, default_class: str) -> str:
    return (claim.get("spec") or {}).get("storageClassName") or default_class or "(default)"


def check_storage_quota(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("resourcequotas", tenant) or inventory.unread("persistentvolumeclaims", tenant)
    if unread:
        return [CheckResult(tenant.name, "storage-quota", ERROR, unread)]
    default_class = next((meta(c).get("name", "") for c in inventory.cluster.of("storageclasses")
                          if (meta(c).get("annotations") or {}).get(_DEFAULT_CLASS) == "true"), "")
    users: dict[str, set[str]] = defaultdict(set)  # class -> tenants with claims on it
    for claim in inventory.cluster.of("persistentvolumeclaims"):
        owner = inventory.tenant_of.get(meta(claim).get("namespace", ""))
        if owner:
            users[_storage_class(claim, default_class)].add(owner)
    results = []
    for namespace in tenant.namespaces:
        claims = inventory.cluster.of("persistentvolumeclaims", namespace)
        total, by_class, problems = Decimal(0), defaultdict(Decimal), []
        for claim in claims:
            value = ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage", "0")
            try:
                amount = parse_quantity(value)
            except QuantityError as error:
                problems.append(f"PersistentVolumeClaim {namespace}/{meta(claim).get('name')}: storage: {error}")
                continue
            total += amount
            by_class[_storage_class(claim, default_class)] += amount
        hard, quota_problems = _hard_limits(inventory, namespace)
        lines = problems + [p for p in quota_problems if "storage" in p]
        uncapped = [c for c in sorted(by_class) if "requests.storage" not in hard
                    and f"{c}.storageclass.storage.k8s.io/requests.storage" not in hard]
        shared = [f"StorageClass {c} shared with {', '.join(sorted(users[c] - {tenant.name}))}"
                  for c in sorted(by_class) if users[c] - {tenant.name}]
        if not claims:
            result, lines = PASS, [*lines, f"{namespace}: no PersistentVolumeClaims"]
        elif uncapped:
            result = FAIL
            lines.append(f"{namespace}: no storage quota for {', '.join(uncapped)} "
                         f"({format_quantity(total)} claimed)")
        else:
            result = WARN if lines else PASS
            lines.append(f"{namespace}: storage capped ({format_quantity(total)} claimed)")
        fix = None
        if uncapped:
            fix = _quota(namespace=namespace, name="gpu-watchdog-storage-quota", hard={"requests.storage": total})
        results.append(CheckResult(tenant.name, "storage-quota", result, "; ".join(lines + shared), fix))
    return results
