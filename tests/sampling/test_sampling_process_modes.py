"""Every NVML process list (compute, MPS-compute, graphics), merged by PID, with the mode kept on each process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sampling_helpers import run_ticks
from watchdog.config.sampling import SamplingSettings
from watchdog.model import NOT_ATTRIBUTABLE
from watchdog.sampling import NvmlSampler, nvml_library
from watchdog.sampling.call_guard import CallGuard, ErrorCounts
from watchdog.sampling.processes import PROCESS_LISTS, ProcessReader
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.mps import MPS_SERVER_LISTED_BY, MPS_SERVER_MEMORY_BYTES

pynvml = nvml_library.load()


def record(pid, used, gi=NOT_ATTRIBUTABLE, ci=NOT_ATTRIBUTABLE):
    return SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=gi, computeInstanceId=ci)


def reader() -> ProcessReader:
    return ProcessReader(pynvml, CallGuard(pynvml, ErrorCounts()), clock=lambda: 0.0, hold_seconds=5.0)


def test_one_sample_per_pid_with_every_mode_and_the_largest_memory() -> None:
    lists = {
        "graphics": [record(7, 100)],
        "compute": [record(7, 300), record(8, None)],
        "mps": [record(7, 200), record(8, 50), record(9, 10)],
    }
    samples = {p.pid: p for p in reader().samples(lists, {8: (0.5, 0.25, 0.0)})}
    assert set(samples) == {7, 8, 9}
    assert (samples[7].mode, samples[7].used_memory_bytes) == ("compute+mps+graphics", 300)
    assert (samples[8].mode, samples[8].used_memory_bytes, samples[8].sm_util) == ("compute+mps", 50, 0.5)
    assert (samples[9].mode, samples[9].gpu_instance) == ("mps", None)


def test_a_bare_list_is_the_compute_list() -> None:
    [sample] = reader().samples([record(3, 1)])
    assert sample.mode == "compute"


MPS_SCENARIO = {
    "name": "mps", "seed": 11, "duration_ticks": 10,
    "gpus": [{"model": "H100-80GB-HBM3", "mps": True, "scheduler": "proportional"},
             {"model": "H100-80GB-HBM3", "mig": ["3g.40gb"]}],
    "pods": [
        {"namespace": "team-a", "name": "train", "device": {"gpu": 0}, "workload": {"memory": {"base": "4Gi"}}},
        {"namespace": "team-b", "name": "infer", "device": {"gpu": 0}, "workload": {"memory": {"base": "2Gi"}}},
        {"namespace": "team-c", "name": "mig", "device": {"gpu": 1, "instance": 0},
         "workload": {"memory": {"base": "1Gi"}}},
    ],
}


@pytest.fixture
def mps_node():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(MPS_SCENARIO, clock)
    sampler = NvmlSampler(node.nvml, node="sim", clock=clock, settings=SamplingSettings())
    sampler.open()
    yield node, sampler, clock
    sampler.close()
    node.close()


def test_mps_clients_come_from_the_mps_list_and_the_server_from_its_assumed_list(mps_node) -> None:
    node, sampler, clock = mps_node
    sample = run_ticks(sampler, clock, 2)
    by_pid = {p.pid: p for p in sample.gpus[0].processes}
    client_pids = {p.pid for p in node.processes() if p.pod in ("train", "infer")}
    server = node.mps_server(0)
    assert set(by_pid) == client_pids | {server}
    assert all(by_pid[pid].mode == "mps" for pid in client_pids)
    assert by_pid[server].mode == MPS_SERVER_LISTED_BY
    assert by_pid[server].used_memory_bytes == MPS_SERVER_MEMORY_BYTES
    assert sorted(by_pid[pid].used_memory_bytes for pid in client_pids) == [2 << 30, 4 << 30]
    [mig] = sample.gpus[1].instances  # MIG handles are asked every list too; nothing there is MPS
    assert [p.mode for p in mig.processes] == ["compute"]
    assert sampler.error_counts() == {}


def test_the_simulators_mps_server_assumption_is_pinned() -> None:
    # NVML's documentation does not say which list reports nvidia-cuda-mps-server; nvidia-smi shows it as "C".
    assert MPS_SERVER_LISTED_BY == "compute"
    assert {listing.mode for listing in PROCESS_LISTS} == {"compute", "mps", "graphics"}


def test_a_list_the_driver_does_not_support_is_asked_once_and_counted(mps_node) -> None:
    node, sampler, clock = mps_node
    node.inject_error("nvmlDeviceGetGraphicsRunningProcesses", pynvml.NVML_ERROR_NOT_SUPPORTED, times=None)
    node.inject_error("nvmlDeviceGetMPSComputeRunningProcesses", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                      device_index=1, times=None)
    sample = run_ticks(sampler, clock, 4)
    # GPU 0 and GPU 1's MIG device are asked (GPU 1's parent lists nothing in MIG mode); a MIG device has no
    # graphics contexts, so only GPU 0's graphics list is asked, once: NotSupported is remembered.
    assert node.nvml.calls["nvmlDeviceGetGraphicsRunningProcesses"] == 1
    assert node.nvml.calls["nvmlDeviceGetGraphicsRunningProcesses_v2"] == 0
    # GPU 0's MPS list names its clients, so it is asked every tick; the MIG device's only at the first sweep.
    assert node.nvml.calls["nvmlDeviceGetMPSComputeRunningProcesses"] == 4 + 1
    assert sampler.error_counts() == {"not_supported": 1, "function_not_found": 1}
    assert {p.mode for p in sample.gpus[0].processes} == {"mps", MPS_SERVER_LISTED_BY}  # the others still read


def test_an_empty_mps_list_is_asked_again_at_every_sweep_and_a_client_that_appears_is_seen(mps_node) -> None:
    from watchdog.sampling.processes import QUIET_LIST_EVERY

    node, sampler, clock = mps_node
    before = node.nvml.calls["nvmlDeviceGetMPSComputeRunningProcesses"]
    run_ticks(sampler, clock, 2 * QUIET_LIST_EVERY)
    asked = node.nvml.calls["nvmlDeviceGetMPSComputeRunningProcesses"] - before
    # GPU 0 names clients, so it is asked every tick; the MIG device, whose list is empty, at each sweep only.
    assert asked == 2 * QUIET_LIST_EVERY + 2
