"""The GPU models the simulation can stand in for, with their real MIG profile tables.

A simulated GPU must look like a real one down to the numbers a sampler and a detector depend on: the device
name (its MIG profile is read from the text after `` MIG ``), the SM count behind each profile, memory per
instance, power limit and clocks. Profile geometry (GI profile id / max count / SMs / memory slices of 8) comes
from ``nvidia-smi mig -lgip`` output and NVIDIA mig-parted's configurations (the profiles themselves are listed in
the NVIDIA MIG user guide, "Supported MIG Profiles"); for H200 only the SM counts of 2g.35gb and 3g.71gb come
from user reports, the other H200 rows are unverified and copied from H100.

Placement follows the A100/H100 rules: an instance of N compute slices may only start at certain slices
(7g at 0, 4g at 0, 3g at 0 or 4, 2g at 0/2/4, 1g anywhere). Instances are placed in list order at the lowest
free start, which gives realistic GPU instance ids and *sparse* MIG device slots (nvml.h,
nvmlDeviceGetMigDeviceHandleByIndex: NOT_FOUND for an empty index). A GPU instance may be split into compute
instances (``nvidia-smi mig -cci``), each its own MIG device sharing the GI's memory, DRAM bandwidth and L2.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
MAX_MIG_DEVICES = 7  # what nvmlDeviceGetMaxMigDeviceCount answers on A100/H100/H200 in MIG mode

# Valid start compute slices per instance size (NVIDIA MIG user guide, "A100 MIG placements").
_VALID_STARTS = {7: (0,), 4: (0,), 3: (0, 4), 2: (0, 2, 4), 1: (0, 1, 2, 3, 4, 5, 6)}


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile as ``nvidia-smi mig -lgip`` lists it."""

    name: str  # "3g.40gb"
    profile_id: int
    max_count: int
    sms: int
    memory_slices: int

    @property
    def compute_slices(self) -> int:
        """Compute slices: the GI's ("3g.40gb" → 3), or the compute instance's ("2c.4g.40gb" → 2)."""
        head = self.name.split(".", 1)[0]
        return int(head[:-1])


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Static facts of one GPU product."""

    key: str  # scenario name, e.g. "H100-80GB-HBM3"
    name: str  # nvmlDeviceGetName
    memory_mib: int
    reserved_mib: int  # kept by driver/firmware (v2 ``reserved``)
    memory_slice_mib: int  # one MIG memory slice, approximate (instance memory = slices × this)
    sms: int
    mig_sms: int  # SMs usable under MIG (A100 loses 10 to MIG)
    power_limit_watts: float  # default enforced limit (TDP)
    min_power_limit_watts: float
    idle_watts: float
    full_load_watts: float  # draw of a heavy kernel on every SM at max clock, above TDP so a cap can bite
    sm_clock_max_mhz: int
    sm_clock_min_mhz: int  # the lowest the power governor drops to
    mem_clock_mhz: int
    video_clock_mhz: int
    pcie_bytes_per_second: float  # one direction, usable
    gpm: bool  # GPU Performance Monitoring: Hopper and newer (nvml.h, nvmlGpm*)
    profiles: tuple[MigProfile, ...]
    # The link as trained under load (nvmlDeviceGetCurrPcieLinkGeneration / …Width): A100 Gen4 x16, H100/H200 Gen5
    # x16 (NVIDIA datasheets); pcie_bytes_per_second is the ~80 % of its encoded rate that transfers reach.
    pcie_generation: int = 5
    pcie_width: int = 16

    def profile(self, name: str) -> MigProfile:
        for candidate in self.profiles:
            if candidate.name == name:
                return candidate
        known = ", ".join(p.name for p in self.profiles)
        raise ValueError(f"{self.key} has no MIG profile {name!r} (known: {known})")


def _table(rows: tuple[tuple[str, int, int, int, int], ...]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, pid, count, sms, mem) for name, pid, count, sms, mem in rows)


# profile name, GI profile id, max count, SMs, memory slices (``nvidia-smi mig -lgip``; see the module docstring)
_HOPPER_ROWS = (("1g.{a}", 19, 7, 16, 1), ("1g.{a}+me", 20, 1, 16, 1), ("1g.{b}", 15, 4, 26, 2),
                ("2g.{b}", 14, 3, 32, 2), ("3g.{c}", 9, 2, 60, 4), ("4g.{c}", 5, 1, 64, 4), ("7g.{d}", 0, 1, 132, 8))


def _hopper(sizes: dict[str, str]) -> tuple[MigProfile, ...]:
    return _table(tuple((name.format(**sizes), pid, n, sms, mem) for name, pid, n, sms, mem in _HOPPER_ROWS))


GPU_MODELS: dict[str, GpuModel] = {
    "A100-SXM4-40GB": GpuModel(
        key="A100-SXM4-40GB", name="NVIDIA A100-SXM4-40GB", memory_mib=40960, reserved_mib=432,
        memory_slice_mib=4864, sms=108, mig_sms=98, power_limit_watts=400.0, min_power_limit_watts=100.0,
        idle_watts=55.0, full_load_watts=400.0, sm_clock_max_mhz=1410, sm_clock_min_mhz=210, mem_clock_mhz=1215,
        video_clock_mhz=1275, pcie_bytes_per_second=25e9, gpm=False, pcie_generation=4,
        profiles=_table((("1g.5gb", 19, 7, 14, 1), ("1g.5gb+me", 20, 1, 14, 1), ("1g.10gb", 15, 4, 14, 2),
                         ("2g.10gb", 14, 3, 28, 2), ("3g.20gb", 9, 2, 42, 4), ("4g.20gb", 5, 1, 56, 4),
                         ("7g.40gb", 0, 1, 98, 8))),
    ),
    "H100-80GB-HBM3": GpuModel(
        key="H100-80GB-HBM3", name="NVIDIA H100 80GB HBM3", memory_mib=81559, reserved_mib=549,
        memory_slice_mib=9984, sms=132, mig_sms=132, power_limit_watts=700.0, min_power_limit_watts=200.0,
        idle_watts=70.0, full_load_watts=875.0, sm_clock_max_mhz=1980, sm_clock_min_mhz=345, mem_clock_mhz=2619,
        video_clock_mhz=1545, pcie_bytes_per_second=50e9, gpm=True,
        profiles=_hopper({"a": "10gb", "b": "20gb", "c": "40gb", "d": "80gb"}),
    ),
    "H200-141GB": GpuModel(
        key="H200-141GB", name="NVIDIA H200", memory_mib=143771, reserved_mib=560,
        memory_slice_mib=17792, sms=132, mig_sms=132, power_limit_watts=700.0, min_power_limit_watts=200.0,
        idle_watts=75.0, full_load_watts=875.0, sm_clock_max_mhz=1980, sm_clock_min_mhz=345, mem_clock_mhz=3201,
        video_clock_mhz=1545, pcie_bytes_per_second=50e9, gpm=True,
        profiles=_hopper({"a": "18gb", "b": "35gb", "c": "71gb", "d": "141gb"}),
    ),
}


LayoutEntry = str | tuple[str, tuple[str, ...]]
"""One GPU instance of a layout: its profile ("4g.40gb", one compute instance spanning it), or the profile with
the sizes of the compute instances it is split into (("4g.40gb", ("2c", "2c")), as ``nvidia-smi mig -cci``)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one MIG instance sits: its device slot, GPU instance id and profile."""

    slot: int  # index for nvmlDeviceGetMigDeviceHandleByIndex
    gpu_instance: int
    compute_instance: int
    profile: MigProfile  # of the compute instance: the GI's own profile when one CI spans the GI
    gi_compute_instances: int = 1  # how many compute instances share this one's GPU instance (memory, DRAM, L2)


def _gpu_instance_id(size: int, start: int) -> int:
    # GI ids follow the placement on A100/H100 (nvidia-smi mig -lgi): 7g → 0, 4g → 1, 3g → 1|2, 2g → 3..5, 1g → 7..13.
    if size == 7:
        return 0
    if size == 4:
        return 1
    if size == 3:
        return 1 if start == 0 else 2
    if size == 2:
        return 3 + start // 2
    return 7 + start


def compute_instance_profile(gi: MigProfile, size: str) -> MigProfile:
    """The profile of a ``<c>c`` compute instance inside ``gi``, named as NVML prints it: "2c.4g.40gb", or the GI's
    own name when the CI spans the whole GI (nvmlDeviceGetName; go-nvlib's MIG profile strings). It keeps the GI's
    memory slices: every CI handle of a GI reports the GI's memory."""
    if not size.endswith("c") or not size[:-1].isdigit() or not 1 <= int(size[:-1]) <= gi.compute_slices:
        raise ValueError(f"{gi.name}: compute instance {size!r} is not <n>c with 1 <= n <= {gi.compute_slices}")
    slices = int(size[:-1])
    if slices == gi.compute_slices:
        return gi
    return MigProfile(f"{slices}c.{gi.name}", gi.profile_id, gi.max_count, gi.sms * slices // gi.compute_slices,
                      gi.memory_slices)


def _compute_instance_starts(gi: MigProfile, sizes: tuple[str, ...]) -> list[tuple[int, MigProfile]]:
    """(offset inside the GI, profile) of each CI, placed in order at the lowest free offset (a simplification of
    the driver's CI placements), or ValueError when they need more compute slices than the GI has."""
    used = [False] * gi.compute_slices
    placed = []
    for size in sizes:
        profile = compute_instance_profile(gi, size)
        width = profile.compute_slices
        for offset in range(gi.compute_slices - width + 1):
            if not any(used[offset:offset + width]):
                break
        else:
            raise ValueError(f"{gi.name}: compute instances {list(sizes)} need more than {gi.compute_slices} "
                             f"compute slices")
        for index in range(offset, offset + width):
            used[index] = True
        placed.append((offset, profile))
    return placed


def place_instances(model: GpuModel, entries: list[LayoutEntry] | tuple[LayoutEntry, ...]) -> tuple[Placement, ...]:
    """Place the GPU instances in order, each split into its compute instances (one MIG device each, slot = the
    GI's start slice + the CI's offset), or raise ValueError saying which one does not fit and why."""
    used_compute = [False] * COMPUTE_SLICES
    memory_used = 0
    counts: dict[str, int] = {}
    placed: list[Placement] = []
    for position, entry in enumerate(entries):
        name, sizes = (entry, ()) if isinstance(entry, str) else entry
        try:
            profile = model.profile(name)
            cis = _compute_instance_starts(profile, tuple(sizes)) if sizes else [(0, profile)]
        except ValueError as exc:
            raise ValueError(f"[{position}] {exc}") from None
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > profile.max_count:
            raise ValueError(f"[{position}] {name}: at most {profile.max_count} of this profile fit on a {model.key}")
        memory_used += profile.memory_slices
        if memory_used > MEMORY_SLICES:
            raise ValueError(f"[{position}] {name}: the instances need more than {MEMORY_SLICES} memory slices")
        size = profile.compute_slices
        for start in _VALID_STARTS[size]:
            if not any(used_compute[start:start + size]):
                break
        else:
            raise ValueError(f"[{position}] {name}: no free placement for {size} compute slices")
        for index in range(start, start + size):
            used_compute[index] = True
        gi = _gpu_instance_id(size, start)
        for ci, (offset, ci_profile) in enumerate(cis):
            placed.append(Placement(slot=start + offset, gpu_instance=gi, compute_instance=ci, profile=ci_profile,
                                    gi_compute_instances=len(cis)))
    return tuple(placed)


# ---------------------------------------------------------------------------------------------------- vGPU types

@dataclass(frozen=True, slots=True)
class VgpuType:
    """One time-sliced C-series (compute) vGPU type a vGPU host offers for its GPU model.

    Names, framebuffers and per-GPU maxima follow the NVIDIA Virtual GPU Software user guide, "Virtual GPU Types for
    Supported GPUs" (A100 PCIe/SXM4 40GB, H100 80GB). A100 types carry the older ``GRID`` prefix and H100 types the
    ``NVIDIA`` prefix, as the NVIDIA GPU Operator's extended resources name them (``nvidia.com/GRID_A100-4C``);
    the type ids are this simulation's own (a real driver numbers its types per release).
    """

    type_id: int  # nvmlVgpuTypeId_t
    name: str  # nvmlVgpuTypeGetName
    framebuffer_gib: int
    max_instances: int  # per physical GPU
    mig_profile: str | None = None  # a MIG-backed type: the GPU instance profile each of its vGPUs sits on

    @property
    def framebuffer_bytes(self) -> int:  # nvmlVgpuTypeGetFramebufferSize answers bytes
        return self.framebuffer_gib << 30


def _vgpu_types(first_id: int, prefix: str, total_gib: int, sizes: tuple[int, ...]) -> tuple[VgpuType, ...]:
    return tuple(VgpuType(first_id + position, f"{prefix}-{size}C", size, total_gib // size)
                 for position, size in enumerate(sizes))


VGPU_TYPES: dict[str, tuple[VgpuType, ...]] = {
    "A100-SXM4-40GB": _vgpu_types(460, "GRID A100", 40, (4, 5, 8, 10, 20, 40)),
    "H100-80GB-HBM3": _vgpu_types(760, "NVIDIA H100", 80, (10, 20, 40, 80)),
}


# MIG-backed C-series types (vGPU user guide, "MIG-Backed C-Series Virtual GPU Types"): each vGPU owns one GPU
# instance of the profile its name encodes (<GPU>-<compute slices>-<framebuffer GB>C); the framebuffer is the GI's.
# Type ids are this simulation's own.
MIG_VGPU_TYPES: dict[str, tuple[VgpuType, ...]] = {
    "A100-SXM4-40GB": (VgpuType(470, "GRID A100-1-5C", 5, 7, "1g.5gb"),
                       VgpuType(471, "GRID A100-2-10C", 10, 3, "2g.10gb"),
                       VgpuType(472, "GRID A100-3-20C", 20, 2, "3g.20gb"),
                       VgpuType(473, "GRID A100-4-20C", 20, 1, "4g.20gb"),
                       VgpuType(474, "GRID A100-7-40C", 40, 1, "7g.40gb")),
    "H100-80GB-HBM3": (VgpuType(770, "NVIDIA H100-1-10C", 10, 7, "1g.10gb"),
                       VgpuType(771, "NVIDIA H100-2-20C", 20, 3, "2g.20gb"),
                       VgpuType(772, "NVIDIA H100-3-40C", 40, 2, "3g.40gb"),
                       VgpuType(773, "NVIDIA H100-4-40C", 40, 1, "4g.40gb"),
                       VgpuType(774, "NVIDIA H100-7-80C", 80, 1, "7g.80gb")),
}


def all_vgpu_types() -> tuple[VgpuType, ...]:
    """Every simulated vGPU type, time-sliced and MIG-backed, of every model."""
    return tuple(kind for table in (VGPU_TYPES, MIG_VGPU_TYPES) for types in table.values() for kind in types)


def vgpu_type(model_key: str, name: str) -> VgpuType:
    """The vGPU type of that name on that GPU model (time-sliced or MIG-backed), or ValueError listing the ones it
    has."""
    types = VGPU_TYPES.get(model_key, ()) + MIG_VGPU_TYPES.get(model_key, ())
    for candidate in types:
        if candidate.name == name:
            return candidate
    offered = ", ".join(t.name for t in types) or "none (no vGPU types are simulated for it)"
    raise ValueError(f"{name!r} is not a vGPU type of {model_key}; it offers {offered}")
