"""How the device plugin shares a GPU between pods: the replicas it advertises, and whether they are MPS clients.

Time-slicing and MPS look alike to the kubelet (a GPU advertised as ``<uuid>::<n>`` replicas, NVIDIA
k8s-device-plugin internal/rm) and differ on the GPU: with MPS sharing the plugin's control daemon sets, per GPU,
``set_default_active_thread_percentage`` to 100/replicas and ``set_default_device_pinned_mem_limit`` to the GPU's
memory / replicas in MiB (k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go, ``activeThreadPercentage`` and
``perDevicePinnedDeviceMemoryLimits``), so each client gets a fixed slice of the SMs and of the memory while L2 and
DRAM bandwidth stay shared. Detection reads the limits from here (detection/mps.py).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
SHARING_STRATEGIES = ("time-slicing", "mps", "unknown")


@dataclass(frozen=True, slots=True)
class DeviceSharing:
    """One GPU's sharing as this node's plugin configured it."""

    replicas: int  # replicas the device plugin advertises for the GPU (≥ 1)
    strategy: str = "unknown"  # one of SHARING_STRATEGIES; "unknown": replicas known, mode not said
    source: str = ""  # where it was learned: "kubelet", "labels", "policy", "trace", or two joined by "+"

    @property
    def thread_share(self) -> float:
        """Each MPS client's share of the SMs: CUDA MPS active-thread percentage 100/replicas, as a ratio."""
        return 1.0 / self.replicas

    def memory_limit_bytes(self, memory_total_bytes: int) -> int:
        """Each MPS client's pinned device-memory limit: the GPU's memory / replicas, whole MiB (as the plugin
        writes it, ``<n>M``)."""
        return (memory_total_bytes // self.replicas // MIB) * MIB
