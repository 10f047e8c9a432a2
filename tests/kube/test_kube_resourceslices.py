"""The ResourceSlice watch against the fake API server over real HTTP, and the slice parser on its own."""

from __future__ import annotations

import asyncio

import pytest
from kube_helpers import RecordingSleep, next_item, running

from watchdog.kube.resourceslices import ResourceSliceWatcher, slice_info
from watchdog.model import SliceDevice
from watchdog.testbed.cluster.apiserver_store import RESOURCE_SLICES
from watchdog.testbed.cluster.dra import DraDevice, slice_object

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def nvidia_slice(node: str = "node-1", *, driver: str = "gpu.nvidia.com", generation: int = 1,
                 abstract_mig: bool = False) -> dict:
    """The driver's slice; ``abstract_mig``: the MIG device is advertised before it exists (no ``uuid`` yet)."""
    devices = [DraDevice("gpu-0", GPU), DraDevice("gpu-1-mig-19-0-1", MIG, parent_uuid=GPU, profile="1g.18gb")]
    body = slice_object(node=node, driver=driver, generation=generation, devices=devices, published_uuids={GPU, MIG})
    if abstract_mig:
        del body["spec"]["devices"][1]["attributes"]["uuid"]
    return body


def test_slice_info_reads_the_attributes_nvidias_driver_publishes():
    info = slice_info(nvidia_slice())
    assert (info.name, info.driver, info.pool, info.generation) == ("node-1-gpu-nvidia-com", "gpu.nvidia.com",
                                                                     "node-1", 1)
    assert info.devices == (
        SliceDevice("gpu.nvidia.com", "node-1", "gpu-0", uuid=GPU, type="gpu"),
        SliceDevice("gpu.nvidia.com", "node-1", "gpu-1-mig-19-0-1", uuid=MIG, parent_uuid=GPU, type="mig",
                    profile="1g.18gb"),
    )


def test_slice_info_accepts_driver_qualified_names_and_a_device_without_uuid():
    body = nvidia_slice(abstract_mig=True)
    device = body["spec"]["devices"][0]
    device["attributes"] = {"gpu.nvidia.com/uuid": {"string": GPU}, "gpu.nvidia.com/type": {"string": "gpu"}}
    info = slice_info(body)
    assert info.devices[0].uuid == GPU and info.devices[0].type == "gpu"
    assert info.devices[1].uuid is None and info.devices[1].profile == "1g.18gb"  # advertised, not created yet


@pytest.mark.parametrize("body, message", [
    ({"metadata": {}, "spec": {}}, "metadata.name"),
    ({"metadata": {"name": "s"}, "spec": {"driver": "d", "pool": {"name": "p"}, "devices": [{"attributes": {}}]}},
     "without a name"),
    ([], "must be an object"),
])
def test_slice_info_refuses_unreadable_slices(body, message):
    with pytest.raises(ValueError, match=message):
        slice_info(body)


async def test_lists_its_node_and_driver_then_follows_a_device_gaining_its_uuid(server, api):
    server.store.create(RESOURCE_SLICES, nvidia_slice(abstract_mig=True))
    server.store.create(RESOURCE_SLICES, {**nvidia_slice("node-2"), "metadata": {"name": "other-node"}})
    server.store.create(RESOURCE_SLICES, {**nvidia_slice(driver="example.com/npu"), "metadata": {"name": "npu"}})
    events: asyncio.Queue = asyncio.Queue()
    relists: asyncio.Queue = asyncio.Queue()
    watcher = ResourceSliceWatcher(api, node="node-1", driver="gpu.nvidia.com", sleep=RecordingSleep(),
                                   on_event=lambda kind, info: events.put_nowait((kind, info)),
                                   on_relist=relists.put_nowait, watch_timeout_seconds=30)
    async with running(watcher.run()):
        listed = await next_item(relists)
        assert [info.name for info in listed] == ["node-1-gpu-nvidia-com"]
        assert listed[0].devices[1].uuid is None
        await server.watching(1, resource="resourceslices")
        current = server.store.get(RESOURCE_SLICES, "", "node-1-gpu-nvidia-com")
        current["spec"] = nvidia_slice(generation=2)["spec"]  # the driver created the MIG device: UUID published
        server.store.update(RESOURCE_SLICES, current)
        kind, info = await next_item(events)
        assert (kind, info.generation, info.devices[1].uuid) == ("MODIFIED", 2, MIG)
        server.store.remove(RESOURCE_SLICES, "", "node-1-gpu-nvidia-com")
        kind, info = await next_item(events)
        assert (kind, info.name) == ("DELETED", "node-1-gpu-nvidia-com")
    selectors = {query.get("fieldSelector") for _, path, query in server.requests if "resourceslices" in path}
    assert selectors == {"spec.nodeName=node-1,spec.driver=gpu.nvidia.com"}
    assert all(path == "/apis/resource.k8s.io/v1/resourceslices" for _, path, _ in server.requests
               if "resourceslices" in path)


async def test_a_malformed_slice_is_counted_and_skipped(server, api):
    server.store.create(RESOURCE_SLICES, nvidia_slice())
    bad = nvidia_slice()
    bad["metadata"]["name"] = "bad"
    del bad["spec"]["pool"]
    server.store.create(RESOURCE_SLICES, bad)
    relists: asyncio.Queue = asyncio.Queue()
    watcher = ResourceSliceWatcher(api, node="node-1", driver="gpu.nvidia.com", sleep=RecordingSleep(),
                                   on_event=lambda kind, info: None, on_relist=relists.put_nowait)
    async with running(watcher.run()):
        listed = await next_item(relists)
    assert [info.name for info in listed] == ["node-1-gpu-nvidia-com"] and watcher.counters["malformed"] == 1


def test_the_driver_name_is_required(api):
    with pytest.raises(ValueError, match="driver"):
        ResourceSliceWatcher(api, node="node-1", driver="", on_event=print, on_relist=print)


async def test_a_cluster_without_the_dra_api_is_not_an_error_and_is_followed_once_served(server, api):
    server.store.create(RESOURCE_SLICES, nvidia_slice())
    server.fail_next(2, status=404, path_prefix="/apis/resource.k8s.io/")  # resource.k8s.io/v1 not served (<1.34)
    relists: asyncio.Queue = asyncio.Queue()
    sleep = RecordingSleep()
    watcher = ResourceSliceWatcher(api, node="node-1", driver="gpu.nvidia.com", sleep=sleep,
                                   on_event=lambda kind, info: None, on_relist=relists.put_nowait)
    async with running(watcher.run()):
        listed = await next_item(relists)  # the third try: the API is served now
    assert [info.name for info in listed] == ["node-1-gpu-nvidia-com"]
    assert watcher.counters["not_served"] == 2 and watcher.error_counts["resourceslice_watch"] == 0
    assert len(sleep.delays) == 2 and not watcher.not_served  # backed off in between, never a tight loop
