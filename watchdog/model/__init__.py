"""The values that cross pipeline stages.

Every stage (sampling → attribution → detection → decision → action → publishing) talks to the next one only
through these immutable types, so a stage can be tested, recorded and replayed without the others. Units are base
units throughout: bytes, seconds, watts, ratios 0–1. Clocks are the one exception: MHz, as NVML reports them
(``sm_clock_mhz``, ``sm_clock_max_mhz``); the exporter converts them to hertz when it renders
``gpu_watchdog_gpu_sm_clock_hertz``. ``None`` always means "not available on this device", never zero.

One module per stage's output; import from here.
"""

from watchdog.model.activity import InstanceActivity, instance_key
from watchdog.model.actions import (ActionOutcome, ActionRecord, ActionReport, Decision, EvictionRequest,
                                    EvictionResult, Mode)
from watchdog.model.claims import ClaimDevice, ClaimRef, ResourceSliceInfo, SliceDevice, SliceKey
from watchdog.model.findings import (REPORT_ONLY_KINDS, Change, Finding, FindingChange, FindingKind, Severity,
                                     finding_changes, material)
from watchdog.model.pods import (GPU_RESOURCES, MIG_RESOURCE_PREFIX, MIRROR_ANNOTATION, Attribution, ContainerInfo, DeviceAssignment, HostProcess, PodIndex,
                                 PodInfo, PodRef, is_gpu_resource)
from watchdog.model.samples import (EMPTY, NOT_ATTRIBUTABLE, PROCESS_MODES, VGPU_SCHEDULERS, GpuSample, MigSample,
                                     NodeSample, ProcessSample, Rejection, VgpuRunlist, VgpuSample,
                                     XidEvent)
from watchdog.model.sharing import SHARING_STRATEGIES, DeviceSharing
from watchdog.model.usage import DeviceUsage, PodUsage
from watchdog.model.vms import VgpuOwner, VmiInfo
from watchdog.model.tick import Snapshot, StageStatus, TickResult, XidKey

__all__ = [
    "GPU_RESOURCES",
    "MIG_RESOURCE_PREFIX",
    "is_gpu_resource",
    "DeviceSharing",
    "SHARING_STRATEGIES",
    "InstanceActivity",
    "instance_key",
    "material",
    "finding_changes",
    "TickResult",
    "FindingChange",
    "Change",
    "ActionReport",
    "ActionRecord",
    "EMPTY",
    "MIRROR_ANNOTATION",
    "NOT_ATTRIBUTABLE",
    "PROCESS_MODES",
    "REPORT_ONLY_KINDS",
    "ActionOutcome",
    "Attribution",
    "ClaimDevice",
    "ClaimRef",
    "ContainerInfo",
    "Decision",
    "DeviceAssignment",
    "DeviceUsage",
    "EvictionRequest",
    "EvictionResult",
    "Finding",
    "FindingKind",
    "GpuSample",
    "MigSample",
    "VgpuSample",
    "VgpuRunlist",
    "VgpuOwner",
    "VmiInfo",
    "VGPU_SCHEDULERS",
    "Mode",
    "NodeSample",
    "PodIndex",
    "PodInfo",
    "PodRef",
    "HostProcess",
    "PodUsage",
    "ProcessSample",
    "Rejection",
    "ResourceSliceInfo",
    "Severity",
    "SliceDevice",
    "SliceKey",
    "Snapshot",
    "StageStatus",
    "XidEvent",
    "XidKey",
]
