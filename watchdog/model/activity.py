"""Per-MIG-instance activity read from outside NVML, keyed so that detection can fill the gaps NVML leaves.

An A100 or A30 in MIG mode has no GPM (``nvmlGpmQueryDeviceSupport`` answers not supported, nvml.h), and
``nvmlDeviceGetUtilizationRates`` and process utilisation are not supported in MIG mode, so NVML gives no SM or
DRAM activity per MIG instance there. DCGM still profiles each GPU instance, and dcgm-exporter publishes it
(``DCGM_FI_PROF_SM_ACTIVE`` and friends, labelled ``UUID`` and ``GPU_I_ID``). The service reads those series from
the cluster's Prometheus off the tick path and carries them here, one value per signal per GPU instance; ``None``
means "not known", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InstanceActivity:
    """One GPU instance's activity as DCGM profiles it, each 0–1 of the instance."""

    sm: float | None = None  # DCGM_FI_PROF_SM_ACTIVE: share of cycles an SM had a warp resident
    dram: float | None = None  # DCGM_FI_PROF_DRAM_ACTIVE: share of cycles the memory interface was busy
    graphics: float | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE: share of time the graphics engine was busy

    @property
    def compute(self) -> float | None:
        """SM activity, else the coarser graphics-engine activity (a busy engine with idle SMs reads high)."""
        return self.sm if self.sm is not None else self.graphics


def instance_key(gpu_uuid: str, gpu_instance: int) -> str:
    """The key a borrowed activity travels under: "<GPU UUID>/<GPU instance id>" (the GI, not the MIG device)."""
    return f"{gpu_uuid}/{gpu_instance}"
