"""Turns one Snapshot into metric families: the only place that decides which series a scrape contains.

Pure and cheap: it reads the immutable Snapshot the pipeline already built and calls nothing outside (no NVML, no
kubelet, no API server). dcgm-exporter mapped pods on the scrape path and paid for it with whole cores on busy
MIG nodes (NVIDIA/dcgm-exporter#599); here attribution happened in the cycle, a scrape only formats it. The
hardware series live in device_series; the series about the agent and its conclusions are here.

Xids are exported as a counter plus a last-seen timestamp per (GPU, GPU instance, Xid), never as a "last value" gauge:
dcgm-exporter's DCGM_FI_DEV_XID_ERRORS gauge keeps the last code forever and hides repeats (its
etc/default-counters.csv: "Value of the last XID error encountered"), whereas
`increase(gpu_watchdog_xid_errors_total[10m])` shows every one. Per-stage duration/success follows node_exporter's
scrape_collector_duration_seconds/scrape_collector_success pattern.
"""

from __future__ import annotations

import platform
from collections import Counter

import watchdog
from watchdog.model import Mode, Snapshot
from watchdog.model.plausibility import CHECKS
from watchdog.publishing import catalogue as c
from watchdog.publishing.device_series import add_device_series
from watchdog.publishing.series import Family, FamilyBook, Owners, with_tenant

POLICY_RELOAD_RESULTS = ("success", "failure")  # always present, so rate() works from the first scrape


def build_families(snapshot: Snapshot) -> list[Family]:
    """The non-empty metric families of one snapshot, in catalogue order."""
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"expected a watchdog.model.Snapshot, got {type(snapshot).__name__}")
    book = FamilyBook(with_tenant=with_tenant(snapshot))
    owners = Owners(snapshot.attribution, with_tenant=book.with_tenant)
    if snapshot.sample is not None:
        add_device_series(book, sample=snapshot.sample, owners=owners)
    add_agent_series(book, snapshot=snapshot, owners=owners)
    return book.non_empty()


def add_agent_series(book: FamilyBook, *, snapshot: Snapshot, owners: Owners) -> None:
    """Fill every family that is not about one device."""
    node = snapshot.node
    _add_xids(book, snapshot)
    _add_findings(book, snapshot)
    _add_pods(book, node=node, owners=owners)
    for (result, reason, namespace), count in snapshot.evictions.items():
        book[c.EVICTIONS].add((node, str(result), reason, namespace), count)
    for (stage, error), count in snapshot.errors.items():
        book[c.ERRORS].add((node, stage, error), count)
    for stage in snapshot.stages:
        book[c.STAGE_DURATION].add((node, stage.name), stage.duration_seconds)
        book[c.STAGE_SUCCESS].add((node, stage.name), 1 if stage.success else 0)
    driver = snapshot.sample.driver_version if snapshot.sample is not None else None
    book[c.BUILD_INFO].add((node, watchdog.__version__, platform.python_version(), driver or ""), 1)
    for mode in Mode:
        book[c.MODE].add((node, str(mode)), 1 if mode == snapshot.mode else 0)
    book[c.EVICTIONS_PAUSED].add((node,), 1 if snapshot.paused else 0)
    book[c.KILL_SWITCH_KNOWN].add((node,), 1 if snapshot.kill_switch_known else 0)
    book[c.READY].add((node,), 1 if snapshot.ready else 0)
    for check in CHECKS:  # every check always present, so rate() works from the first scrape
        book[c.READINGS_REJECTED].add((node, check), snapshot.readings_rejected.get(check, 0))
    reloads = dict.fromkeys(POLICY_RELOAD_RESULTS, 0)
    reloads.update(snapshot.policy_reloads)
    for result, count in reloads.items():
        book[c.POLICY_RELOADS].add((node, result), count)
    if snapshot.mqtt is not None:  # only when the stream is enabled
        book[c.MQTT_PUBLISHED].add((node,), snapshot.mqtt.get("published", 0))
        book[c.MQTT_DROPPED].add((node,), snapshot.mqtt.get("dropped", 0))
        book[c.MQTT_CONNECT_FAILURES].add((node,), snapshot.mqtt.get("connect_failures", 0))
        book[c.MQTT_CONNECTED].add((node,), snapshot.mqtt.get("connected", 0))
    if snapshot.flight_recorder is not None:  # only when the flight recorder is enabled
        recorder = snapshot.flight_recorder
        book[c.FLIGHT_BYTES].add((node,), recorder.get("bytes_written", 0))
        book[c.FLIGHT_TICKS].add((node,), recorder.get("ticks_written", 0))
        book[c.FLIGHT_DROPPED].add((node,), recorder.get("dropped", 0))
        book[c.FLIGHT_DELETED].add((node,), recorder.get("deleted", 0))
        book[c.FLIGHT_SEGMENTS].add((node,), recorder.get("segments", 0))
    attribution = snapshot.attribution
    if attribution is not None:
        book[c.ATTRIBUTION_HEALTHY].add((node,), 1 if attribution.healthy else 0)
        book[c.ATTRIBUTION_SOURCE_UP].add((node, "kubelet"), 1 if attribution.kubelet_ok else 0)
        book[c.ATTRIBUTION_SOURCE_UP].add((node, "api"), 1 if attribution.api_ok else 0)
        if attribution.slices_ok is not None:  # only on a node that watches its DRA driver's ResourceSlices
            book[c.ATTRIBUTION_SOURCE_UP].add((node, "resourceslices"), 1 if attribution.slices_ok else 0)
            book[c.CLAIMED_DEVICES_HELD_BACK].add((node,), attribution.claims_held)
    if snapshot.sample is not None:
        book[c.LAST_SAMPLE].add((node,), snapshot.sample.timestamp)
        book[c.DEVICES_QUARANTINED].add((node,), len(snapshot.sample.quarantined))


def _add_xids(book: FamilyBook, snapshot: Snapshot) -> None:
    errors, last_seen = book[c.XID_ERRORS], book[c.XID_LAST_SEEN]
    for (gpu_index, gpu_uuid, gpu_instance, xid), (count, seen) in snapshot.xid_counts.items():
        instance = "" if gpu_instance is None else str(gpu_instance)
        labels = (snapshot.node, str(gpu_index), gpu_uuid, instance, str(xid))
        errors.add(labels, count)
        last_seen.add(labels, seen)


def _add_findings(book: FamilyBook, snapshot: Snapshot) -> None:
    """Count active findings per (kind, severity, resource, victim, culprit); a finding counts once per victim."""
    counts: Counter[tuple[str, ...]] = Counter()
    for finding in snapshot.findings:
        culprit = finding.culprit
        culprit_labels = (culprit.namespace, culprit.name) if culprit is not None else ("", "")
        head = (snapshot.node, str(finding.kind), str(finding.severity), finding.resource)
        victims = finding.victims or (None,)
        for victim in victims:
            victim_labels = (victim.namespace, victim.name) if victim is not None else ("", "")
            counts[head + victim_labels + culprit_labels + (finding.gpu_uuid, finding.mig_uuid)] += 1
    family = book[c.FINDINGS]
    for labels, count in counts.items():
        family.add(labels, count)


def _add_pods(book: FamilyBook, *, node: str, owners: Owners) -> None:
    family = book[c.POD_INFO]
    for info in owners.pods:
        labels = (node, info.namespace, info.name, info.uid, info.priority_class, info.qos_class, str(info.priority))
        if book.with_tenant:
            labels = labels + (owners.index.tenant(info),)
        family.add(labels, 1)
