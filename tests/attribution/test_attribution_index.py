"""The frozen pod index every stage looks pods up in: by UID, by name (live first), by static-pod hash, tenants."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from watchdog.attribution.pods import MIRROR_ANNOTATION
from watchdog.model import Attribution, PodIndex, PodRef


def test_by_name_prefers_the_live_pod_whatever_the_order(make_pod):
    old = make_pod("db-0", uid="uid-old", deleting=True)
    done = make_pod("db-0", uid="uid-done", phase="Succeeded")
    new = make_pod("db-0", uid="uid-new")
    for order in ([old, done, new], [new, old, done], [done, new, old]):
        assert PodIndex.of(order).by_name("ml", "db-0") is new
    assert PodIndex.of([old, done]).by_name("ml", "db-0") is old  # none live: the first one the cache holds
    assert PodIndex.of([old]).by_name("ml", "other") is None


def test_a_ref_with_a_uid_never_resolves_to_a_same_name_replacement(make_pod):
    old = make_pod("db-0", uid="uid-old", deleting=True)
    new = make_pod("db-0", uid="uid-new")
    index = PodIndex.of([old, new])
    assert index.pod(PodRef("ml", "db-0", "uid-old")) is old
    assert index.pod(PodRef("ml", "db-0", "uid-gone")) is None
    assert index.pod(PodRef("ml", "db-0")) is new  # no UID (the kubelet's word): by name, live first
    assert Attribution(index=index).pod(PodRef("ml", "db-0")) is new


def test_a_static_pod_is_found_by_the_config_hash_its_cgroup_carries(make_pod):
    config_hash = "0123456789abcdef0123456789abcdef"
    mirror = make_pod("etcd-node-a", namespace="kube-system", mirror=True,
                      annotations=MappingProxyType({MIRROR_ANNOTATION: config_hash}))
    index = PodIndex.of([mirror])
    assert index.by_cgroup_uid(config_hash) is mirror
    assert index.by_cgroup_uid(mirror.uid) is mirror
    assert index.by_uid(config_hash) is None  # the API and the findings name it by its own UID only


def test_tenant_is_the_label_value_else_the_namespace(make_pod):
    labelled = make_pod("a", labels=MappingProxyType({"team": "vision"}))
    unlabelled = make_pod("b", namespace="research")
    by_team = PodIndex.of([labelled, unlabelled], tenant_label="team")
    assert by_team.tenant(labelled) == "vision" and by_team.tenant(unlabelled) == "research"
    assert by_team.tenant_of(PodRef("ml", "a", labelled.uid)) == "vision"
    assert by_team.tenant_of(PodRef("ml", "a")) == "vision"  # found by name
    assert by_team.tenant_of(PodRef("batch", "unknown")) == "batch"  # a pod the index does not know
    assert PodIndex.of([labelled]).tenant_of(labelled.ref) == "ml"  # no label configured
    by_app = by_team.with_tenant_label("app")
    assert by_app.tenant_of(labelled.ref) == "ml" and by_app.pods == by_team.pods
    assert by_team.with_tenant_label("team") is by_team


@pytest.mark.parametrize("label", ["", 3])
def test_a_bad_tenant_label_is_refused(label):
    with pytest.raises(ValueError, match="tenant_label"):
        PodIndex(tenant_label=label)  # type: ignore[arg-type]


def test_the_index_is_frozen_and_owns_its_maps(make_pod):
    pods = {"uid-ml-a": make_pod("a")}
    index = PodIndex(pods)
    pods["uid-ml-b"] = make_pod("b")
    assert list(index.pods) == ["uid-ml-a"] and index.by_name("ml", "b") is None
    with pytest.raises(TypeError):
        index.pods["x"] = make_pod("x")  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        index.tenant_label = "team"  # type: ignore[misc]


def test_attribution_pods_is_the_index_uid_map(make_pod):
    a = make_pod("a")
    attribution = Attribution(index=PodIndex.of([a], tenant_label="team"))
    assert attribution.pods is attribution.index.pods and dict(attribution.pods) == {a.uid: a}
    relabelled = attribution.with_tenant_label(None)
    assert relabelled.index.tenant_label is None and relabelled.pods == attribution.pods
    assert attribution.with_tenant_label("team") is attribution
