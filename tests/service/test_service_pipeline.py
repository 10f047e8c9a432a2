"""The wired agent on the demo node: every instance sampled, attributed and exported, scrapes cost nothing."""

from __future__ import annotations

import aiohttp

from tests.service.conftest import SCENARIOS


async def scrape(port: int, accept: str = "text/plain") -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept}) as response:
            assert response.status == 200
            return await response.text()


async def test_every_mig_instance_has_memory_bandwidth_and_pod_labels(drive):
    driver = await drive(SCENARIOS / "demo.yaml")
    snapshot = await driver.ticks(3)
    assert snapshot.attribution.healthy
    body = await scrape(driver.agent.port)
    migs = [d for d in driver.world.node.device_uuids() if d.mig_profile]
    assert len(migs) == 7
    owners = snapshot.attribution.devices
    for device in migs:
        memory = [line for line in body.splitlines()
                  if line.startswith("gpu_watchdog_mig_memory_used_bytes{") and f'mig_uuid="{device.uuid}"' in line]
        bandwidth = [line for line in body.splitlines() if line.startswith(
            "gpu_watchdog_mig_dram_bandwidth_utilization_ratio{") and f'mig_uuid="{device.uuid}"' in line]
        assert len(memory) == 1 and len(bandwidth) == 1, device
        pods = owners.get(device.uuid, ())
        if len(pods) == 1:
            assert f'namespace="{pods[0].namespace}"' in memory[0] and f'pod="{pods[0].name}"' in memory[0]


async def test_time_sliced_pods_get_their_own_series(drive):
    driver = await drive(SCENARIOS / "demo.yaml")
    snapshot = await driver.ticks(3)
    a100 = next(g for g in snapshot.sample.gpus if not g.mig_enabled)
    sharing = snapshot.attribution.devices[a100.uuid]
    assert len(sharing) >= 2
    body = await scrape(driver.agent.port)
    per_pod = [line for line in body.splitlines()
               if line.startswith("gpu_watchdog_pod_gpu_memory_used_bytes{") and f'gpu_uuid="{a100.uuid}"' in line]
    values = {line.rsplit(" ", 1)[1] for line in per_pod}
    for pod in sharing:
        assert any(f'pod="{pod.name}"' in line for line in per_pod), pod
    assert len(values) > 1  # each pod its own value, not a copy of the device's


async def test_scrapes_make_no_kubelet_or_api_calls(drive):
    driver = await drive(SCENARIOS / "demo.yaml")
    await driver.ticks(2)
    kubelet_before = driver.world.kubelet.calls
    api_before = len(driver.world.api.requests)
    nvml_before = _sampling_calls(driver)
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            async with session.get(f"http://127.0.0.1:{driver.agent.port}/metrics") as response:
                assert response.status == 200
                await response.read()
    assert driver.world.kubelet.calls == kubelet_before
    assert len(driver.world.api.requests) == api_before
    assert _sampling_calls(driver) == nvml_before


def _sampling_calls(driver) -> int:
    """NVML calls other than the event thread's bounded waits, which go on by themselves."""
    return sum(n for name, n in driver.world.nvml.calls.items() if not name.startswith("nvmlEventSetWait"))


async def test_readyz_turns_ready_after_the_first_sample(drive):
    driver = await drive(SCENARIOS / "demo.yaml")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{driver.agent.port}/readyz") as response:
            assert response.status == 503
        await driver.ticks(1)
        async with session.get(f"http://127.0.0.1:{driver.agent.port}/readyz") as response:
            assert response.status == 200
        async with session.get(f"http://127.0.0.1:{driver.agent.port}/healthz") as response:
            assert response.status == 200
