"""Findings leave detection naming the DRA claim of the pod they are about: no rewrite after the stage."""

from __future__ import annotations

import dataclasses

from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.detection import Detector
from watchdog.detection.claims import with_claims
from watchdog.model import Attribution, ClaimRef, Finding, FindingKind, PodRef, Severity


def test_findings_carry_the_claim_of_the_pod_they_are_about():
    sweep, infer = PodRef("batch", "sweep", "u1"), PodRef("prod", "infer", "u2")
    attribution = Attribution(claims={("MIG-3g", "batch/sweep"): ClaimRef("batch", "sweep-mig"),
                                      ("MIG-1g", "prod/infer"): ClaimRef("prod", "infer-mig")})

    def finding(**fields):
        return Finding(kind=FindingKind.INTERFERENCE, key="k", domain="gpu/GPU-0/power", resource="power",
                       severity=Severity.WARNING, first_tick=1, last_tick=2, since=0.0, **fields)

    power, xid, plain = with_claims([
        finding(victims=(infer,), culprit=sweep, gpu_uuid="GPU-0"),  # whole-GPU finding: the pod's only claim
        finding(victims=(infer,), mig_uuid="MIG-1g", gpu_uuid="GPU-0"),  # no culprit: the victim's claim
        finding(victims=(PodRef("web", "api", "u3"),)),  # a device-plugin pod: unchanged
    ], attribution)
    assert (power.evidence["claim_namespace"], power.evidence["claim_name"]) == ("batch", "sweep-mig")
    assert xid.evidence["claim_name"] == "infer-mig"
    assert "claim_name" not in plain.evidence


def test_the_detector_hands_out_findings_with_their_claim():
    owner, sneak = pod("team-a", "owner"), pod("team-b", "sneak")
    attr = attribution(devices={"MIG-a": [owner], "MIG-b": [sneak]}, processes={10: owner, 20: sneak})
    attr = dataclasses.replace(attr, claims={("MIG-b", "team-b/sneak"): ClaimRef("team-b", "sneak-gpu")})
    detector = Detector()
    for t in range(6):
        instances = (mig("MIG-a", gi=1, processes=(proc(10, mem=GIB), proc(20, mem=2 * GIB))), mig("MIG-b", gi=2))
        findings = detector.step(sample(t, [gpu("GPU-0", instances=instances)]), attr)
    [finding] = [f for f in findings if f.kind is FindingKind.UNAUTHORIZED]
    assert finding.culprit.key == "team-b/sneak"
    assert (finding.evidence["claim_namespace"], finding.evidence["claim_name"]) == ("team-b", "sneak-gpu")
