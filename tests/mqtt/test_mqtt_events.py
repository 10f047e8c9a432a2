"""events_for: which of a tick's results become which MQTT events, and what the payloads hold."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from watchdog.model import (
    ActionRecord,
    ActionReport,
    EvictionResult,
    Finding,
    FindingKind,
    Mode,
    NodeSample,
    PodRef,
    Severity,
    Snapshot,
    StageStatus,
    TickResult,
    XidEvent,
    finding_changes,
)
from watchdog.publishing.mqtt_events import SCHEMA_VERSION, events_for, topic_segment

VICTIM = PodRef("team-a", "trainer-0", uid="u-1", container="main")
CULPRIT = PodRef("team-b", "hog-7", uid="u-2")


def sample(tick: int) -> NodeSample:
    return NodeSample(node="node-a", tick=tick, timestamp=1700000000.0 + tick, gpus=())


def finding(**changes) -> Finding:
    base = Finding(
        kind=FindingKind.INTERFERENCE,
        key="interference/gi/GPU-1/3/team-b/hog-7",
        domain="gi/GPU-1/3",
        resource="dram",
        gpu_uuid="GPU-1",
        mig_uuid="MIG-1-3",
        severity=Severity.WARNING,
        first_tick=5,
        last_tick=7,
        since=1700000005.0,
        victims=(VICTIM,),
        culprit=CULPRIT,
        tenant="b",
        evidence={"deviation": 0.4, "correlation": 0.9, "signal": "dram_bw"},
        usage={"team-b/hog-7": 0.8},
        needed=0.3,
        message="hog-7 slows trainer-0",
    )
    return replace(base, **changes)


def snapshot(tick: int, **fields) -> Snapshot:
    fields.setdefault("stages", (StageStatus("sampling", 0.01, True), StageStatus("detection", 0.002, True)))
    return Snapshot(node="node-a", sample=sample(tick), **fields)


def tick_events(before: Snapshot | None, after: Snapshot, *, actions=(), xids=(), now=None):
    """The events of the tick that ends in ``after``, its finding changes computed by the model's one rule."""
    changes = finding_changes(before.findings if before is not None else (), after.findings)
    result = TickResult(tick=after.sample.tick if after.sample else 0, snapshot=after, changes=changes,
                        actions=ActionReport(counted=tuple(actions)), xids=tuple(xids))
    return events_for(result, previous=before, now=now)


def record(result="evicted", reason="interference", namespace="team-b", pod="hog-7", **fields) -> ActionRecord:
    return ActionRecord(result=EvictionResult(result), reason=reason, namespace=namespace, pod=pod,
                        finding_key="interference/gi/GPU-1/3/team-b/hog-7", finding_kind=FindingKind.INTERFERENCE,
                        mode=Mode.ENFORCE, timestamp=1700000008.0, uid="u-2", **fields)


def by_topic(events, suffix):
    return [(payload, retain) for topic, payload, retain in events if topic == suffix]


def test_first_snapshot_announces_status_and_open_findings():
    events = tick_events(None, snapshot(7, findings=(finding(),), mode=Mode.ENFORCE, ready=True))

    [(status, retained)] = by_topic(events, "node-a/status")
    assert retained is True
    assert status == {
        "schema": SCHEMA_VERSION,
        "node": "node-a",
        "tick": 7,
        "timestamp": 1700000007.0,
        "state": "online",
        "mode": "enforce",
        "paused": False,
        "ready": True,
        "stages": {"sampling": {"success": True, "detail": ""}, "detection": {"success": True, "detail": ""}},
    }
    [(new, retained)] = by_topic(events, "node-a/findings/interference")
    assert retained is False
    assert new["event"] == "new"
    assert new["victims"] == [{"namespace": "team-a", "name": "trainer-0", "uid": "u-1", "container": "main"}]
    assert new["culprit"] == {"namespace": "team-b", "name": "hog-7", "uid": "u-2", "container": None}
    assert (new["first_tick"], new["last_tick"], new["severity"]) == (5, 7, "warning")
    assert new["evidence"] == {"deviation": 0.4, "correlation": 0.9, "signal": "dram_bw"}
    assert (new["key"], new["tick"], new["schema"]) == (finding().key, 7, 1)
    assert (new["gpu_uuid"], new["mig_uuid"]) == ("GPU-1", "MIG-1-3")
    json.dumps(events, allow_nan=False)  # every payload is plain JSON


def test_an_unchanged_cycle_is_silent_even_when_evidence_moves():
    before = snapshot(7, findings=(finding(),))
    after = snapshot(8, findings=(finding(last_tick=8, evidence={"deviation": 0.5}),))
    assert tick_events(before, after) == []


@pytest.mark.parametrize(
    "change",
    [
        {"severity": Severity.CRITICAL},
        {"culprit": PodRef("team-c", "other")},
        {"victims": (VICTIM, PodRef("team-a", "trainer-1"))},
    ],
)
def test_a_material_change_is_an_update(change):
    events = tick_events(snapshot(7, findings=(finding(),)), snapshot(8, findings=(finding(last_tick=8, **change),)))
    [(updated, _)] = by_topic(events, "node-a/findings/interference")
    assert updated["event"] == "updated"
    assert updated["last_tick"] == 8


def test_a_vanished_finding_is_resolved_with_its_last_state():
    quota = finding(kind=FindingKind.QUOTA, key="quota/tenant/b", resource="memory")
    events = tick_events(snapshot(7, findings=(finding(), quota)), snapshot(8, findings=(finding(),)))
    [(resolved, _)] = by_topic(events, "node-a/findings/quota")
    assert (resolved["event"], resolved["key"], resolved["tick"], resolved["last_tick"]) == (
        "resolved",
        "quota/tenant/b",
        8,
        7,
    )
    assert by_topic(events, "node-a/findings/interference") == []


def test_same_key_of_another_kind_is_another_finding():
    events = tick_events(
        snapshot(7, findings=(finding(),)), snapshot(8, findings=(finding(kind=FindingKind.MEMORY_PRESSURE),))
    )
    assert [p["event"] for p, _ in by_topic(events, "node-a/findings/memory_pressure")] == ["new"]
    assert [p["event"] for p, _ in by_topic(events, "node-a/findings/interference")] == ["resolved"]


def test_each_counted_action_is_one_event_naming_its_pod():
    counted = [record(), record(), record("blocked_pdb", "quota", "team-c", "job-3", detail="PDB job-pdb", http_status=429)]
    after = snapshot(8, evictions={("evicted", "interference", "team-b"): 3, ("blocked_pdb", "quota", "team-c"): 1})
    actions = [payload for payload, _ in by_topic(tick_events(snapshot(7), after, actions=counted), "node-a/actions")]
    assert [(a["result"], a["reason"], a["namespace"], a["pod"], a["count"], a["total"]) for a in actions] == [
        ("evicted", "interference", "team-b", "hog-7", 1, 2),
        ("evicted", "interference", "team-b", "hog-7", 1, 3),
        ("blocked_pdb", "quota", "team-c", "job-3", 1, 1),
    ]
    assert actions[0]["uid"] == "u-2" and actions[0]["finding"] == "interference/gi/GPU-1/3/team-b/hog-7"
    assert (actions[2]["mode"], actions[2]["detail"], actions[2]["http_status"]) == ("enforce", "PDB job-pdb", 429)


def test_no_counted_action_no_action_event_whatever_the_counters_say():
    """A counter that merely stands where it stood (or a restarted one) is not an event: only what was counted."""
    before = snapshot(7, evictions={("evicted", "quota", "ns"): 5})
    after = snapshot(8, evictions={("evicted", "quota", "ns"): 2})
    assert by_topic(tick_events(before, after), "node-a/actions") == []


def test_an_xid_event_names_gpu_and_compute_instance_and_the_recovery_action():
    xid = XidEvent(gpu_index=1, gpu_uuid="GPU-1", xid=31, event_type=8, timestamp=1700000008.0, gpu_instance=3,
                   compute_instance=0, recovery_action=2)
    ecc = XidEvent(gpu_index=1, gpu_uuid="GPU-1", xid=0, event_type=4, timestamp=1700000008.0)  # no Xid number
    after = snapshot(8, xid_counts={(0, "GPU-0", None, 79): (1, 1700000003.0), (1, "GPU-1", 3, 31): (2, 1700000008.0)})
    [(payload, retained)] = by_topic(tick_events(snapshot(7), after, xids=(xid, ecc)), "node-a/xid")
    assert retained is False
    assert {k: payload[k] for k in ("gpu", "gpu_uuid", "gpu_instance", "compute_instance", "xid", "recovery_action",
                                    "count", "total", "last_seen")} == {
        "gpu": 1,
        "gpu_uuid": "GPU-1",
        "gpu_instance": 3,
        "compute_instance": 0,
        "xid": 31,
        "recovery_action": 2,
        "count": 1,
        "total": 2,
        "last_seen": 1700000008.0,
    }


@pytest.mark.parametrize(
    "change",
    [{"paused": True}, {"ready": True}, {"mode": Mode.OBSERVE}, {"stages": (StageStatus("sampling", 0.01, False),)}],
)
def test_status_is_published_again_only_when_it_changes(change):
    before = snapshot(7)
    assert tick_events(before, snapshot(8)) == []
    [(status, retained)] = by_topic(tick_events(before, snapshot(8, **change)), "node-a/status")
    assert retained and status["state"] == "online" and status["tick"] == 8


def test_topic_levels_are_sanitised():
    assert topic_segment("node/+#x") == "node___x"
    assert topic_segment("") == "_"
    events = tick_events(None, Snapshot(node="rack/1+gpu#"), now=42.0)
    assert [topic for topic, _, _ in events] == ["rack_1_gpu_/status"]
    assert events[0][1]["node"] == "rack/1+gpu#"  # the payload keeps the true name


def test_without_a_sample_the_given_clock_stamps_the_payload():
    [(_, status, _)] = tick_events(None, Snapshot(node="node-a"), now=42.0)
    assert (status["tick"], status["timestamp"]) == (None, 42.0)


def test_non_finite_numbers_become_null():
    bad = finding(evidence={"ratio": math.nan}, usage={"a/b": math.inf}, needed=-math.inf)
    [(_, payload, _)] = [e for e in tick_events(None, snapshot(7, findings=(bad,))) if "findings" in e[0]]
    assert (payload["evidence"], payload["usage"], payload["needed"]) == ({"ratio": None}, {"a/b": None}, None)
    json.dumps(payload, allow_nan=False)
