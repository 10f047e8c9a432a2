"""The detection stage as one object: a tick in (sample + attribution), the findings that hold at that tick out.

Pure (no I/O, no asyncio, no logging): everything it knows between ticks is in numpy rings and small dicts, so the
service can call it inline, a recording replays to the same findings, and the evaluation can run it faster than
real time. A policy reload keeps what was learned where it still fits (baselines, windows, open runs); see
`set_policy`. Every detector is a finding source (``view.FindingSource``) listed in ``SOURCES``: a new detector is
one module and one line there. Each runs behind its own fence: one that raises loses its own findings of the tick
and nothing else, and `last_failures` says which, for the service to count and log.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from watchdog.config.detection import DetectionPolicy
from watchdog.config.runtime import RuntimePolicy
from watchdog.detection.claims import with_claims
from watchdog.detection.host_processes import HostProcessDetector
from watchdog.detection.interference import InterferenceDetector
from watchdog.detection.memory import MemoryPressureDetector
from watchdog.detection.mps_memory import MpsMemoryDetector
from watchdog.detection.quota import QuotaDetector
from watchdog.detection.unauthorized import UnauthorizedDetector
from watchdog.detection.view import FindingSource, SourceFactory, TickView, tick_view
from watchdog.detection.xid import XidDetector
from watchdog.model import EMPTY, Attribution, Finding, InstanceActivity, NodeSample, PodRef

# The registry: every finding source the agent runs, in the order they run (their findings are sorted by key
# whatever it is). Each name is unique; the service counts `stage="detection/<name>"` by it.
SOURCES: tuple[SourceFactory, ...] = (
    InterferenceDetector,
    MemoryPressureDetector,
    QuotaDetector,
    UnauthorizedDetector,
    HostProcessDetector,
    XidDetector,
    MpsMemoryDetector,
)


class Detector:
    """Stateful across ticks; call `step` once per tick with increasing ticks."""

    def __init__(self, policy: DetectionPolicy | None = None, *, sources: Sequence[SourceFactory] = SOURCES) -> None:
        """A tenant is what the tick's pod index says (``Attribution.index.tenant_of``); the service builds that
        index for the runtime policy's tenant label, so detection needs no label of its own. ``sources``: the
        finding sources to run, the registry's by default."""
        self._policy = policy or DetectionPolicy()
        self._attribution = Attribution()
        self._sources: tuple[FindingSource, ...] = tuple(
            factory(self._policy, tenant_of=self._tenant_of) for factory in sources
        )
        names = [source.name for source in self._sources]
        if len(set(names)) != len(names):
            raise ValueError(f"sources: every finding source needs its own name, got {names}")
        self._last_tick: int | None = None
        self.last_failures: tuple[tuple[str, Exception], ...] = ()

    @property
    def policy(self) -> DetectionPolicy:
        return self._policy

    @property
    def source_names(self) -> tuple[str, ...]:
        """The registered sources, in the order they run: the ``detection/<name>`` stages the service counts."""
        return tuple(source.name for source in self._sources)

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load: its thresholds, learned state kept (see ``set_policy``). Its tenant label reaches
        detection through the pod index the cycle builds with it."""
        self.set_policy(runtime.detection)

    def set_policy(self, policy: DetectionPolicy) -> None:
        """Hot reload: learned baselines, windows (resized, newest kept) and open runs survive."""
        self._policy = policy
        for source in self._sources:
            source.set_policy(policy)

    def _tenant_of(self, ref: PodRef) -> str:
        # The sources live across ticks; the tenant rule is the current tick's index's.
        return self._attribution.index.tenant_of(ref)

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        *,
        external_signals: Mapping[str, float] | None = None,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> tuple[Finding, ...]:
        """The findings open at this tick, sorted by key, each complete (its DRA claim named, detection/claims.py).

        `external_signals`: "ns/pod" → override signal value; `borrowed_activity`: "<GPU UUID>/<GI id>" → the
        instance's activity from outside NVML, used only where NVML has none (detection/borrowed.py). No finding
        names a device in quarantine (``sample.quarantined``) or one whose UUID another device claims too
        (detection/trust.py). After the call, `last_failures` holds (name, exception) for each source that lost its
        findings of this tick and each part of the tick's view that could not be built ("view/<part>"); a source
        skipped for want of such a part is listed with a ``view.ViewUnavailable`` caused by the part's exception."""
        if not isinstance(sample, NodeSample) or not isinstance(attribution, Attribution):
            raise TypeError("step() takes a NodeSample and an Attribution")
        if self._last_tick is not None and sample.tick <= self._last_tick:
            raise ValueError(f"tick {sample.tick} is not after the previous tick {self._last_tick}")
        self._last_tick = sample.tick
        self._attribution = attribution
        view = tick_view(sample, attribution, external=external_signals or EMPTY,
                         borrowed_activity=borrowed_activity)
        failures = list(view.failures)
        findings: list[Finding] = []
        for source in self._sources:
            if source.needs:
                missing = view.missing(source.needs)
                if missing is not None:
                    failures.append((source.name, missing))
                    continue
            try:
                findings.extend(source.step(view))
            except Exception as exc:  # its own findings of this tick are lost; every other source's stand
                failures.append((source.name, exc))
        self.last_failures = tuple(failures)
        return tuple(sorted(with_claims(_trusted(findings, view), attribution), key=lambda finding: finding.key))


def _trusted(findings: list[Finding], view: TickView) -> list[Finding]:
    """Without any finding about a device left out of the view: a source that kept one open from before its
    device's quarantine must not hand it on."""
    excluded = view.excluded
    if not excluded:
        return findings
    return [f for f in findings if f.gpu_uuid not in excluded and f.mig_uuid not in excluded]
