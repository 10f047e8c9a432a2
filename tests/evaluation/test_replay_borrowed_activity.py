"""An A100 MIG trace where a batch burst power-caps the GPU and the serving tenant's own p99 latency rises, a case
NVML alone cannot attribute (no GPM, no utilization in MIG mode). Recorded with the borrowed per-instance activity
it names the culprit; recorded without it, it reports the victim with culprit unknown and evicts nobody."""

from pathlib import Path

from watchdog.config import Policy
from watchdog.evaluation import replay
from watchdog.evaluation.evaluate import scenario_policy
from watchdog.evaluation.scenario_run import simulate_observed
from watchdog.testbed import load_scenario
from watchdog.trace import TraceHeader, TraceWriter, read_trace

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "interference-power-a100-mig.yaml"


def test_a100_mig_trace_replays_with_and_without_borrowed_activity(tmp_path: Path) -> None:
    scenario = load_scenario(str(SCENARIO))
    policy = scenario_policy(scenario.policy, base=Policy(), source=str(SCENARIO))
    header = TraceHeader(node=scenario.node, tick_seconds=1.0, started=0.0, source="simulator:a100")
    borrowed, blind = tmp_path / "borrowed.jsonl", tmp_path / "blind.jsonl.gz"
    expected = None
    with TraceWriter(borrowed, header=header) as with_activity, TraceWriter(blind, header=header) as without:
        for tick in simulate_observed(scenario):
            expected = tick.activity if tick.sample.tick == 100 else expected
            with_activity.write(tick.sample, tick.attribution, tick.signals, borrowed_activity=tick.activity)
            without.write(tick.sample, tick.attribution, tick.signals)
    records = list(read_trace(borrowed))
    assert all(record.borrowed_activity for record in records)  # recorded on every line, read back
    assert records[100].tick == 100 and records[100].borrowed_activity == expected

    named = replay(borrowed, policy=policy)
    [finding] = named["findings"]
    assert (finding["kind"], finding["culprit"]) == ("interference", "batch/sweep")
    assert set(finding["victims"]) == {"prod/infer", "research/notebook"}  # the notebook by its borrowed activity
    assert finding["evidence"]["activity_source"] == "dcgm-exporter"

    enforce = scenario_policy({"action": {"mode": "enforce"}}, base=policy, source="enforce")
    unknown = replay(blind, policy=enforce)
    [finding] = unknown["findings"]
    assert (finding["kind"], finding["culprit"], finding["victims"]) == (
        "interference_culprit_unknown", None, ["prod/infer"])
    assert finding["severity"] == "warning" and finding["evidence"]["culprit"] == "unknown"
    assert unknown["evictions"] == []

