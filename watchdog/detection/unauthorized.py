"""Unauthorized device use: a process on a GPU or MIG instance the kubelet never gave its pod.

Pure (no I/O). The usual way in is a container started with NVIDIA_VISIBLE_DEVICES=all (or a privileged one), which
bypasses the device plugin: the kubelet's PodResources list does not name the device for that pod, yet NVML shows
its process there. Judged only when attribution is healthy, because "the kubelet did not list it" means nothing
when the kubelet could not be read; processes whose pod is unknown (host processes, a stale PID) are never
judged; young pods get a grace period and the use must persist `for_ticks`, because PodResources is refreshed on a
timer and a just-started pod is legitimately absent from the last list. Two more legitimate cases are left alone: a
pod that is no longer live (deletionTimestamp set, or Succeeded/Failed), whose assignment the kubelet has already
released while its process is still exiting, and the pods the policy exempts (the NVIDIA GPU operator's validators
run with NVIDIA_VISIBLE_DEVICES=all by design). A finding that cannot be re-judged (kubelet unreadable, GPU missing)
stays open unobserved (`observed=False`) for at most `stale_ticks`. Processes in no pod at all are judged by
``host_processes.HostProcessDetector``, a source of its own.
"""

from __future__ import annotations

from typing import Callable

from watchdog.config.detection import DetectionPolicy, UnauthorizedPolicy
from watchdog.detection.runs import Runs, report_open
from watchdog.detection.view import DEVICES, TickView
from watchdog.model import Finding, FindingKind, PodInfo, PodRef, Severity


def exempt(ref: PodRef, info: PodInfo | None, policy: UnauthorizedPolicy) -> bool:
    """Whether the pod may use devices it was not given: an exempt namespace, or labels the selector matches."""
    if ref.namespace in policy.exempt_namespaces:
        return True
    if not policy.exempt_labels or info is None:
        return False
    return all(info.labels.get(key) == value for key, value in policy.exempt_labels.items())


class UnauthorizedDetector:
    name = "unauthorized"
    needs = frozenset({DEVICES})

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy
        self._tenant_of = tenant_of
        self._runs = Runs()
        self._open: dict[str, Finding] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        self._policy = policy

    def step(self, view: TickView) -> list[Finding]:
        """Pods whose processes run on devices the kubelet did not give them."""
        policy = self._policy.unauthorized
        attribution, tick, timestamp, devices = view.attribution, view.tick, view.timestamp, view.devices or ()
        if not policy.enabled:
            self._runs, self._open = Runs(), {}
            return []
        if not attribution.healthy:
            return self._report(tick)  # cannot tell: neither raise nor clear anything
        observed: set[str] = set()
        present_gpus = {device.gpu.uuid for device in devices}
        for device in devices:
            allowed = {ref.key for ref in device.assigned}
            offenders: dict[str, tuple[PodRef, int, float]] = {}  # pod key → (ref, processes, bytes)
            for proc in device.processes:
                ref = attribution.processes.get(proc.pid)
                if ref is None or ref.key in allowed:
                    continue
                info = attribution.pod(ref)
                if info is not None and (not info.live or timestamp - info.created < policy.min_pod_age_seconds):
                    continue
                if exempt(ref, info, policy):
                    continue
                _, count, used = offenders.get(ref.key, (ref, 0, 0.0))
                offenders[ref.key] = (ref, count + 1, used + (proc.used_memory_bytes or 0))
            for pod_key, (ref, count, used) in offenders.items():
                key = f"unauthorized/{device.uuid}/{pod_key}"
                observed.add(key)
                run = self._runs.hold(key, tick=tick, timestamp=timestamp, for_ticks=policy.for_ticks)
                if not run.active:
                    continue
                usage = {k: float(v) for k, v in device.pod_memory.items()}
                usage.setdefault(pod_key, used)
                self._open[key] = Finding(
                    kind=FindingKind.UNAUTHORIZED,
                    key=key,
                    domain=f"{'mig' if device.mig else 'gpu'}/{device.uuid}",
                    resource="device",
                    severity=Severity.CRITICAL,
                    first_tick=run.first_tick,
                    last_tick=tick,
                    since=run.since,
                    victims=device.assigned,
                    culprit=ref,
                    tenant=self._tenant_of(ref),
                    evidence={
                        "device": device.uuid,
                        "gpu_uuid": device.gpu.uuid,
                        "processes": count,
                        "used_memory_bytes": int(used),
                        "assigned_to": ",".join(r.key for r in device.assigned),
                        "ticks": run.ticks,
                    },
                    usage=usage,
                    needed=float(used),
                    message=f"{pod_key} runs {count} process(es) on {device.uuid}, which the kubelet gave "
                    f"{', '.join(r.key for r in device.assigned) or 'no pod'}",
                    gpu_uuid=device.gpu.uuid,
                    mig_uuid=device.uuid if device.mig else "",
                )

        def missing(key: str) -> bool:  # its GPU is absent from this sample: keep the run as it is
            finding = self._open.get(key)
            return finding is not None and finding.evidence.get("gpu_uuid") not in present_gpus

        self._runs.end_unless(observed, missing=missing)
        for key in list(self._open):
            if self._runs.get(key) is None:
                del self._open[key]
        return self._report(tick)

    def _report(self, tick: int) -> list[Finding]:
        return report_open(self._open, self._runs, tick=tick, stale_ticks=self._policy.unauthorized.stale_ticks)
