"""Settings of the attribution stage (kubelet pod-resources, /proc cgroups, pod metadata)."""

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from watchdog.config._base import Section
from watchdog.config.limits import MAX_PATTERN_CHARACTERS, MAX_PATTERNS
from watchdog.config.names import LabelKey, ObjectNameOrEmpty


class SharingSettings(Section):
    """How the device plugin shares this node's GPUs, for a node GPU Feature Discovery does not label.

    ``strategy`` wins over the node's ``nvidia.com/gpu.sharing-strategy`` label, ``replicas`` over its
    ``nvidia.com/gpu.replicas``; the kubelet's own count of a GPU's replicas (``GetAllocatableResources``) wins over
    both, since it is what the plugin advertises (watchdog/attribution/sharing.py).
    """

    strategy: Literal["mps", "time-slicing"] | None = Field(
        None, description="The device plugin's sharing (sharing.mps or sharing.timeSlicing); null: from the label."
    )
    replicas: int | None = Field(
        None, ge=1, le=1024,
        description="Replicas per GPU when the kubelet does not count them; 1: not shared; null: from the label.",
    )
    refresh_seconds: float = Field(
        300.0, gt=0, description="Seconds between two reads of the kubelet's allocatable devices and the Node's labels."
    )


class AttributionSettings(Section):
    kubelet_socket: str = Field(
        "/var/lib/kubelet/pod-resources/kubelet.sock", description="Unix socket of the kubelet PodResources API."
    )
    refresh_seconds: float = Field(10.0, gt=0, description="Seconds between two PodResources List calls.")
    unknown_refresh_seconds: float = Field(
        2.0, ge=0, description="Least seconds between two extra List calls caused by a device no pod is known for."
    )
    kubelet_timeout_seconds: float = Field(5.0, gt=0, description="Deadline of one PodResources call.")
    backoff_max_seconds: float = Field(
        60.0, gt=0, description="Longest wait between two List retries while the kubelet keeps failing (from 1 s)."
    )
    resources: list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATTERN_CHARACTERS)]] = Field(
        default_factory=lambda: ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"],
        max_length=MAX_PATTERNS,
        description="Resource names (fnmatch patterns) whose devices are GPUs or MIG instances; nvidia.com/gpu.shared "
        "is the device plugin's name for a shared GPU under renameByDefault.",
    )
    dra_driver: ObjectNameOrEmpty = Field(
        "gpu.nvidia.com",
        description="Dynamic Resource Allocation driver whose claimed devices are GPUs or MIG devices; \"\" turns "
        "DRA attribution (and the ResourceSlice watch) off.",
    )
    proc_root: str = Field("/proc", description="Root of the proc filesystem (host's /proc mounted in the pod).")
    tenant_label: LabelKey | None = Field(
        None,
        description="Deprecated: set the policy's action.tenant_label instead. Used only when the policy names no "
        "tenant label (kept so that existing settings files still work).",
    )
    gpu_memory_request_resource: LabelKey | None = Field(
        None, description="Extended resource (MiB) that states a pod's GPU memory request, e.g. nvidia.com/gpumem."
    )
    sharing: SharingSettings = Field(
        default_factory=SharingSettings,
        description="GPU sharing (time-slicing or MPS replicas) where the node's GFD labels do not say it.",
    )
