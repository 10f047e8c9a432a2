"""The agent's own Node's labels, read from the fake API server over real HTTP: last good kept, failures counted."""

from __future__ import annotations

import logging

import pytest
from kube_helpers import RecordingSleep, running

from watchdog.kube.client import KubeApi
from watchdog.kube.node_labels import NodeLabels
from watchdog.testbed.cluster.apiserver_store import NODES

GFD = {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"}


async def test_reads_its_own_nodes_labels(server, api):
    server.add_node("gpu-1", labels=GFD)
    server.add_node("gpu-2", labels={"nvidia.com/gpu.sharing-strategy": "time-slicing"})
    reader = NodeLabels(api, node="gpu-1")
    assert reader.labels is None
    assert await reader.read()
    assert reader.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert reader.labels["kubernetes.io/hostname"] == "gpu-1"
    first = reader.labels
    assert await reader.read()
    assert reader.labels is first  # unchanged labels keep their object: the per-tick join compares identity
    node = server.store.get(NODES, "", "gpu-1")
    node["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "8"
    server.store.update(NODES, node)
    assert await reader.read()
    assert reader.labels["nvidia.com/gpu.replicas"] == "8"
    assert reader.error_counts() == {} and reader.reads == 3


async def test_a_failed_read_keeps_the_last_good_labels_and_is_counted(server, api, caplog):
    server.add_node("gpu-1", labels=GFD)
    reader = NodeLabels(api, node="gpu-1")
    await reader.read()
    server.fail_next(2, status=503, path_prefix="/api/v1/nodes")
    with caplog.at_level(logging.WARNING, logger="watchdog.kube.node_labels"):
        assert not await reader.read()
        assert not await reader.read()
    assert reader.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert reader.failures == 2
    assert len([r for r in caplog.records if "cannot read node" in r.message]) == 1  # once per outage
    server.fail_next(1, status=403, path_prefix="/api/v1/nodes")
    assert not await reader.read()
    assert reader.error_counts() == {"node_labels_unavailable": 2, "node_labels_forbidden": 1}
    assert await reader.read() and reader.failures == 0
    assert reader.error_counts() == {"node_labels_unavailable": 2, "node_labels_forbidden": 1}  # cumulative


async def test_an_unknown_node_is_a_counted_failure_with_no_labels(api):
    reader = NodeLabels(api, node="not-registered")
    assert not await reader.read()
    assert reader.labels is None and reader.error_counts() == {"node_labels_not_found": 1}


async def test_an_unreachable_api_server_is_a_counted_failure(fake_api):
    server = await fake_api.server()
    api = await fake_api.client(server, timeout=1.0)
    server.add_node("gpu-1", labels=GFD)
    reader = NodeLabels(api, node="gpu-1")
    assert await reader.read()
    await server.stop()
    assert not await reader.read()
    assert reader.labels["nvidia.com/gpu.replicas"] == "4"
    assert reader.error_counts() == {"node_labels_unavailable": 1}


async def test_run_reads_slowly_and_backs_off_after_a_failure(server, api):
    server.add_node("gpu-1", labels=GFD)
    server.fail_next(3, status=500, path_prefix="/api/v1/nodes")
    sleep = RecordingSleep()
    reader = NodeLabels(api, node="gpu-1", refresh_seconds=300.0, backoff_max_seconds=60.0, sleep=sleep)
    async with running(reader.run()):
        await sleep.until(lambda: len(sleep.delays) >= 5)
    assert sleep.delays[:5] == [1.0, 2.0, 4.0, 300.0, 300.0]
    assert reader.labels is not None and reader.error_counts() == {"node_labels_unavailable": 3}


async def test_the_agents_declared_permissions_allow_getting_a_node(server):
    server.add_node("gpu-1", labels=GFD)
    async with KubeApi.from_url(server.url).restrict_to_declared_permissions() as api:
        reader = NodeLabels(api, node="gpu-1")
        assert await reader.read()


def test_constructor_refuses_nonsense(api):
    with pytest.raises(ValueError, match="node"):
        NodeLabels(api, node="")
    with pytest.raises(ValueError, match="refresh_seconds"):
        NodeLabels(api, node="n", refresh_seconds=0)
