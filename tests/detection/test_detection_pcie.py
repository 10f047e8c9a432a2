"""The PCIe link of a MIG GPU as a contention domain: a neighbour's copies starving a pod's input pipeline."""

from __future__ import annotations

from dataclasses import replace

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.blind import MISSING_PCIE_USE
from watchdog.detection.domains import DomainKind, devices_of, domains_of
from watchdog.model import FindingKind, Severity

from detection_builders import attribution, gpu, mig, pod, sample

LINK = 63e9  # Gen5 x16, one direction
VICTIM, CULPRIT, BYSTANDER = pod("prod", "train", priority=1000), pod("batch", "loader"), pod("lab", "notebook")
DEVICES = {"MIG-a": [CULPRIT], "MIG-b": [VICTIM], "MIG-c": [BYSTANDER]}


def _instance(uuid: str, *, gi: int, sm: float, rx: float | None, profile: str = "1g.10gb"):
    return replace(mig(uuid, gi=gi, sm=sm, profile=profile), pcie_rx_bytes_per_second=rx,
                   pcie_tx_bytes_per_second=None if rx is None else 0.0)


def _tick(t: int, *, victim_rx: float = 12e9, per_instance: bool = True, link: float | None = LINK):
    """From tick 60 the loader's copies fill the link and the victim's SMs idle for want of input."""
    burst = t >= 60
    loader_rx = 49e9 if burst else 2e9
    victim_got = victim_rx * (0.7 if burst else 1.0)
    wobble = 0.01 * (t % 3)
    instances = (
        _instance("MIG-a", gi=1, sm=0.3 + wobble, rx=loader_rx if per_instance else None, profile="3g.40gb"),
        _instance("MIG-b", gi=5, sm=(0.56 if burst else 0.8) + wobble, rx=victim_got if per_instance else None),
        _instance("MIG-c", gi=9, sm=0.5 - wobble, rx=0.0 if per_instance else None),
    )
    whole = replace(gpu("GPU-0", instances=instances), pcie_link_bytes_per_second=link,
                    pcie_rx_bytes_per_second=loader_rx + victim_got, pcie_tx_bytes_per_second=0.0)
    return sample(t, [whole])


def _run(**kwargs):
    detector = Detector(DetectionPolicy())
    attr = attribution(devices=DEVICES)
    seen = []
    for t in range(120):
        seen.extend(detector.step(_tick(t, **kwargs), attr))
    return seen


def test_a_neighbour_filling_the_link_is_the_culprit_of_the_starved_pod() -> None:
    findings = [f for f in _run() if f.kind is FindingKind.INTERFERENCE]
    assert findings, "no interference finding"
    assert {f.domain for f in findings} == {"gpu/GPU-0/pcie"}
    last = findings[-1]
    assert last.culprit.key == "batch/loader" and [v.key for v in last.victims] == ["prod/train"]
    assert last.resource == "pcie" and last.severity is Severity.CRITICAL
    assert last.evidence["link_bytes_per_second"] == LINK and last.evidence["busy"] >= 0.75


def test_a_pod_that_moves_nothing_over_the_link_is_never_its_victim() -> None:
    # Same idle SMs, but the pod reads nothing from the host: whatever slowed it, it was not the link.
    assert not [f for f in _run(victim_rx=0.0) if f.domain == "gpu/GPU-0/pcie"]


def test_whole_gpu_pcie_only_reports_the_victim_with_culprit_unknown() -> None:
    findings = _run(per_instance=False)
    assert not [f for f in findings if f.kind is FindingKind.INTERFERENCE]
    blind = [f for f in findings if f.kind is FindingKind.INTERFERENCE_CULPRIT_UNKNOWN]
    assert blind and blind[-1].culprit is None and [v.key for v in blind[-1].victims] == ["prod/train"]
    assert blind[-1].evidence["missing"] == MISSING_PCIE_USE and blind[-1].severity is Severity.WARNING


def test_no_link_capacity_no_pcie_domain() -> None:
    devices = devices_of(_tick(70, link=None), attribution(devices=DEVICES))
    assert DomainKind.PCIE not in {d.kind for d in domains_of(devices)}


def test_compute_instances_of_one_gpu_instance_count_its_link_use_once() -> None:
    first, second = pod("a", "one"), pod("b", "two")
    instances = (replace(_instance("MIG-x", gi=2, sm=0.5, rx=20e9), compute_instance=0),
                 replace(_instance("MIG-y", gi=2, sm=0.5, rx=20e9), compute_instance=1))
    node = sample(0, [replace(gpu("GPU-0", instances=instances), pcie_link_bytes_per_second=LINK)])
    domains = domains_of(devices_of(node, attribution(devices={"MIG-x": [first], "MIG-y": [second]})))
    link = next(d for d in domains if d.kind is DomainKind.PCIE)
    assert link.busy == 20e9 / LINK  # the GI's rate once, not once per CI
    assert link.activity == {"a/one": 20e9 / LINK, "b/two": 20e9 / LINK}
