"""A simulated GPU node: NVML answered from a scenario, so the whole agent runs without a GPU.

``SimulatedGpuNode.from_scenario(load_scenario(path), SimClock())`` builds the node; ``node.nvml`` is the object to
hand the sampler in place of ``pynvml``; ``node.processes()`` / ``node.assignments()`` feed the fake /proc and
the fake kubelet. The scenario format is described in docs/scenario-format.md.
"""

from watchdog.simulation.clock import SimClock
from watchdog.simulation.gpu_node import SimAssignment, SimDevice, SimProcess, SimulatedGpuNode
from watchdog.simulation.scenario import DEMO_SCENARIO, Scenario, ScenarioError, load_scenario

__all__ = [
    "DEMO_SCENARIO",
    "Scenario",
    "ScenarioError",
    "SimAssignment",
    "SimClock",
    "SimDevice",
    "SimProcess",
    "SimulatedGpuNode",
    "load_scenario",
]
