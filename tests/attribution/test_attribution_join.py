"""The pure join: devices → live pods, processes → pods, health, tenants, unknown devices."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from watchdog.attribution.join import attribute, unknown_devices
from watchdog.attribution.pods import MIRROR_ANNOTATION
from watchdog.model import ContainerInfo, DeviceAssignment, PodIndex, PodRef


def assign(device, pod, *, namespace="ml", container="main", resource="nvidia.com/gpu", replica=None):
    return DeviceAssignment(device_id=device, resource=resource, namespace=namespace, pod=pod,
                            container=container, replica=replica)


def by_uid(*pods):
    return PodIndex.of(pods)


def test_mig_instances_map_to_their_pods_and_processes(make_pod, mig_sample):
    train, serve = make_pod("train"), make_pod("serve", namespace="web")
    sample = mig_sample(("MIG-a", (11,)), ("MIG-b", (22,)), ("MIG-idle", ()))
    result = attribute(
        sample,
        assignments=[assign("MIG-a", "train", resource="nvidia.com/mig-1g.18gb"),
                     assign("MIG-b", "serve", namespace="web", resource="nvidia.com/mig-1g.18gb")],
        index=by_uid(train, serve),
        proc={11: (train.uid, train.containers[0].container_id), 22: (serve.uid, serve.containers[0].container_id)},
        kubelet_ok=True,
        api_ok=True,
    )
    assert result.devices == {
        "MIG-a": (PodRef("ml", "train", train.uid, "main"),),
        "MIG-b": (PodRef("web", "serve", serve.uid, "main"),),
    }
    assert result.processes == {11: PodRef("ml", "train", train.uid, "main"),
                                22: PodRef("web", "serve", serve.uid, "main")}
    assert result.healthy and result.kubelet_ok and result.api_ok
    assert result.pods[train.uid] is train


def test_whole_gpus(make_pod, gpu_sample):
    pod = make_pod("big")
    result = attribute(
        gpu_sample(("GPU-0", (5,)), ("GPU-1", ())),
        assignments=[assign("GPU-0", "big"), assign("GPU-1", "big")],
        index=by_uid(pod), proc={5: (pod.uid, pod.containers[0].container_id)}, kubelet_ok=True, api_ok=True,
    )
    assert set(result.devices) == {"GPU-0", "GPU-1"}
    assert result.devices["GPU-1"] == (PodRef("ml", "big", pod.uid, "main"),)
    assert result.processes[5].name == "big"


def test_time_sliced_gpu_has_several_owners_and_per_pod_processes(make_pod, gpu_sample):
    a = make_pod("a", containers=(ContainerInfo("worker", "a" * 64),))
    b = make_pod("b", containers=(ContainerInfo("worker", "b" * 64), ContainerInfo("helper", "c" * 64)))
    result = attribute(
        gpu_sample(("GPU-shared", (100, 200, 201))),
        assignments=[
            assign("GPU-shared", "a", container="worker", replica=0),
            assign("GPU-shared", "a", container="worker", replica=3),  # two replicas, still one owner
            assign("GPU-shared", "b", container="worker", replica=1),
        ],
        index=by_uid(a, b),
        proc={100: (a.uid, "a" * 64), 200: (b.uid, "b" * 64), 201: (b.uid, "c" * 64)},
        kubelet_ok=True, api_ok=True,
    )
    assert result.devices["GPU-shared"] == (PodRef("ml", "a", a.uid, "worker"), PodRef("ml", "b", b.uid, "worker"))
    assert result.processes[100] == PodRef("ml", "a", a.uid, "worker")
    assert result.processes[200] == PodRef("ml", "b", b.uid, "worker")
    assert result.processes[201] == PodRef("ml", "b", b.uid, "helper")


@pytest.mark.parametrize("ending", [{"phase": "Succeeded"}, {"phase": "Failed"}, {"deleting": True}])
def test_ended_or_terminating_pods_lose_their_devices_but_keep_their_processes(make_pod, gpu_sample, ending):
    done = make_pod("done", **ending)
    result = attribute(
        gpu_sample(("GPU-0", (7,))),
        assignments=[assign("GPU-0", "done")],  # the kubelet still lists it
        index=by_uid(done), proc={7: (done.uid, done.containers[0].container_id)}, kubelet_ok=True, api_ok=True,
    )
    assert result.devices == {}
    assert result.processes[7].name == "done"  # the process really is still that pod's


def test_pod_gone_from_the_api_is_not_attributed(make_pod, gpu_sample):
    result = attribute(gpu_sample(("GPU-0", ())), assignments=[assign("GPU-0", "gone")], index=by_uid(),
                       proc={}, kubelet_ok=True, api_ok=True)
    assert result.devices == {}


def test_with_the_api_down_the_kubelet_word_names_the_pod_and_the_result_is_unhealthy(gpu_sample):
    result = attribute(gpu_sample(("GPU-0", ())), assignments=[assign("GPU-0", "new")], index=by_uid(),
                       proc={}, kubelet_ok=True, api_ok=False)
    assert result.devices == {"GPU-0": (PodRef("ml", "new", "", "main"),)}
    assert not result.healthy and result.kubelet_ok and not result.api_ok


def test_recreated_pod_name_attributes_to_the_live_incarnation(make_pod, gpu_sample):
    old = make_pod("db-0", uid="old", deleting=True)
    new = make_pod("db-0", uid="new")
    result = attribute(gpu_sample(("GPU-0", ())), assignments=[assign("GPU-0", "db-0")], index=by_uid(new, old),
                       proc={}, kubelet_ok=True, api_ok=True)
    assert result.devices["GPU-0"][0].uid == "new"


def test_processes_outside_pods_or_of_unknown_pods_are_left_out(make_pod, gpu_sample):
    pod = make_pod("p")
    result = attribute(
        gpu_sample(("GPU-0", (1, 2, 3))), assignments=[], index=by_uid(pod),
        proc={2: ("uid-not-cached", "f" * 64), 3: (pod.uid, None)}, kubelet_ok=False, api_ok=True,
    )
    assert set(result.processes) == {3}
    assert result.processes[3] == PodRef("ml", "p", pod.uid, None)  # sandbox-level cgroup: no container
    assert not result.healthy


def test_static_pod_process_found_through_the_mirror_hash(make_pod, gpu_sample):
    config_hash = "0123456789abcdef0123456789abcdef"
    mirror = make_pod("probe-node-a", namespace="kube-system", mirror=True,
                      annotations=MappingProxyType({MIRROR_ANNOTATION: config_hash}))
    result = attribute(gpu_sample(("GPU-0", (9,))), assignments=[], index=by_uid(mirror),
                       proc={9: (config_hash, mirror.containers[0].container_id)}, kubelet_ok=True, api_ok=True)
    assert result.processes[9] == PodRef("kube-system", "probe-node-a", mirror.uid, "main")


def test_the_attribution_carries_the_index_it_was_joined_with(make_pod, gpu_sample):
    labelled = make_pod("a", labels=MappingProxyType({"team": "vision"}))
    index = PodIndex.of([labelled], tenant_label="team")
    result = attribute(gpu_sample(), assignments=[], index=index, proc={}, kubelet_ok=True, api_ok=True)
    assert result.index is index and result.pods == {labelled.uid: labelled}
    assert result.index.tenant_of(PodRef("ml", "a")) == "vision"


def test_unknown_devices_are_busy_devices_without_an_assignment(mig_sample, gpu_sample):
    migs = mig_sample(("MIG-a", (1,)), ("MIG-b", (2,)), ("MIG-idle", ()))
    assert unknown_devices(migs, [assign("MIG-a", "x")]) == ("MIG-b",)
    gpus = gpu_sample(("GPU-0", (1,)), ("GPU-1", ()), ("GPU-2", (3,)))
    assert unknown_devices(gpus, [assign("GPU-2", "x", replica=1)]) == ("GPU-0",)


def test_unresolvable_device_ids_are_the_non_uuid_ones():
    from watchdog.attribution.join import unresolvable_device_ids
    from watchdog.model import DeviceAssignment

    rows = [DeviceAssignment("GPU-1", "nvidia.com/gpu", "a", "p", "c"),
            DeviceAssignment("MIG-2", "nvidia.com/mig-1g.10gb", "a", "q", "c"),
            DeviceAssignment("0", "nvidia.com/gpu", "b", "r", "c"),
            DeviceAssignment("nvidia1", "nvidia.com/gpu", "b", "s", "c")]
    assert unresolvable_device_ids(rows) == ("0", "nvidia1")
    assert unresolvable_device_ids(rows[:2]) == ()
