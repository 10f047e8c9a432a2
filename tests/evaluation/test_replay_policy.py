"""A replay applies the policy its trace recorded: the demo, run live as `gpu-watchdog demo` runs it and recorded,
replays without --policy to what the live agent found and decided; --policy takes a scenario's policy: section;
an old trace replays under the defaults and says so; flight-recorder segments switch policy where a reload did."""

import asyncio
import dataclasses
import io
import json
import math
from pathlib import Path

import jsonschema
import pytest

from watchdog.cli import main
from watchdog.config import FlightRecorderSettings, Policy
from watchdog.config.runtime import RuntimePolicy
from watchdog.evaluation import replay, report_schema, simulate
from watchdog.model import EvictionResult, Snapshot, TickResult
from watchdog.testbed.runner import run_simulated
from watchdog.trace import TraceHeader, TraceRecorder, TraceWriter, read_trace
from watchdog.trace.flight import FlightRecorder, segments

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scenarios" / "demo.yaml"
POWER = ROOT / "scenarios" / "interference-power-mig.yaml"
TICKS = 240  # the demo's two dry-run evictions come by tick ~165 (its policy's for_seconds)


class Live:
    """A TickSink keeping what the live agent found (episodes) and decided (pod, result), as the report folds them."""

    stage = "test-live"

    def __init__(self) -> None:
        self.ticks: list[int] = []
        self.episodes: set[tuple[str, str, int]] = set()
        self.decisions: set[tuple[str, str]] = set()

    def tick_done(self, result: TickResult) -> None:
        self.ticks.append(result.tick)
        self.episodes |= {(f.kind.value, f.key, f.first_tick) for f in result.findings}
        self.decisions |= {(f"{r.namespace}/{r.pod}" if r.pod else "-", r.result.value)
                           for r in result.actions.counted if r.result is not EvictionResult.PENDING}


def episodes(report: dict) -> set[tuple[str, str, int]]:
    return {(f["kind"], f["key"], f["first_tick"]) for f in report["findings"]}


def decisions(report: dict) -> set[tuple[str, str]]:
    return {(f"{e['namespace']}/{e['pod']}" if e["pod"] else "-", e["result"]) for e in report["evictions"]}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Live]:
    """The demo as `gpu-watchdog demo` runs it (run_simulated, the scenario's own policy, no --mode), with a
    recorder beside it as `record` adds one, as fast as the agent ticks."""
    path = tmp_path_factory.mktemp("demo") / "demo.jsonl.gz"
    live = Live()
    recorder = TraceRecorder(path, tick_seconds=1.0, source=f"simulated:{DEMO}")
    try:
        run = run_simulated(DEMO, port=0, ticks=TICKS, speed=math.inf, sinks=(recorder, live), out=io.StringIO())
        asyncio.run(asyncio.wait_for(run, timeout=300))  # a hang fails here, with its traceback
    finally:
        recorder.close()
    return path, live


def test_replay_without_policy_decides_what_the_live_demo_decided(demo_run, capsys) -> None:
    path, live = demo_run
    assert [record.tick for record in read_trace(path)] == live.ticks == list(range(TICKS))
    assert main(["replay", str(path), "--report", "json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    jsonschema.Draft202012Validator(report_schema()).validate(report)
    assert report["policy_source"] == "trace" and report["mode"] == "dry-run"
    assert err.strip() == f"gpu-watchdog replay: {path}: replayed under the policy recorded in the trace"
    assert episodes(report) == live.episodes
    assert decisions(report) == live.decisions
    assert {("batch/scavenger-0", "dry_run"), ("ml-research/sweep-7", "dry_run")} <= live.decisions
    # Under the defaults (what replay applied before traces carried a policy) the same trace shows neither the
    # quota breach nor the interference eviction, whose hysteresis the demo's policy shortens.
    defaults = replay(path, policy=Policy())
    assert ("ml-research/sweep-7", "dry_run") not in decisions(defaults)
    assert not any(f["kind"] == "quota" for f in defaults["findings"])


def test_policy_may_name_the_scenario_and_gives_the_same(demo_run, capsys) -> None:
    path, _ = demo_run
    assert main(["replay", str(path), "--report", "json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(["replay", str(path), "--policy", str(DEMO), "--report", "json"]) == 0
    out, err = capsys.readouterr()
    from_scenario = json.loads(out)
    assert from_scenario["policy_source"] == f"scenario:{DEMO}"
    assert f"replayed under the policy: section of {DEMO}" in err
    assert {**from_scenario, "policy_source": "trace"} == own
    assert main(["replay", str(path), "--compare", str(DEMO), "--report", "text"]) == 0
    out = capsys.readouterr().out
    assert "A = the policy recorded in the trace" in out and f"B = the policy: section of {DEMO}" in out
    assert "finding episodes: no change" in out and "eviction decisions: no change" in out


def test_record_writes_the_scenario_policy_not_its_forced_observe_mode(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    assert main(["record", "--simulate", str(DEMO), "--ticks", "3", "--fast", "--out", str(out)]) == 0
    policy = read_trace(out).header.policy
    assert policy["action"]["mode"] == "dry-run"
    assert policy["detection"]["quota"]["tenants"]["batch"]["gpu_memory_bytes"] == 16_000_000_000


def test_an_old_trace_without_a_policy_replays_under_the_defaults_and_says_so(tmp_path: Path, capsys) -> None:
    path = tmp_path / "old.jsonl"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for _, (sample, attribution) in zip(range(5), simulate(str(POWER))):
            writer.write(sample, attribution)
    assert main(["replay", str(path), "--report", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["policy_source"] == "defaults"
    assert "replayed under the default policy (the trace records none" in err and "--policy" in err
    assert main(["replay", str(path), "--report", "text"]) == 0
    assert ", policy: the default policy" in capsys.readouterr().out.splitlines()[0]


def test_a_bad_policy_field_is_named_where_it_lies(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        writer.write(*next(simulate(str(POWER))))
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("gpus: [{model: H100-80GB-HBM3}]\npods: []\npolicy: {action: {mode: sometimes}}\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: sometimes}\n")
    for path, field in ((scenario, "policy.action.mode"), (policy, "action.mode")):
        for flag in ("--policy", "--compare"):
            assert main(["replay", str(trace), flag, str(path)]) == 2
            err = capsys.readouterr().err
            assert f"  {field}: " in err and str(path) in err
    recorded = tmp_path / "recorded.jsonl"
    header = TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0, policy={"action": {"mode": "often"}})
    with TraceWriter(recorded, header=header) as writer:
        writer.write(*next(simulate(str(POWER))))
    assert main(["replay", str(recorded)]) == 2
    assert "  policy.action.mode: " in capsys.readouterr().err


def test_segments_under_different_policies_switch_where_the_reload_began_one(tmp_path: Path, capsys) -> None:
    slow = Policy.model_validate({"action": {"interference": {"for_seconds": 600}}})
    quick = Policy.model_validate({"action": {"interference": {"for_seconds": 0}}})
    flight = FlightRecorder(FlightRecorderSettings(enabled=True, directory=str(tmp_path)), tick_seconds=1.0)
    flight.apply_runtime(RuntimePolicy.resolve(slow))
    for sample, attribution in simulate(str(POWER)):
        if sample.tick == 50:
            flight.apply_runtime(RuntimePolicy.resolve(quick))  # a reload: the next tick begins a segment
        sample = dataclasses.replace(sample, timestamp=1_700_000_000.0 + sample.tick)
        flight.tick_done(TickResult(tick=sample.tick, snapshot=Snapshot(node=sample.node, sample=sample,
                                                                         attribution=attribution)))
    flight.close()
    first, second = segments(tmp_path)
    report = replay(tmp_path)
    jsonschema.Draft202012Validator(report_schema()).validate(report)
    assert report["policy_source"] == "trace"
    assert report["policy_changes"] == [{"tick": 50, "path": str(second)}]
    assert ("batch/sweep", "dry_run") in decisions(report)  # the quick policy acted after the switch
    assert "batch/sweep" not in {pod for pod, _ in decisions(replay(tmp_path, policy=slow))}
    assert main(["replay", str(tmp_path), "--report", "json"]) == 0
    assert f"then from tick 50 the policy recorded in {second}" in capsys.readouterr().err
