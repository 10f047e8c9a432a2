"""The pure GPU-sharing rule (attribution/sharing.py): the kubelet's count, the GFD labels and the settings joined."""

from __future__ import annotations

import pytest

from watchdog.attribution.sharing import (REPLICAS_LABEL, STRATEGY_LABEL, count_replicas, device_sharing,
                                          label_replicas, label_strategy, shareable_gpus, split_replica)
from watchdog.model import EMPTY, DeviceSharing, GpuSample, MigSample, NodeSample

A, B = "GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"
MPS = {STRATEGY_LABEL: "mps", REPLICAS_LABEL: "4"}


def test_count_replicas_counts_distinct_ids_per_device():
    ids = [f"{A}::0", f"{A}::1", f"{A}::2", f"{A}::1", B, "MIG-x::0", "MIG-x::1", "odd::name"]
    assert count_replicas(ids) == {A: 3, B: 1, "MIG-x": 2, "odd::name": 1}
    assert count_replicas([]) == {}
    assert split_replica(f"{A}::7") == (A, 7)


def test_only_whole_gpus_not_in_mig_mode_can_be_shared():
    mig = GpuSample(index=1, uuid=B, name="g", mig_enabled=True,
                    instances=(MigSample(uuid="MIG-1", gpu_index=1, gpu_instance=1, compute_instance=0,
                                         profile="1g.10gb"),))
    sample = NodeSample(node="n", tick=0, timestamp=0.0, gpus=(GpuSample(index=0, uuid=A, name="g"), mig))
    assert shareable_gpus(sample) == (A,)


@pytest.mark.parametrize(("labels", "strategy", "replicas"), [
    (None, None, None),
    ({}, None, None),
    ({STRATEGY_LABEL: "none", REPLICAS_LABEL: "1"}, None, 1),
    ({STRATEGY_LABEL: "time-slicing", REPLICAS_LABEL: "8"}, "time-slicing", 8),
    ({STRATEGY_LABEL: "mps", REPLICAS_LABEL: " 4 "}, "mps", 4),
    ({STRATEGY_LABEL: "MPS", REPLICAS_LABEL: "four"}, None, None),
    ({REPLICAS_LABEL: "0"}, None, None),
    ({REPLICAS_LABEL: "-3"}, None, None),
])
def test_labels_are_read_leniently(labels, strategy, replicas):
    assert label_strategy(labels) == strategy
    assert label_replicas(labels) == replicas


@pytest.mark.parametrize(("kubelet", "labels", "settings", "expected"), [
    # the kubelet counts, GFD says the mode
    ({A: 4, B: 1}, MPS, {}, {A: DeviceSharing(4, "mps", "kubelet+labels")}),
    ({A: 4}, {STRATEGY_LABEL: "time-slicing"}, {}, {A: DeviceSharing(4, "time-slicing", "kubelet+labels")}),
    # no label: the mode is unknown, the replicas still known
    ({A: 4, B: 4}, {}, {}, {A: DeviceSharing(4, "unknown", "kubelet"), B: DeviceSharing(4, "unknown", "kubelet")}),
    ({A: 4}, None, {}, {A: DeviceSharing(4, "unknown", "kubelet")}),
    ({A: 4}, {STRATEGY_LABEL: "none"}, {}, {A: DeviceSharing(4, "unknown", "kubelet")}),
    # the kubelet's count beats the label's and the settings'
    ({A: 10, B: 1}, MPS, {"replicas": 2}, {A: DeviceSharing(10, "mps", "kubelet+labels")}),
    ({A: 1, B: 1}, MPS, {"replicas": 4}, {}),
    # the kubelet has not answered, or does not name the GPU: the settings', else the label's replicas
    (None, MPS, {}, {A: DeviceSharing(4, "mps", "labels"), B: DeviceSharing(4, "mps", "labels")}),
    ({B: 1}, MPS, {}, {A: DeviceSharing(4, "mps", "labels")}),
    (None, MPS, {"replicas": 2}, {A: DeviceSharing(2, "mps", "policy+labels"),
                                  B: DeviceSharing(2, "mps", "policy+labels")}),
    (None, MPS, {"replicas": 1}, {}),
    (None, {REPLICAS_LABEL: "3"}, {}, {A: DeviceSharing(3, "unknown", "labels"),
                                      B: DeviceSharing(3, "unknown", "labels")}),
    # the settings' strategy beats the label's
    ({A: 4, B: 1}, MPS, {"strategy": "time-slicing"}, {A: DeviceSharing(4, "time-slicing", "kubelet+policy")}),
    (None, None, {"strategy": "mps", "replicas": 7}, {A: DeviceSharing(7, "mps", "policy"),
                                                     B: DeviceSharing(7, "mps", "policy")}),
    # nothing says replicas: no entry, whatever the mode
    (None, {STRATEGY_LABEL: "mps"}, {"strategy": "mps"}, {}),
    (None, None, {}, {}),
])
def test_device_sharing(kubelet, labels, settings, expected):
    assert dict(device_sharing((A, B), kubelet=kubelet, labels=labels, **settings)) == expected


def test_a_gpu_not_in_the_sample_gets_no_entry_and_none_shared_is_the_empty_map():
    assert dict(device_sharing((B,), kubelet={A: 4, B: 1}, labels=MPS)) == {}
    assert device_sharing((), kubelet={A: 4}, labels=MPS) is EMPTY
    found = device_sharing((A,), kubelet={A: 4}, labels=MPS)
    with pytest.raises(TypeError):
        found[B] = DeviceSharing(2)  # type: ignore[index]  # read-only, as every Attribution map
