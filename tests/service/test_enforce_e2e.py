"""End to end in enforce mode: a low-priority time-sliced tenant starving a high-priority one is evicted through
the Eviction API — with an Event, an audit line and a counter — and the benign scenarios evict nobody."""

from __future__ import annotations

import json

import pytest

from tests.service.conftest import SCENARIOS
from watchdog.testbed import load_scenario

def _benign(path) -> bool:
    truth = load_scenario(path).truth or {}
    return "expect_evictions" in truth and not truth["expect_evictions"]


TRAPS = sorted(p.name for p in SCENARIOS.glob("*.yaml") if _benign(p))  # every scenario that must evict nobody


def audit_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def eviction_posts(world) -> list[tuple[str, str, dict]]:
    return [r for r in world.api.requests if r[0] == "POST" and r[1].endswith("/eviction")]


async def test_low_priority_starver_is_evicted_and_the_victim_recovers(drive, tmp_path):
    audit = tmp_path / "audit.jsonl"
    driver = await drive(SCENARIOS / "interference-timeslice-a100.yaml", events=False,
                         policy={"action": {"mode": "enforce"}}, audit_log=str(audit))
    world = driver.world
    a100 = world.node.gpu_uuids[0]
    await driver.ticks(95, sync=False)
    starved = _share(driver, "serve")
    for _ in range(200):
        await driver.ticks(1)
        if "batch/hog" in world.ended:
            break
        starved = _share(driver, "serve")
    assert "batch/hog" in world.ended, "the starving pod was never evicted"
    evicted_at = world.ended["batch/hog"]
    assert 90 < evicted_at < 230
    assert world.api.get_pod("batch", "hog") is None and world.api.get_pod("prod", "serve") is not None
    posts = eviction_posts(world)
    assert all("/namespaces/batch/pods/hog/" in path for _, path, _ in posts)
    events = [e for e in world.api.objects("events", "batch") if e["involvedObject"]["name"] == "hog"]
    assert events and events[0]["reason"] == "GpuWatchdogEvicted" and events[0]["type"] == "Warning"
    records = [r for r in audit_lines(audit) if r["result"] == "evicted"]
    assert len(records) == 1 and records[0]["pod"]["name"] == "hog"
    snapshot = driver.agent.cycle.snapshot
    assert snapshot.evictions[("evicted", "interference", "batch")] == 1
    await driver.ticks(10, sync=True)
    after = _share(driver, "serve")
    assert after > starved + 0.15  # the victim has its SM time back
    assert list(driver.agent.cycle.snapshot.attribution.devices.get(a100, ())) == [
        p for p in driver.agent.cycle.snapshot.attribution.devices[a100] if p.name == "serve"]


def _share(driver, pod_name: str) -> float:
    snapshot = driver.agent.cycle.snapshot
    gpu = snapshot.sample.gpus[0]
    owners = snapshot.attribution.processes
    return sum(p.sm_util or 0.0 for p in gpu.processes if owners.get(p.pid) and owners[p.pid].name == pod_name)


@pytest.mark.parametrize("name", TRAPS)
async def test_benign_scenarios_evict_nobody_even_in_enforce_mode(drive, tmp_path, name):
    scenario = load_scenario(SCENARIOS / name)
    driver = await drive(SCENARIOS / name, events=False, policy={"action": {"mode": "enforce"}},
                         audit_log=str(tmp_path / "audit.jsonl"))
    healthy = 0
    # A scenario's own kubelet outages (and the refresher's backoff that ends each) are ticks it means the agent to
    # be blind in.
    blind = {t for o in scenario.kubelet_outages for t in range(o.start_tick, o.end_tick + 30)}
    for _ in range(scenario.duration_ticks):
        tick = driver.world.tick
        snapshot = await driver.ticks(1)
        healthy += snapshot.attribution.healthy or tick in blind
    assert healthy >= scenario.duration_ticks - 5  # the agent could have acted: it chose not to
    assert eviction_posts(driver.world) == []
    assert driver.world.ended == {}
    counts = driver.agent.cycle.snapshot.evictions
    assert not any(result in ("evicted", "dry_run") for result, _, _ in counts)
    if name == "high-priority-antagonist.yaml":  # found, and refused for priority
        assert any(result == "not_lower_priority" for result, _, _ in counts), counts


async def _run_until_decided(driver, ticks: int = 200) -> None:
    for _ in range(ticks):
        await driver.ticks(1)
        if any(r in ("dry_run", "observed", "paused", "evicted") for r, _, _ in driver.agent.cycle.snapshot.evictions):
            return


async def test_dry_run_asks_the_api_server_and_evicts_nothing(drive, tmp_path):
    driver = await drive(SCENARIOS / "interference-timeslice-a100.yaml", events=False,
                         policy={"action": {"mode": "dry-run"}})
    await _run_until_decided(driver)
    posts = eviction_posts(driver.world)
    assert posts and all(query.get("dryRun") == "All" for _, _, query in posts)
    assert driver.world.api.get_pod("batch", "hog") is not None and driver.world.ended == {}
    assert driver.agent.cycle.snapshot.evictions[("dry_run", "interference", "batch")] == 1


async def test_observe_sends_no_request_at_all(drive):
    driver = await drive(SCENARIOS / "interference-timeslice-a100.yaml", events=False,
                         policy={"action": {"mode": "observe"}})
    await _run_until_decided(driver)
    assert driver.agent.cycle.snapshot.evictions[("observed", "interference", "batch")] == 1
    assert eviction_posts(driver.world) == [] and driver.world.ended == {}


async def test_kill_switch_holds_every_eviction(drive):
    driver = await drive(SCENARIOS / "interference-timeslice-a100.yaml", events=False,
                         policy={"action": {"mode": "enforce"}}, namespace="gpu-watchdog")
    driver.world.api.set_config_map("gpu-watchdog", "gpu-watchdog-kill-switch", {"paused": "true"})
    assert await driver.agent.kill_switch.refresh() is True
    await _run_until_decided(driver)
    assert driver.agent.cycle.snapshot.paused
    assert driver.agent.cycle.snapshot.evictions[("paused", "interference", "batch")] == 1
    assert eviction_posts(driver.world) == [] and driver.world.ended == {}
