"""The registry of finding sources: each source fenced on its own, and the tick's shared view fenced by part."""

from __future__ import annotations

import dataclasses

import pytest
from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import SOURCES, Detector
from watchdog.detection.view import DEVICES, TickView, ViewUnavailable
from watchdog.model import FindingKind, ProcessSample, XidEvent

OWNER, SNEAK = pod("team-a", "owner"), pod("team-b", "sneak")
ATTR = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: SNEAK, 21: SNEAK})


def node(tick: int, *, xid: bool = True, processes: tuple[ProcessSample, ...] | None = None):
    """SNEAK runs a process on OWNER's instance (unauthorized from tick 4); an Xid 31 on GPU-0 at every tick."""
    instances = (
        mig("MIG-a", gi=1, processes=processes or (proc(10, mem=GIB), proc(20, mem=2 * GIB))),
        mig("MIG-b", gi=2, processes=(proc(21, mem=GIB),)),
    )
    events = (XidEvent(gpu_index=0, gpu_uuid="GPU-0", xid=31, event_type=8, timestamp=float(tick), gpu_instance=1),)
    return sample(tick, [gpu("GPU-0", instances=instances)], xids=events if xid else ())


class Exploding:
    """A source that raises at the ticks in ``at`` and finds nothing at the others."""

    name = "exploding"
    needs = frozenset({DEVICES})
    at: frozenset[int] = frozenset(range(100))

    def __init__(self, policy: DetectionPolicy, *, tenant_of) -> None:
        self.seen: list[int] = []

    def set_policy(self, policy: DetectionPolicy) -> None:
        pass

    def step(self, view: TickView):
        self.seen.append(view.tick)
        if view.tick in self.at:
            raise RuntimeError(f"broken at {view.tick}")
        return []


def kinds(findings):
    return sorted({f.kind for f in findings})


def test_a_source_that_raises_loses_only_its_own_findings():
    plain, fenced = Detector(), Detector(sources=(Exploding, *SOURCES))
    for t in range(8):
        expected, found = plain.step(node(t), ATTR), fenced.step(node(t), ATTR)
        assert found == expected  # every other source's findings, tick by tick, state and all
        [(name, error)] = fenced.last_failures
        assert name == "exploding" and isinstance(error, RuntimeError) and str(error) == f"broken at {t}"
    assert kinds(found) == [FindingKind.UNAUTHORIZED, FindingKind.XID]
    assert plain.last_failures == ()


def test_a_source_raising_for_a_while_costs_nothing_after_it_recovers():
    flaky = type("Flaky", (Exploding,), {"name": "unauthorized_flaky", "at": frozenset({2, 3})})
    detector = Detector(sources=(flaky, *SOURCES))
    failures = []
    for t in range(6):
        detector.step(node(t), ATTR)
        failures.append([name for name, _ in detector.last_failures])
    assert failures == [[], [], ["unauthorized_flaky"], ["unauthorized_flaky"], [], []]


def test_a_view_part_that_cannot_be_built_skips_only_the_sources_that_need_it():
    detector = Detector()
    broken = (ProcessSample(pid=10, used_memory_bytes="1 GiB", gpu_instance=1, compute_instance=0),  # type: ignore[arg-type]
              proc(20, mem=2 * GIB))
    findings = detector.step(node(0, processes=broken), ATTR)
    assert kinds(findings) == [FindingKind.XID]  # the Xid needs the sample alone
    assert [f.evidence["gpu_uuid"] for f in findings] == ["GPU-0"]
    failures = dict(detector.last_failures)
    assert isinstance(failures["view/devices"], TypeError)
    needing = {"interference", "memory_pressure", "quota", "unauthorized", "unauthorized_host", "mps_memory"}
    assert set(failures) == needing | {"view/devices"}
    for name in needing:
        assert isinstance(failures[name], ViewUnavailable) and failures[name].__cause__ is failures["view/devices"]
    detector.step(node(1), ATTR)  # the next tick builds its view again
    assert detector.last_failures == ()


def test_every_registered_source_has_its_own_name():
    names = Detector().source_names
    assert len(names) == len(set(names)) == len(SOURCES)
    with pytest.raises(ValueError, match="own name"):
        Detector(sources=(Exploding, Exploding))


def test_a_policy_reload_reaches_every_source():
    detector = Detector()
    detector.set_policy(DetectionPolicy.model_validate({"unauthorized": {"enabled": False}, "xid": {"enabled": False}}))
    for t in range(6):
        findings = detector.step(node(t), ATTR)
    assert findings == ()


def test_domains_that_cannot_be_built_skip_interference_alone():
    detector = Detector()
    for t in range(6):
        good = node(t)
        unnamed = dataclasses.replace(good.gpus[0].instances[1], profile=None)  # no profile: no share of the GPU
        gpu0 = dataclasses.replace(good.gpus[0], instances=(good.gpus[0].instances[0], unnamed))
        findings = detector.step(dataclasses.replace(good, gpus=(gpu0,)), ATTR)
        assert [name for name, _ in detector.last_failures] == ["view/domains", "interference"]
    assert kinds(findings) == [FindingKind.UNAUTHORIZED, FindingKind.XID]
