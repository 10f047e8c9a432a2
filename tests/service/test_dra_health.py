"""The DRA side of attribution's health on /metrics: the ResourceSlice watch as an attribution source, and the
claimed devices held back while no slice names them."""

from __future__ import annotations

import aiohttp

from tests.service.conftest import SCENARIOS
from tests.waiting import poll


async def scrape(port: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            body = (await response.text()).splitlines()
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in body
            if line.startswith(("gpu_watchdog_attribution_source_up{", "gpu_watchdog_claimed_devices_held_back{"))}


SLICES_UP = 'gpu_watchdog_attribution_source_up{node="sim-node-1",source="resourceslices"}'
HELD = 'gpu_watchdog_claimed_devices_held_back{node="sim-node-1"}'


async def test_a_claimed_device_waiting_for_its_slice_is_counted_as_held_back(drive):
    driver = await drive(SCENARIOS / "dra-dynamic-mig.yaml")
    world = driver.world
    world.advance(41 * world.scenario.tick_seconds)  # the claim's MIG device exists from 40, its slice from 45
    await driver.caught_up()
    await driver.ticks(1, sync=True)
    assert driver.agent.attributor.unresolved_claim_devices
    series = await scrape(driver.agent.port)
    assert series[SLICES_UP] == 1 and series[HELD] == 1
    world.advance((46 - world.tick) * world.scenario.tick_seconds)
    await driver.caught_up()
    await driver.ticks(1, sync=True)
    series = await scrape(driver.agent.port)
    assert series[SLICES_UP] == 1 and series[HELD] == 0


async def test_a_failing_slice_watch_is_a_source_down_and_the_agent_goes_on(drive):
    driver = await drive(SCENARIOS / "dra-whole-and-mig.yaml", events=False)
    await driver.ticks(1, sync=True)
    world, agent = driver.world, driver.agent
    world.api.fail_next(10_000, status=500, path_prefix="/apis/resource.k8s.io/")
    world.api.drop_watches()
    # Dropping the watches drops the pod watch too: it comes back, the slice watch cannot.
    await poll(lambda: not agent.slice_watcher.ok and agent.pod_watcher.ok, what="the slice watch alone to fail")
    snapshot = (await agent.cycle_once()).snapshot
    series = await scrape(agent.port)
    assert series[SLICES_UP] == 0
    assert series['gpu_watchdog_attribution_source_up{node="sim-node-1",source="kubelet"}'] == 1
    # The last slices known still name the devices: attribution goes on, nothing is called unauthorized.
    assert snapshot.attribution.healthy and not any(f.kind == "unauthorized" for f in snapshot.findings)
    assert {claim.key for claim in snapshot.attribution.claims.values()} == {
        "batch/sweep-mig-3g", "prod/infer-mig-1g", "train/trainer-gpu"}


async def test_a_cluster_without_the_dra_api_has_no_slice_source_to_be_down(drive):
    driver = await drive(SCENARIOS / "dra-whole-and-mig.yaml", events=False)
    await driver.ticks(1, sync=True)
    world, agent = driver.world, driver.agent
    world.api.fail_next(10_000, status=404, path_prefix="/apis/resource.k8s.io/")  # before Kubernetes 1.34
    world.api.drop_watches()
    await poll(lambda: agent.slice_watcher.not_served and agent.pod_watcher.ok, what="resource.k8s.io to be gone")
    await agent.cycle_once()
    series = await scrape(agent.port)
    assert SLICES_UP not in series and HELD not in series
    assert series['gpu_watchdog_attribution_source_up{node="sim-node-1",source="api"}'] == 1
