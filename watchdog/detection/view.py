"""One tick as every finding source sees it, built once, and the protocol a finding source implements.

Pure (no I/O, no logging). The detector builds one frozen ``TickView`` per tick (devices, domains, pools) and
hands the same view to every registered source (``detector.SOURCES``), so no source selects its own share of the
tick. Building a part of the view is fenced like a source is: a part that cannot be built is ``None`` and is named
in ``failures``, the sources that need it are skipped (their state untouched), and the sources that do not still
run: an Xid needs the sample alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.borrowed import with_borrowed
from watchdog.detection.domain_types import Device, Domain
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.pools import memory_pools
from watchdog.detection.trust import trusted
from watchdog.model import Attribution, Finding, InstanceActivity, NodeSample, PodRef

# The parts of a view a source may need (``FindingSource.needs``), each built from the one before it.
DEVICES, DOMAINS, POOLS = "devices", "domains", "pools"


class ViewUnavailable(Exception):
    """A source was skipped because a part of the view it needs could not be built; ``__cause__`` says why."""


@dataclass(frozen=True, slots=True)
class TickView:
    """What one tick shows detection. ``sample`` is the trusted one (detection/trust.py: no quarantined or
    ambiguous device left in it) with borrowed activity filled in (detection/borrowed.py); ``excluded`` holds the
    UUIDs left out; ``borrowed_gpus`` the GPUs where some activity came from outside NVML this tick;
    ``external`` the tenants' own victim signals ("ns/pod" → value). ``devices``, ``domains`` and ``pools`` are
    None when they could not be built; ``failures`` then names the part ("view/<part>") and its exception."""

    sample: NodeSample
    attribution: Attribution
    external: Mapping[str, float]
    devices: tuple[Device, ...] | None
    domains: tuple[Domain, ...] | None
    pools: tuple[Device, ...] | None  # the devices with each split GI merged into one pool (detection/pools.py)
    excluded: frozenset[str] = frozenset()
    borrowed_gpus: frozenset[str] = frozenset()
    failures: tuple[tuple[str, Exception], ...] = ()

    @property
    def tick(self) -> int:
        return self.sample.tick

    @property
    def timestamp(self) -> float:
        return self.sample.timestamp

    def missing(self, needs: frozenset[str]) -> ViewUnavailable | None:
        """Why a source that needs ``needs`` cannot run on this view; None when it can."""
        for part in (DEVICES, DOMAINS, POOLS):
            if part in needs and getattr(self, part) is None:
                cause = next((exc for name, exc in self.failures if name in (f"view/{part}", f"view/{DEVICES}")),
                             None)
                error = ViewUnavailable(f"the tick's {part} could not be built")
                error.__cause__ = cause
                return error
        return None


class FindingSource(Protocol):
    """A detector, as the registry knows it: one per kind of trouble, state kept between ticks.

    ``name`` is unique among the registered sources (the service counts ``stage="detection/<name>"`` by it);
    ``needs`` names the parts of the view it reads (``DEVICES``, ``DOMAINS``, ``POOLS``), so it is skipped, not
    fed a partial view, when one is missing. ``step`` is called once per tick with increasing ticks."""

    name: str
    needs: frozenset[str]

    def set_policy(self, policy: DetectionPolicy) -> None: ...

    def step(self, view: TickView) -> Iterable[Finding]: ...


class SourceFactory(Protocol):
    """How the registry builds a source: a detector class's constructor. ``tenant_of`` is the current tick's
    tenant rule (the pod index's), read whenever a finding names a tenant."""

    def __call__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> FindingSource: ...


def tick_view(
    sample: NodeSample,
    attribution: Attribution,
    *,
    external: Mapping[str, float],
    borrowed_activity: Mapping[str, InstanceActivity] | None = None,
) -> TickView:
    """The view of one tick, each derived part built behind its own fence."""
    sample, excluded = trusted(sample)
    failures: list[tuple[str, Exception]] = []
    borrowed_gpus: frozenset[str] = frozenset()
    if borrowed_activity:
        try:
            filled, into = with_borrowed(sample, borrowed_activity)
        except Exception as exc:  # NVML's own readings still stand: judge on those alone
            failures.append(("view/borrowed", exc))
        else:
            sample = filled
            if into:
                borrowed_gpus = frozenset(gpu.uuid for gpu in sample.gpus
                                          if any(mig.uuid in into for mig in gpu.instances))
    devices = domains = pools = None
    try:
        devices = tuple(devices_of(sample, attribution, leave_out=excluded))  # `trusted` checked identity
    except Exception as exc:
        failures.append((f"view/{DEVICES}", exc))
    if devices is not None:
        try:
            domains = tuple(domains_of(devices))
        except Exception as exc:
            failures.append((f"view/{DOMAINS}", exc))
        try:
            pools = tuple(memory_pools(devices, attribution))  # a GI split into CIs is one memory pool
        except Exception as exc:
            failures.append((f"view/{POOLS}", exc))
    return TickView(sample=sample, attribution=attribution, external=external, devices=devices, domains=domains,
                    pools=pools, excluded=excluded, borrowed_gpus=borrowed_gpus, failures=tuple(failures))
