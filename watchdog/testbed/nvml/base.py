"""The plumbing shared by every simulated NVML call: handles, errors, init state and call counting.

Real pynvml hands out ``c_nvmlDevice_t`` pointers and raises its own ``NVMLError_*`` classes; a sampler written
against it compares error codes, checks ``isinstance`` and passes handles back into ctypes structs (an event's
``device`` field). So the simulation hands out *real* ``c_nvmlDevice_t`` pointers too, to fake addresses it never
dereferences, and maps the address back to a GPU or MIG device. A handle that arrives through a struct field is a
new pointer object with the same address, which is why the address, not the object, is the key.
"""

from __future__ import annotations

import ctypes
import functools
from collections import Counter
from typing import Any, Callable, Protocol, Sequence

from watchdog.sampling import nvml_library
from watchdog.testbed.nvml.event_sets import EventHub
from watchdog.testbed.profiles import GpuModel
from watchdog.testbed.tick_state import GpuLayout, GpuState, TickState

pynvml = nvml_library.load()

_GPU_BASE = 0x5A1D_0000_0000
_GPU_STRIDE = 1 << 24
_MIG_OFFSET = 0x100
_SAMPLE_BASE = 0x6B70_0000_0000
_EVENT_SET_BASE = 0x7E57_0000_0000
_NO_INIT_NEEDED = frozenset({"nvmlInit", "nvmlInitWithFlags"})


class SimulatedGpus(Protocol):
    """What the simulated NVML answers from: the GPUs of one node as a scenario drives them.

    ``watchdog.testbed.gpu_node.SimulatedGpuNode`` is the implementation. The NVML side names only this protocol,
    so the node may build its NVML object without the two modules importing each other.
    """

    scenario: Any
    clock: Any
    models: Sequence[GpuModel]
    gpu_uuids: Sequence[str]
    error_rules: list
    events: EventHub
    clock_event_reasons_missing: bool
    compute_processes_v3_missing: bool
    mps_servers: dict[int, int]

    def mps_server(self, gpu: int, tick: int | None = None) -> int | None: ...

    @property
    def tick(self) -> int: ...

    @property
    def has_scheduled_errors(self) -> bool: ...

    def state(self, tick: int | None = None) -> TickState: ...

    def generation(self, gpu: int, tick: int) -> int: ...

    def layout(self, gpu: int, tick: int | None = None) -> GpuLayout: ...

    def device_uuids(self, tick: int | None = None) -> list: ...

    def promote_scheduled_errors(self) -> None: ...

    def is_lost(self, gpu: int, tick: int | None = None) -> bool: ...


def nvml_error(code: int) -> Exception:
    """The real pynvml exception for ``code`` (NVMLError.__new__ picks the NVMLError_* subclass)."""
    return pynvml.NVMLError(code)


def fake_pointer(pointer_type: Any, address: int) -> Any:
    pointer = ctypes.cast(ctypes.c_void_p(address), pointer_type)
    pointer._sim_address = address  # fast path for handles we made; struct fields fall back to the cast
    return pointer


def address_of(pointer: Any) -> int | None:
    address = getattr(pointer, "_sim_address", None)
    if address is not None:
        return address
    if isinstance(pointer, ctypes._Pointer):
        return ctypes.cast(pointer, ctypes.c_void_p).value
    return None


def nvml_call(method: Callable) -> Callable:
    """Count the call, raise an injected error if one matches, refuse calls before nvmlInit."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: NvmlBase, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        node = self._node
        if node.error_rules or node.has_scheduled_errors:
            self._raise_injected(name, args)
        if not self._init_count and name not in _NO_INIT_NEEDED:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        return method(self, *args, **kwargs)

    call.__sim_nvml__ = True
    return call


class NvmlBase:
    """Handle bookkeeping for :class:`watchdog.testbed.nvml.module.SimulatedNvml`."""

    def __init__(self, node: SimulatedGpus) -> None:
        self._node = node
        self.calls: Counter[str] = Counter()
        self._init_count = 0
        self._gpu_handles = [fake_pointer(pynvml.c_nvmlDevice_t, _GPU_BASE + gpu * _GPU_STRIDE)
                             for gpu in range(len(node.models))]
        self._mig_handles: dict[tuple[int, int, int], Any] = {}  # (gpu, generation, slot) → handle
        self._devices: dict[int, tuple[int, int | None, int]] = {  # address → (gpu, slot, generation)
            _GPU_BASE + gpu * _GPU_STRIDE: (gpu, None, 0) for gpu in range(len(node.models))}
        self._samples: dict[int, Any] = {}  # GPM sample address → what was sampled when (None: not yet taken)
        self._next_sample = _SAMPLE_BASE
        self._next_event_set = _EVENT_SET_BASE

    # ------------------------------------------------------------------------------------------ handles

    def _mig_handle(self, gpu: int, generation: int, slot: int) -> Any:
        key = (gpu, generation, slot)
        handle = self._mig_handles.get(key)
        if handle is None:
            address = _GPU_BASE + gpu * _GPU_STRIDE + _MIG_OFFSET + generation * 8 + slot
            handle = self._mig_handles[key] = fake_pointer(pynvml.c_nvmlDevice_t, address)
            self._devices[address] = (gpu, slot, generation)
        return handle

    def _resolve(self, handle: Any) -> tuple[int, int | None]:
        """(gpu, MIG slot or None) of a live handle; InvalidArgument for unknown or stale, GpuIsLost if lost."""
        entry = self._devices.get(address_of(handle))
        if entry is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu, slot, generation = entry
        node = self._node
        if node.is_lost(gpu):
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if slot is not None and node.generation(gpu, node.tick) != generation:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # its instance was destroyed
        return gpu, slot

    def _parent(self, handle: Any, *, mig_error: int | None = None) -> int:
        """The GPU index of a parent handle; MIG handles get ``mig_error`` (NotSupported by default)."""
        gpu, slot = self._resolve(handle)
        if slot is not None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED if mig_error is None else mig_error)
        return gpu

    def _now(self) -> TickState:
        return self._node.state()

    def _gpu_state(self, gpu: int) -> GpuState:
        return self._node.state().gpus[gpu]

    # ----------------------------------------------------------------------------------- injected errors

    def _raise_injected(self, name: str, args: tuple) -> None:
        node = self._node
        node.promote_scheduled_errors()
        if not node.error_rules:
            return
        device = self._device_of_call(name, args)
        for rule in node.error_rules:
            if rule.function != name or (rule.device_index is not None and rule.device_index != device):
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    node.error_rules.remove(rule)
            raise nvml_error(rule.code)

    def _device_of_call(self, name: str, args: tuple) -> int | None:
        if not args:
            return None
        if name == "nvmlDeviceGetHandleByIndex" and isinstance(args[0], int):
            return args[0]
        if name == "nvmlDeviceGetHandleByUUID":
            for device in self._node.device_uuids():
                if device.uuid == args[0]:
                    return device.gpu_index
            return None
        entry = self._devices.get(address_of(args[0]))
        return entry[0] if entry else None
