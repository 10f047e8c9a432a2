"""The scenario file: one YAML document describes a whole simulated node, its tenants and what goes wrong.

The demo, the evaluation harness, the fake kubelet and the fake API server all read the same scenario, so the
field names here are a contract (documented in docs/scenario-format.md). Unknown fields are errors, cross
references (a pod's GPU and MIG instance, an Xid's instance) are checked, and every error names the field, so a
typo fails at load time with a message rather than as a silent quiet GPU at run time. Missing pod UIDs, PIDs and
time-slice replicas are filled in deterministically from the seed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from watchdog.testbed.profiles import GPU_MODELS, place_instances, vgpu_type
from watchdog.testbed.scenario_parts import (
    ClusterSpec,
    DeviceRef,
    DraSpec,
    FaultSpec,
    GpuSpec,
    HostProcessSpec,
    MonitoringSpec,
    OutageSpec,
    PodSpec,
    Strict,
    XidSpec,
    layout_entries,
    mig_device_profiles,
)

def _demo_scenario() -> Path:
    """scenarios/demo.yaml of the source checkout, else the copy installed under <prefix>/share/gpu-watchdog."""
    checkout = Path(__file__).resolve().parents[2] / "scenarios" / "demo.yaml"
    installed = Path(sys.prefix) / "share" / "gpu-watchdog" / "scenarios" / "demo.yaml"
    return checkout if checkout.exists() else installed


DEMO_SCENARIO = _demo_scenario()


class ScenarioError(ValueError):
    """The scenario cannot be used; the message names the file and every offending field."""


class Scenario(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    node: str = "sim-node-1"
    seed: int = 0
    tick_seconds: float = Field(default=1.0, gt=0)
    duration_ticks: int = Field(default=600, ge=1)
    driver_version: str = "580.82.07"
    gpus: list[GpuSpec] = Field(min_length=1, max_length=64)
    pods: list[PodSpec] = []
    host_processes: list[HostProcessSpec] = []  # GPU processes in no pod
    kubelet_outages: list[OutageSpec] = []
    xids: list[XidSpec] = []
    faults: list[FaultSpec] = []
    dra: DraSpec | None = None
    monitoring: MonitoringSpec = MonitoringSpec()
    cluster: ClusterSpec = ClusterSpec()
    truth: dict[str, Any] = {}
    policy: dict[str, Any] = {}

    @model_validator(mode="after")
    def _cross_check(self) -> Scenario:
        _check_references(self)
        _check_monitoring(self)
        _fill_identities(self)
        return self


def _check_monitoring(scenario: Scenario) -> None:
    """A latency signal belongs to a scenario pod that has a device."""
    devices = {pod.key: pod.device for pod in scenario.pods}
    for key in scenario.monitoring.latency:
        if devices.get(key) is None:
            raise ValueError(f"monitoring.latency.{key}: no pod {key} with a device in this scenario")


def _check_references(scenario: Scenario) -> None:
    for index, gpu in enumerate(scenario.gpus):
        model = GPU_MODELS[gpu.model]
        if gpu.mig is not None:
            if gpu.replicas is not None:
                raise ValueError(f"gpus.{index}.replicas: time-slicing replicas are only simulated without MIG")
            if gpu.mps:
                raise ValueError(f"gpus.{index}.mps: MPS is only simulated without MIG (the device plugin's MPS "
                                 "sharing does not support MIG)")
            try:
                place_instances(model, layout_entries(gpu.mig))
            except ValueError as exc:
                raise ValueError(f"gpus.{index}.mig{exc}") from None
        limit = gpu.power_limit_watts
        if limit is not None and not model.min_power_limit_watts <= limit <= model.power_limit_watts:
            raise ValueError(f"gpus.{index}.power_limit_watts: {limit} outside "
                             f"{model.min_power_limit_watts}–{model.power_limit_watts} W of a {model.key}")
        if gpu.vgpu is not None:
            _check_vgpu_host(gpu, f"gpus.{index}")
    vm_names: set[str] = set()
    for index, gpu in enumerate(scenario.gpus):
        for position, vm in enumerate(gpu.vgpu.vms if gpu.vgpu is not None else ()):
            # KubeVirt's legacy firmware UUID is derived from the name alone: two VMs so named share a VM id.
            if vm.name in vm_names:
                raise ValueError(f"gpus.{index}.vgpu.vms.{position}.name: duplicate VM name {vm.name!r}")
            vm_names.add(vm.name)
    seen: set[str] = set()
    for index, pod in enumerate(scenario.pods):
        if pod.key in seen:
            raise ValueError(f"pods.{index}: duplicate pod {pod.key}")
        seen.add(pod.key)
        if pod.end_tick is not None and pod.end_tick <= pod.start_tick:
            raise ValueError(f"pods.{index}.end_tick: must be after start_tick")
        refs = ([("device", pod.device)] if pod.device else []) + [
            (f"extra_devices.{n}", ref) for n, ref in enumerate(pod.extra_devices)]
        for where, ref in refs:
            _check_device(scenario, ref, f"pods.{index}.{where}")
    for index, host in enumerate(scenario.host_processes):
        if host.end_tick is not None and host.end_tick <= host.start_tick:
            raise ValueError(f"host_processes.{index}.end_tick: must be after start_tick")
        _check_device(scenario, host.device, f"host_processes.{index}.device")
    _check_claims(scenario)
    for index, xid in enumerate(scenario.xids):
        _check_device(scenario, DeviceRef(gpu=xid.gpu, instance=xid.instance), f"xids.{index}", any_instance=True)
    for index, fault in enumerate(scenario.faults):
        _check_device(scenario, DeviceRef(gpu=fault.gpu), f"faults.{index}", any_instance=True)
        if fault.mig is not None:
            gpu = scenario.gpus[fault.gpu]
            if gpu.mig is None:
                raise ValueError(f"faults.{index}.mig: GPU {fault.gpu} is not in MIG mode")
            try:
                place_instances(GPU_MODELS[gpu.model], layout_entries(fault.mig))
            except ValueError as exc:
                raise ValueError(f"faults.{index}.mig{exc}") from None


def vm_mig_devices(gpu: GpuSpec) -> list[int | None]:
    """Per VM of a vGPU host GPU, the MIG device (index into ``gpu.mig``) its MIG-backed vGPU sits on: the n-th VM of
    a type takes the n-th GPU instance of the type's profile; None for a time-sliced vGPU. ValueError naming the
    field when a VM finds no free GPU instance of its profile."""
    vms = gpu.vgpu.vms if gpu.vgpu is not None else []
    profiles = mig_device_profiles(gpu.model, gpu.mig) if gpu.mig is not None else []
    taken: set[int] = set()
    devices: list[int | None] = []
    for position, vm in enumerate(vms):
        profile = vgpu_type(gpu.model, vm.type).mig_profile
        if profile is None:
            devices.append(None)
            continue
        free = [at for at, name in enumerate(profiles) if name == profile and at not in taken]
        if not free:
            raise ValueError(f"vgpu.vms.{position}.type: {vm.type} needs a free {profile} GPU instance in mig "
                             f"(mig: {list(profiles)}; one vGPU per GPU instance)")
        taken.add(free[0])
        devices.append(free[0])
    return devices


def _check_vgpu_host(gpu: GpuSpec, where: str) -> None:
    """Time-sliced vGPUs of one type, no more than the type allows per GPU, on a GPU that is nothing else; or
    MIG-backed vGPUs, one per GPU instance of their type's profile, on a GPU in MIG mode."""
    if gpu.mps or gpu.replicas is not None:
        raise ValueError(f"{where}.vgpu: a vGPU host GPU is simulated without mps and replicas")
    vms = gpu.vgpu.vms if gpu.vgpu is not None else []
    types = set()
    for position, vm in enumerate(vms):
        try:
            kind = vgpu_type(gpu.model, vm.type)
        except ValueError as exc:
            raise ValueError(f"{where}.vgpu.vms.{position}.type: {exc}") from None
        types.add(kind)
        if vm.end_tick is not None and vm.end_tick <= vm.start_tick:
            raise ValueError(f"{where}.vgpu.vms.{position}.end_tick: must be after start_tick")
        if (gpu.mig is None) != (kind.mig_profile is None):
            mode = "in MIG mode holds MIG-backed" if gpu.mig is not None else "without mig holds time-sliced"
            raise ValueError(f"{where}.vgpu.vms.{position}.type: {vm.type} — a vGPU host GPU {mode} vGPU types only")
    if gpu.mig is not None:
        if any(not isinstance(entry, str) for entry in gpu.mig):
            raise ValueError(f"{where}.mig: a MIG-backed vGPU takes a whole GPU instance; no compute instance splits")
        try:
            vm_mig_devices(gpu)
        except ValueError as exc:
            raise ValueError(f"{where}.{exc}") from None
        if len({vm.name for vm in vms}) != len(vms):
            raise ValueError(f"{where}.vgpu.vms: VM names must be unique on the GPU")
        return
    if len(types) > 1:
        raise ValueError(f"{where}.vgpu.vms: time-sliced vGPUs on one GPU share one type; got "
                         f"{sorted(t.name for t in types)}")
    if types and len(vms) > next(iter(types)).max_instances:
        kind = next(iter(types))
        raise ValueError(f"{where}.vgpu.vms: {len(vms)} VMs but a {gpu.model} holds at most {kind.max_instances} "
                         f"{kind.name}")
    if len({vm.name for vm in vms}) != len(vms):
        raise ValueError(f"{where}.vgpu.vms: VM names must be unique on the GPU")


def _check_claims(scenario: Scenario) -> None:
    """A claim needs a DRA node and a device; pods sharing a claim share its one device."""
    devices: dict[tuple[str, str], tuple[int, int | None]] = {}
    for index, pod in enumerate(scenario.pods):
        if pod.claim is None:
            continue
        if scenario.dra is None:
            raise ValueError(f"pods.{index}.claim: only a DRA node (dra: {{}}) allocates devices by claim")
        if pod.device is None:
            raise ValueError(f"pods.{index}.claim: a claim needs the device it allocated (device: …)")
        device = (pod.device.gpu, pod.device.instance)
        if devices.setdefault((pod.namespace, pod.claim), device) != device:
            raise ValueError(f"pods.{index}.device: claim {pod.namespace}/{pod.claim} is shared, so it names one "
                             f"device for every pod")


def _check_device(scenario: Scenario, ref: DeviceRef, where: str, *, any_instance: bool = False) -> None:
    if ref.gpu >= len(scenario.gpus):
        raise ValueError(f"{where}.gpu: {ref.gpu} but the node has {len(scenario.gpus)} GPUs")
    gpu = scenario.gpus[ref.gpu]
    if gpu.vgpu is not None and not any_instance:
        raise ValueError(f"{where}.gpu: GPU {ref.gpu} is a vGPU host; its work runs in VMs (vgpu.vms)")
    if gpu.mig is None:
        if ref.instance is not None:
            raise ValueError(f"{where}.instance: GPU {ref.gpu} is not in MIG mode")
    elif ref.instance is None and not any_instance:
        raise ValueError(f"{where}.instance: GPU {ref.gpu} is in MIG mode; name an index into its mig list")
    elif ref.instance is not None and ref.instance >= _most_instances(scenario, ref.gpu):
        raise ValueError(f"{where}.instance: {ref.instance} but GPU {ref.gpu} has "
                         f"{_most_instances(scenario, ref.gpu)} MIG instances")
    if ref.replica is not None and (gpu.replicas is None or ref.replica >= gpu.replicas):
        raise ValueError(f"{where}.replica: {ref.replica} but GPU {ref.gpu} has replicas: {gpu.replicas}")


def _most_instances(scenario: Scenario, gpu: int) -> int:
    """The most MIG instances the GPU ever has: a pod may use one that a later reconfiguration (``faults.mig``, or
    a DRA driver creating a MIG device at claim time) brings into being."""
    layouts = [scenario.gpus[gpu].mig or []] + [f.mig for f in scenario.faults if f.gpu == gpu and f.mig is not None]
    model = GPU_MODELS[scenario.gpus[gpu].model]
    counts = []
    for layout in layouts:
        try:
            counts.append(len(place_instances(model, layout_entries(layout))))
        except ValueError:  # an invalid fault layout is reported with its own field name
            counts.append(len(layout))
    return max(counts)


def stable_digest(*parts: object) -> bytes:
    """A digest of the parts, the same on every run and machine (Python's hash() is salted per process)."""
    return hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()


def format_uuid(digest: bytes) -> str:
    text = digest[:16].hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def _fill_identities(scenario: Scenario) -> None:
    used_pids = {pod.pid for pod in scenario.pods if pod.pid is not None}
    used_pids |= {host.pid for host in scenario.host_processes if host.pid is not None}
    replica_next: dict[int, int] = {}
    for pod in scenario.pods:
        if pod.uid is None:
            pod.uid = format_uuid(stable_digest(scenario.seed, "pod", pod.namespace, pod.name))
        if pod.pid is None:
            # Container PIDs on a busy node are large and scattered; pick one in 10 000–399 999, unique on the node.
            pid = 10_000 + int.from_bytes(stable_digest(scenario.seed, "pid", pod.key)[:4], "big") % 390_000
            while pid in used_pids:
                pid += 1
            pod.pid = pid
            used_pids.add(pid)
        device = pod.device
        if device is not None and device.replica is None and scenario.gpus[device.gpu].replicas:
            replicas = scenario.gpus[device.gpu].replicas
            device.replica = replica_next.get(device.gpu, 0) % replicas
            replica_next[device.gpu] = replica_next.get(device.gpu, 0) + 1
    for number, host in enumerate(scenario.host_processes):
        if host.pid is None:  # host processes: PIDs below the containers' range, as on a node booted long ago
            pid = 2_000 + int.from_bytes(stable_digest(scenario.seed, "host-pid", number)[:4], "big") % 8_000
            while pid in used_pids:
                pid += 1
            host.pid = pid
            used_pids.add(pid)


def load_scenario(source: str | Path | dict | Scenario) -> Scenario:
    """A validated Scenario from a YAML file path, a mapping, or a Scenario (returned as is)."""
    if isinstance(source, Scenario):
        return source
    where = "scenario"
    if isinstance(source, (str, Path)):
        where = str(source)
        path = Path(source)
        if not path.is_file():
            raise ScenarioError(f"{where}: no such scenario file")
        try:
            source = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(source, dict):
        raise ScenarioError(f"{where}: the top level must be a mapping, got {type(source).__name__}")
    try:
        return Scenario.model_validate(source)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            field = ".".join(str(part) for part in error["loc"])
            lines.append(f"  {field}: {message}" if field else f"  {message}")
        raise ScenarioError(f"{where}: invalid scenario\n" + "\n".join(lines)) from None
