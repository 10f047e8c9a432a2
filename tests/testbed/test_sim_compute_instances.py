"""A GPU instance split into compute instances: the scenario syntax, placement, and what the simulated NVML answers
per CI handle as the real driver does (CI profile names, the GI's memory on every CI handle, GPM DRAM per GI and SM
per CI), read through the real sampler."""

from __future__ import annotations

import pytest

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.profiles import GPU_MODELS, place_instances
from watchdog.testbed.scenario import ScenarioError, load_scenario

GIB = 1 << 30


def split_scenario(**gpu) -> dict:
    return {
        "name": "split", "seed": 5,
        "gpus": [{"model": "H100-80GB-HBM3", "mig": [{"gi": "4g.40gb", "ci": ["2c", "2c"]}, "3g.40gb"], **gpu}],
        "pods": [
            {"namespace": "a", "name": "train", "device": {"gpu": 0, "instance": 0},
             "workload": {"memory": {"base": "10Gi"}, "sm": {"base": 0.9}, "dram": {"base": 0.6}}},
            {"namespace": "b", "name": "scan", "device": {"gpu": 0, "instance": 1},
             "workload": {"memory": {"base": "6Gi"}, "sm": {"base": 0.5}, "dram": {"base": 0.9}}},
            {"namespace": "c", "name": "api", "device": {"gpu": 0, "instance": 2},
             "workload": {"memory": {"base": "4Gi"}, "sm": {"base": 0.4}, "dram": {"base": 0.3}}},
        ],
    }


def test_cis_are_placed_inside_their_gi_with_nvml_names_and_their_own_slots():
    placed = place_instances(GPU_MODELS["H100-80GB-HBM3"], [("7g.80gb", ("4c", "3c"))])
    assert [(p.slot, p.gpu_instance, p.compute_instance, p.profile.name) for p in placed] == [
        (0, 0, 0, "4c.7g.80gb"), (4, 0, 1, "3c.7g.80gb")]
    assert {p.profile.memory_slices for p in placed} == {8}  # every CI reports the GI's memory
    whole = place_instances(GPU_MODELS["H100-80GB-HBM3"], [("3g.40gb", ("3c",))])
    assert whole[0].profile.name == "3g.40gb"  # one CI spanning the GI keeps the GI's name


@pytest.mark.parametrize("mig, message", [
    ([{"gi": "4g.40gb", "ci": ["2c", "3c"]}], "gpus.0.mig[0] 4g.40gb: compute instances ['2c', '3c'] need more"),
    ([{"gi": "3g.40gb", "ci": ["4c"]}], "gpus.0.mig[0] 3g.40gb: compute instance '4c' is not <n>c"),
    ([{"gi": "3g.40gb", "ci": []}], "gpus.0.mig.0.GpuInstanceSpec.ci"),
])
def test_impossible_splits_are_load_errors_naming_the_field(mig, message):
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_scenario({"name": "bad", "gpus": [{"model": "H100-80GB-HBM3", "mig": mig}]})


def test_a_pod_index_counts_every_ci_as_a_device():
    data = split_scenario()
    data["pods"][2]["device"]["instance"] = 3
    with pytest.raises(ScenarioError, match="pods.2.device.instance: 3 but GPU 0 has 3 MIG instances"):
        load_scenario(data)


@pytest.fixture
def sampled():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(split_scenario(), clock)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings())
    sampler.open()
    samples = []
    for tick in range(3):
        samples.append(sampler.sample(tick))
        clock.advance(1.0)
    yield node, samples[-1]
    sampler.close()
    node.close()


def test_every_ci_handle_reports_the_gis_memory_and_dram_and_its_own_sm(sampled):
    node, sample = sampled
    ci0, ci1, other = sample.gpus[0].instances
    assert (ci0.profile, ci1.profile, other.profile) == ("2c.4g.40gb", "2c.4g.40gb", "3g.40gb")
    assert (ci0.gpu_instance, ci0.compute_instance, ci1.gpu_instance, ci1.compute_instance) == (1, 0, 1, 1)
    assert ci0.memory_used_bytes == ci1.memory_used_bytes == 16 * GIB  # the GI's 10 + 6 GiB on both handles
    assert ci0.memory_total_bytes == ci1.memory_total_bytes == other.memory_total_bytes
    assert [p.used_memory_bytes for p in ci0.processes] == [10 * GIB]  # processes: the CI's own
    assert [p.used_memory_bytes for p in ci1.processes] == [6 * GIB]
    assert ci0.dram_bw_util == ci1.dram_bw_util == pytest.approx(1.0)  # 0.6 + 0.9 asked of one GI: saturated
    assert other.dram_bw_util == pytest.approx(0.3)
    # Max-min sharing gives each 0.5 of the GI's bandwidth: train (0.6 asked) does 5/6 of its work, scan 5/9.
    assert ci0.sm_util == pytest.approx(0.9 * 5 / 6, abs=0.01)
    assert ci1.sm_util == pytest.approx(0.5 * 5 / 9, abs=0.01)
    # The GPU's total counts the GI's memory once: 16 + 4 GiB of processes, plus each GI's reserve once.
    assert node.state().gpus[0].whole.memory_used == 20 * GIB


def test_the_kubelet_hands_out_ci_resources_by_their_profile(sampled):
    node, _ = sampled
    resources = sorted(row.resource for row in node.assignments())
    assert resources == ["nvidia.com/mig-2c.4g.40gb", "nvidia.com/mig-2c.4g.40gb", "nvidia.com/mig-3g.40gb"]
