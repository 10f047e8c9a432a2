"""The wired agent on DRA nodes: devices from ResourceClaims attributed through the driver's ResourceSlices, a MIG
device created at claim time held back (never unauthorized) until its slice names it, series that follow it, claim
labels on /metrics, and scrapes that cost no API call (the slice cache is watch-fed)."""

from __future__ import annotations

import aiohttp

from tests.service.conftest import SCENARIOS


async def scrape(port: int) -> list[str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            return (await response.text()).splitlines()


def claim_lines(body: list[str]) -> list[str]:
    return [line for line in body if line.startswith("gpu_watchdog_device_claim_info{")]


async def test_dynamic_mig_device_is_held_back_then_followed_and_scrapes_make_no_api_calls(drive):
    # NVML events on: the MIG-config-change event is what makes the sampler enumerate the new device.
    driver = await drive(SCENARIOS / "dra-dynamic-mig.yaml")
    world, agent = driver.world, driver.agent
    world.advance(38 * world.scenario.tick_seconds)  # just before the claim asks for a MIG device at tick 40
    await driver.caught_up()
    held_ticks, attributed_at, mig_uuid = [], None, None
    for _ in range(10):
        tick = world.tick  # the tick the next cycle samples (the driver advances the world after it)
        snapshot = await driver.ticks(1, sync=True)
        assert not any(f.kind == "unauthorized" for f in snapshot.findings)
        notebook = [p for p in world.node.processes(tick) if p.pod == "notebook"]
        if not notebook:
            continue
        mig_uuid = notebook[0].device_uuid
        if notebook[0].pid in snapshot.attribution.processes:
            attributed_at = attributed_at or tick
        else:
            assert attributed_at is None and agent.attributor.unresolved_claim_devices, tick
            held_ticks.append(tick)
    # The slice names the device 5 ticks after it appeared (slice_lag_ticks): held back until then, never judged.
    assert held_ticks and max(held_ticks) < 45 and attributed_at == 45, (held_ticks, attributed_at)
    # Scrapes make no API and no kubelet calls. The background refresher and watches may still make one of their
    # own (a refresh a pod event asked for), so the claim is proven by a window of 21 scrapes in which nothing at all
    # was called: a scrape path that called out would call in every window.
    windows = []
    for _ in range(3):
        await driver.caught_up()
        api_before, kubelet_before = len(world.api.requests), world.kubelet.calls
        body = await scrape(agent.port)
        for _ in range(20):
            await scrape(agent.port)
        windows.append((len(world.api.requests) - api_before, world.kubelet.calls - kubelet_before))
        if windows[-1] == (0, 0):
            break
    assert (0, 0) in windows, windows
    claims = claim_lines(body)
    assert any(f'mig_uuid="{mig_uuid}"' in line and 'pod="notebook"' in line and 'claim_namespace="ml"' in line
               and 'claim_name="notebook-mig-1g"' in line for line in claims), claims
    assert any('pod="infer"' in line and 'claim_name="infer-gpu"' in line and 'mig_uuid=""' in line
               for line in claims), claims
    # The claim is released at 150 and the driver deletes the device at 152: its series go with it.
    world.advance((153 - world.tick) * world.scenario.tick_seconds)
    await driver.caught_up()
    snapshot = await driver.ticks(2, sync=True)
    assert not any(f.kind == "unauthorized" for f in snapshot.findings)
    body = await scrape(agent.port)
    assert not any(mig_uuid in line for line in body)
    assert [line for line in claim_lines(body) if 'pod="infer"' in line]
    assert world.api.objects("resourceclaims", "ml") == []


async def test_whole_gpu_and_mig_claims_are_attributed_as_on_a_device_plugin_node(drive):
    driver = await drive(SCENARIOS / "dra-whole-and-mig.yaml", events=False)
    snapshot = await driver.ticks(2, sync=True)
    attribution = snapshot.attribution
    assert attribution.healthy
    owners = {ref.key for refs in attribution.devices.values() for ref in refs}
    assert owners == {"batch/sweep", "prod/infer", "train/trainer"}
    processes = {ref.key for ref in attribution.processes.values()}
    assert processes == owners
    assert {claim.key for claim in attribution.claims.values()} == {
        "batch/sweep-mig-3g", "prod/infer-mig-1g", "train/trainer-gpu"}
    body = await scrape(driver.agent.port)
    assert len(claim_lines(body)) == 3
    memory = [line for line in body if line.startswith("gpu_watchdog_mig_memory_used_bytes{")]
    assert any('pod="infer"' in line for line in memory) and any('pod="sweep"' in line for line in memory)
    claim = driver.world.api.objects("resourceclaims", "prod")[0]
    assert claim["status"]["reservedFor"][0]["name"] == "infer" and claim["metadata"]["name"] == "infer-mig-1g"


async def test_a_shared_claim_is_one_sharing_domain(drive):
    driver = await drive(SCENARIOS / "dra-shared-claim.yaml", events=False)
    snapshot = await driver.ticks(2, sync=True)
    shared = [refs for refs in snapshot.attribution.devices.values() if len(refs) == 2]
    assert len(shared) == 1 and {ref.name for ref in shared[0]} == {"serve", "hog"}
    uuid = next(u for u, refs in snapshot.attribution.devices.items() if len(refs) == 2)
    assert {snapshot.attribution.claims[(uuid, ref.key)].name for ref in shared[0]} == {"team-gpu"}
    claim = driver.world.api.objects("resourceclaims", "shared")[0]
    assert sorted(user["name"] for user in claim["status"]["reservedFor"]) == ["hog", "serve"]
