"""GPU use from outside Kubernetes through the whole agent: the simulated /proc tree, the real /proc reader, the
kubelet over gRPC, detection, /metrics; enforce mode evicts nothing, as there is no pod to evict."""

from __future__ import annotations

from pathlib import Path

from watchdog.model import FindingKind

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


async def test_a_host_process_is_reported_from_proc_and_never_acted_on(drive):
    driver = await drive(SCENARIOS / "host-process-mig.yaml", events=False, policy={"action": {"mode": "enforce"}})
    world = driver.world
    world.advance(58 * world.scenario.tick_seconds)  # the hand-started container starts at tick 60
    await driver.caught_up()
    snapshot = await driver.ticks(10, sync=True)
    [finding] = [f for f in snapshot.findings if f.kind is FindingKind.UNAUTHORIZED_HOST]
    assert finding.evidence["command"] == "python3" and finding.evidence["cgroup"].startswith("/system.slice/docker-")
    assert [v.key for v in finding.victims] == ["prod/infer"] and finding.culprit is None
    assert {host.command for host in snapshot.attribution.host_processes.values()} == {"python3", "nv-hostengine"}
    assert not snapshot.evictions and world.ended == {}
