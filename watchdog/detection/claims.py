"""The DRA claim a finding's pod holds its device through, named in the finding's evidence.

Pure (no I/O). A pod given its GPU or MIG device through Dynamic Resource Allocation holds it through a
ResourceClaim; an operator reading a finding (or the Event on the pod) needs that claim to find the allocation,
and a device-plugin pod has none. The attribution already knows every (device, pod) → claim pair
(``Attribution.claims``, from the kubelet's pod-resources answer), so detection names the claim as it hands its
findings out: a finding leaves detection complete, and replay and the live agent read the same evidence.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Iterable

from watchdog.model import Attribution, ClaimRef, Finding


def with_claims(findings: Iterable[Finding], attribution: Attribution) -> list[Finding]:
    """The findings, each with ``claim_namespace``/``claim_name`` in its evidence when the pod it is about (the
    culprit, else the first victim) holds a device through a DRA claim: the claim on the finding's own device
    (``mig_uuid``, else ``gpu_uuid``) when there is one, else the pod's only claim on the node (a whole-GPU finding
    about a pod on one of its MIG devices). Evidence is not material (``model.findings.material``): adding it never
    reopens or re-announces a finding."""
    findings = list(findings)
    if not attribution.claims:
        return findings
    by_pod: dict[str, set[ClaimRef]] = {}
    for (_, key), claim in attribution.claims.items():
        by_pod.setdefault(key, set()).add(claim)
    enriched = []
    for finding in findings:
        ref = finding.culprit or (finding.victims[0] if finding.victims else None)
        claim = None
        if ref is not None:
            device = finding.mig_uuid or finding.gpu_uuid
            claim = attribution.claims.get((device, ref.key))
            held = by_pod.get(ref.key, set())
            if claim is None and len(held) == 1:
                claim = next(iter(held))
        if claim is None:
            enriched.append(finding)
            continue
        evidence = MappingProxyType({**finding.evidence, "claim_namespace": claim.namespace,
                                     "claim_name": claim.name})
        enriched.append(replace(finding, evidence=evidence))
    return enriched
