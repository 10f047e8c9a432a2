"""The kubelet's replica counts against a real gRPC fake kubelet, their slow refresh, and the per-tick join with the
node's labels (attribution/sharing_sources.py)."""

from __future__ import annotations

import logging

import pytest

from watchdog.attribution.kubelet import PodResourcesClient, replicas_from_settings
from watchdog.attribution.sharing import REPLICAS_LABEL, STRATEGY_LABEL
from watchdog.attribution.sharing_sources import KubeletReplicas, NodeSharing
from watchdog.attribution.stage import NodeAttributor
from watchdog.config.attribution import AttributionSettings
from watchdog.model import EMPTY, DeviceSharing, GpuSample, NodeSample
from tests.attribution.stage_fakes import FixedKubelet, FixedProc

A, B = "GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"
LOGGER = "watchdog.attribution.sharing_sources"


def advertise(kubelet, **gpus: int) -> None:
    """Every GPU the plugin advertises, ``uuid=replicas`` (1: not shared), plus a MIG device and a CPU set."""
    ids = [f"{uuid}::{n}" for uuid, replicas in gpus.items() if replicas > 1 for n in range(replicas)]
    ids += [uuid for uuid, replicas in gpus.items() if replicas == 1]
    kubelet.set_allocatable({"nvidia.com/gpu": ids, "nvidia.com/mig-1g.18gb": ["MIG-free"], "cpu": ["0", "1"]})


def sample(*uuids: str) -> NodeSample:
    return NodeSample(node="n", tick=0, timestamp=0.0,
                      gpus=tuple(GpuSample(index=i, uuid=u, name="g") for i, u in enumerate(uuids)))


class Labels:
    """What ``NodeSharing`` reads of ``kube.node_labels.NodeLabels``."""

    def __init__(self, labels=None) -> None:
        self.labels = labels
        self.failed = 0

    def error_counts(self):
        return {"node_labels_unavailable": self.failed} if self.failed else {}


@pytest.fixture
def replicas(client):
    return KubeletReplicas(client, refresh_seconds=300.0, backoff_initial_seconds=1.0, backoff_max_seconds=60.0)


async def test_allocatable_replicas_counts_each_gpus_replicas_over_the_matching_resources(kubelet, client):
    advertise(kubelet, **{A: 4, B: 1})
    assert await client.allocatable_replicas() == {A: 4, B: 1, "MIG-free": 1}
    assert kubelet.calls_by_method["GetAllocatableResources"] == 1


async def test_without_set_allocatable_the_fake_lists_the_assigned_devices(kubelet, client):
    kubelet.set_pods([("ml", "a", [("c", "nvidia.com/gpu", [f"{A}::0"])]), ("ml", "b", [("c", "nvidia.com/gpu",
                                                                                          [f"{A}::3"])])])
    assert await client.allocatable_replicas() == {A: 2}
    advertise(kubelet, **{A: 4})
    assert (await client.allocatable_replicas())[A] == 4  # the advertised set, assigned or not


async def test_counts_are_read_slowly_and_reads_cost_nothing(kubelet, replicas, clock):
    advertise(kubelet, **{A: 4})
    assert replicas.counts is None
    assert await replicas.refresh(clock())
    assert replicas.counts == {A: 4, "MIG-free": 1}
    first = replicas.counts
    assert not await replicas.refresh(clock.advance(299.0))
    assert await replicas.refresh(clock.advance(1.0))
    assert replicas.counts is first  # the same answer keeps the same object (NodeSharing compares identity)
    assert kubelet.calls_by_method["GetAllocatableResources"] == 2 and replicas.calls == 2


async def test_a_failure_keeps_the_last_counts_counts_the_error_and_backs_off(kubelet, replicas, clock, caplog):
    advertise(kubelet, **{A: 4})
    await replicas.refresh(clock())
    kubelet.rate_limit = True
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert await replicas.refresh(clock.advance(300.0))
        assert not await replicas.refresh(clock.advance(0.5))  # backing off: 1 s
        assert await replicas.refresh(clock.advance(0.5))
        assert not await replicas.refresh(clock.advance(1.5))  # then 2 s
        assert await replicas.refresh(clock.advance(0.5))
    assert replicas.counts == {A: 4, "MIG-free": 1}
    assert replicas.error_counts() == {"kubelet_allocatable_rate_limited": 3}
    assert len([r for r in caplog.records if "GetAllocatableResources failed" in r.message]) == 1  # once an outage
    kubelet.rate_limit = False
    advertise(kubelet, **{A: 8})
    assert await replicas.refresh(clock.advance(4.0))
    assert replicas.counts[A] == 8
    assert not await replicas.refresh(clock.advance(299.0))  # back on the slow timer


async def test_an_absent_kubelet_before_any_answer_leaves_the_counts_unknown(socket_path, clock):
    client = PodResourcesClient(socket_path, timeout=1.0)
    replicas = KubeletReplicas(client)
    try:
        assert await replicas.refresh(clock())
        assert replicas.counts is None
        assert replicas.error_counts() == {"kubelet_allocatable_unavailable": 1}
    finally:
        await replicas.close()


async def test_a_gpu_the_last_answer_did_not_name_is_asked_about_once(kubelet, replicas, clock):
    advertise(kubelet, **{A: 4})
    await replicas.refresh(clock())
    sharing = NodeSharing(kubelet=replicas, labels=None)
    sharing.for_sample(sample(A, B))  # B is news: one refresh, now
    assert await replicas.refresh(clock.advance(1.0))
    assert B not in replicas.counts
    for _ in range(20):  # still unnamed: never asked again before the timer
        sharing.for_sample(sample(A, B))
        assert not await replicas.refresh(clock.advance(1.0))
    advertise(kubelet, **{A: 4, B: 2})  # the plugin re-registered with B
    assert await replicas.refresh(clock.advance(300.0))
    assert sharing.for_sample(sample(A, B))[B] == DeviceSharing(2, "unknown", "kubelet")


async def test_node_sharing_joins_counts_labels_and_settings_and_recomputes_only_on_a_change(kubelet, replicas,
                                                                                               clock):
    labels = Labels()
    sharing = NodeSharing(kubelet=replicas, labels=labels)
    assert sharing.for_sample(sample(A, B)) is EMPTY  # nothing read yet
    labels.labels = {STRATEGY_LABEL: "mps", REPLICAS_LABEL: "4"}
    assert dict(sharing.for_sample(sample(A))) == {A: DeviceSharing(4, "mps", "labels")}
    advertise(kubelet, **{A: 2, B: 1})
    await replicas.refresh(clock())
    first = sharing.for_sample(sample(A, B))
    assert dict(first) == {A: DeviceSharing(2, "mps", "kubelet+labels")}
    assert sharing.for_sample(sample(A, B)) is first  # computed once per change, not per tick
    labels.labels = {STRATEGY_LABEL: "time-slicing"}
    assert sharing.for_sample(sample(A, B))[A].strategy == "time-slicing"
    labels.failed = 2
    assert NodeSharing(kubelet=replicas, labels=labels, strategy="mps").for_sample(sample(A))[A].source == \
        "kubelet+policy"
    kubelet.rate_limit = True
    await replicas.refresh(clock.advance(300.0))
    assert sharing.error_counts() == {"kubelet_allocatable_rate_limited": 1, "node_labels_unavailable": 2}


async def test_the_stage_carries_sharing_and_counts_its_sources_errors(kubelet, replicas, clock):
    advertise(kubelet, **{A: 4})
    await replicas.refresh(clock())
    attributor = NodeAttributor(kubelet=FixedKubelet(), pods=None, pods_ok=lambda: True, proc=FixedProc({}),
                                clock=clock, sharing=NodeSharing(kubelet=replicas, labels=Labels({
                                    STRATEGY_LABEL: "mps"})))
    attribution = attributor.attribute(sample(A, B), tenant_label=None)
    assert dict(attribution.sharing) == {A: DeviceSharing(4, "mps", "kubelet+labels")}
    kubelet.rate_limit = True
    await replicas.refresh(clock.advance(300.0))
    assert attributor.error_counts()["kubelet_allocatable_rate_limited"] == 1
    assert attributor.attribute(sample(A), tenant_label=None).sharing[A].replicas == 4  # the last good counts
    plain = NodeAttributor(kubelet=FixedKubelet(), pods=None, pods_ok=lambda: True, proc=None, clock=clock)
    assert plain.attribute(sample(A), tenant_label=None).sharing is EMPTY


async def test_replicas_from_settings_read_the_configured_socket_on_the_sharing_timer(kubelet, socket_path, clock):
    advertise(kubelet, **{A: 3})
    replicas = replicas_from_settings(AttributionSettings(kubelet_socket=socket_path,
                                                          sharing={"refresh_seconds": 60.0}))
    try:
        await replicas.refresh(clock())
        assert replicas.counts[A] == 3
        assert not await replicas.refresh(clock.advance(59.0))
        assert await replicas.refresh(clock.advance(1.0))
    finally:
        await replicas.close()
