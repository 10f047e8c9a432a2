"""The test bed: a simulated GPU node and the cluster around it, so the whole agent runs without a GPU or a
Kubernetes cluster. The demo, the evaluation and the tests use it; production code is forbidden to import it
(import-linter contract in pyproject.toml), since the device and the cluster are injected, never imported.

- ``gpu_node`` — the GPUs of one node following a scenario (``scenario``, ``curves``, ``profiles``, with the
  physics of a tick in ``tick_state`` and ``contention``); ``nvml/`` answers pynvml's calls from it.
- ``cluster/`` — the Kubernetes API server fake (real HTTP), the kubelet PodResources server (real gRPC on a unix
  socket) and the /proc tree.
- ``world`` — all of it assembled into one node the agent runs against; ``runner`` runs the agent on a world in
  real time (``gpu-watchdog demo``, ``run --simulate``, ``record --simulate``).

``SimulatedGpuNode.from_scenario(load_scenario(path), SimClock())`` builds the node; ``node.nvml`` is the object to
hand the sampler in place of ``pynvml``; ``node.processes()`` / ``node.assignments()`` feed the fake /proc and
the fake kubelet. The scenario format is described in docs/scenario-format.md.
"""

from watchdog.testbed.clock import SimClock
from watchdog.testbed.gpu_node import SimAssignment, SimDevice, SimProcess, SimulatedGpuNode
from watchdog.testbed.scenario import DEMO_SCENARIO, Scenario, ScenarioError, load_scenario

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
