"""The simulated device plugin and GFD: a shared scenario GPU is advertised as replicas and labelled on the Node."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from watchdog.attribution.kubelet import PodResourcesClient
from watchdog.testbed import SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.cluster.device_plugin import advertised_devices, gfd_labels
from watchdog.testbed.world import SimulatedWorld

MPS = {"model": "H100-80GB-HBM3", "mps": True, "replicas": 4}
SCENARIO = {
    "name": "sharing", "seed": 11, "duration_ticks": 4,
    "gpus": [MPS, {"model": "A100-SXM4-40GB"}, {"model": "A100-SXM4-40GB", "mig": ["3g.20gb", "1g.5gb"]}],
    "pods": [
        {"namespace": "a", "name": "one", "device": {"gpu": 0, "replica": 0}},
        {"namespace": "b", "name": "two", "device": {"gpu": 0, "replica": 2}},
    ],
}


def gpus(*specs: dict) -> dict:
    return {"name": "labels", "seed": 1, "gpus": list(specs)}


@pytest.mark.parametrize(("scenario", "labels"), [
    (gpus({"model": "H100-80GB-HBM3"}), {}),
    (gpus(MPS), {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"}),
    (gpus({"model": "H100-80GB-HBM3", "replicas": 8}, {"model": "H100-80GB-HBM3", "replicas": 8}),
     {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "8"}),
    # replicas that differ between GPUs have no one value for the node's label
    (gpus({"model": "H100-80GB-HBM3", "replicas": 2}, {"model": "H100-80GB-HBM3", "replicas": 3}),
     {"nvidia.com/gpu.sharing-strategy": "time-slicing"}),
])
def test_gfd_labels(scenario, labels):
    assert gfd_labels(load_scenario(scenario)) == labels


def test_advertised_devices_are_replicas_whole_gpus_and_mig_devices():
    node = SimulatedGpuNode.from_scenario(SCENARIO, SimClock())
    try:
        found = advertised_devices(node, 0)
        shared, whole, _ = node.gpu_uuids
        assert found["nvidia.com/gpu"] == [f"{shared}::{n}" for n in range(4)] + [whole]
        assert sorted(found) == ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"]
    finally:
        node.close()


@pytest.fixture
def workdir():
    # The world's kubelet socket lives here: unix socket paths are limited to ~107 bytes (sun_path).
    directory = tempfile.mkdtemp(prefix="dp-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def test_the_world_labels_its_node_and_its_kubelet_advertises_every_replica(workdir):
    async with SimulatedWorld(SCENARIO, workdir=workdir) as world:
        node = world.api.objects("nodes")[0]
        assert node["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] == "mps"
        assert node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
        client = PodResourcesClient(os.path.join(workdir, "kubelet.sock"))
        try:
            counts = await client.allocatable_replicas()
            shared, whole, _ = world.node.gpu_uuids
            assert counts[shared] == 4 and counts[whole] == 1  # two replicas assigned, four advertised
            assert len(counts) == 4  # and the two MIG devices
        finally:
            await client.close()
