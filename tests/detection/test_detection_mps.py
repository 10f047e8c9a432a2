"""MPS as what it is (issue 21): clients under the device plugin's limits share DRAM bandwidth, not SMs, and each
is pinned to a slice of the memory. Detection reads the limits from ``Attribution.sharing``."""

from __future__ import annotations

from dataclasses import replace

import pytest
from detection_builders import GIB, Noise, attribution, gpu, pod, proc, sample

from watchdog.detection import Detector, DomainKind, devices_of, domains_of
from watchdog.model import REPORT_ONLY_KINDS, DeviceSharing, FindingKind, ProcessSample, Severity

SERVE, STREAM = pod("prod", "serve", priority=50000), pod("batch", "stream", priority=10)
SERVER_PID = 1500  # the MPS server: infrastructure, in no pod


def mps_attribution(strategy: str = "mps", replicas: int = 4):
    attr = attribution(devices={"GPU-1": [SERVE, STREAM]}, processes={100: SERVE, 200: STREAM})
    return replace(attr, sharing={"GPU-1": DeviceSharing(replicas=replicas, strategy=strategy, source="labels")},
                   infrastructure=frozenset({SERVER_PID}))


def client(pid: int, *, sm: float, memu: float | None, mem: int = 4 * GIB) -> ProcessSample:
    return ProcessSample(pid=pid, used_memory_bytes=mem, sm_util=sm, memory_util=memu, mode="mps")


def mps_tick(tick: int, *, serve_sm: float, stream_memu: float | None, dram: float, serve_mem: int = 12 * GIB,
             serve_memu: float | None = 0.25) -> object:
    processes = (
        ProcessSample(pid=SERVER_PID, used_memory_bytes=32 << 20, mode="compute"),
        client(100, sm=serve_sm, memu=serve_memu, mem=serve_mem),
        client(200, sm=0.2, memu=stream_memu),
    )
    return sample(tick, [replace(gpu("GPU-1", processes=processes, gpu_util=0.4), dram_bw_util=dram)])


def test_an_mps_gpu_under_limits_is_a_dram_domain_not_a_timeslice():
    s = mps_tick(1, serve_sm=0.2, stream_memu=0.2, dram=0.5)
    domains = domains_of(devices_of(s, mps_attribution()))
    assert [d.kind for d in domains] == [DomainKind.POWER, DomainKind.MPS]
    mps = domains[1]
    assert mps.resource == "dram" and mps.busy == 0.5
    assert mps.share == {"prod/serve": 0.25, "batch/stream": 0.25}  # 100/replicas % of the SMs each
    assert mps.victim_activity == {"prod/serve": pytest.approx(0.8), "batch/stream": pytest.approx(0.8)}
    assert mps.activity == {"prod/serve": 0.25, "batch/stream": 0.2}  # each client's memory-controller share


@pytest.mark.parametrize(("strategy", "modes", "kind"), [
    ("unknown", "mps", DomainKind.MPS),  # replicas known, strategy not said: NVML's MPS listing tells
    ("unknown", "compute", DomainKind.TIMESLICE),
    ("time-slicing", "mps", DomainKind.TIMESLICE),  # the plugin says time-slicing: no MPS limits apply
])
def test_mps_limits_apply_only_where_the_sharing_or_nvml_says_mps(strategy, modes, kind):
    s = mps_tick(1, serve_sm=0.2, stream_memu=0.2, dram=0.5)
    gpu0 = s.gpus[0]
    s = replace(s, gpus=(replace(gpu0, processes=tuple(replace(p, mode=modes) for p in gpu0.processes)),))
    kinds = [d.kind for d in domains_of(devices_of(s, mps_attribution(strategy)))]
    assert kinds == [DomainKind.POWER, kind]


def _run(detector, *, stream_memu_known: bool = True):
    noise, found = Noise(seed=3), []
    for t in range(160):
        hot = 100 <= t < 150
        # stream saturates DRAM at 100: serve's memory-bound kernels wait, its SM activity falls.
        serve_sm = noise(0.155 if hot else 0.2, 0.005)
        stream = noise(0.77 if hot else 0.2, 0.01) if stream_memu_known else None
        found.append(detector.step(mps_tick(t, serve_sm=serve_sm, stream_memu=stream, dram=1.0 if hot else 0.5,
                                            serve_memu=noise(0.23 if hot else 0.3, 0.005)), mps_attribution()))
    return found


def test_a_client_slowed_while_dram_is_saturated_names_the_client_whose_bandwidth_rose():
    ticks = _run(Detector())
    during = [f for f in ticks[140] if f.kind is FindingKind.INTERFERENCE]
    [finding] = during
    assert finding.culprit.key == "batch/stream" and [v.key for v in finding.victims] == ["prod/serve"]
    assert finding.domain == "mps/GPU-1" and finding.resource == "dram"
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["active_thread_share"] == 0.25 and finding.evidence["busy"] == 1.0
    assert all(not f for f in ticks[:100])  # nothing before the bandwidth ran out; never the server


def test_without_the_neighbours_bandwidth_shares_the_victim_is_reported_with_culprit_unknown():
    ticks = _run(Detector(), stream_memu_known=False)
    kinds = {f.kind for f in ticks[140]}
    assert kinds == {FindingKind.INTERFERENCE_CULPRIT_UNKNOWN}
    [finding] = ticks[140]
    assert finding.culprit is None and finding.severity is Severity.WARNING
    assert "memory-controller share" in finding.evidence["missing"]


def test_a_client_near_its_pinned_memory_limit_is_a_report_only_warning_with_the_limit():
    detector = Detector()
    limit = (80 * GIB) // 4  # the plugin pins memory / replicas per client
    found = []
    for t in range(30):
        used = 12 * GIB if t < 10 else int(limit * 0.97) if t < 20 else int(limit * 0.93)
        found.append(detector.step(mps_tick(t, serve_sm=0.2, stream_memu=0.2, dram=0.5, serve_mem=used),
                                   mps_attribution()))
    limits = [[f for f in tick if f.kind is FindingKind.MPS_MEMORY_LIMIT] for tick in found]
    assert not any(limits[:12])  # 3 ticks at 97 % before it is a finding
    [finding] = limits[12]
    assert finding.culprit.key == "prod/serve" and finding.severity is Severity.WARNING
    assert finding.evidence["limit_bytes"] == limit and finding.evidence["replicas"] == 4
    assert finding.evidence["used_bytes"] == int(limit * 0.97)
    assert limits[22] and limits[22][0].first_tick == 10  # 93 % is inside the band: still open, same episode
    assert FindingKind.MPS_MEMORY_LIMIT in REPORT_ONLY_KINDS  # never an eviction reason


def test_the_mps_server_counts_for_no_pod_and_no_limit():
    detector = Detector()
    for t in range(10):
        findings = detector.step(mps_tick(t, serve_sm=0.2, stream_memu=0.2, dram=0.5), mps_attribution())
    devices = devices_of(mps_tick(10, serve_sm=0.2, stream_memu=0.2, dram=0.5), mps_attribution())
    assert devices[0].pod_memory == {"prod/serve": 12 * GIB, "batch/stream": 4 * GIB}  # the server's 32 MiB: nobody's
    assert findings == ()
