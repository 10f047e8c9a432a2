"""Traces keep the DRA claim of each (device, pod): a replay of a DRA node names the claims the agent named."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest

from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.model import ClaimRef
from watchdog.trace import TraceHeader, TraceWriter, read_trace
from watchdog.trace.codec import decode_tick, encode_tick

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "dra-whole-and-mig.yaml"


@pytest.fixture(scope="module")
def dra_ticks() -> list:
    return list(simulate(str(SCENARIO)))


def write(path: Path, ticks: list, *, version: int) -> Path:
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0,
                                              version=version)) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    return path


def test_claims_round_trip_exactly_through_json(dra_ticks: list) -> None:
    sample, attribution = dra_ticks[-1]
    assert attribution.claims  # the scenario's pods hold their devices through claims
    line = json.loads(json.dumps(encode_tick(sample, attribution)))
    assert line["attribution"]["claims"]  # nested like "devices": uuid → "ns/pod" → claim
    assert decode_tick(line) == (sample, attribution)


@pytest.mark.parametrize("version", [1, 2])
def test_every_tick_reads_back_with_its_claims(tmp_path: Path, dra_ticks: list, version: int) -> None:
    records = list(read_trace(write(tmp_path / "dra.jsonl", dra_ticks, version=version)))
    assert [r.attribution.claims for r in records] == [a.claims for _, a in dra_ticks]
    assert ClaimRef("prod", "infer-mig-1g") in records[-1].attribution.claims.values()


def test_a_claim_change_alone_writes_the_attribution_again(tmp_path: Path, dra_ticks: list) -> None:
    sample, attribution = dra_ticks[-1]
    renamed = dataclasses.replace(attribution, claims=MappingProxyType(
        {key: ClaimRef(claim.namespace, claim.name + "-2") for key, claim in attribution.claims.items()}))
    later = dataclasses.replace(sample, tick=sample.tick + 1, timestamp=sample.timestamp + 1.0)
    path = write(tmp_path / "changed.jsonl", [(sample, attribution), (later, renamed)], version=2)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert "attribution" in lines[1] and "attribution_from" not in lines[1]
    assert [r.attribution for r in read_trace(path)] == [attribution, renamed]


def test_a_line_without_claims_reads_as_no_claims() -> None:
    line = {"tick": 0, "timestamp": 0.0, "sample": {"node": "n1", "gpus": []}, "attribution": {"healthy": True}}
    assert dict(decode_tick(line)[1].claims) == {}


def test_replayed_findings_carry_the_claim_evidence(tmp_path: Path, dra_ticks: list) -> None:
    report = replay(write(tmp_path / "dra.jsonl.gz", dra_ticks, version=2), policy=Policy())
    interference = [f for f in report["findings"] if f["kind"] == "interference"]
    assert interference
    assert {(f["evidence"].get("claim_namespace"), f["evidence"].get("claim_name")) for f in interference} == {
        ("batch", "sweep-mig-3g")}


def test_the_slice_watch_health_and_held_back_claims_round_trip_and_compact_away_at_defaults(dra_ticks: list) -> None:
    from watchdog.trace.compact import compact_attribution

    sample, attribution = dra_ticks[-1]
    degraded = dataclasses.replace(attribution, slices_ok=False, claims_held=2)
    line = json.loads(json.dumps(encode_tick(sample, degraded)))
    assert (line["attribution"]["slices_ok"], line["attribution"]["claims_held"]) == (False, 2)
    assert decode_tick(line)[1] == degraded
    assert {"slices_ok", "claims_held"} <= set(compact_attribution(line["attribution"]))
    plain = compact_attribution(encode_tick(sample, attribution)["attribution"])
    assert "slices_ok" not in plain and "claims_held" not in plain
