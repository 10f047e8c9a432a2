"""The bindings nvml_library corrects: nvmlVgpuInstanceGetFbUsage passes the 8-byte buffer nvml.h declares."""

from __future__ import annotations

import ctypes

from watchdog.sampling import nvml_library


def test_the_vgpu_framebuffer_use_is_read_into_an_unsigned_long_long(monkeypatch):
    pynvml = nvml_library.load()
    seen = []

    def driver(instance, pointer):  # what libnvidia-ml would do: write 5 GiB through the pointer
        seen.append(type(pointer._obj))
        pointer._obj.value = 5 << 30
        return pynvml.NVML_SUCCESS

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: driver)
    assert pynvml.nvmlVgpuInstanceGetFbUsage(7) == 5 << 30  # not wrapped at 4 GiB
    assert seen == [ctypes.c_ulonglong]
