"""A100 MIG: no GPM, so a power-capped victim is reported with culprit unknown, or with its culprit named once the
cluster's per-instance activity is borrowed; NVML's own reading always wins over a borrowed one."""

from __future__ import annotations

from watchdog.action import decide
from watchdog.config.action import ActionPolicy
from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.borrowed import with_borrowed
from watchdog.model import FindingKind, InstanceActivity, Severity, instance_key

from detection_builders import SW_POWER_CAP, attribution, gpu, mig, pod, sample

UUID = "GPU-a100"
POLICY = DetectionPolicy.model_validate({"victim_signal_overrides": {"prod": {"query": "p99", "min_deviation": 5}}})
VICTIM, CULPRIT = pod("prod", "serve", priority=1000), pod("batch", "sweep", priority=1)
DEVICES = {"MIG-big": [CULPRIT], "MIG-small": [VICTIM]}


def _tick(t: int, *, borrowed: bool, nvml_sm: float | None = None):
    """Ticks 0–59 calm; from 60 the batch 3g runs flat out, the clock falls under SwPowerCap, p99 rises."""
    burst = t >= 60
    node = sample(t, [gpu(UUID, clock=1200.0 if burst else 1980.0, reasons=SW_POWER_CAP if burst else 0,
                          instances=(mig("MIG-big", gi=1, profile="3g.20gb", sm=nvml_sm),
                                     mig("MIG-small", gi=7, profile="1g.5gb")))])
    latency = {"prod/serve": (80.0 if burst else 20.0) + (t % 3)}
    activity = {instance_key(UUID, 1): InstanceActivity(sm=1.0 if burst else 0.1 + 0.01 * (t % 2)),
                instance_key(UUID, 7): InstanceActivity(sm=0.9, dram=0.3)} if borrowed else None
    return node, latency, activity


def _run(*, borrowed: bool, ticks: int = 100):
    detector = Detector(POLICY)
    attr = attribution(devices=DEVICES)
    findings = ()
    for t in range(ticks):
        node, latency, activity = _tick(t, borrowed=borrowed)
        findings = detector.step(node, attr, external_signals=latency, borrowed_activity=activity)
    return findings, attr


def test_victim_without_neighbour_use_is_reported_culprit_unknown_and_never_acted_on():
    findings, attr = _run(borrowed=False)
    [finding] = findings
    assert finding.kind is FindingKind.INTERFERENCE_CULPRIT_UNKNOWN
    assert finding.culprit is None and finding.severity is Severity.WARNING
    assert [v.key for v in finding.victims] == ["prod/serve"]
    assert finding.evidence["culprit"] == "unknown" and "batch/sweep" in str(finding.evidence["missing_for"])
    assert "DCGM_FI_PROF_SM_ACTIVE" in str(finding.evidence["supply"])
    assert decide(findings, attr, policy=ActionPolicy(mode="enforce"), now=100.0) == []


def test_borrowed_activity_names_the_culprit():
    findings, _ = _run(borrowed=True)
    [finding] = findings
    assert finding.kind is FindingKind.INTERFERENCE
    assert finding.culprit is not None and finding.culprit.key == "batch/sweep"
    assert finding.evidence["activity_source"] == "dcgm-exporter"
    assert [v.key for v in finding.victims] == ["prod/serve"]


def test_nvml_reading_wins_over_the_borrowed_one():
    node, _, activity = _tick(70, borrowed=True, nvml_sm=0.42)
    filled, borrowed_into = with_borrowed(node, activity)
    big, small = filled.gpus[0].instances
    assert big.sm_util == 0.42 and big.dram_bw_util is None  # NVML's SM kept; no borrowed DRAM for GI 1
    assert small.sm_util == 0.9 and small.dram_bw_util == 0.3
    assert borrowed_into == frozenset({"MIG-small"})
    assert with_borrowed(node, {}) == (node, frozenset())
