"""Keeps what the kubelet and the node last said about GPU sharing, so each tick's attribution can say it for free.

Replicas change only when the device plugin is reconfigured (and restarted), so they are read slowly: the kubelet's
``GetAllocatableResources`` at start, then every ``refresh_seconds``, and once more when a tick shows a GPU the last
answer did not name (a GPU that came back, a plugin that re-registered); a GPU still unnamed after that answer is not
asked about again. A failed call keeps the last good counts (a plugin does not change its replicas because the
kubelet is briefly unreachable) and is counted in the attribution stage's errors as ``kubelet_allocatable_<kind>``;
retries back off from 1 s, doubling, up to ``backoff_max_seconds``. The node's labels come from a reader in
watchdog/kube (``NodeLabels``) that keeps its own last good answer and failure count. ``NodeSharing`` joins the two
with the settings through the pure ``sharing.device_sharing``, recomputed only when one of its inputs changed.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Awaitable, Callable, Mapping, Protocol

from watchdog.attribution.sharing import device_sharing, shareable_gpus
from watchdog.model import EMPTY, DeviceSharing, NodeSample

log = logging.getLogger(__name__)


class ReplicaLister(Protocol):
    """What the refresher needs from a client (``kubelet.PodResourcesClient`` in production)."""

    async def allocatable_replicas(self) -> Mapping[str, int]: ...


class LabelSource(Protocol):
    """The node's labels as last read (``kube.node_labels.NodeLabels``): None until a read succeeded."""

    @property
    def labels(self) -> Mapping[str, str] | None: ...

    def error_counts(self) -> Mapping[str, int]: ...


class KubeletReplicas:
    """The latest good replica count per device, with the slow refresh and the backoff above."""

    def __init__(self, client: ReplicaLister, *, refresh_seconds: float = 300.0, backoff_initial_seconds: float = 1.0,
                 backoff_max_seconds: float = 60.0) -> None:
        if refresh_seconds <= 0 or not 0 < backoff_initial_seconds <= backoff_max_seconds:
            raise ValueError("need refresh_seconds > 0 and 0 < backoff_initial_seconds <= backoff_max_seconds")
        self._client = client
        self._refresh_seconds = refresh_seconds
        self._backoff_initial = backoff_initial_seconds
        self._backoff_max = backoff_max_seconds
        self._next = -math.inf
        self._failures = 0
        self._asked: set[str] = set()  # devices a refresh was asked for; those still unnamed after it are dropped
        self._unnamed: set[str] = set()  # named by no answer since they were asked about: not asked again
        self._in_flight = False
        self.counts: Mapping[str, int] | None = None  # None until the first answer; then the last good one
        self.calls = 0
        self.errors: dict[str, int] = {}

    def error_counts(self) -> dict[str, int]:
        return {f"kubelet_allocatable_{kind}": n for kind, n in self.errors.items()}

    def note_unknown(self, device: str) -> None:
        """A tick shows ``device`` and the last answer does not name it: one refresh as soon as backoff allows."""
        counts = self.counts
        if counts is None or device in counts or device in self._unnamed or device in self._asked:
            return
        self._asked.add(device)
        if not self._failures:
            self._next = -math.inf

    async def refresh(self, now: float) -> bool:
        """Ask the kubelet if due at ``now``; True when a call was made. Never raises (cancellation aside)."""
        if self._in_flight or now < self._next:
            return False
        self.calls += 1
        asked = frozenset(self._asked)  # a device noted while the call is out is asked about by the next one
        self._in_flight = True
        try:
            counts = dict(await self._client.allocatable_replicas())
        except Exception as error:  # noqa: BLE001 - a failing kubelet keeps the last counts, never stops the agent
            kind = getattr(error, "kind", "error")
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if not self._failures:
                log.warning("kubelet GetAllocatableResources failed (%s), keeping the last replica counts: %s",
                            kind, error)
            self._failures += 1
            self._next = now + min(self._backoff_max, self._backoff_initial * 2 ** min(self._failures - 1, 32))
            return True
        finally:
            self._in_flight = False
        if counts != self.counts:  # a new object only when the answer changed: NodeSharing recomputes on identity
            shared = {device: n for device, n in counts.items() if n > 1}
            log.info("kubelet advertises %d device(s), %d shared: %s", len(counts), len(shared), shared or "none")
            self.counts = counts
        self._unnamed = {device for device in self._unnamed | asked if device not in counts}
        self._asked -= asked
        self._failures = 0
        self._next = -math.inf if self._asked else now + self._refresh_seconds
        return True

    async def close(self) -> None:
        """Close the client's channel, when the client has one."""
        close = getattr(self._client, "close", None)
        if close is not None:
            await close()

    async def refresher(self, clock: Callable[[], float], *,
                        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep, poll_seconds: float = 1.0) -> None:
        """Long-running agent: refresh whenever due; polls so that ``note_unknown`` is honoured within a poll."""
        while True:
            await self.refresh(clock())
            await sleep(max(0.0, min(poll_seconds, self._next - clock())))


class NodeSharing:
    """Each tick's ``Attribution.sharing``: the kubelet's counts, the node's labels and the settings, joined."""

    def __init__(self, *, kubelet: KubeletReplicas | None, labels: LabelSource | None, strategy: str | None = None,
                 replicas: int | None = None) -> None:
        self.kubelet = kubelet
        self.labels = labels
        self.strategy = strategy
        self.replicas = replicas
        self._inputs: tuple = ((), None, None)  # (gpus, counts, labels) the last answer was computed from
        self._last: Mapping[str, DeviceSharing] = EMPTY

    def error_counts(self) -> dict[str, int]:
        counts = dict(self.kubelet.error_counts()) if self.kubelet is not None else {}
        if self.labels is not None:
            counts.update(self.labels.error_counts())
        return counts

    def for_sample(self, sample: NodeSample) -> Mapping[str, DeviceSharing]:
        """GPU UUID → sharing for the sample's whole GPUs; the same object while nothing changed."""
        gpus = shareable_gpus(sample)
        counts = self.kubelet.counts if self.kubelet is not None else None
        labels = self.labels.labels if self.labels is not None else None
        if counts is not None and self.kubelet is not None:
            for uuid in gpus:
                if uuid not in counts:
                    self.kubelet.note_unknown(uuid)
        # Each source replaces its mapping on a new answer and never edits it, so identity says "unchanged".
        last_gpus, last_counts, last_labels = self._inputs
        if gpus != last_gpus or counts is not last_counts or labels is not last_labels:
            self._inputs = (gpus, counts, labels)
            self._last = device_sharing(gpus, kubelet=counts, labels=labels, strategy=self.strategy,
                                        replicas=self.replicas)
        return self._last
