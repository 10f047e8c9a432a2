"""The attribution stage's own state (``attribution.stage.NodeAttributor``): which kubelet List a tick can trust,
the hold-back of (device, pod) pairs too new to judge, devices the kubelet has never named, the /proc reader's
failures as error counts, and the tick's pod index built with the tenant label it is given."""

from __future__ import annotations

import logging

from tests.attribution.stage_fakes import FixedKubelet, FixedProc
from watchdog.attribution.join import unassigned_processes
from watchdog.attribution.pods import PodCache
from watchdog.attribution.stage import NodeAttributor, why_unhealthy
from watchdog.model import Attribution, DeviceAssignment, PodRef


def assigned(device: str, pod: str, *, namespace: str = "ml") -> DeviceAssignment:
    return DeviceAssignment(device, "nvidia.com/gpu", namespace, pod, "main")


def cgroup_of(pod) -> tuple[str, str | None]:
    return pod.uid, pod.containers[0].container_id


def test_a_new_pair_is_held_back_until_a_list_started_after_it_was_first_seen(make_pod, gpu_sample, clock):
    owner, intruder = make_pod("owner"), make_pod("intruder", namespace="batch")
    kubelet = FixedKubelet([assigned("GPU-0", "owner")])
    kubelet.listed_at = clock()
    attributor = NodeAttributor(kubelet=kubelet, pods=PodCache([owner, intruder]), pods_ok=lambda: True,
                                proc=FixedProc({1: cgroup_of(owner), 2: cgroup_of(intruder)}), clock=clock)
    sample = gpu_sample(("GPU-0", (1, 2)))
    clock.advance(1)
    first = attributor.attribute(sample, tenant_label=None)
    assert first.healthy and set(first.processes) == {1}  # the listed owner at once; the intruder waits
    assert unassigned_processes(sample, first) == {} and kubelet.refreshes == 1  # a List is asked for, once
    clock.advance(1)
    assert set(attributor.attribute(sample, tenant_label=None).processes) == {1}  # no newer List yet
    assert kubelet.refreshes == 1
    kubelet.listed_at = clock.advance(1)  # a List that started after the pair was first seen, and still lacks it
    confirmed = attributor.attribute(sample, tenant_label=None)
    assert confirmed.processes[2] == PodRef("batch", "intruder", intruder.uid, "main")
    assert unassigned_processes(sample, confirmed) == {2: ("GPU-0", "batch/intruder")}


def test_device_ids_that_are_not_uuids_make_the_kubelet_side_unreadable(make_pod, gpu_sample, clock, caplog):
    pod = make_pod("train")
    kubelet = FixedKubelet([assigned("0", "train")])  # the device plugin's deviceIDStrategy=index
    attributor = NodeAttributor(kubelet=kubelet, pods=PodCache([pod]), pods_ok=lambda: True,
                                proc=FixedProc({1: cgroup_of(pod)}), clock=clock)
    with caplog.at_level(logging.ERROR, logger="watchdog.attribution.stage"):
        for _ in range(3):
            result = attributor.attribute(gpu_sample(("GPU-0", (1,))), tenant_label=None)
            assert not result.kubelet_ok and not result.healthy
    assert why_unhealthy(result) == "kubelet pod-resources unavailable"
    assert kubelet.unknown == []  # nothing can be joined: another List would not help
    assert len([r for r in caplog.records if "deviceIDStrategy=uuid" in r.getMessage()]) == 1  # said once


def test_a_busy_device_no_assignment_names_is_news_for_the_kubelet(make_pod, gpu_sample, clock):
    pod = make_pod("train")
    kubelet = FixedKubelet([assigned("GPU-0", "train")])
    attributor = NodeAttributor(kubelet=kubelet, pods=PodCache([pod]), pods_ok=lambda: True,
                                proc=FixedProc({1: cgroup_of(pod)}), clock=clock)
    attributor.attribute(gpu_sample(("GPU-0", (1,)), ("GPU-1", (9,)), ("GPU-2", ())), tenant_label=None)
    assert kubelet.unknown == [("GPU-1", clock())]  # the idle GPU-2 is free capacity, not news
    kubelet.ok = False
    attributor.attribute(gpu_sample(("GPU-0", (1,)), ("GPU-1", (9,))), tenant_label=None)
    assert len(kubelet.unknown) == 1  # a kubelet that cannot be read is not asked about devices


def test_the_pod_index_is_built_with_the_tenant_label_it_is_given(make_pod, gpu_sample, clock):
    labelled = make_pod("a", labels={"team": "vision"})
    attributor = NodeAttributor(kubelet=FixedKubelet([assigned("GPU-0", "a")]), pods=PodCache([labelled]),
                                pods_ok=lambda: True, proc=FixedProc({1: cgroup_of(labelled)}), clock=clock)
    sample = gpu_sample(("GPU-0", (1,)))
    by_team = attributor.attribute(sample, tenant_label="team")
    assert by_team.index.tenant_label == "team" and by_team.index.tenant_of(labelled.ref) == "vision"
    by_namespace = attributor.attribute(sample, tenant_label=None)  # a reload that dropped the label
    assert by_namespace.index.tenant_of(labelled.ref) == "ml"
    # Without a pod cache (no API configured) the index is empty, but still carries the label.
    bare = NodeAttributor(kubelet=None, pods=None, pods_ok=lambda: False, proc=None, clock=clock)
    result = bare.attribute(sample, tenant_label="team")
    assert result.index.tenant_label == "team" and len(result.index) == 0
    assert not result.healthy and why_unhealthy(result) == "kubelet pod-resources unavailable; pod metadata unavailable"


def test_error_counts_are_the_proc_readers_failures(clock):
    proc = FixedProc({}, counters={"reads": 10, "cache_hits": 4, "vanished": 2, "denied": 1, "errors": 3})
    attributor = NodeAttributor(kubelet=None, pods=None, pods_ok=lambda: True, proc=proc, clock=clock)
    assert attributor.error_counts() == {"proc_vanished": 2, "proc_denied": 1, "proc_errors": 3}
    assert NodeAttributor(kubelet=None, pods=None, pods_ok=lambda: True, proc=None, clock=clock).error_counts() == {}


def test_a_healthy_attribution_has_no_reason_to_give():
    assert why_unhealthy(Attribution()) == ""
    assert why_unhealthy(Attribution(healthy=False, api_ok=False)) == "pod metadata unavailable"
