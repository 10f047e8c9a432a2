"""The offline agent applies the policy exactly as the live agent does: the runtime overlay and the shared planner."""

from __future__ import annotations

from pathlib import Path

from watchdog.action import effective_policy
from watchdog.config import Policy
from watchdog.evaluation.scenario_run import simulate
from watchdog.evaluation.stages import OfflineAgent
from watchdog.model import EvictionResult

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "memory-pressure-timeslice.yaml"


def results_for(agent: OfflineAgent, pod: str) -> tuple[set[EvictionResult], bool]:
    results, sent = set(), False
    for sample, attribution in simulate(str(SCENARIO)):
        step = agent.step(sample, attribution)
        for decision in step.decisions:
            if f"{decision.namespace}/{decision.pod}" == pod:
                results.add(decision.result)
        sent = sent or any(key.endswith(f"|{pod}") for key in step.sent)
    return results, sent


def test_the_agents_own_namespace_is_protected_offline_too():
    policy = Policy.model_validate({"action": {"mode": "enforce"}})
    results, sent = results_for(OfflineAgent(policy), "batch/grow")
    assert sent and EvictionResult.EVICTED in results
    results, sent = results_for(OfflineAgent(policy, own_namespace="batch"), "batch/grow")
    assert not sent and EvictionResult.EVICTED not in results and EvictionResult.PROTECTED in results


def test_the_overlay_is_the_one_the_service_uses():
    policy = Policy()
    agent = OfflineAgent(policy, own_namespace="gpu-watchdog", tenant_label="team")
    assert agent.action_policy == effective_policy(policy.action, own_namespace="gpu-watchdog", tenant_label="team")
    assert agent.action_policy.tenant_label == "team" and "gpu-watchdog" in agent.action_policy.protected_namespaces
    assert OfflineAgent(policy).action_policy == policy.action  # no runtime settings: the policy as written


def test_a_trace_carrying_tenant_signals_records_and_replays(tmp_path):
    """Tenant signals written by `record` come back with each tick and replay accepts them."""
    import json

    from watchdog.config import Policy
    from watchdog.evaluation.replay import replay
    from watchdog.trace import TraceHeader, TraceWriter, read_trace

    source = Path(__file__).parent / "data" / "handwritten-memory-pressure.jsonl"
    trace = read_trace(source)
    records = list(trace)
    out = tmp_path / "signals.jsonl"
    writer = TraceWriter(out, header=TraceHeader(node=trace.header.node, tick_seconds=1.0, started=0.0))
    for record in records:
        pods = sorted(ref.key for ref in record.attribution.processes.values())
        writer.write(record.sample, record.attribution, {key: 0.05 for key in pods})
    writer.close()
    assert [dict(r.external_signals) for r in read_trace(out)] == [
        {ref.key: 0.05 for ref in r.attribution.processes.values()} for r in records]
    report = replay(out, policy=Policy())
    assert json.loads(json.dumps(report))["ticks"] == len(records)
