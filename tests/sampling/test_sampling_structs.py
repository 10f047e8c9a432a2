"""Hook-free struct field access reads and writes exactly what attribute access would, on any object."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from watchdog.sampling.call_guard import CallGuard, ErrorCounts
from watchdog.sampling.gpm import DRAM_BW_UTIL, SM_OCCUPANCY, SM_UTIL, GpmTracker
from watchdog.sampling.structs import FieldReader, field_getter, field_setter


class CountingMetric(pynvml.c_nvmlGpmMetric_t):
    """pynvml's GPM metric struct, counting every pass through the _PrintableStructure hooks."""

    hook_calls = 0

    def __getattribute__(self, name):
        type(self).hook_calls += 1
        return super().__getattribute__(name)

    def __setattr__(self, name, value):
        type(self).hook_calls += 1
        super().__setattr__(name, value)


def test_descriptors_read_and_write_the_struct_without_pynvml_hooks():
    metric = CountingMetric()
    set_return, get_return = field_setter(CountingMetric, "nvmlReturn"), field_getter(CountingMetric, "nvmlReturn")
    set_value, get_value = field_setter(CountingMetric, "value"), field_getter(CountingMetric, "value")
    CountingMetric.hook_calls = 0
    set_return(metric, 0xFFFFFFFF)
    set_value(metric, 42.5)
    assert (get_return(metric), get_value(metric)) == (0xFFFFFFFF, 42.5)
    assert CountingMetric.hook_calls == 0
    assert (metric.nvmlReturn, metric.value) == (0xFFFFFFFF, 42.5)  # the ordinary path sees the same memory
    metric.value = 7.0
    assert get_value(metric) == 7.0


def test_plain_objects_fall_back_to_attribute_access():
    record = SimpleNamespace(total=10, used=4)
    assert field_getter(SimpleNamespace, "used")(record) == 4
    field_setter(SimpleNamespace, "used")(record, 5)
    assert record.used == 5
    with pytest.raises(AttributeError):
        field_getter(SimpleNamespace, "reserved")(record)


def test_field_reader_reads_pynvml_structs_and_stand_ins_alike():
    reader = FieldReader("total", "used", "reserved")
    memory = pynvml.c_nvmlMemory_v2_t()
    memory.total, memory.used, memory.reserved = 80 << 30, 10 << 30, 512 << 20
    assert reader(memory) == (80 << 30, 10 << 30, 512 << 20)
    assert reader(SimpleNamespace(total=3, used=2, reserved=1)) == (3, 2, 1)
    with pytest.raises(ValueError):
        FieldReader()


class PlainMetricsGet:
    """A pure-Python stand-in for c_nvmlGpmMetricsGet_t, as a binding without ctypes structs might return."""

    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]


def fake_nvml(request_type: type) -> SimpleNamespace:
    """Just enough NVML for GpmTracker: slot 0 answers 150 %, slot 1 is never written by the 'driver'."""

    def metrics_get(request):
        assert request.version == 1 and request.sample1 is not None and request.sample2 is not None
        request.metrics[0].nvmlReturn = pynvml.NVML_SUCCESS
        request.metrics[0].value = 150.0
        return request

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVML_GPM_METRICS_GET_VERSION=1,
        c_nvmlGpmMetricsGet_t=request_type,
        nvmlGpmSampleAlloc=pynvml.c_nvmlGpmSample_t,
        nvmlGpmMetricsGet=metrics_get,
        nvmlGpmSampleFree=lambda sample: None,
    )


@pytest.mark.parametrize("request_type", [pynvml.c_nvmlGpmMetricsGet_t, PlainMetricsGet])
def test_gpm_diff_clamps_and_never_reads_an_untouched_slot_as_success(request_type):
    nvml = fake_nvml(request_type)
    counts = ErrorCounts()
    tracker = GpmTracker(nvml, CallGuard(nvml, counts), min_interval=0.1)
    metrics = (SM_UTIL, SM_OCCUPANCY)

    def read(now: float) -> tuple[float | None, ...]:
        return tracker.read("s", device_key="gpu", metrics=metrics, now=now, take=lambda sample: sample)

    assert read(0.0) == (None, None)  # the first sample only starts the stream
    assert read(1.0) == (1.0, None)  # 150 % clamps to 1; slot 1 still holds the "not read" marker
    assert read(2.0) == (1.0, None)
    assert counts.snapshot() == {"gpm_metric_unavailable": 2}
    tracker.close()


def test_gpm_requests_per_metric_set_are_independent():
    nvml = fake_nvml(pynvml.c_nvmlGpmMetricsGet_t)
    tracker = GpmTracker(nvml, CallGuard(nvml, ErrorCounts()), min_interval=0.1)
    for now in (0.0, 1.0):
        single = tracker.read("gi", device_key="gpu", metrics=(DRAM_BW_UTIL,), now=now, take=lambda s: s)
        pair = tracker.read("ci", device_key="gpu", metrics=(SM_UTIL, SM_OCCUPANCY), now=now, take=lambda s: s)
    assert single == (1.0,)
    assert pair == (1.0, None)
    tracker.close()
