"""The in-between form of a scrape: metric families as plain tuples, before any text is written.

Both the prometheus_client Collector and the fast renderer read this one form, so the two can never disagree
about which series exist; only the byte layout is written twice (and a test holds them byte-identical). Also
here: ``Owners``, the label values naming a device's or a process's pod, read from the attribution's pod index
(built once per pod-cache change, not once per render) with the tenant rule every stage uses.
"""

from __future__ import annotations

from typing import Callable, Iterable

from watchdog.model import Attribution, DeviceUsage, NodeSample, PodInfo, PodRef, Snapshot
from watchdog.publishing.catalogue import ALL_FAMILIES, FamilySpec

Sample = tuple[tuple[str, ...], float, float | None]  # (label values, value, created timestamp or None)
SnapshotProvider = Callable[[], Snapshot | None]  # the latest snapshot; None before the first cycle

NO_OWNER: tuple[str, str, str] = ("", "", "")


class Family:
    """One metric family's samples; label values are raw (unescaped) strings in ``label_names`` order."""

    __slots__ = ("spec", "label_names", "samples")

    def __init__(self, spec: FamilySpec, label_names: tuple[str, ...]) -> None:
        self.spec = spec
        self.label_names = label_names
        self.samples: list[Sample] = []

    def add(self, values: tuple[str, ...], value: float, created: float | None = None) -> None:
        self.samples.append((values, value, created))

    def __repr__(self) -> str:
        return f"Family({self.spec.name}, {len(self.samples)} samples)"


class FamilyBook:
    """All families of one scrape, in catalogue order, so the exposition order never depends on the data."""

    def __init__(self, *, with_tenant: bool, specs: tuple[FamilySpec, ...] = ALL_FAMILIES) -> None:
        self.with_tenant = with_tenant
        self._families = {spec: Family(spec, spec.label_names(with_tenant=with_tenant)) for spec in specs}

    def __getitem__(self, spec: FamilySpec) -> Family:
        return self._families[spec]

    def non_empty(self) -> list[Family]:
        """Families with at least one sample: a family with nothing to say is left out of the scrape."""
        return [family for family in self._families.values() if family.samples]


class Owners:
    """Who owns a device or a process, as label values, for one snapshot."""

    def __init__(self, attribution: Attribution | None, *, with_tenant: bool) -> None:
        self.attribution = attribution or Attribution()
        self.index = self.attribution.index  # tenants as detection counts them: the label's value, else namespace
        self._with_tenant = with_tenant
        self._device_cache: dict[str, tuple[str, ...]] = {}

    @property
    def pods(self) -> Iterable[PodInfo]:
        return self.index.pods.values()

    def usage(self, sample: NodeSample) -> DeviceUsage:
        """Each device's use per (pod, container), the sums detection read too (``Attribution.usage``)."""
        return self.attribution.usage(sample)

    def device_labels(self, device_uuid: str) -> tuple[str, ...]:
        """(namespace, pod, container[, tenant]) when exactly one pod holds the device, else empty strings.

        Several PodRefs of one pod (one per container) still count as one owner; the container is named only
        when there is exactly one.
        """
        cached = self._device_cache.get(device_uuid)
        if cached is not None:
            return cached
        refs = self.attribution.devices.get(device_uuid, ())
        pods = {(ref.namespace, ref.name) for ref in refs}
        if len(pods) == 1:
            containers = {ref.container or "" for ref in refs}
            container = containers.pop() if len(containers) == 1 else ""
            labels = (refs[0].namespace, refs[0].name, container)
            if self._with_tenant:
                labels = labels + (self.index.tenant_of(refs[0]),)
        else:
            labels = NO_OWNER + ("",) if self._with_tenant else NO_OWNER
        self._device_cache[device_uuid] = labels
        return labels

    def pod_labels(self, ref: PodRef | None) -> tuple[str, ...]:
        """(namespace, pod, container[, tenant]) of a process's pod; empty strings when no pod owns it."""
        if ref is None:
            return NO_OWNER + ("",) if self._with_tenant else NO_OWNER
        labels = (ref.namespace, ref.name, ref.container or "")
        return labels + (self.index.tenant_of(ref),) if self._with_tenant else labels


def with_tenant(snapshot: Snapshot) -> bool:
    """Whether attributed families carry a ``tenant`` label: when the tick's pod index counts tenants by a pod
    label, the same index ``Owners`` reads the values from (a tick without an attribution has no owners to name)."""
    return snapshot.attribution is not None and snapshot.attribution.index.tenant_label is not None
