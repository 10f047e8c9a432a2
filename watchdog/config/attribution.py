"""Settings of the attribution stage (kubelet pod-resources, /proc cgroups, pod metadata)."""

from typing import Annotated

from pydantic import Field, StringConstraints

from watchdog.config._base import Section
from watchdog.config.limits import MAX_PATTERN_CHARACTERS, MAX_PATTERNS
from watchdog.config.names import LabelKey, ObjectNameOrEmpty


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
        default_factory=lambda: ["nvidia.com/gpu", "nvidia.com/mig-*"],
        max_length=MAX_PATTERNS,
        description="Resource names (fnmatch patterns) whose devices are GPUs or MIG instances.",
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
