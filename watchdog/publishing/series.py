"""The in-between form of a scrape: metric families as plain tuples, before any text is written.

Both the prometheus_client Collector and the fast renderer read this one form, so the two can never disagree
about which series exist; only the byte layout is written twice (and a test holds them byte-identical). Also
here: ``Owners``, the per-snapshot index from devices and processes to pods, built once per render so the
per-series lookups are dictionary hits and never the linear scan ``Attribution.pod`` falls back to.
"""

from __future__ import annotations

from typing import Callable

from watchdog.model import Attribution, PodInfo, PodRef, Snapshot
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

    def __init__(self, attribution: Attribution | None, tenant_label: str | None) -> None:
        self._attribution = attribution or Attribution()
        self._tenant_label = tenant_label or None
        self._by_uid: dict[str, PodInfo] = dict(self._attribution.pods)
        self._by_key: dict[tuple[str, str], PodInfo] = {
            (info.namespace, info.name): info for info in self._attribution.pods.values()
        }
        self._device_cache: dict[str, tuple[str, ...]] = {}

    @property
    def pods(self) -> list[PodInfo]:
        return list(self._attribution.pods.values())

    def tenant_of_info(self, info: PodInfo | None) -> str:
        """The pod's tenant label value, else its namespace, as detection and action count tenants."""
        if info is None or self._tenant_label is None:
            return ""
        return info.tenant(self._tenant_label)

    def tenant_of(self, ref: PodRef) -> str:
        if self._tenant_label is None:
            return ""
        info = self._by_uid.get(ref.uid) if ref.uid else None
        if info is None:
            info = self._by_key.get((ref.namespace, ref.name))
        return self.tenant_of_info(info)

    def device_labels(self, device_uuid: str) -> tuple[str, ...]:
        """(namespace, pod, container[, tenant]) when exactly one pod holds the device, else empty strings.

        Several PodRefs of one pod (one per container) still count as one owner; the container is named only
        when there is exactly one.
        """
        cached = self._device_cache.get(device_uuid)
        if cached is not None:
            return cached
        refs = self._attribution.devices.get(device_uuid, ())
        pods = {(ref.namespace, ref.name) for ref in refs}
        if len(pods) == 1:
            containers = {ref.container or "" for ref in refs}
            container = containers.pop() if len(containers) == 1 else ""
            labels = (refs[0].namespace, refs[0].name, container)
            tenant = self.tenant_of(refs[0])
        else:
            labels, tenant = NO_OWNER, ""
        if self._tenant_label is not None:
            labels = labels + (tenant,)
        self._device_cache[device_uuid] = labels
        return labels

    def process_owner(self, pid: int) -> PodRef | None:
        return self._attribution.processes.get(pid)

    def pod_labels(self, ref: PodRef | None) -> tuple[str, ...]:
        """(namespace, pod, container[, tenant]) of a process's pod; empty strings when no pod owns it."""
        if ref is None:
            labels = NO_OWNER
            tenant = ""
        else:
            labels = (ref.namespace, ref.name, ref.container or "")
            tenant = self.tenant_of(ref)
        return labels + (tenant,) if self._tenant_label is not None else labels


def with_tenant(snapshot: Snapshot) -> bool:
    return bool(snapshot.tenant_label)
