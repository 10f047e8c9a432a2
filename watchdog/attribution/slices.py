"""The GPU driver's ResourceSlices as the watch last described them, handed to each tick as one frozen index.

Devices allocated through Dynamic Resource Allocation are named by (driver, pool, device); the NVML UUID behind that
name is a device attribute in the driver's ResourceSlices. This cache, fed by ``kube.resourceslices`` (ADDED /
MODIFIED / DELETED, plus a full relist after a watch expires), builds the (driver, pool, device) → ``SliceDevice``
lookup once per change and hands the same frozen mapping to every tick until the next change, so attribution never
asks the API server anything on the sampling (or scrape) path.

A pool can span several slices and is republished with a higher ``generation`` when it changes; slices of an older
generation are stale until the driver deletes them (resource.k8s.io/v1 ResourcePool: "consumers should only use
the slices with the highest generation"), so only the newest generation of each pool is indexed. Pure: no I/O.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping

from watchdog.model import EMPTY, ResourceSliceInfo, SliceDevice, SliceKey

_UPSERT_EVENTS = frozenset({"ADDED", "MODIFIED"})


class SliceCache:
    """Slice name → ResourceSliceInfo, kept by watch events; ``index()`` is the frozen device lookup."""

    __slots__ = ("_by_name", "_index", "synced")

    def __init__(self, slices: Iterable[ResourceSliceInfo] = ()) -> None:
        self._by_name: dict[str, ResourceSliceInfo] = {}
        self._index: Mapping[SliceKey, SliceDevice] | None = None
        self.synced = False  # True after the first full list: before it, "no slice names the device" proves nothing
        for info in slices:
            self._by_name[info.name] = info

    def __len__(self) -> int:
        return len(self._by_name)

    def apply(self, event_type: str, info: ResourceSliceInfo) -> None:
        """Apply one watch event; BOOKMARK carries no change, any other unknown type is a caller error."""
        if not isinstance(info, ResourceSliceInfo):
            raise TypeError(f"SliceCache.apply wants a ResourceSliceInfo, got {type(info).__name__}")
        if event_type in _UPSERT_EVENTS:
            self._by_name[info.name] = info
        elif event_type == "DELETED":
            self._by_name.pop(info.name, None)
        elif event_type == "BOOKMARK":
            return
        else:
            raise ValueError(f"unknown resourceslice watch event type {event_type!r}")
        self._index = None

    def replace(self, slices: Iterable[ResourceSliceInfo]) -> None:
        """Hold exactly ``slices`` (a list or relist); the cache counts as synced from now on."""
        by_name: dict[str, ResourceSliceInfo] = {}
        for info in slices:
            if not isinstance(info, ResourceSliceInfo):
                raise TypeError(f"SliceCache.replace wants ResourceSliceInfo items, got {type(info).__name__}")
            by_name[info.name] = info
        self._by_name = by_name
        self._index = None
        self.synced = True

    def generations(self) -> dict[str, int]:
        """Slice name → pool generation, as held now (what a caller compares to know the cache caught up)."""
        return {name: info.generation for name, info in self._by_name.items()}

    def index(self) -> Mapping[SliceKey, SliceDevice]:
        """(driver, pool, device) → the device, newest pool generation only; built once per change."""
        if self._index is None:
            self._index = build_index(self._by_name.values())
        return self._index


def build_index(slices: Iterable[ResourceSliceInfo]) -> Mapping[SliceKey, SliceDevice]:
    """The device lookup over ``slices``, keeping only each pool's highest generation."""
    slices = list(slices)
    if not slices:
        return EMPTY
    newest: dict[tuple[str, str], int] = {}
    for info in slices:
        pool = (info.driver, info.pool)
        newest[pool] = max(newest.get(pool, info.generation), info.generation)
    found: dict[SliceKey, SliceDevice] = {}
    for info in sorted(slices, key=lambda s: s.name):
        if info.generation != newest[(info.driver, info.pool)]:
            continue
        for device in info.devices:
            found[device.slice_key] = device
    return MappingProxyType(found)
