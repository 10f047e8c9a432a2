"""The simulator's MPS server: what NVML and /proc show of it, where NVML's documentation leaves it open.

With the device plugin's MPS sharing (``sharing.mps``) a control daemon per GPU starts one ``nvidia-cuda-mps-server``
when the first client connects; the clients' CUDA contexts live inside that server. NVML's reference documents the
MPS call (nvmlDeviceGetMPSComputeRunningProcesses_v3) as listing "processes with a Multi-Process Service (MPS)
compute context" and says nothing about which list reports the server itself, nor how much memory it is charged.
The choices below are the simulator's assumptions, named so tests pin them and a GPU check can correct them.
"""

from __future__ import annotations

from watchdog.testbed.scenario import stable_digest

MPS_SERVER_LISTED_BY = "compute"
"""The NVML list that reports the MPS server's PID (nvidia-smi shows the server as a "C" row and its clients as
"M+C"): an assumption, NVML's documentation does not say. Clients are listed by the MPS call only."""

MPS_SERVER_COMM = "nvidia-cuda-mps"
"""/proc/<pid>/comm of ``nvidia-cuda-mps-server``: the kernel keeps 15 characters (TASK_COMM_LEN 16)."""

MPS_SERVER_MEMORY_BYTES = 32 * 1024 * 1024
"""usedGpuMemory reported for the server: its own context only, never its clients' memory (an assumption)."""

MPS_DAEMON_CGROUP = ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
                     "cri-containerd-{cid}.scope")
"""The server runs in the device plugin's MPS control daemon pod, which no scenario lists: its cgroup names a pod
the agent's cache does not know."""


def server_pid(seed: int, gpu: int, taken: set[int]) -> int:
    """A stable host-range PID for the MPS server of ``gpu``, unique among ``taken`` (which it joins)."""
    pid = 1_000 + int.from_bytes(stable_digest(seed, "mps-server", gpu)[:4], "big") % 1_000
    while pid in taken:
        pid += 1
    taken.add(pid)
    return pid


def daemon_cgroup(seed: int, gpu: int) -> str:
    digest = stable_digest(seed, "mps-daemon", gpu)
    uid = digest[:16].hex()
    uid = f"{uid[:8]}_{uid[8:12]}_{uid[12:16]}_{uid[16:20]}_{uid[20:32]}"
    return MPS_DAEMON_CGROUP.format(uid=uid, cid=digest.hex())
