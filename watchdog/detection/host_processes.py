"""GPU use from outside Kubernetes: a process in no pod on a device the kubelet gave to a pod.

Pure (no I/O). A container started by hand (``docker run --gpus``), a host tool left running or a miner takes memory
and SM time from the pod the device was given to, and neither the kubelet nor a scheduler such as HAMi can see it;
interference judging only counts it as ``excluded_rise``. Here it is reported as its own kind,
``unauthorized_host``, which is report-only (``REPORT_ONLY_KINDS``): there is no pod to evict, and the action stage
and the controller refuse it. The evidence is what an operator needs to find it on the node: the PID, its cgroup
path (``/proc/<pid>/cgroup``) and command (``/proc/<pid>/comm``), the device and the pods it was given to.

A process is judged only when attribution is healthy (with the kubelet or the API unread, "no pod" may only mean
"not known yet") and only after ``for_ticks`` consecutive ticks (a short-lived probe is not worth a page). Node agents
that open every GPU by design (DCGM's nv-hostengine, nvidia-persistenced, the device plugin as a host service) are
exempt by command or cgroup pattern (``unauthorized.exempt_commands`` / ``exempt_cgroups``). A PID whose cgroup could
not be read is not in ``Attribution.host_processes`` and is never judged: unreadable is not "in no pod".

A VM's vGPU whose VM maps to no VMI or no live virt-launcher pod (a VM started by hand, one KubeVirt does not manage)
is the same on a vGPU host: it takes SM time and framebuffer from the VMs the cluster placed there, and there is no
pod to evict. It is reported as ``unauthorized_host`` too, on a GPU where some vGPU does belong to a pod (a GPU with
no VM of the cluster is nobody's to defend), with the vGPU's UUID, type, VM id and, where the VMI is known, its name.
Not while a live launcher pod on the node runs a VMI the (fresh) VMI list does not name: a VM just started, or one
arriving by live migration (its VMI keeps the source node's label until the hand-over), runs its vGPU before the
list names it, and the vGPU of no known VM may be that one; such a tick neither raises nor clears anything.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Callable

from watchdog.config.detection import DetectionPolicy, UnauthorizedPolicy
from watchdog.detection.domain_types import Device
from watchdog.detection.runs import Run, Runs, report_open
from watchdog.detection.view import DEVICES, TickView
from watchdog.model import Finding, FindingKind, HostProcess, PodRef, ProcessSample, Severity
from watchdog.model.vms import CREATED_BY_LABEL, LAUNCHER_LABEL, LAUNCHER_VALUE


def host_exempt(host: HostProcess, policy: UnauthorizedPolicy) -> bool:
    """Whether a process in no pod is a known node agent, by its command or its cgroup path."""
    return any(fnmatchcase(host.command, pattern) for pattern in policy.exempt_commands) or any(
        fnmatchcase(host.cgroup, pattern) for pattern in policy.exempt_cgroups
    )


class HostProcessDetector:
    name = "unauthorized_host"
    needs = frozenset({DEVICES})

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str] | None = None) -> None:
        """``tenant_of`` is the registry's common argument (view.SourceFactory): a process in no pod has no
        tenant, so it goes unused."""
        self._policy = policy
        self._runs = Runs()
        self._open: dict[str, Finding] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        self._policy = policy

    def step(self, view: TickView) -> list[Finding]:
        """Processes in no pod on devices the kubelet gave to a pod."""
        policy = self._policy.unauthorized
        attribution, tick, timestamp = view.attribution, view.tick, view.timestamp
        if not (policy.enabled and policy.host_processes):
            self._runs, self._open = Runs(), {}
            return []
        if not attribution.healthy:
            return self._report(tick)  # cannot tell: neither raise nor clear anything
        observed: set[str] = set()
        vm_pending: bool | None = None
        for device in view.devices or ():
            if device.vgpu is not None:
                if device.pods:
                    continue
                vm_pending = _vm_pending(view) if vm_pending is None else vm_pending
                if not vm_pending:
                    self._unmapped_vgpu(device, view, observed)
                elif self._runs.get(_vgpu_key(device)) is not None:
                    observed.add(_vgpu_key(device))  # cannot tell this tick: neither raise nor clear
                continue
            if not device.assigned:
                continue  # a device no pod was given is nobody's to defend
            hosts = [(proc, attribution.host_processes.get(proc.pid)) for proc in device.processes]
            outside = [(proc, host) for proc, host in hosts if host is not None and not host_exempt(host, policy)]
            for proc, host in outside:
                key = f"unauthorized-host/{device.uuid}/{proc.pid}"
                observed.add(key)
                run = self._runs.hold(key, tick=tick, timestamp=timestamp, for_ticks=policy.for_ticks)
                if run.active:
                    self._open[key] = self._finding(device, proc, host, key=key, run=run, tick=tick)
        self._runs.end_unless(observed)
        for key in list(self._open):
            if self._runs.get(key) is None:
                del self._open[key]
        return self._report(tick)

    def _unmapped_vgpu(self, device: Device, view: TickView, observed: set[str]) -> None:
        """A vGPU of no pod, on a GPU where other vGPUs do belong to pods: those pods are what it hurts."""
        vgpu = device.vgpu
        assert vgpu is not None
        neighbours = tuple(ref for other in view.devices or () if other.gpu is device.gpu and other.vgpu is not None
                           for ref in other.pods)
        if not neighbours:
            return
        key = _vgpu_key(device)
        observed.add(key)
        policy, tick = self._policy.unauthorized, view.tick
        run = self._runs.hold(key, tick=tick, timestamp=view.timestamp, for_ticks=policy.for_ticks)
        if not run.active:
            return
        gpu_total = device.gpu.memory_total_bytes
        size = vgpu.fb_total_bytes or 0
        memory_ratio = size / gpu_total if gpu_total else 0.0
        share = max(memory_ratio, vgpu.sm_util or 0.0)
        owner = view.attribution.vgpus.get(vgpu.uuid)
        evidence: dict[str, float | int | str] = {
            "vgpu_uuid": vgpu.uuid,
            "vgpu_type": vgpu.type_name,
            "vm_id": vgpu.vm_id,
            "vm_id_type": vgpu.vm_id_type,
            "gpu_uuid": device.gpu.uuid,
            "shared_with": ",".join(ref.key for ref in neighbours),
            "framebuffer_bytes": int(size),
            "memory_ratio": round(memory_ratio, 4),
            "ticks": run.ticks,
        }
        if owner is not None:
            evidence["vmi"] = f"{owner.namespace}/{owner.vmi}"  # a VMI whose launcher pod is not live here
        if vgpu.sm_util is not None:
            evidence["sm_share"] = round(vgpu.sm_util, 4)
        self._open[key] = Finding(
            kind=FindingKind.UNAUTHORIZED_HOST,
            key=key,
            domain=f"vgpu/{device.gpu.uuid}",
            resource="device",
            severity=Severity.CRITICAL if share >= policy.host_critical_ratio else Severity.WARNING,
            first_tick=run.first_tick,
            last_tick=tick,
            since=run.since,
            victims=neighbours,
            culprit=None,  # no pod: nothing to evict
            evidence=evidence,
            usage={f"vgpu/{vgpu.uuid}": float(size)},
            needed=float(size),
            message=f"vGPU {vgpu.uuid} ({vgpu.type_name or '?'}) of VM {vgpu.vm_id} belongs to no pod and shares "
            f"{device.gpu.uuid} with {', '.join(ref.key for ref in neighbours)}",
            gpu_uuid=device.gpu.uuid,
        )

    def _finding(self, device: Device, proc: ProcessSample, host: HostProcess, *, key: str, run: Run,
                 tick: int) -> Finding:
        used = proc.used_memory_bytes or 0
        memory_ratio = used / device.memory_total if device.memory_total else 0.0
        # Per-process SM time exists off MIG only (nvmlDeviceGetProcessUtilization); GPM's SM activity on a MIG
        # device is the instance's, which the process shares with the pod: there, its memory is the measure.
        sm = proc.sm_util
        share = max(memory_ratio, sm or 0.0)
        critical = share >= self._policy.unauthorized.host_critical_ratio
        given = ", ".join(ref.key for ref in device.assigned)
        evidence: dict[str, float | int | str] = {
            "pid": proc.pid,
            "command": host.command,
            "cgroup": host.cgroup,
            "device": device.uuid,
            "gpu_uuid": device.gpu.uuid,
            "assigned_to": ",".join(ref.key for ref in device.assigned),
            "used_memory_bytes": int(used),
            "memory_ratio": round(memory_ratio, 4),
            "ticks": run.ticks,
        }
        if sm is not None:
            evidence["sm_share"] = round(sm, 4)
        return Finding(
            kind=FindingKind.UNAUTHORIZED_HOST,
            key=key,
            domain=f"{'mig' if device.mig else 'gpu'}/{device.uuid}",
            resource="device",
            severity=Severity.CRITICAL if critical else Severity.WARNING,
            first_tick=run.first_tick,
            last_tick=tick,
            since=run.since,
            victims=device.assigned,
            culprit=None,  # no pod: nothing to evict
            evidence=evidence,
            usage={f"pid/{proc.pid}": float(used)},
            needed=float(used),
            message=f"process {proc.pid} ({host.command or '?'}, cgroup {host.cgroup or '?'}) belongs to no pod and "
            f"uses {used / 2**30:.1f} GiB on {device.uuid}, which the kubelet gave {given}",
            gpu_uuid=device.gpu.uuid,
            mig_uuid=device.uuid if device.mig else "",
        )

    def _report(self, tick: int) -> list[Finding]:
        return report_open(self._open, self._runs, tick=tick, stale_ticks=self._policy.unauthorized.stale_ticks)


def _vgpu_key(device: Device) -> str:
    assert device.vgpu is not None
    return f"unauthorized-host/{device.gpu.uuid}/vgpu/{device.vgpu.uuid}"


def _vm_pending(view: TickView) -> bool:
    """Whether a live virt-launcher pod on this node runs a VMI the VMI list does not name (yet)."""
    attribution, node = view.attribution, view.sample.node
    for pod in attribution.index.pods.values():
        if not pod.live or pod.labels.get(LAUNCHER_LABEL) != LAUNCHER_VALUE or (pod.node and pod.node != node):
            continue
        uid = pod.labels.get(CREATED_BY_LABEL)
        if uid and uid not in attribution.vmis:
            return True
    return False
