"""Fixtures for the attribution tests: a real fake kubelet on a short unix socket path, and sample builders."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from watchdog.attribution.kubelet import PodResourcesClient
from watchdog.testbed.cluster.kubelet import FakeKubelet
from watchdog.model import ContainerInfo, GpuSample, MigSample, NodeSample, PodInfo, ProcessSample


@pytest.fixture
def socket_path():
    # Unix socket paths are limited to ~107 bytes (sun_path); pytest's tmp_path can be longer than that.
    directory = tempfile.mkdtemp(prefix="kl-")
    yield os.path.join(directory, "kubelet.sock")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def kubelet(socket_path):
    server = FakeKubelet(socket_path)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def client(socket_path):
    made = PodResourcesClient(socket_path, timeout=2.0)
    yield made
    await made.close()


class Clock:
    """A manual clock: tests move time, nothing sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock():
    return Clock()


def _make_pod(name: str, *, namespace: str = "ml", uid: str | None = None, **fields) -> PodInfo:
    containers = fields.pop("containers", (ContainerInfo("main", f"{name:0<12}".encode().hex()[:64]),))
    return PodInfo(uid=uid or f"uid-{namespace}-{name}", namespace=namespace, name=name, containers=containers, **fields)


def _mig_sample(*instances: tuple[str, tuple[int, ...]]) -> NodeSample:
    """One MIG GPU whose instances are (uuid, pids)."""
    migs = tuple(
        MigSample(
            uuid=uuid,
            gpu_index=0,
            gpu_instance=index + 1,
            compute_instance=0,
            profile="1g.18gb",
            processes=tuple(ProcessSample(pid=pid, used_memory_bytes=1 << 30) for pid in pids),
        )
        for index, (uuid, pids) in enumerate(instances)
    )
    gpu = GpuSample(index=0, uuid="GPU-mig0", name="NVIDIA H200", mig_enabled=True, instances=migs)
    return NodeSample(node="node-a", tick=1, timestamp=1000.0, gpus=(gpu,))


def _gpu_sample(*gpus: tuple[str, tuple[int, ...]]) -> NodeSample:
    """Whole (non-MIG) GPUs given as (uuid, pids)."""
    samples = tuple(
        GpuSample(
            index=index,
            uuid=uuid,
            name="NVIDIA H200",
            processes=tuple(ProcessSample(pid=pid, used_memory_bytes=1 << 30) for pid in pids),
        )
        for index, (uuid, pids) in enumerate(gpus)
    )
    return NodeSample(node="node-a", tick=1, timestamp=1000.0, gpus=samples)


# Builders are handed out as fixtures (not imported) so they never depend on how pytest imports conftest modules.
@pytest.fixture
def make_pod():
    return _make_pod


@pytest.fixture
def mig_sample():
    return _mig_sample


@pytest.fixture
def gpu_sample():
    return _gpu_sample
