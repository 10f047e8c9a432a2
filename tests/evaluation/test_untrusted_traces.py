"""Readings no GPU can produce, and a wall clock that steps, change no decision: each case (impossible memory,
temperature or Xid values, a duplicated MIG or GPU UUID, readings that name no device, a stepped wall clock), on a
recording of a shipped scenario with a few values changed, replays to no finding blaming a pod through the bad
reading and no decision the unchanged recording did not make, with the rejected readings counted.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from watchdog.config import Policy
from watchdog.evaluation import replay as replay_trace
from watchdog.evaluation import simulate
from watchdog.trace import TraceError, TraceHeader, TraceWriter, read_trace

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def record(scenario: str, path: Path, ticks: int) -> Path:
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for sample, attribution in itertools.islice(simulate(str(ROOT / "scenarios" / scenario)), ticks):
            writer.write(sample, attribution)
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("recordings")
    return {
        "memory": record("memory-pressure-timeslice.yaml", where / "memory.jsonl", 240),
        "demo": record("demo.yaml", where / "demo.jsonl", 200),
        "interference": record("interference-timeslice-a100.yaml", where / "interference.jsonl", 260),
    }


def mutate(source: Path, target: Path, ticks: range, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the trace with ``change`` applied to each line of the given ticks (compact lines are whole JSON)."""
    lines = source.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        record_ = json.loads(line)
        if record_["tick"] in ticks:
            change(record_)
        out.append(json.dumps(record_))
    target.write_text("\n".join(out) + "\n")
    return target


def blamed(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(finding kind, pod) for every pod a finding names as culprit."""
    found = set()
    for finding in report["findings"]:
        culprit = finding.get("culprit")
        if culprit:
            found.add((finding["kind"], culprit if isinstance(culprit, str) else
                       f"{culprit['namespace']}/{culprit['name']}"))
    return found


def sent(report: dict[str, Any]) -> list[tuple[int, str]]:
    """Every request let through, repeats included (the report lists a pod's result only when it changes)."""
    return report["sends"]


def replay(path: Path, *, policy: Policy) -> dict[str, Any]:
    sends: list[tuple[int, str]] = []

    def on_step(step) -> None:
        sends.extend((step.sample.tick, key.split("|", 1)[1]) for key in sorted(step.sent))

    report = replay_trace(path, policy=policy, on_step=on_step)
    return {**report, "sends": sends}


def assert_nothing_new(original: dict[str, Any], mutated: dict[str, Any]) -> None:
    assert blamed(mutated) <= blamed(original), blamed(mutated) - blamed(original)
    assert {pod for _, pod in sent(mutated)} <= {pod for _, pod in sent(original)}


def rejected(report: dict[str, Any]) -> dict[str, int]:
    return report.get("readings_rejected", {})


def gpu_by_index(record_: dict[str, Any], index: int) -> dict[str, Any]:
    return next(gpu for gpu in record_["sample"]["gpus"] if gpu["index"] == index)


def time_sliced_gpu(record_: dict[str, Any]) -> dict[str, Any]:
    return next(gpu for gpu in record_["sample"]["gpus"] if not gpu.get("mig_enabled"))


@pytest.mark.parametrize("used", ["total+1GiB", "10^30", "total=0"])
def test_an_impossible_memory_reading_evicts_nobody(recordings, tmp_path, used):
    policy = Policy()
    original = replay(recordings["memory"], policy=policy)

    def change(record_: dict[str, Any]) -> None:
        gpu = time_sliced_gpu(record_)
        if used == "total+1GiB":
            gpu["memory_used_bytes"] = gpu["memory_total_bytes"] + GiB
        elif used == "10^30":
            gpu["memory_used_bytes"] = 10**30
        else:
            gpu["memory_total_bytes"] = 0

    mutated = replay(mutate(recordings["memory"], tmp_path / "m.jsonl", range(10, 60), change), policy=policy)
    assert_nothing_new(original, mutated)
    # No memory-pressure finding reports negative free memory ("-1456 MiB free"), so none leads to an eviction.
    assert not any("-" in f["message"].split(" MiB free")[0][-8:] for f in mutated["findings"]
                   if f["kind"] == "memory_pressure")
    assert sum(rejected(mutated).values()) >= 50


def test_a_duplicated_mig_uuid_blames_nobody(recordings, tmp_path):
    policy = Policy()
    original = replay(recordings["demo"], policy=policy)

    def change(record_: dict[str, Any]) -> None:
        instances = gpu_by_index(record_, 0)["instances"]
        instances[1]["uuid"] = instances[0]["uuid"]

    mutated = replay(mutate(recordings["demo"], tmp_path / "d.jsonl", range(20, 90), change), policy=policy)
    assert_nothing_new(original, mutated)
    assert ("unauthorized", "ml-prod/inference-0") not in blamed(mutated)
    assert rejected(mutated).get("identity", 0) >= 70


def test_a_duplicated_gpu_uuid_neither_crashes_nor_blames(recordings, tmp_path):
    policy = Policy()
    original = replay(recordings["demo"], policy=policy)

    def change(record_: dict[str, Any]) -> None:
        gpus = record_["sample"]["gpus"]
        gpus[1]["uuid"] = gpus[0]["uuid"]

    mutated = replay(mutate(recordings["demo"], tmp_path / "g.jsonl", range(20, 90), change), policy=policy)
    assert_nothing_new(original, mutated)
    assert rejected(mutated).get("identity", 0) >= 70


def test_readings_that_name_nothing_are_rejected(recordings, tmp_path):
    policy = Policy()
    original = replay(recordings["demo"], policy=policy)

    def change(record_: dict[str, Any]) -> None:
        sample = record_["sample"]
        gpu = sample["gpus"][0]
        gpu["temperature_celsius"] = -2731.0
        if gpu.get("instances"):
            gpu["instances"][-1]["gpu_index"] = 97  # names no GPU
        sample["xids"] = [
            {"gpu_index": 42, "gpu_uuid": "GPU-ghost", "xid": 79, "event_type": 8, "timestamp": record_["timestamp"]},
            {"gpu_index": gpu["index"], "gpu_uuid": gpu["uuid"], "xid": 2**70, "event_type": 8,
             "timestamp": record_["timestamp"]},
        ]

    mutated = replay(mutate(recordings["demo"], tmp_path / "x.jsonl", range(20, 40), change), policy=policy)
    assert_nothing_new(original, mutated)
    assert not any(f["kind"] == "xid" for f in mutated["findings"]) or \
        {f["key"] for f in mutated["findings"] if f["kind"] == "xid"} <= \
        {f["key"] for f in original["findings"] if f["kind"] == "xid"}
    assert sum(rejected(mutated).values()) >= 20


@pytest.mark.parametrize("step", [3600.0, -3600.0, 86400.0, -86400.0])
def test_a_wall_clock_step_changes_no_guarantee(recordings, tmp_path, step):
    policy = Policy()
    original = replay(recordings["interference"], policy=policy)
    first = sent(original)
    assert first, "the recording must contain a dry-run send"

    def change(record_: dict[str, Any]) -> None:
        record_["timestamp"] += step
        record_["sample"]["timestamp"] = record_["sample"].get("timestamp", record_["timestamp"]) + step \
            if "timestamp" in record_["sample"] else record_["timestamp"]

    after = first[0][0] + 1
    trace = mutate(recordings["interference"], tmp_path / "s.jsonl", range(after, 10**6), change)
    if step < 0:
        # A recording whose timestamps go backwards unmarked is not one this agent wrote: refused, with where.
        with pytest.raises(TraceError, match=rf"^{trace}:\d+: .*backwards"):
            replay(trace, policy=policy)
        # The agent's own recording of a step back marks it (clock_step) and replays like any other.
        recorded = rewrite(recordings["interference"], tmp_path / "recorded.jsonl", after=after, step=step)
        assert '"clock_step"' in recorded.read_text()
        trace = recorded
    assert sent(replay(trace, policy=policy)) == first  # no second send inside the pod's cooldown


def rewrite(source: Path, target: Path, *, after: int, step: float) -> Path:
    """The recording written again with the wall clock stepped from tick `after` on, as the live agent's writer
    records such a step (it marks the step back on the line)."""
    with TraceWriter(target, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for record_ in read_trace(source):
            sample = record_.sample
            if sample.tick >= after:
                sample = dataclasses.replace(sample, timestamp=sample.timestamp + step)
            writer.write(sample, record_.attribution)
    return target
