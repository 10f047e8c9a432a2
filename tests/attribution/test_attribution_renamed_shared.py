"""A GPU shared under the device plugin's renameByDefault is advertised as nvidia.com/gpu.shared: attributed by
default like nvidia.com/gpu (k8s-device-plugin README, "Shared Access to GPUs")."""

from watchdog.attribution.kubelet import DEFAULT_RESOURCES, resource_matches
from watchdog.config.attribution import AttributionSettings


def test_renamed_shared_gpus_and_mig_devices_are_gpus_by_default():
    for resources in (DEFAULT_RESOURCES, tuple(AttributionSettings().resources)):
        assert resource_matches("nvidia.com/gpu.shared", resources)
        assert resource_matches("nvidia.com/mig-1g.10gb.shared", resources)
        assert resource_matches("nvidia.com/gpu", resources)
        assert not resource_matches("nvidia.com/gpu.other", resources)
        assert not resource_matches("amd.com/gpu", resources)


def test_a_pod_asking_for_a_renamed_shared_gpu_is_a_gpu_pod():
    from watchdog.controller.selection import is_gpu_pod
    from watchdog.kube.pods import pod_info

    pod = {"metadata": {"uid": "u", "namespace": "ml", "name": "p"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "1", "cpu": "1"}}}]},
           "status": {"phase": "Running"}}
    info = pod_info(pod)
    assert info.gpu_resources == ("nvidia.com/gpu.shared",)
    assert is_gpu_pod(info)
