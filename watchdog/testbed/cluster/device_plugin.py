"""What the NVIDIA device plugin and GPU Feature Discovery say about the simulated node: the devices the kubelet can
hand out, and the node's GPU sharing labels.

A scenario GPU with ``replicas: N`` is advertised the way the k8s-device-plugin advertises a GPU it shares
(``sharing.timeSlicing`` or, with ``mps: true``, ``sharing.mps``): as N devices ``<uuid>::0`` … ``<uuid>::<N-1>``
(k8s-device-plugin internal/rm), so the fake kubelet's ``GetAllocatableResources`` lists them all, assigned or not;
a GPU in MIG mode is advertised as its MIG devices (``nvidia.com/mig-<profile>``, the plugin's mixed strategy).
GFD labels a node that shares its GPUs ``nvidia.com/gpu.sharing-strategy`` (``mps`` or ``time-slicing``) and
``nvidia.com/gpu.replicas`` (k8s-device-plugin README, "Shared Access to GPUs"). The live test bed (world.py) and
the offline evaluation (evaluation/scenario_run.py) both take these from here, so they agree.
"""

from __future__ import annotations

from watchdog.attribution.sharing import REPLICAS_LABEL, STRATEGY_LABEL
from watchdog.testbed.gpu_node import SimulatedGpuNode
from watchdog.testbed.profiles import GPU_MODELS
from watchdog.testbed.scenario import Scenario

GPU_RESOURCE = "nvidia.com/gpu"


def advertised_devices(node: SimulatedGpuNode, tick: int | None = None) -> dict[str, list[str]]:
    """Resource → device IDs the plugin advertises at ``tick`` (what GetAllocatableResources lists)."""
    found: dict[str, list[str]] = {}
    for device in node.device_uuids(tick):
        if device.mig_profile is not None:
            found.setdefault(f"nvidia.com/mig-{device.mig_profile}", []).append(device.uuid)
        elif not node.layout(device.gpu_index, tick).mig_enabled:
            replicas = device.replicas
            ids = [f"{device.uuid}::{n}" for n in range(replicas)] if replicas else [device.uuid]
            found.setdefault(GPU_RESOURCE, []).extend(ids)
    return found


def gfd_labels(scenario: Scenario) -> dict[str, str]:
    """The node's GFD sharing labels: none for a node that shares no GPU; ``mps`` when a shared GPU is an MPS one
    (the plugin's config is per node), and the replica count when the shared GPUs agree on it."""
    shared = [gpu for gpu in scenario.gpus if gpu.replicas and gpu.mig is None]
    if not shared:
        return {}
    labels = {STRATEGY_LABEL: "mps" if any(gpu.mps for gpu in shared) else "time-slicing"}
    counts = {gpu.replicas for gpu in shared}
    if len(counts) == 1:
        labels[REPLICAS_LABEL] = str(counts.pop())
    return labels


def gfd_node_labels(scenario: Scenario) -> dict[str, str]:
    """Every label GPU Feature Discovery puts on the node (k8s-device-plugin README, "Generated Labels"): the sharing
    labels above, the product (of GPU 0, spaces as dashes, ``-SHARED`` when that GPU's replicas are advertised), its
    memory in MiB, the GPU count, the MIG strategy (``mixed``: the plugin advertises each profile as its own
    resource) and the driver version, full and in parts."""
    first = scenario.gpus[0]
    model = GPU_MODELS[first.model]
    product = model.name.replace(" ", "-") + ("-SHARED" if first.replicas and first.mig is None else "")
    major, _, rest = scenario.driver_version.partition(".")
    minor, _, revision = rest.partition(".")
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.count": str(len(scenario.gpus)),
        "nvidia.com/mig.capable": str(any(GPU_MODELS[gpu.model].profiles for gpu in scenario.gpus)).lower(),
        "nvidia.com/mig.strategy": "mixed" if any(gpu.mig is not None for gpu in scenario.gpus) else "none",
        "nvidia.com/cuda.driver-version.full": scenario.driver_version,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
    }
    return {**labels, **gfd_labels(scenario)}
