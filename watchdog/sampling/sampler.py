"""The sampling stage: one NodeSample per tick from NVML, whatever state the GPUs are in.

Everything later in the pipeline decides on these numbers, so the sampler's job is to be both complete (every
GPU, every MIG instance, every process) and unbreakable (a lost GPU, a timeout or a missing symbol costs a value
or a device, never the tick). It is synchronous on purpose: NVML calls block, so the service runs ``sample`` in a
worker thread (asyncio.to_thread) and the event loop never waits on the driver.

Per-device quirks live with their readers (inventory, gpm, processes); this module composes them into samples
and owns the lifecycle: nvmlInit once in ``open``, nvmlShutdown once in ``close`` (NVML counts inits: nvml.h,
nvmlInit_v2).
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType
from typing import Any, Callable

from watchdog.config.sampling import SamplingSettings
from watchdog.model import GpuSample, MigSample, NodeSample
from watchdog.model.plausibility import PlausibilityGate
from watchdog.sampling.call_guard import CallGuard, ErrorCounts, GpuLost, StaleHandle, nvml_code
from watchdog.sampling.gpm import (CTXSW, DRAM_BW_UTIL, PCIE_RX_PER_SEC, PCIE_TX_PER_SEC, SM_OCCUPANCY, SM_UTIL,
                                   GpmTracker)
from watchdog.sampling.pcie_link import link_bytes_per_second
from watchdog.sampling.inventory import GpuEntry, MigEntry, enumerate_instances, open_gpu, read_mig_mode, text
from watchdog.sampling.processes import ProcessReader
from watchdog.sampling.structs import FieldReader
from watchdog.sampling.vgpu import VgpuReader

log = logging.getLogger(__name__)

EVENT_REASONS = "nvmlDeviceGetCurrentClocksEventReasons"
THROTTLE_REASONS = "nvmlDeviceGetCurrentClocksThrottleReasons"  # deprecated name of the same mask (R535 rename)
_ALL_GPUS = -1
# GPM requests: the whole GPU's (not in MIG mode) and a GPU instance's, each ending in the optional CTXSW metrics
# (NVML 12.9+), which the tracker leaves out of a device's requests once its driver refuses them.
_GPU_GPM = (SM_UTIL, DRAM_BW_UTIL) + CTXSW
_GI_GPM = (DRAM_BW_UTIL, PCIE_TX_PER_SEC, PCIE_RX_PER_SEC) + CTXSW
# Per-type getter caches (pure functions of the struct type), so sharing them between samplers is harmless.
_MEMORY_V2_FIELDS = FieldReader("total", "used", "reserved")
_MEMORY_V1_FIELDS = FieldReader("total", "used")


class NvmlUnavailable(RuntimeError):
    """nvmlInit or the device count failed: no driver, no library, or no permission."""


class NvmlSampler:
    """Samples every GPU and MIG instance of the node through an NVML module (real pynvml or the simulation)."""

    def __init__(
        self, nvml: ModuleType, *, node: str, clock: Callable[[], float], settings: SamplingSettings | None = None
    ) -> None:
        self._nvml = nvml
        self._node = node
        self._clock = clock
        self._settings = settings or SamplingSettings()
        self._counts = ErrorCounts()
        self._guard = CallGuard(nvml, self._counts)
        self._gpm = GpmTracker(nvml, self._guard, min_interval=self._settings.gpm_min_interval_seconds)
        self._processes = ProcessReader(
            nvml, self._guard, clock=clock, hold_seconds=self._settings.process_util_hold_seconds
        )
        self._vgpus = VgpuReader(nvml, self._guard, clock=clock, hold_seconds=self._settings.process_util_hold_seconds,
                                 log_every_ticks=self._settings.vgpu_scheduler_log_every_ticks)
        self._gpus: list[GpuEntry] = []
        self._gate = PlausibilityGate(quarantine_ticks=self._settings.quarantine_ticks)
        self._layout_generation = 0  # bumped at every MIG enumeration: the gate's continuity check reads it
        self._initialised = False
        self._reasons_call = EVENT_REASONS
        self._requests: set[int] = set()
        self._requests_lock = threading.Lock()
        self.driver_version: str | None = None
        # Enum values from nvml.h, read from the module so a mirror of pynvml is used as-is.
        self._memory_v2 = getattr(nvml, "nvmlMemory_v2", 0x02000028)
        self._temperature_gpu = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        self._clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self._pcie_tx = getattr(nvml, "NVML_PCIE_UTIL_TX_BYTES", 0)
        self._pcie_rx = getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1)
        self._function_not_found = nvml_code(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND")

    # ---------------------------------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """nvmlInit, driver version and the list of GPUs; raises NvmlUnavailable when NVML cannot be used."""
        if self._initialised:
            return
        try:
            self._nvml.nvmlInit()
        except Exception as exc:
            raise NvmlUnavailable(f"nvmlInit failed: {exc!r} (is the NVIDIA driver mounted into the pod?)") from exc
        self._initialised = True
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self.close()
            raise NvmlUnavailable(f"nvmlDeviceGetCount failed: {exc!r}") from exc
        version = self._guard.call("system", "nvmlSystemGetDriverVersion")
        self.driver_version = None if version is None else text(version)
        self._gpus = [GpuEntry(index) for index in range(count)]
        for entry in self._gpus:
            try:
                open_gpu(self._guard, entry)
            except GpuLost:
                entry.lost_since = self._clock()

    def close(self) -> None:
        """Free every GPM sample and shut NVML down once; safe to call twice."""
        self._gpm.close()
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                self._counts.add("shutdown")
                log.warning("nvmlShutdown failed: %r", exc)

    def request_enumeration(self, gpu_index: int | None = None) -> None:
        """Enumerate MIG devices again at the next tick (called from the event thread on MIG-config-change).

        None, or -1 (the index an event from an unrecognised device carries), means every GPU.
        """
        with self._requests_lock:
            self._requests.add(_ALL_GPUS if gpu_index is None else gpu_index)

    def error_counts(self) -> dict[str, int]:
        """Cumulative failures by name ("timeout", "not_supported", "gpu_is_lost", ...)."""
        return self._counts.snapshot()

    def gpu_handles(self) -> list[tuple[int, str, Any]]:
        """(index, uuid, handle) of every opened GPU, for the Xid watcher to register on."""
        return [(entry.index, entry.uuid, entry.handle) for entry in self._gpus if entry.handle is not None]

    @property
    def gate(self) -> PlausibilityGate:
        """The plausibility gate every sample passes; the cycle passes the tick's sample through it again once the
        tick's Xid events are merged in (a second admit of one tick replaces the first)."""
        return self._gate

    @property
    def uses_process_v2(self) -> bool:
        return self._processes.uses_v2

    # -------------------------------------------------------------------------------------------- ticks

    def sample(self, tick: int) -> NodeSample:
        now = self._clock()
        if not self._initialised:
            try:
                self.open()
            except NvmlUnavailable as exc:
                self._counts.add("init")
                log.warning("NVML unavailable, empty sample: %s", exc)
                return self._gate.admit(NodeSample(node=self._node, tick=tick, timestamp=now, gpus=(),
                                                   layout_generation=self._layout_generation))
        with self._requests_lock:
            requests, self._requests = self._requests, set()
        self._processes.next_tick()
        gpus = []
        for entry in self._gpus:
            if _ALL_GPUS in requests or entry.index in requests:
                entry.needs_enumeration = True
            try:
                gpus.append(self._sample_gpu(entry, now))
            except Exception:  # the last line of defence: one device, never the node
                self._counts.add("unexpected")
                log.exception("sampling GPU %d failed", entry.index)
                gpus.append(GpuSample(index=entry.index, uuid=entry.uuid, name=entry.name))
        # Every reading passes the plausibility gate here, where it enters: impossible values never leave NVML's side.
        return self._gate.admit(NodeSample(
            node=self._node, tick=tick, timestamp=now, gpus=tuple(gpus), driver_version=self.driver_version,
            layout_generation=self._layout_generation,
        ))

    def _sample_gpu(self, entry: GpuEntry, now: float) -> GpuSample:
        if entry.lost_since is not None and now - entry.lost_since < self._settings.lost_retry_seconds:
            return self._lost(entry)
        try:
            if entry.handle is None or not entry.uuid:
                open_gpu(self._guard, entry)
                if entry.handle is None:
                    return GpuSample(index=entry.index, uuid=entry.uuid, name=entry.name)
            sample = self._read_gpu(entry, now)
        except GpuLost:
            entry.lost_since = now
            entry.needs_enumeration = True
            self._gpm.forget_where(lambda key: entry.uuid in key or any(m.uuid in key for m in entry.instances))
            return self._lost(entry)
        if entry.lost_since is not None:
            log.info("GPU %d (%s) answers again", entry.index, entry.uuid)
            entry.lost_since = None
        return sample

    @staticmethod
    def _lost(entry: GpuEntry) -> GpuSample:
        return GpuSample(index=entry.index, uuid=entry.uuid, name=entry.name, mig_enabled=entry.mig_enabled, lost=True)

    def _read_gpu(self, entry: GpuEntry, now: float) -> GpuSample:
        guard, key, handle = self._guard, entry.uuid, entry.handle
        mode = read_mig_mode(self._nvml, guard, entry=entry)
        if mode is not None and mode != entry.mig_enabled:
            log.info("GPU %d MIG mode is now %s", entry.index, "enabled" if mode else "disabled")
            entry.mig_enabled = mode
            entry.needs_enumeration = True
            guard.forget(key)  # utilisation, GPM and process calls answer differently with MIG on or off
            self._gpm.forget(("gpu", key))
            self._processes.forget(key)
        if entry.needs_enumeration:
            self._enumerate(entry)
        total, used, reserved = self._memory(key, handle, mig=False)
        util = None if entry.mig_enabled else guard.call(key, "nvmlDeviceGetUtilizationRates", handle)
        power = guard.call(key, "nvmlDeviceGetPowerUsage", handle)
        limit = guard.call(key, "nvmlDeviceGetEnforcedPowerLimit", handle)
        temperature = guard.call(key, "nvmlDeviceGetTemperature", handle, self._temperature_gpu)
        sm_clock = guard.call(key, "nvmlDeviceGetClockInfo", handle, self._clock_sm)
        if entry.sm_clock_max_mhz is None:
            maximum = guard.call(key, "nvmlDeviceGetMaxClockInfo", handle, self._clock_sm)
            entry.sm_clock_max_mhz = None if maximum is None else float(maximum)
        tx = guard.call(key, "nvmlDeviceGetPcieThroughput", handle, self._pcie_tx, label="pcie_tx")
        rx = guard.call(key, "nvmlDeviceGetPcieThroughput", handle, self._pcie_rx, label="pcie_rx")
        gpm_sm = gpm_dram = ctxsw_active = ctxsw_rate = None
        if not entry.mig_enabled and self._gpm_supported(entry):
            gpm_sm, gpm_dram, ctxsw_active, ctxsw_rate = self._gpm.read(
                ("gpu", key),
                device_key=key,
                metrics=_GPU_GPM,
                optional=len(CTXSW),
                now=now,
                take=lambda sample: guard.call(key, "nvmlGpmSampleGet", handle, sample),
            )
        instances: tuple[MigSample, ...] = ()
        processes = ()
        if entry.mig_enabled:
            instances = self._sample_instances(entry, now)
        else:
            shares = None
            if not guard.is_unsupported(key, "nvmlDeviceGetProcessUtilization"):
                shares = self._processes.utilisation(key, handle)
            processes = self._processes.samples(self._processes.running(key, handle, mig=False), shares)
        host = self._vgpus.read(key, handle)
        return GpuSample(
            index=entry.index,
            uuid=key,
            name=entry.name,
            mig_enabled=entry.mig_enabled,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_reserved_bytes=reserved,
            gpu_util=None if util is None else util.gpu / 100.0,
            memory_util=None if util is None else util.memory / 100.0,
            dram_bw_util=gpm_dram,
            sm_util=gpm_sm,
            power_watts=None if power is None else power / 1000.0,  # NVML reports milliwatts
            power_limit_watts=None if limit is None else limit / 1000.0,
            temperature_celsius=None if temperature is None else float(temperature),
            sm_clock_mhz=None if sm_clock is None else float(sm_clock),
            sm_clock_max_mhz=entry.sm_clock_max_mhz,
            clock_event_reasons=self._clock_reasons(key, handle),
            pcie_tx_bytes_per_second=None if tx is None else tx * 1024.0,  # NVML reports KB/s
            pcie_rx_bytes_per_second=None if rx is None else rx * 1024.0,
            ctxsw_active=ctxsw_active,
            ctxsw_per_second=ctxsw_rate,
            pcie_link_bytes_per_second=link_bytes_per_second(
                guard.call(key, "nvmlDeviceGetCurrPcieLinkGeneration", handle, label="pcie_link_gen"),
                guard.call(key, "nvmlDeviceGetCurrPcieLinkWidth", handle, label="pcie_link_width"),
            ),
            instances=instances,
            processes=processes,
            vgpus=host.vgpus,
            vgpu_scheduler=host.scheduler,
            vgpu_scheduler_arr=host.arr,
            vgpu_timeslice_seconds=host.timeslice_seconds,
            vgpu_runlists=host.runlists,
        )

    # ------------------------------------------------------------------------------------ MIG instances

    def _enumerate(self, entry: GpuEntry) -> None:
        scan = enumerate_instances(self._nvml, self._guard, entry=entry) if entry.mig_enabled else None
        if entry.mig_enabled and scan is None:
            return  # could not scan now; keep the old list and try again next tick
        found = scan.found if scan is not None else []
        before = {mig.uuid: mig.identity for mig in entry.instances}
        after = {mig.uuid: mig.identity for mig in found}
        for uuid, identity in before.items():
            if after.get(uuid) != identity:
                self._gpm.forget(("ci", uuid))
                self._guard.forget(uuid)
        members_before = _members_by_gpu_instance(entry.instances)
        members_after = _members_by_gpu_instance(found)
        for gpu_instance in members_before.keys() | members_after.keys():
            if members_before.get(gpu_instance) != members_after.get(gpu_instance):
                self._gpm.forget(("gi", entry.uuid, gpu_instance))
        entry.instances = found
        self._layout_generation += 1
        # An incomplete scan kept old entries for the slots it could not read: scan again next tick.
        entry.needs_enumeration = scan is not None and not scan.complete

    def _sample_instances(self, entry: GpuEntry, now: float) -> tuple[MigSample, ...]:
        samples, stale = self._sample_each(entry, now)
        if stale:
            self._enumerate(entry)  # a handle went stale: the configuration changed under us
            samples, stale = self._sample_each(entry, now)
            entry.needs_enumeration = entry.needs_enumeration or stale
        return tuple(samples)

    def _sample_each(self, entry: GpuEntry, now: float) -> tuple[list[MigSample], bool]:
        samples, stale = [], False
        gpm = self._gpm_supported(entry)
        for mig in entry.instances:
            try:
                samples.append(self._sample_instance(entry, mig, now=now, gpm=gpm))
            except StaleHandle:
                stale = True
        return samples, stale

    def _sample_instance(self, entry: GpuEntry, mig: MigEntry, *, now: float, gpm: bool) -> MigSample:
        guard, key, handle = self._guard, mig.uuid, mig.handle
        total, used, reserved = self._memory(key, handle, mig=True)
        dram = sm = occupancy = pcie_tx = pcie_rx = ctxsw_active = ctxsw_rate = None
        if gpm:
            # PCIe per GI too: the link is the one path MIG does not partition (nvidia_gpu_exporter reads it so);
            # context switching per GI, in the same request, where the driver answers it (NVML 12.9+).
            dram, pcie_tx, pcie_rx, ctxsw_active, ctxsw_rate = self._gpm.read(
                ("gi", entry.uuid, mig.gpu_instance),
                device_key=entry.uuid,
                metrics=_GI_GPM,
                optional=len(CTXSW),
                now=now,
                # DRAM bandwidth is a GPU-instance resource: sample it on the parent with the GI id (DCGM).
                take=lambda sample: guard.call(
                    entry.uuid, "nvmlGpmMigSampleGet", entry.handle, mig.gpu_instance, sample, mig=True
                ),
            )
            sm, occupancy = self._gpm.read(
                ("ci", key),
                device_key=key,
                metrics=(SM_UTIL, SM_OCCUPANCY),
                now=now,
                take=lambda sample: guard.call(key, "nvmlGpmSampleGet", handle, sample, mig=True),
            )
        processes = self._processes.samples(self._processes.running(key, handle, mig=True))
        return MigSample(
            uuid=key,
            gpu_index=entry.index,
            gpu_instance=mig.gpu_instance,
            compute_instance=mig.compute_instance,
            profile=mig.profile,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_reserved_bytes=reserved,
            dram_bw_util=dram,
            sm_util=sm,
            sm_occupancy=occupancy,
            processes=processes,
            pcie_tx_bytes_per_second=pcie_tx,
            pcie_rx_bytes_per_second=pcie_rx,
            ctxsw_active=ctxsw_active,
            ctxsw_per_second=ctxsw_rate,
        )

    # ------------------------------------------------------------------------------------------ readers

    def _memory(self, key: str, handle: Any, *, mig: bool) -> tuple[int | None, int | None, int | None]:
        """(total, used, reserved) bytes: v2 splits driver-reserved memory out of ``used``; v1 cannot."""
        guard = self._guard
        if not guard.is_unsupported(key, "memory_v2"):
            memory = guard.call(key, "nvmlDeviceGetMemoryInfo", handle, self._memory_v2, label="memory_v2", mig=mig)
            if memory is not None:
                total, used, reserved = _MEMORY_V2_FIELDS(memory)  # hook-free reads, see sampling.structs
                return int(total), int(used), int(reserved)
            if not guard.is_unsupported(key, "memory_v2"):
                return None, None, None  # transient: no fallback, the value is simply missing this tick
        memory = guard.call(key, "nvmlDeviceGetMemoryInfo", handle, label="memory_v1", mig=mig)
        if memory is None:
            return None, None, None
        total, used = _MEMORY_V1_FIELDS(memory)
        return int(total), int(used), None

    def _clock_reasons(self, key: str, handle: Any) -> int | None:
        self._guard.last_error_code = None
        value = self._guard.call(key, self._reasons_call, handle)
        if value is None and self._reasons_call == EVENT_REASONS:
            if self._guard.last_error_code == self._function_not_found:
                # Drivers before the R535 rename only export the throttle-reasons symbol; remember that.
                self._reasons_call = THROTTLE_REASONS
                value = self._guard.call(key, THROTTLE_REASONS, handle)
        return None if value is None else int(value)

    def _gpm_supported(self, entry: GpuEntry) -> bool:
        if entry.gpm_supported is None:
            support = self._guard.call(entry.uuid, "nvmlGpmQueryDeviceSupport", entry.handle)
            if support is not None:
                entry.gpm_supported = bool(support.isSupportedDevice)
            elif self._guard.is_unsupported(entry.uuid, "nvmlGpmQueryDeviceSupport"):
                entry.gpm_supported = False
        return bool(entry.gpm_supported)


def _members_by_gpu_instance(instances: list[MigEntry]) -> dict[int, frozenset[str]]:
    members: dict[int, set[str]] = {}
    for mig in instances:
        members.setdefault(mig.gpu_instance, set()).add(mig.uuid)
    return {gpu_instance: frozenset(uuids) for gpu_instance, uuids in members.items()}
