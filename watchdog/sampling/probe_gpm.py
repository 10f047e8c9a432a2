"""The GPM part of ``gpu-watchdog probe``: which GPM metrics each stream (whole GPU, GPU instance, MIG device) answers.

GPM answers per metric slot inside one request, and which slots a driver fills is the open question (per-GI PCIe,
the context-switch counters of NVML 12.9+, the graphics engines besides GR0). So the probe takes two samples per
stream the way the sampler does and asks for every metric the sampler reads plus those, recording each slot's answer.
Samples are the probe's own and are freed; nothing on the GPU changes.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from watchdog.sampling.call_guard import error_name

# nvml.h (NVML 12.9+): graphics engine 0's five context-switch counters, NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ELAPSED
# (170) … _ACTIVE_PCT (174), of which the sampler reads ACTIVE_PCT and REQUESTS, asked on every GPM stream; and the
# other engines' ACTIVE_PCT (GR1 179 … GR7 209) on the whole GPU, to show which engines a driver answers for.
GR0_CTXSW = (170, 171, 172, 173, 174)
OTHER_ENGINES_CTXSW_ACTIVE_PCT = tuple(range(179, 210, 5))
_METRIC_PREFIX = "NVML_GPM_METRIC_"
_NOT_ANSWERED = 0xFFFFFFFF


def probe_gpm(
    record: Callable[..., Any], nvml: ModuleType, streams: list, *, sleep: Callable[[float], None], interval: float
) -> dict:
    """Two samples per stream ``interval`` apart (NVML needs > 100 ms), then one nvmlGpmMetricsGet each."""
    summary: dict[str, Any] = {"streams": len(streams), "interval_seconds": interval}
    taken: list[tuple[dict, Any, Any, tuple[int, ...], Callable]] = []
    try:
        for target, take, metrics in streams:
            first = record(target.setdefault("gpm", {}), "nvmlGpmSampleAlloc", "nvmlGpmSampleAlloc")
            second = record(target["gpm"], "nvmlGpmSampleAlloc", "nvmlGpmSampleAlloc")
            if first is None or second is None:
                continue
            taken.append((target, first, second, metrics, take))
            _take(target["gpm"], "first sample", nvml=nvml, take=take, sample=first)
        if taken:
            sleep(interval)
        for target, first, second, metrics, take in taken:
            if _take(target["gpm"], "second sample", nvml=nvml, take=take, sample=second):
                target["gpm"]["metrics"] = _metrics(nvml, first=first, second=second, metrics=metrics)
    finally:
        for _target, first, second, _metrics_, _take_ in taken:
            for sample in (first, second):
                try:
                    nvml.nvmlGpmSampleFree(sample)
                except Exception:
                    summary["free_errors"] = summary.get("free_errors", 0) + 1
    return summary


def _take(report: dict, label: str, *, nvml: ModuleType, take: Callable[[Any], Any], sample: Any) -> bool:
    try:
        take(sample)
    except Exception as exc:
        report[label] = {"supported": False, "error": error_name(nvml, exc), "detail": str(exc)}
        return False
    report[label] = {"supported": True}
    return True


def _metrics(nvml: ModuleType, *, first: Any, second: Any, metrics: tuple[int, ...]) -> dict[str, Any]:
    """One nvmlGpmMetricsGet: per metric id, its name, whether the driver answered it (else the error) and the
    value; and under ``context_switch`` the answer to each CTXSW metric by name (drivers before 12.9 refuse them)."""
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))
    request.numMetrics = len(metrics)
    request.sample1, request.sample2 = first, second
    for position, metric in enumerate(metrics):
        request.metrics[position].metricId = metric
        request.metrics[position].nvmlReturn = _NOT_ANSWERED  # a slot the driver leaves alone is no success
    try:
        nvml.nvmlGpmMetricsGet(request)
    except Exception as exc:
        return {"supported": False, "error": error_name(nvml, exc)}
    names = _metric_names(nvml)
    result: dict[str, Any] = {}
    context_switch: dict[str, str] = {}
    for position, metric in enumerate(metrics):
        slot = request.metrics[position]
        code = int(slot.nvmlReturn)
        name = names.get(metric, str(metric))
        entry: dict[str, Any] = {"name": name, "supported": code == 0, "nvmlReturn": code, "value": float(slot.value)}
        if code:
            entry["error"] = _code_name(nvml, code)
        result[str(metric)] = entry
        if "_CTXSW_" in name:
            context_switch[name] = "supported" if code == 0 else entry["error"]
    report: dict[str, Any] = {"supported": True, "value": result}
    if context_switch:
        report["context_switch"] = context_switch
    return report


def _metric_names(nvml: ModuleType) -> dict[int, str]:
    """GPM metric id → its nvml.h name without NVML_GPM_METRIC_ (GR0_CTXSW_REQUESTS …), from the module itself."""
    names: dict[int, str] = {}
    for attribute in sorted(dir(nvml)):
        if attribute.startswith(_METRIC_PREFIX) and attribute != _METRIC_PREFIX + "MAX":
            value = getattr(nvml, attribute)
            if isinstance(value, int):
                names.setdefault(value, attribute.removeprefix(_METRIC_PREFIX))
    return names


def _code_name(nvml: ModuleType, code: int) -> str:
    """A slot's nvmlReturn as the probe names errors elsewhere (not_supported …)."""
    if code == _NOT_ANSWERED:
        return "not_answered"
    try:
        return error_name(nvml, nvml.NVMLError(code))
    except Exception:  # a code pynvml has no class for
        return f"nvml_error_{code}"
