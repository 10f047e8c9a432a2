"""The live agent in the test bed tells detection how each GPU is shared: the kubelet's replicas, GFD's strategy."""

from __future__ import annotations

from watchdog.model import DeviceSharing
from tests.sharing_scenario import SCENARIO



async def test_the_agent_reads_the_replicas_and_the_strategy_as_eval_does(drive):
    driver = await drive(SCENARIO, events=False)
    shared, plain = driver.world.node.gpu_uuids
    snapshot = await driver.ticks(2)
    assert dict(snapshot.attribution.sharing) == {shared: DeviceSharing(4, "mps", "kubelet+labels")}
    assert plain not in snapshot.attribution.sharing


async def test_failed_reads_keep_the_last_answer_and_are_counted_as_attribution_errors(drive):
    driver = await drive(SCENARIO, events=False)
    shared, _ = driver.world.node.gpu_uuids
    agent, world = driver.agent, driver.world
    world.kubelet.rate_limit = True
    world.api.fail_next(1, status=503, path_prefix="/api/v1/nodes")
    await agent.replicas.refresh(world.clock() + 600.0)
    await agent.node_labels.read()
    world.kubelet.rate_limit = False
    snapshot = await driver.ticks(1)
    assert snapshot.attribution.sharing[shared] == DeviceSharing(4, "mps", "kubelet+labels")
    assert snapshot.errors[("attribution", "kubelet_allocatable_rate_limited")] == 1
    assert snapshot.errors[("attribution", "node_labels_unavailable")] == 1


async def test_the_settings_strategy_wins_over_the_nodes_label(drive):
    scenario = {**SCENARIO, "gpus": [{"model": "H100-80GB-HBM3", "replicas": 4}, {"model": "H100-80GB-HBM3"}]}
    driver = await drive(scenario, events=False, attribution={"sharing": {"strategy": "mps"}})
    shared, _ = driver.world.node.gpu_uuids
    snapshot = await driver.ticks(1)
    assert snapshot.attribution.sharing[shared] == DeviceSharing(4, "mps", "kubelet+policy")
