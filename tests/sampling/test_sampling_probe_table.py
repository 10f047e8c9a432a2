"""The probe's table: every GPU, MIG device and GPU instance of a scenario, each call's answer, in 100 columns."""

from __future__ import annotations

import re

import pynvml

from watchdog.sampling import probe
from watchdog.sampling.probe_events import wait_outcome
from watchdog.sampling.probe_table import render_table
from watchdog.testbed import SimClock, SimulatedGpuNode

ANSWER = re.compile(r"^ {2,}(\S.*?)\s{2,}(supported|not supported|error \([a-z0-9_]+\))(?:\s{2,}(.*))?$")


def rows(table: str) -> dict[str, list[tuple[str, str]]]:
    """label → [(answer, value)] of every call line (a label repeats where devices answered differently)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for line in table.splitlines():
        match = ANSWER.match(line)
        if match:
            found.setdefault(match.group(1), []).append((match.group(2), match.group(3) or ""))
    return found


def test_the_table_lists_every_gpu_mig_device_and_gpu_instance(node: SimulatedGpuNode, clock: SimClock) -> None:
    report = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)

    table = render_table(report)

    assert max(len(line) for line in table.splitlines()) <= 100
    for index, uuid in enumerate(node.gpu_uuids):
        assert re.search(rf"^GPU {index}  NVIDIA .+  {uuid}  MIG (on|off)$", table, re.M)
    devices = [d for d in node.device_uuids() if d.mig_profile]
    for gpu in {d.gpu_index for d in devices}:
        report_gpu = report["gpus"][gpu]
        block = table.split(f"\nGPU {gpu}  ", 1)[1].split("\nGPU ", 1)[0]
        header = next(line for line in block.splitlines() if line.startswith("  MIG devices"))
        for mig in report_gpu["mig_devices"]:
            calls = mig["calls"]
            profile = calls["nvmlDeviceGetName"]["value"].rpartition(" MIG ")[2]
            gi, ci = calls["nvmlDeviceGetGpuInstanceId"]["value"], calls["nvmlDeviceGetComputeInstanceId"]["value"]
            assert f"{mig['slot']}:{profile}({gi}/{ci})" in header
        instances = ", ".join(str(gi["gpu_instance"]) for gi in report_gpu["gpu_instances"])
        assert f"GPU instances (nvmlGpmMigSampleGet on the GPU's handle) {instances}" in table
    assert sum(len(gpu["mig_devices"]) for gpu in report["gpus"]) == len(devices)
    found = rows(table)
    # MIG GPUs refuse utilisation rates (nvml.h); the time-sliced A100 answers them.
    assert [answer for answer, _ in found["nvmlDeviceGetUtilizationRates"]] == [
        "not supported", "not supported", "supported"]
    assert found["nvmlDeviceGetPowerUsage"][0][1].endswith(" W")
    memory = found["nvmlDeviceGetMemoryInfo_v2"]
    assert memory[0][1].endswith("GiB reserved") and memory[1][1].count(",") == 3  # 4 MIG devices on GPU 0
    assert found["GPM SM_OCCUPANCY"][0] == ("supported", found["GPM SM_OCCUPANCY"][0][1])
    assert found["GPM SM_OCCUPANCY"][0][1].endswith(" %")
    assert re.search(r"\d+ answers: \d+ supported, \d+ not supported, 0 errors$", table.rstrip())


def test_devices_that_answer_differently_get_a_line_each(node: SimulatedGpuNode, clock: SimClock) -> None:
    # GPU 0 asks once for itself, then once per MIG device in slot order: the parent and MIG slot 0 fail.
    node.inject_error("nvmlDeviceGetMPSComputeRunningProcesses", pynvml.NVML_ERROR_GPU_IS_LOST, device_index=0,
                      times=2)

    found = rows(render_table(probe(node.nvml, sleep=clock.advance, event_wait_ms=5)))

    answers = found["nvmlDeviceGetMPSComputeRunningProcesses"]
    assert answers[0] == ("error (gpu_is_lost)", "")  # GPU 0 itself
    assert answers[1] == ("error (gpu_is_lost)", "on 0")  # its MIG device in slot 0
    assert answers[2] == ("supported", "on 3,4,6: 0, 0, 0 processes")
    # where the primary failed, the sampler's _v2 fallback is shown too
    assert found["nvmlDeviceGetMPSComputeRunningProcesses_v2"][0] == ("supported", "0 processes")


def test_an_event_wait_without_events_reads_supported(node: SimulatedGpuNode, clock: SimClock) -> None:
    report = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)

    wait = report["events"]["nvmlEventSetWait_v2"]
    assert (wait["supported"], wait["waited_ms"], wait["events"], wait["outcome"]) == (True, 5, 0, "no_event")
    assert wait["error"] == "timeout"  # kept for readers of the earlier report
    assert rows(render_table(report))["nvmlEventSetWait_v2"] == [("supported", "no event in 0.005 s")]
    assert wait_outcome({"supported": True, "value": {}}, wait_ms=5)["events"] == 1
    assert wait_outcome({"supported": False, "error": "gpu_is_lost"}, wait_ms=5) == {"outcome": "error"}


def test_refused_registration_reads_not_supported(node: SimulatedGpuNode, clock: SimClock) -> None:
    node.inject_error("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED, device_index=1)
    node.inject_error("nvmlEventSetWait_v2", pynvml.NVML_ERROR_GPU_IS_LOST)

    found = rows(render_table(probe(node.nvml, sleep=clock.advance, event_wait_ms=5)))

    assert found["GPU 0 nvmlDeviceRegisterEvents"] == [("supported", "mask 0x10b")]
    assert found["GPU 1 nvmlDeviceRegisterEvents"] == [("not supported", "")]
    assert found["nvmlEventSetWait_v2"] == [("error (gpu_is_lost)", "")]


def test_without_nvml_the_table_says_so_after_the_prerequisites(node: SimulatedGpuNode) -> None:
    node.inject_error("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    report = probe(node.nvml, sleep=lambda seconds: None)
    report["prerequisites"] = [{"check": "driver", "title": "driver and NVML versions", "status": "missing",
                                "detail": "nvmlInit failed (driver_not_loaded)", "fix": "mount the driver"}]

    lines = render_table(report).splitlines()

    assert lines[0] == "Node prerequisites"
    assert re.match(r"^  missing  driver and NVML versions  nvmlInit failed \(driver_not_loaded\)\. Fix: mount",
                    lines[1])
    assert lines[-1] == "nvmlInit: error (driver_not_loaded): no NVML call could be made"


def test_a_gpm_refusal_and_an_old_drivers_context_switch_metrics() -> None:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario({
        "name": "old-gpm", "gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "3g.40gb"], "gpm_ctxsw": False}],
    }, clock)
    try:
        node.inject_error("nvmlGpmMetricsGet", pynvml.NVML_ERROR_NOT_SUPPORTED)  # the whole GPU's request
        found = rows(render_table(probe(node.nvml, sleep=clock.advance, event_wait_ms=5)))
    finally:
        node.close()

    assert found["nvmlGpmMetricsGet"] == [("not supported", "")]
    assert ("not supported", "") in found["GPM GR0_CTXSW_ACTIVE_PCT"]  # per MIG device and per GPU instance
    assert found["GPM SM_UTIL"] == [("supported", found["GPM SM_UTIL"][0][1])]
