"""A whole simulated GPU node — simulated NVML, a fake kubelet, a fake API server and a /proc tree — that the
agent runs against unchanged. The demo, the end-to-end tests and ``gpu-watchdog run --simulate`` use it."""

from watchdog.world.node import SimulatedWorld

__all__ = ["SimulatedWorld"]
