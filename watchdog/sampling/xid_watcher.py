"""Xid, ECC and MIG-config-change events, received the moment NVML has them.

A tick-based poll would miss the order of events and, worse, the GPU/compute instance an Xid belongs to: only
the event record carries the GI/CI ids that let an Xid be pinned on one MIG tenant. nvmlEventSetWait blocks, so
it gets a dedicated daemon thread (pynvml calls through ctypes, which releases the GIL during the C call, so the
sampler keeps running). The wait is bounded so the stop flag is checked at least once per ``wait_ms``; events go
to ``on_event``, which the service points at ``loop.call_soon_threadsafe``.

A live thread is not a working watch: a set NVML invalidated fails every wait, and a node where no GPU accepted
registration never sees an event. So health is "some GPU registered and the last wait ended well", and a set
whose waits keep failing is freed and created again, without the GPUs that are lost by then.

The watcher relies on the sampler's nvmlInit and must be stopped before the sampler's nvmlShutdown.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from types import ModuleType
from typing import Any, Callable, Hashable, Sequence

from watchdog.model import NOT_ATTRIBUTABLE, XidEvent
from watchdog.sampling.call_guard import ErrorCounts, error_name, nvml_code
from watchdog.sampling.inventory import text

log = logging.getLogger(__name__)

# nvml.h nvmlEventType* bits; registered on parent handles only (per-MIG-handle registration is unsupported).
XID_CRITICAL = 0x8
DOUBLE_BIT_ECC = 0x2
SINGLE_BIT_ECC = 0x1
MIG_CONFIG_CHANGE = 0x100


def wanted_event_mask(nvml: ModuleType) -> int:
    """The event types the watcher registers: Xid, double- and single-bit ECC, MIG config change."""
    return (
        getattr(nvml, "nvmlEventTypeXidCriticalError", XID_CRITICAL)
        | getattr(nvml, "nvmlEventTypeDoubleBitEccError", DOUBLE_BIT_ECC)
        | getattr(nvml, "nvmlEventTypeSingleBitEccError", SINGLE_BIT_ECC)
        | getattr(nvml, "nvmlEventMigConfigChange", MIG_CONFIG_CHANGE)
    )


def handle_key(handle: Any) -> Hashable:
    """A key equal for two handles of the same device: pynvml returns a fresh ctypes pointer per call."""
    if isinstance(handle, (ctypes._Pointer, ctypes.c_void_p)):  # ctypes exposes no public base
        return ("address", ctypes.cast(handle, ctypes.c_void_p).value)
    try:
        hash(handle)
    except TypeError:
        return ("id", id(handle))
    return handle


class XidWatcher:
    """Waits on an NVML event set in its own thread and hands each event over as an XidEvent."""

    def __init__(
        self,
        nvml: ModuleType,
        *,
        on_event: Callable[[XidEvent], None],
        clock: Callable[[], float],
        wait_ms: int = 1000,
        node_handles: Sequence[tuple[int, str, Any]] | None = None,
        on_mig_change: Callable[[int], None] | None = None,
        error_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 30.0,
        recreate_after_errors: int = 3,
    ) -> None:
        if wait_ms <= 0:
            raise ValueError(f"wait_ms must be positive, got {wait_ms}")
        if recreate_after_errors < 1:
            raise ValueError(f"recreate_after_errors must be at least 1, got {recreate_after_errors}")
        self._nvml = nvml
        self._on_event = on_event
        self._on_mig_change = on_mig_change
        self._clock = clock
        self._wait_ms = int(wait_ms)
        self._given_handles = list(node_handles) if node_handles is not None else None
        self._backoff = error_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._recreate_after = recreate_after_errors
        self._delay = error_backoff_seconds  # the pause after the next failure; doubles up to the maximum
        self._consecutive_errors = 0
        self._last_wait_ok = False  # the last wait ended in an event or a Timeout
        self._counts = ErrorCounts()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._by_handle: dict[Hashable, tuple[int, str]] = {}
        self._by_uuid: dict[str, int] = {}
        self.registered: list[int] = []  # indexes of the GPUs events were registered on
        self._timeout = nvml_code(nvml, "NVML_ERROR_TIMEOUT")
        self._not_supported = nvml_code(nvml, "NVML_ERROR_NOT_SUPPORTED")
        self._wanted = wanted_event_mask(nvml)
        self._xid_bit = getattr(nvml, "nvmlEventTypeXidCriticalError", XID_CRITICAL)
        self._mig_bit = getattr(nvml, "nvmlEventMigConfigChange", MIG_CONFIG_CHANGE)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def healthy(self) -> bool:
        """Whether events can reach us now: the thread runs, at least one GPU is registered and the latest wait
        ended in an event or a Timeout (an error means the next Xid may not arrive, e.g. a set NVML invalidated).

        ``running`` alone is not enough: a thread whose every wait fails, or one that registered no GPU, is alive
        and sees nothing. Use this for the "events" stage health.
        """
        return self.running and self.watching

    @property
    def watching(self) -> bool:
        """At least one GPU is registered and the latest wait ended in an event or a Timeout (thread or not)."""
        return bool(self.registered) and self._last_wait_ok

    def error_counts(self) -> dict[str, int]:
        return self._counts.snapshot()

    def wait_ready(self, timeout: float) -> bool:
        """Block until events are registered (events that happen before that are not seen, nvml.h)."""
        return self._ready.wait(timeout)

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-xid-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to end and join it; True once it has ended (within one wait, normally) and the event
        set is freed."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            self._free()  # driven by poll_once (or never started): nobody else holds the set
            return True
        thread.join(self._wait_ms / 1000.0 + 5.0 if timeout is None else timeout)
        if thread.is_alive():
            log.warning("Xid watcher did not stop within its wait; it is a daemon thread and dies with the process")
            return False
        self._thread = None
        return True

    # ------------------------------------------------------------------------------------------ thread

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                pause = self.poll_once()
                if pause > 0:
                    self._stop.wait(pause)  # interruptible by stop
        finally:
            self._free()
            self._ready.clear()

    def poll_once(self) -> float:
        """One step of the watch: create and register the event set if there is none, else wait once.

        Returns the seconds to pause before the next step (0: go on at once). The thread calls this in a loop;
        it is public so a caller (or a test) can drive the watcher step by step without the thread.
        After ``recreate_after_errors`` failed waits in a row the set is freed and created again: NVML may have
        invalidated it, and registering anew leaves out GPUs that are lost (their registration fails).
        """
        if self._event_set is None:
            if self._setup():
                return 0.0
            return self._failed()
        try:
            data = self._nvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
        except Exception as exc:  # the watcher must outlive any driver answer
            if isinstance(exc, self._nvml.NVMLError) and getattr(exc, "value", None) == self._timeout:
                self._succeeded()  # nothing happened (or the wait was interrupted): check the stop flag
                return 0.0
            # GpuIsLost, an invalid set and friends: count, back off and, if it keeps failing, start over.
            self._counts.add(error_name(self._nvml, exc))
            self._last_wait_ok = False
            self._consecutive_errors += 1
            if self._consecutive_errors >= self._recreate_after:
                log.warning("%d event waits failed in a row (last: %r); creating the event set again",
                            self._consecutive_errors, exc)
                self._counts.add("event_set_recreated")
                self._consecutive_errors = 0
                self._free()
            return self._failed()
        self._succeeded()
        self._deliver(data)
        return 0.0

    def _succeeded(self) -> None:
        self._last_wait_ok = True
        self._consecutive_errors = 0
        self._delay = self._backoff

    def _failed(self) -> float:
        pause, self._delay = self._delay, min(self._delay * 2, self._max_backoff)
        return pause

    def _setup(self) -> bool:
        try:
            self._event_set = self._nvml.nvmlEventSetCreate()
        except Exception as exc:
            self._counts.add(error_name(self._nvml, exc))
            log.warning("nvmlEventSetCreate failed (%r); retrying", exc)
            return False
        self.registered = []
        self._last_wait_ok = False
        for index, uuid, handle in self._handles():
            self._by_handle[handle_key(handle)] = (index, uuid)
            self._by_uuid[uuid] = index
            try:
                mask = int(self._nvml.nvmlDeviceGetSupportedEventTypes(handle)) & self._wanted
                if mask:
                    self._nvml.nvmlDeviceRegisterEvents(handle, mask, self._event_set)
                    self.registered.append(index)
            except Exception as exc:  # NotSupported: nothing registered, the set stays usable
                self._counts.add(error_name(self._nvml, exc))
                if getattr(exc, "value", None) != self._not_supported:
                    log.warning("registering events on GPU %d failed: %r", index, exc)
        self._ready.set()
        return True

    def _handles(self) -> list[tuple[int, str, Any]]:
        if self._given_handles is not None:
            return self._given_handles
        found = []
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self._counts.add(error_name(self._nvml, exc))
            return found
        for index in range(count):
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
                found.append((index, text(self._nvml.nvmlDeviceGetUUID(handle)), handle))
            except Exception as exc:  # a lost GPU sends no events; the others still do
                self._counts.add(error_name(self._nvml, exc))
        return found

    def _deliver(self, data: Any) -> None:
        index, uuid = self._device_of(data.device)
        event_type = int(data.eventType)
        gpu_instance = int(getattr(data, "gpuInstanceId", NOT_ATTRIBUTABLE))
        compute_instance = int(getattr(data, "computeInstanceId", NOT_ATTRIBUTABLE))
        event = XidEvent(
            gpu_index=index,
            gpu_uuid=uuid,
            xid=int(data.eventData) if event_type & self._xid_bit else 0,
            event_type=event_type,
            timestamp=self._clock(),
            gpu_instance=None if gpu_instance == NOT_ATTRIBUTABLE else gpu_instance,
            compute_instance=None if compute_instance == NOT_ATTRIBUTABLE else compute_instance,
        )
        if event_type & self._mig_bit and self._on_mig_change is not None:
            self._call(self._on_mig_change, index)
        self._call(self._on_event, event)

    def _device_of(self, handle: Any) -> tuple[int, str]:
        known = self._by_handle.get(handle_key(handle))
        if known is not None:
            return known
        try:  # a handle object we have not seen: ask NVML which GPU it is
            uuid = text(self._nvml.nvmlDeviceGetUUID(handle))
        except Exception as exc:
            self._counts.add(error_name(self._nvml, exc))
            return (-1, "")
        return (self._by_uuid.get(uuid, -1), uuid)

    def _call(self, callback: Callable[[Any], None], argument: Any) -> None:
        try:
            callback(argument)
        except Exception:  # a failing consumer must not end the watch
            self._counts.add("callback")
            log.exception("Xid event callback failed")

    def _free(self) -> None:
        if self._event_set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._event_set)
            except Exception as exc:
                self._counts.add(error_name(self._nvml, exc))
            self._event_set = None
