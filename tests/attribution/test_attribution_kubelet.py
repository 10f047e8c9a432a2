"""The PodResources client against a real gRPC server on a unix socket (the fake kubelet)."""

from __future__ import annotations

import pytest

from watchdog.attribution.kubelet import (
    KubeletError,
    KubeletPodNotFound,
    KubeletRateLimited,
    KubeletUnavailable,
    PodResourcesClient,
    split_replica,
)
from watchdog.testbed.cluster.kubelet import FakeKubelet
from watchdog.model import DeviceAssignment

GPU = "GPU-5d2c3b4a-0000-1111-2222-333344445555"


def test_split_replica():
    assert split_replica(f"{GPU}::3") == (GPU, 3)
    assert split_replica(GPU) == (GPU, None)
    assert split_replica("MIG-abc::x") == ("MIG-abc::x", None)
    assert split_replica("::2") == ("::2", None)


def test_constructor_refuses_nonsense():
    with pytest.raises(ValueError, match="socket_path"):
        PodResourcesClient("")
    with pytest.raises(ValueError, match="timeout"):
        PodResourcesClient("/x.sock", timeout=0)


async def test_list_mig_whole_and_time_sliced_devices_filtered_by_resource(kubelet, client):
    kubelet.set_pods(
        [
            ("ml", "train", [("main", "nvidia.com/mig-3g.71gb", ["MIG-aaa"]), ("main", "cpu", ["0", "1"])]),
            ("ml", "whole", [("main", "nvidia.com/gpu", ["GPU-w0", "GPU-w1"])]),
            ("web", "a", [("srv", "nvidia.com/gpu", [f"{GPU}::0"])]),
            ("web", "b", [("srv", "nvidia.com/gpu", [f"{GPU}::1"]), ("side", "example.com/fpga", ["F-1"])]),
        ]
    )
    listed = await client.list_assignments()
    assert set(listed) == {
        DeviceAssignment("MIG-aaa", "nvidia.com/mig-3g.71gb", "ml", "train", "main"),
        DeviceAssignment("GPU-w0", "nvidia.com/gpu", "ml", "whole", "main"),
        DeviceAssignment("GPU-w1", "nvidia.com/gpu", "ml", "whole", "main"),
        DeviceAssignment(GPU, "nvidia.com/gpu", "web", "a", "srv", replica=0),
        DeviceAssignment(GPU, "nvidia.com/gpu", "web", "b", "srv", replica=1),
    }
    assert kubelet.calls_by_method["List"] == 1
    assert client.calls == 1


async def test_configured_resource_patterns_extend_the_filter(kubelet, socket_path):
    kubelet.set_pods([("ns", "p", [("c", "example.com/vgpu", ["V-1::2"]), ("c", "nvidia.com/gpu", ["G-1"])])])
    custom = PodResourcesClient(socket_path, resources=["example.com/*"])
    try:
        assert await custom.list_assignments() == (DeviceAssignment("V-1", "example.com/vgpu", "ns", "p", "c", 2),)
    finally:
        await custom.close()


async def test_get_one_pod_and_the_kubelets_not_found_answer(kubelet, client):
    kubelet.set_pods([("ml", "train", [("main", "nvidia.com/gpu", ["GPU-1"])])])
    assert await client.get_assignments("ml", "train") == (
        DeviceAssignment("GPU-1", "nvidia.com/gpu", "ml", "train", "main"),
    )
    with pytest.raises(KubeletPodNotFound, match="pod ghost in namespace ml not found"):
        await client.get_assignments("ml", "ghost")
    kubelet.get_disabled = True
    with pytest.raises(KubeletError, match="Get method disabled") as caught:
        await client.get_assignments("ml", "train")
    assert type(caught.value) is KubeletError


async def test_allocatable_devices_count_replicas_once(kubelet, client):
    kubelet.set_pods([("ml", "a", [("c", "nvidia.com/gpu", [f"{GPU}::0", f"{GPU}::1"])])])
    kubelet.extra_allocatable = {"nvidia.com/mig-1g.18gb": ["MIG-free"], "cpu": ["3"]}
    assert set(await client.allocatable_devices()) == {("nvidia.com/gpu", GPU), ("nvidia.com/mig-1g.18gb", "MIG-free")}


async def test_absent_socket_is_unavailable(client):
    with pytest.raises(KubeletUnavailable, match="does not exist"):
        await client.list_assignments()


async def test_stale_socket_file_without_a_server_is_unavailable(socket_path, client):
    with open(socket_path, "w") as handle:  # what a crashed kubelet can leave behind
        handle.write("")
    with pytest.raises(KubeletUnavailable, match="UNAVAILABLE"):
        await client.list_assignments()


async def test_rate_limit_is_its_own_error(kubelet, client):
    kubelet.rate_limit = True
    with pytest.raises(KubeletRateLimited, match="rejected by rate limit"):
        await client.list_assignments()
    kubelet.rate_limit = False
    assert await client.list_assignments() == ()


async def test_client_recovers_when_the_kubelet_restarts_on_the_same_path(kubelet, client):
    kubelet.set_pods([("ml", "a", [("c", "nvidia.com/gpu", ["GPU-1"])])])
    assert len(await client.list_assignments()) == 1
    await kubelet.stop()
    with pytest.raises(KubeletUnavailable):
        await client.list_assignments()
    await kubelet.start()
    assert len(await client.list_assignments()) == 1


async def test_fake_kubelet_refuses_a_second_start(kubelet):
    with pytest.raises(RuntimeError, match="already running"):
        await kubelet.start()


async def test_fake_kubelet_set_pods_merges_a_containers_resources(socket_path):
    fake = FakeKubelet(socket_path)
    fake.set_pods([("ns", "p", [("c", "nvidia.com/gpu", ["G-1"]), ("c", "nvidia.com/mig-1g.18gb", ["M-1"])])])
    await fake.start()
    client = PodResourcesClient(socket_path)
    try:
        listed = await client.list_assignments()
        assert [(a.container, a.device_id) for a in listed] == [("c", "G-1"), ("c", "M-1")]
        assert fake.running
    finally:
        await client.close()
        await fake.stop()
    assert not fake.running


async def test_assignments_from_settings_wire_the_configured_socket_and_patterns(kubelet, socket_path):
    from watchdog.attribution.kubelet import assignments_from_settings
    from watchdog.config.attribution import AttributionSettings

    kubelet.set_pods([("ns", "p", [("c", "example.com/vgpu", ["V-1"]), ("c", "nvidia.com/gpu", ["G-1"])])])
    settings = AttributionSettings(kubelet_socket=socket_path, resources=["example.com/*"])
    assignments = assignments_from_settings(settings)
    try:
        assert await assignments.refresh(0.0)
        assert [a.device_id for a in assignments.assignments] == ["V-1"]
    finally:
        await assignments.close()
