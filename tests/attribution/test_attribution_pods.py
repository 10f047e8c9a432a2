"""The watch-fed pod cache: events, relists, the three lookups, and a frozen index rebuilt only on change."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from watchdog.attribution.pods import MIRROR_ANNOTATION, PodCache
from watchdog.model import ContainerInfo


def test_added_modified_deleted(make_pod):
    cache = PodCache()
    pod = make_pod("train")
    cache.apply("ADDED", pod)
    assert cache.get(pod.uid) is pod
    assert cache.by_name("ml", "train") is pod
    moved = make_pod("train", phase="Succeeded")
    cache.apply("MODIFIED", moved)
    assert cache.get(pod.uid).phase == "Succeeded"
    assert len(cache) == 1
    cache.apply("DELETED", moved)
    assert cache.get(pod.uid) is None
    assert cache.by_name("ml", "train") is None
    assert len(cache) == 0


def test_deleting_an_unknown_pod_is_harmless_and_bookmark_is_a_no_op(make_pod):
    cache = PodCache([make_pod("a")])
    cache.apply("DELETED", make_pod("never-seen"))
    cache.apply("BOOKMARK", make_pod("a"))
    assert list(cache.index().pods) == ["uid-ml-a"]


def test_unknown_event_types_and_non_pods_are_refused(make_pod):
    cache = PodCache()
    with pytest.raises(ValueError, match="unknown pod watch event type 'ERROR'"):
        cache.apply("ERROR", make_pod("a"))
    with pytest.raises(TypeError, match="PodInfo"):
        cache.apply("ADDED", {"uid": "x"})
    with pytest.raises(TypeError, match="PodInfo"):
        cache.replace([object()])


def test_replace_is_a_relist(make_pod):
    cache = PodCache([make_pod("old")])
    cache.replace([make_pod("a"), make_pod("b", namespace="web")])
    assert sorted(cache.index().pods) == ["uid-ml-a", "uid-web-b"]
    assert cache.by_name("ml", "old") is None
    assert cache.by_name("web", "b").namespace == "web"


def test_recreated_pod_with_the_same_name_prefers_the_live_one(make_pod):
    cache = PodCache()
    old = make_pod("db-0", uid="uid-old", deleting=True)
    new = make_pod("db-0", uid="uid-new")
    cache.apply("ADDED", new)
    cache.apply("MODIFIED", old)  # a late update of the terminating predecessor
    assert cache.by_name("ml", "db-0") is new
    cache.apply("DELETED", new)
    assert cache.by_name("ml", "db-0") is old


def test_index_is_read_only_stable_and_rebuilt_only_on_change(make_pod):
    cache = PodCache([make_pod("a")])
    first = cache.index("team")
    assert isinstance(first.pods, MappingProxyType)
    assert cache.index("team") is first  # nothing changed: the same frozen object, not a rebuild per tick
    cache.apply("BOOKMARK", make_pod("a"))
    assert cache.index("team") is first
    cache.apply("ADDED", make_pod("b"))
    second = cache.index("team")
    assert second is not first and list(first.pods) == ["uid-ml-a"]  # what was handed out never changes
    assert sorted(second.pods) == ["uid-ml-a", "uid-ml-b"]
    cache.replace([make_pod("c")])
    assert list(cache.index("team").pods) == ["uid-ml-c"]


def test_a_new_tenant_label_gives_a_new_index_of_the_same_pods(make_pod):
    cache = PodCache([make_pod("a", labels=MappingProxyType({"team": "vision", "app": "web"}))])
    by_team = cache.index("team")
    by_app = cache.index("app")  # a policy reload changed the label
    assert by_app is not by_team and by_app.pods == by_team.pods
    assert by_team.tenant_of(by_team.pods["uid-ml-a"].ref) == "vision"
    assert by_app.tenant_of(by_app.pods["uid-ml-a"].ref) == "web"
    assert cache.index("app") is by_app
    with pytest.raises(ValueError, match="tenant_label"):
        cache.index("")


def test_container_name_from_full_short_or_scheme_prefixed_ids(make_pod):
    full = "c" * 64
    pod = make_pod(
        "p",
        containers=(
            ContainerInfo("main", full),
            ContainerInfo("sidecar", "containerd://" + "d" * 64),
            ContainerInfo("pending", None),
        ),
    )
    cache = PodCache([pod])
    assert cache.container_name(pod.uid, full) == "main"
    assert cache.container_name(pod.uid, full[:12]) == "main"
    assert cache.container_name(pod.uid, "d" * 64) == "sidecar"
    assert cache.container_name(pod.uid, "e" * 64) is None
    assert cache.container_name(pod.uid, None) is None
    assert cache.container_name("no-such-uid", full) is None


def test_static_pod_found_by_its_config_hash(make_pod):
    config_hash = "6a1b2c3d4e5f60718293a4b5c6d7e8f9"
    mirror = make_pod("etcd-node-a", namespace="kube-system", mirror=True,
                      annotations=MappingProxyType({MIRROR_ANNOTATION: config_hash}))
    cache = PodCache([mirror])
    assert cache.get(config_hash) is mirror
    assert cache.container_name(config_hash, mirror.containers[0].container_id) == "main"
    cache.apply("DELETED", mirror)
    assert cache.get(config_hash) is None
