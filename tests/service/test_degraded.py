"""Unreachable dependencies degrade one stage, are counted and shown, never crash the agent or let it act blind."""

from __future__ import annotations

import aiohttp

from tests.service.conftest import SCENARIOS
from tests.waiting import poll


async def _scrape(port: int) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            return await response.text()

TIMESLICE = SCENARIOS / "interference-timeslice-a100.yaml"


async def test_kubelet_down_then_back(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    snapshot = await driver.ticks(2)
    assert snapshot.attribution.healthy and snapshot.attribution.devices
    await driver.world.kubelet.stop()
    await driver.ticks(11)  # past the 10 s refresh: the refresher's List fails
    await poll(lambda: not driver.agent.kubelet.ok, what="the refresher to notice the kubelet is gone")
    snapshot = await driver.ticks(1)
    assert not snapshot.attribution.healthy and not snapshot.attribution.kubelet_ok
    assert dict((s.name, s.success) for s in snapshot.stages)["attribution"] is False
    assert snapshot.sample is not None and len(snapshot.sample.gpus) == 3  # sampling goes on
    assert snapshot.attribution.devices == {} and snapshot.attribution.processes  # /proc still places processes
    body = await _scrape(driver.agent.port)
    assert 'gpu_watchdog_stage_success{node="sim-node-1",stage="attribution"} 0' in body
    mig_lines = [line for line in body.splitlines() if line.startswith("gpu_watchdog_mig_memory_used_bytes{")]
    assert mig_lines and all('namespace=""' in line and 'pod=""' in line for line in mig_lines)  # no stale labels
    await driver.world.kubelet.start()
    for _ in range(70):  # the retry backoff (1 s doubling, capped at 60 s of simulated time) ends
        await driver.ticks(1)
        if driver.agent.kubelet.ok:
            break
    await poll(lambda: driver.agent.kubelet.ok, what="the refresher to reconnect")
    snapshot = await driver.ticks(1)
    assert snapshot.attribution.healthy and snapshot.attribution.devices


async def test_api_unreachable_means_no_eviction(drive):
    driver = await drive(TIMESLICE, events=False, policy={"action": {"mode": "enforce"}})
    await driver.ticks(80)
    await driver.world.api.stop()  # the API server goes away before the interference starts
    await poll(lambda: not driver.agent.pod_watcher.ok, what="the pod watch to notice")
    for _ in range(200):
        snapshot = await driver.ticks(1)
        assert not snapshot.attribution.healthy
    assert driver.world.ended == {}
    assert not any(result == "evicted" for result, _, _ in snapshot.evictions)


async def test_policy_reload_applies_good_edits_and_keeps_the_last_good_one(drive, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    driver = await drive(SCENARIOS / "demo.yaml", events=False, policy_file=str(policy))
    from watchdog.service.policy_watch import PolicyWatcher

    watcher = PolicyWatcher(str(policy), apply=driver.agent.apply_policy,
                            on_result=lambda r: driver.agent.state.policy_reloads.update([r]))
    policy.write_text("action: {mode: enforce, priority_floor: 5000}\n")
    assert watcher.check() is True
    assert driver.agent.action.policy.mode == "enforce" and driver.agent.action.policy.priority_floor == 5000
    assert "gpu-watchdog" in driver.agent.action.policy.protected_namespaces  # its own namespace stays protected
    policy.write_text("action: {mode: enforce, priority_floor: not-a-number}\n")
    assert watcher.check() is False
    assert driver.agent.action.policy.priority_floor == 5000
    snapshot = await driver.ticks(1)
    assert snapshot.policy_reloads == {"success": 1, "failure": 1}
    assert watcher.check() is None  # unchanged file: nothing to do


async def test_the_policy_file_is_in_force_from_the_start_and_an_invalid_one_refuses_to_start(drive, tmp_path):
    import pytest

    from watchdog.config import ConfigError
    from watchdog.service.agent import Agent

    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe, priority_floor: 7}\n")
    driver = await drive(SCENARIOS / "demo.yaml", events=False, policy_file=str(policy))
    assert driver.agent.action.policy.mode == "observe" and driver.agent.action.policy.priority_floor == 7
    policy.write_text("detection: {interference: {k_sigma: -1}}\n")
    with pytest.raises(ConfigError) as caught:
        Agent(driver.agent.settings, nvml=driver.world.nvml, clock=driver.world.clock)
    assert [field for field, _ in caught.value.problems] == ["detection.interference.k_sigma"]


def test_a_policy_file_that_is_not_text_is_refused_and_kept_running(tmp_path):
    from watchdog.service.policy_watch import PolicyWatcher

    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    applied, results = [], []
    watcher = PolicyWatcher(str(policy), apply=applied.append, on_result=results.append)
    policy.write_bytes(b"action: {mode: \xff\xfe}\n")
    assert watcher.check() is False and results == ["failure"] and applied == []
    policy.write_text("action: {mode: enforce}\n")
    assert watcher.check() is True and applied[0].action.mode == "enforce"


def test_a_policy_that_fails_to_apply_is_counted_not_raised(tmp_path):
    from watchdog.service.policy_watch import PolicyWatcher

    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    results = []

    def apply(_policy):
        raise RuntimeError("boom")

    watcher = PolicyWatcher(str(policy), apply=apply, on_result=results.append)
    policy.write_text("action: {mode: enforce}\n")
    assert watcher.check() is False and results == ["failure"]
