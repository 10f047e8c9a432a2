"""One GPM read against the simulated NVML, as the sampler makes it: two samples, one metrics request, both freed."""

from __future__ import annotations

from typing import Any, Callable

from watchdog.sampling import nvml_library

pynvml = nvml_library.load()


def read_metrics(nvml: Any, take_first: Callable[[Any], Any], take_second: Callable[[Any], Any],
                 metrics: tuple[int, ...]) -> list[tuple[int, float, bytes]]:
    """(nvmlReturn, value, shortName) per metric, between a sample ``take_first`` fills and one ``take_second``
    fills (advance the simulated clock in ``take_second`` for an interval)."""
    first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    take_first(first)
    take_second(second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version, request.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, len(metrics)
    request.sample1, request.sample2 = first, second
    for position, metric in enumerate(metrics):
        request.metrics[position].metricId = metric
    nvml.nvmlGpmMetricsGet(request)
    nvml.nvmlGpmSampleFree(first)
    nvml.nvmlGpmSampleFree(second)
    return [(request.metrics[i].nvmlReturn, request.metrics[i].value, request.metrics[i].metricInfo.shortName)
            for i in range(len(metrics))]
