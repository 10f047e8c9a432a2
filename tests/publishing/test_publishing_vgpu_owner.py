"""Per-vGPU series carry the VMI that holds the vGPU, its namespace and its virt-launcher pod; empty when none."""

from __future__ import annotations

import dataclasses

from tests.publishing.conftest import VGPU_UUID, build_rich_snapshot
from watchdog.model import PodRef, VgpuOwner


def _vgpu_rows(snapshot, series):
    rows = series(snapshot)
    return {name: rows[name] for name in rows if name.startswith("gpu_watchdog_vgpu_")}


def test_unattributed_vgpus_have_empty_owner_labels(series):
    families = _vgpu_rows(build_rich_snapshot(), series)
    assert len(families) == 6
    for rows in families.values():
        (labels, _), = rows
        assert (labels["namespace"], labels["pod"], labels["vmi"]) == ("", "", "")


def test_attributed_vgpus_name_their_vmi_and_launcher_pod(series):
    snapshot = build_rich_snapshot()
    owner = VgpuOwner(namespace="vms", vmi="vm-a", pod=PodRef("vms", "virt-launcher-vm-a-x1", "uid-l"))
    attribution = dataclasses.replace(snapshot.attribution, vgpus={VGPU_UUID: owner})
    for rows in _vgpu_rows(dataclasses.replace(snapshot, attribution=attribution), series).values():
        (labels, _), = rows
        assert (labels["namespace"], labels["pod"], labels["vmi"]) == ("vms", "virt-launcher-vm-a-x1", "vm-a")
    no_pod = dataclasses.replace(attribution, vgpus={VGPU_UUID: VgpuOwner(namespace="vms", vmi="vm-a")})
    (labels, _), = _vgpu_rows(dataclasses.replace(snapshot, attribution=no_pod), series)[
        "gpu_watchdog_vgpu_framebuffer_used_bytes"]
    assert (labels["namespace"], labels["pod"], labels["vmi"]) == ("vms", "", "vm-a")
