"""The read-only probe and the pynvml loader."""

from __future__ import annotations

import json

import pynvml

from watchdog.sampling import nvml_library, probe
from watchdog.testbed import SimClock, SimulatedGpuNode

_MUTATING = ("Set", "Create", "Destroy", "Reset", "Clear", "Register")
# The probe's own event set: process-local NVML state, created, registered on, waited on once and freed; it
# changes nothing on a GPU (nvml.h: nvmlDeviceRegisterEvents only starts recording events into the set), unlike
# the Set*/Create*/Destroy* calls on devices above.
_OWN_EVENT_SET = {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlEventSetFree"}


def test_probe_reports_every_call_per_gpu_and_mig_device(node: SimulatedGpuNode, clock: SimClock) -> None:
    report = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)

    json.dumps(report)  # JSON-able all the way down
    assert report["nvmlInit"]["supported"] and report["nvmlShutdown"]["supported"]
    assert report["nvmlSystemGetDriverVersion"]["value"] == node.scenario.driver_version
    assert report["nvmlSystemGetNVMLVersion"]["value"] == f"13.{node.scenario.driver_version}"
    h100, _, a100 = report["gpus"]
    assert h100["uuid"] == node.gpu_uuids[0]
    assert h100["calls"]["nvmlDeviceGetMigMode"]["value"] == [1, 1]
    assert h100["calls"]["nvmlDeviceGetPersistenceMode"]["value"] == pynvml.NVML_FEATURE_ENABLED
    # the sampler's three process lists, on the GPU and on each MIG device
    assert h100["calls"]["nvmlDeviceGetMPSComputeRunningProcesses"] == {"supported": True, "value": []}
    assert "nvmlDeviceGetGraphicsRunningProcesses_v2" in h100["mig_devices"][0]["calls"]
    utilisation = h100["calls"]["nvmlDeviceGetUtilizationRates"]
    assert (utilisation["supported"], utilisation["error"]) == (False, "not_supported")
    assert h100["calls"]["nvmlDeviceGetMemoryInfo_v2"]["value"]["reserved"] > 0
    assert len(h100["mig_devices"]) == 4  # empty slots (NotFound) are left out
    mig = h100["mig_devices"][0]
    assert mig["calls"]["nvmlDeviceGetName"]["value"].endswith(" MIG 3g.40gb")
    assert mig["calls"]["nvmlDeviceIsMigDeviceHandle"]["value"] == 1  # the raw c_uint, unwrapped
    assert mig["gpm"]["metrics"]["supported"]
    assert {gi["gpu_instance"] for gi in h100["gpu_instances"]} == {
        d.gpu_instance for d in node.device_uuids() if d.gpu_index == 0 and d.mig_profile}
    assert all(gi["gpm"]["metrics"]["supported"] for gi in h100["gpu_instances"])
    assert a100["calls"]["nvmlGpmQueryDeviceSupport"]["value"]["isSupportedDevice"] == 0
    assert a100["calls"]["nvmlDeviceGetProcessUtilization"]["supported"]
    # Per H100: the whole GPU (does GPM answer on a MIG parent?), then a CI and a GI stream per instance.
    assert report["gpm"]["streams"] == (1 + 4 + 4) + (1 + 3 + 3)


def test_probe_only_reads(node: SimulatedGpuNode, clock: SimClock) -> None:
    probe(node.nvml, sleep=clock.advance, event_wait_ms=5)

    called = {name for name, count in node.nvml.calls.items() if count}
    assert not [name for name in called - _OWN_EVENT_SET if any(verb in name for verb in _MUTATING)]
    assert node.nvml.calls["nvmlEventSetCreate"] == node.nvml.calls["nvmlEventSetFree"] == 1
    assert node.nvml.calls["nvmlGpmSampleAlloc"] == node.nvml.calls["nvmlGpmSampleFree"]
    assert node.nvml.calls["nvmlInit"] == node.nvml.calls["nvmlShutdown"] == 1


def test_probe_tries_the_xid_watchers_event_registration(node: SimulatedGpuNode, clock: SimClock) -> None:
    report = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)

    events = report["events"]
    json.dumps(events)
    wanted = (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
              | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventMigConfigChange)
    assert events["wanted_mask"] == wanted
    assert events["nvmlEventSetCreate"]["supported"] and events["nvmlEventSetFree"]["supported"]
    assert [gpu["index"] for gpu in events["gpus"]] == [0, 1, 2]
    for gpu in events["gpus"]:
        assert gpu["nvmlDeviceGetSupportedEventTypes"]["supported"]
        assert gpu["mask"] == gpu["nvmlDeviceGetSupportedEventTypes"]["value"] & wanted
        assert gpu["nvmlDeviceRegisterEvents"] == {"supported": True, "value": None}
    assert events["registered_gpus"] == 3
    # Per-instance events through a MIG handle are unsupported (nvml.h, nvmlEventSetWait_v2): the probe asks one MIG
    # handle.
    assert events["mig_device"]["nvmlDeviceGetSupportedEventTypes"]["error"] == "not_supported"
    # a quiet node: the normal answer, supported with no event (the timeout's name kept for earlier readers)
    assert events["nvmlEventSetWait_v2"] == {"supported": True, "waited_ms": 5, "events": 0, "outcome": "no_event",
                                             "error": "timeout", "detail": events["nvmlEventSetWait_v2"]["detail"]}
    assert node.nvml.calls["nvmlEventSetWait_v2"] == 1


def test_probe_records_event_failures_and_still_frees_the_set(node: SimulatedGpuNode, clock: SimClock) -> None:
    # Twice: the per-GPU calls ask nvmlDeviceGetSupportedEventTypes first, then the events section.
    node.inject_error("nvmlDeviceGetSupportedEventTypes", pynvml.NVML_ERROR_NOT_SUPPORTED, device_index=1, times=2)
    node.inject_error("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NO_PERMISSION, device_index=2)
    node.inject_error("nvmlEventSetWait_v2", pynvml.NVML_ERROR_GPU_IS_LOST)

    events = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)["events"]

    first, second, third = events["gpus"]
    assert first["nvmlDeviceRegisterEvents"]["supported"]
    assert second["nvmlDeviceGetSupportedEventTypes"]["error"] == "not_supported"
    assert "nvmlDeviceRegisterEvents" not in second
    assert third["nvmlDeviceRegisterEvents"]["error"] == "no_permission"
    assert events["registered_gpus"] == 1
    assert events["nvmlEventSetWait_v2"]["error"] == "gpu_is_lost"
    assert not events["nvmlEventSetWait_v2"]["supported"] and events["nvmlEventSetWait_v2"]["outcome"] == "error"
    assert events["nvmlEventSetFree"]["supported"]
    assert node.nvml.calls["nvmlEventSetCreate"] == node.nvml.calls["nvmlEventSetFree"] == 1


def test_probe_without_a_driver_says_why(node: SimulatedGpuNode) -> None:
    node.inject_error("nvmlInit", node.nvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    report = probe(node.nvml, sleep=lambda seconds: None)

    assert report["nvmlInit"]["error"] == "library_not_found"
    assert report["gpus"] == []


def test_loader_returns_pynvml() -> None:
    nvml = nvml_library.load()

    assert nvml.__name__ == "pynvml"
    assert hasattr(nvml, "nvmlGpmMetricsGet") and not issubclass(nvml.NVMLLibraryMismatchError, nvml.NVMLError)


GR0_CTXSW = {"GR0_CTXSW_CYCLES_ELAPSED", "GR0_CTXSW_CYCLES_ACTIVE", "GR0_CTXSW_REQUESTS", "GR0_CTXSW_CYCLES_PER_REQ",
             "GR0_CTXSW_ACTIVE_PCT"}


def _ctxsw_probe(*, ctxsw: bool) -> dict:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario({
        "name": "ctxsw", "gpus": [{"model": "H100-80GB-HBM3", "gpm_ctxsw": ctxsw},
                                  {"model": "H100-80GB-HBM3", "mig": ["3g.40gb"], "gpm_ctxsw": ctxsw}],
        "pods": [{"namespace": "a", "name": "p", "device": {"gpu": 0}, "workload": {"sm": {"base": 0.5}}}],
    }, clock)
    try:
        return probe(node.nvml, sleep=clock.advance, event_wait_ms=5)
    finally:
        node.close()


def test_probe_lists_the_context_switch_metrics_each_gpm_stream_answers() -> None:
    whole, mig_gpu = _ctxsw_probe(ctxsw=True)["gpus"]
    listed = whole["gpm"]["metrics"]["context_switch"]
    assert {name for name, answer in listed.items() if answer == "supported"} == GR0_CTXSW
    # the other graphics engines are asked on the whole GPU too: which ones a driver answers is the news
    assert {name for name, answer in listed.items() if answer != "supported"} == {
        f"GR{engine}_CTXSW_ACTIVE_PCT" for engine in range(1, 8)}
    assert set(listed.values()) == {"supported", "not_supported"}
    requests = whole["gpm"]["metrics"]["value"][str(pynvml.NVML_GPM_METRIC_GR0_CTXSW_REQUESTS)]
    assert requests["name"] == "GR0_CTXSW_REQUESTS" and requests["supported"] and "error" not in requests
    for stream in (mig_gpu["gpu_instances"][0], mig_gpu["mig_devices"][0]):  # per GPU instance and per CI
        assert stream["gpm"]["metrics"]["context_switch"] == dict.fromkeys(sorted(GR0_CTXSW), "supported")


def test_probe_shows_an_old_drivers_refusal_per_metric_and_the_other_metrics_still_answered() -> None:
    whole, mig_gpu = _ctxsw_probe(ctxsw=False)["gpus"]
    for stream in (whole, mig_gpu["gpu_instances"][0], mig_gpu["mig_devices"][0]):
        metrics = stream["gpm"]["metrics"]
        assert metrics["supported"] and set(metrics["context_switch"].values()) == {"not_supported"}
        assert GR0_CTXSW <= set(metrics["context_switch"])
        answered = {entry["name"] for entry in metrics["value"].values() if entry["supported"]}
        assert answered and not answered & GR0_CTXSW  # SM, DRAM, PCIe in the same request: still answered
    refused = whole["gpm"]["metrics"]["value"][str(pynvml.NVML_GPM_METRIC_GR0_CTXSW_ACTIVE_PCT)]
    assert (refused["supported"], refused["error"], refused["nvmlReturn"]) == (
        False, "not_supported", pynvml.NVML_ERROR_NOT_SUPPORTED)
