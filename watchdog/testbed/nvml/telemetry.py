"""Simulated NVML calls that read the node's state: memory, utilisation, power, clocks, PCIe, processes.

Each answer is read from the tick's cached :class:`~watchdog.testbed.tick_state.TickState` with pynvml's return types:
the real ctypes structs, plain ints in pynvml's units (mW, MHz, KB/s, °C, %), and the friendly process objects
pynvml builds with ``nvmlStructToFriendlyObject``. Whole-GPU readings (power, clocks, PCIe, temperature) need the
parent handle, as on real MIG GPUs, where they describe the whole board; utilisation rates and per-process
utilisation are NotSupported on MIG-enabled GPUs (nvml.h notes on nvmlDeviceGetUtilizationRates and
nvmlDeviceGetProcessUtilization).
"""

from __future__ import annotations

from watchdog.model import NOT_ATTRIBUTABLE
from watchdog.testbed.mps import MPS_SERVER_LISTED_BY, MPS_SERVER_MEMORY_BYTES
from watchdog.testbed.nvml.base import NvmlBase, nvml_call, nvml_error, pynvml
from watchdog.testbed.tick_state import DomainState

_TIME_SHARE_CLOCKS = (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM)


class TelemetryCalls(NvmlBase):
    def _domain(self, handle) -> DomainState:
        gpu, slot = self._resolve(handle)
        gpu_state = self._gpu_state(gpu)
        return gpu_state.whole if slot is None else gpu_state.instances[slot]

    # ----------------------------------------------------------------------------------------- memory

    @nvml_call
    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        domain = self._domain(handle)
        if not version:
            # v1: ``used`` includes what the driver keeps, so used + free == total (nvml.h, nvmlMemory_t).
            memory = pynvml.c_nvmlMemory_t()
            memory.total = domain.memory_total
            memory.used = domain.memory_used + domain.memory_reserved
            memory.free = domain.memory_total - memory.used
            return memory
        if version != pynvml.nvmlMemory_v2:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        memory = pynvml.c_nvmlMemory_v2_t()
        memory.version = version
        memory.total = domain.memory_total
        memory.reserved = domain.memory_reserved
        memory.used = domain.memory_used
        memory.free = domain.memory_total - domain.memory_reserved - domain.memory_used
        return memory

    # ------------------------------------------------------------------------------------- utilisation

    @nvml_call
    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._parent(handle)
        state = self._gpu_state(gpu)
        if state.layout.mig_enabled:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu = round(100 * state.whole.busy)
        rates.memory = round(100 * state.whole.dram)
        return rates

    @nvml_call
    def nvmlDeviceGetProcessUtilization(self, handle, timeStamp):
        gpu = self._parent(handle)
        state = self._gpu_state(gpu)
        if state.layout.mig_enabled:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        # One sample per process per tick, stamped (µs) at the start of the tick it describes; timeStamp 0 asks
        # for everything in the buffer (nvml.h, nvmlDeviceGetProcessUtilization).
        stamp = int(round(self._node.tick * self._node.scenario.tick_seconds * 1e6))
        if not state.whole.processes:
            # The first (sizing) call answers SUCCESS with count 0 and pynvml 13.615.71 raises NVMLError(ret) for
            # anything but InsufficientSize: an NVMLError whose value is 0 (pynvml.py, the function's else branch).
            raise nvml_error(pynvml.NVML_SUCCESS)
        if timeStamp and stamp <= timeStamp:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)  # no sample newer than timeStamp (nvml.h)
        samples = []
        for process in state.whole.processes:
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid = process.pid
            sample.timeStamp = stamp
            sample.smUtil = round(100 * process.sm)
            sample.memUtil = round(100 * process.dram)
            samples.append(sample)
        return samples

    # ---------------------------------------------------------------------------- power, clocks, thermal

    @nvml_call
    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self._gpu_state(self._parent(handle)).power_watts * 1000)

    @nvml_call
    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return int(self._gpu_state(self._parent(handle)).power_limit_watts * 1000)

    @nvml_call
    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return int(self._gpu_state(self._parent(handle)).power_limit_watts * 1000)

    @nvml_call
    def nvmlDeviceGetTemperature(self, handle, sensor):
        gpu = self._parent(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._gpu_state(gpu).temperature_celsius)

    @nvml_call
    def nvmlDeviceGetClockInfo(self, handle, type):
        gpu = self._parent(handle)
        if type in _TIME_SHARE_CLOCKS:
            return self._gpu_state(gpu).sm_clock_mhz
        return self._fixed_clock(gpu, type)

    @nvml_call
    def nvmlDeviceGetMaxClockInfo(self, handle, type):
        gpu = self._parent(handle)
        if type in _TIME_SHARE_CLOCKS:
            return self._node.models[gpu].sm_clock_max_mhz
        return self._fixed_clock(gpu, type)

    def _fixed_clock(self, gpu: int, clock_type: int) -> int:
        model = self._node.models[gpu]
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return model.mem_clock_mhz
        if clock_type == pynvml.NVML_CLOCK_VIDEO:
            return model.video_clock_mhz
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        if self._node.clock_event_reasons_missing:
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # driver older than the symbol (pynvml.py)
        return self._gpu_state(self._parent(handle)).clock_reasons

    @nvml_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu_state(self._parent(handle)).clock_reasons

    @nvml_call
    def nvmlDeviceGetPcieThroughput(self, device, counter):
        state = self._gpu_state(self._parent(device))
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return int(state.pcie_tx_bytes / 1024)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return int(state.pcie_rx_bytes / 1024)
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_call
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._node.models[self._parent(handle)].pcie_generation

    @nvml_call
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._node.models[self._parent(handle)].pcie_width

    # -------------------------------------------------------------------------------------- processes

    # One list per NVML call. On an MPS GPU the clients are listed by the MPS call only and the server by
    # MPS_SERVER_LISTED_BY (testbed/mps.py: NVML's documentation does not say); no simulated process is graphics.

    @nvml_call
    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self._check_v3("nvmlDeviceGetComputeRunningProcesses")
        return self._processes(handle, "compute")

    @nvml_call
    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._processes(handle, "compute")

    @nvml_call
    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle):
        self._check_v3("nvmlDeviceGetMPSComputeRunningProcesses")
        return self._processes(handle, "mps")

    @nvml_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle):
        return self._processes(handle, "mps")

    @nvml_call
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._check_v3("nvmlDeviceGetGraphicsRunningProcesses")
        return self._processes(handle, "graphics")

    @nvml_call
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle):
        return self._processes(handle, "graphics")

    def _check_v3(self, name: str) -> None:
        if self._node.compute_processes_v3_missing:
            # pynvml's throwOnVersionMismatch turns a missing _v3 symbol into this non-NVMLError (pynvml.py).
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not "
                                                  "match the NVML lib version. Either use matching pyNVML and NVML "
                                                  f"lib versions or use a versioned function such as {name}_v2")

    def _processes(self, handle, mode: str) -> list:
        gpu, slot = self._resolve(handle)
        domain = self._domain(handle)
        on_mps = slot is None and gpu in self._node.mps_servers
        rows = []
        if mode == ("mps" if on_mps else "compute"):
            rows = [self._row(p.pid, p.memory_used, p.gpu_instance, p.compute_instance) for p in domain.processes]
        server = self._node.mps_server(gpu) if on_mps else None
        if server is not None and mode == MPS_SERVER_LISTED_BY:
            rows.append(self._row(server, MPS_SERVER_MEMORY_BYTES, NOT_ATTRIBUTABLE, NOT_ATTRIBUTABLE))
        return rows

    @staticmethod
    def _row(pid: int, memory: int, gpu_instance: int, compute_instance: int):
        row = pynvml.c_nvmlProcessInfo_v2_t()
        row.pid = pid
        row.usedGpuMemory = memory
        row.gpuInstanceId = gpu_instance
        row.computeInstanceId = compute_instance
        return pynvml.nvmlStructToFriendlyObject(row)
