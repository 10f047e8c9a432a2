"""GPU use from outside Kubernetes: a process in no pod on a device given to a pod (finding kind unauthorized_host)."""

from __future__ import annotations

import dataclasses

import pytest
from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.model import REPORT_ONLY_KINDS, FindingKind, HostProcess, Severity

OWNER = pod("team-a", "owner")
DOCKER = HostProcess(cgroup="/system.slice/docker-4f1c2b7e9d0a.scope", command="python3")


def hosts_only(findings):
    return [f for f in findings if f.kind is FindingKind.UNAUTHORIZED_HOST]


def node(tick, *, host_mem=4 * GIB):
    host = (proc(7001, mem=host_mem),) if host_mem is not None else ()
    instances = (
        mig("MIG-a", gi=1, processes=(proc(10, mem=GIB), *host)),
        mig("MIG-b", gi=2),
    )
    return sample(tick, [gpu("GPU-0", instances=instances)])


def owned(*, hosts=None, healthy=True, devices=None):
    attr = attribution(devices=devices or {"MIG-a": [OWNER]}, processes={10: OWNER}, healthy=healthy)
    return dataclasses.replace(attr, host_processes=hosts if hosts is not None else {7001: DOCKER})


def run(detector, ticks, attr, **kwargs):
    return [hosts_only(detector.step(node(t, **kwargs), attr(t) if callable(attr) else attr)) for t in ticks]


def test_a_process_in_no_pod_is_reported_with_what_finds_it_on_the_node():
    history = run(Detector(), range(6), owned())
    assert [bool(h) for h in history] == [False] * 4 + [True, True]  # for_ticks (5)
    [f] = history[-1]
    assert f.kind in REPORT_ONLY_KINDS and f.culprit is None and f.tenant is None
    assert [v.key for v in f.victims] == ["team-a/owner"] and (f.gpu_uuid, f.mig_uuid) == ("GPU-0", "MIG-a")
    assert f.key == "unauthorized-host/MIG-a/7001"
    assert {k: f.evidence[k] for k in ("pid", "command", "cgroup", "device", "assigned_to", "used_memory_bytes")} == {
        "pid": 7001, "command": "python3", "cgroup": DOCKER.cgroup, "device": "MIG-a", "assigned_to": "team-a/owner",
        "used_memory_bytes": 4 * GIB}
    assert f.severity is Severity.CRITICAL  # 4 of 10 GiB ≥ host_critical_ratio (0.25)


def test_severity_follows_the_share_it_takes():
    [f] = run(Detector(), range(5), owned(), host_mem=GIB // 2)[-1]
    assert f.severity is Severity.WARNING and f.evidence["memory_ratio"] == 0.05


@pytest.mark.parametrize("agent", [
    HostProcess(cgroup="/system.slice/nvidia-dcgm.service", command="nv-hostengine"),
    HostProcess(cgroup="/system.slice/nvidia-persistenced.service", command="nvidia-persiste"),
    HostProcess(cgroup="/system.slice/nvidia-device-plugin.service", command="plugin"),
    HostProcess(cgroup="/user.slice/session-3.scope", command="nvidia-device-p"),
], ids=["dcgm", "persistenced", "plugin-by-cgroup", "plugin-by-command"])
def test_node_agents_are_exempt_by_default(agent):
    assert not any(run(Detector(), range(10), owned(hosts={7001: agent})))


def test_exemptions_are_policy():
    agent = HostProcess(cgroup="/opt/agent.scope", command="myagent")
    assert any(run(Detector(), range(10), owned(hosts={7001: agent})))
    policy = DetectionPolicy.model_validate({"unauthorized": {"exempt_commands": ["my*"]}})
    assert not any(run(Detector(policy), range(10), owned(hosts={7001: agent})))
    policy = DetectionPolicy.model_validate({"unauthorized": {"exempt_cgroups": ["/opt/*"]}})
    assert not any(run(Detector(policy), range(10), owned(hosts={7001: agent})))
    off = DetectionPolicy.model_validate({"unauthorized": {"host_processes": False}})
    assert not any(run(Detector(off), range(10), owned()))


def test_a_process_seen_for_fewer_ticks_than_the_policy_is_not_reported():
    gone = owned(hosts={})
    history = run(Detector(), range(12), lambda t: owned() if t % 4 != 3 else gone)  # 3 ticks on, 1 off
    assert not any(history)


def test_unhealthy_attribution_reports_nothing_new():
    assert not any(run(Detector(), range(10), owned(healthy=False)))


def test_an_unhealthy_tick_keeps_an_open_finding_unobserved():
    detector = Detector()
    run(detector, range(5), owned())
    [[f]] = run(detector, [5], owned(healthy=False))
    assert f.observed is False and f.last_tick == 4


def test_a_device_no_pod_was_given_and_an_unread_cgroup_are_not_judged():
    assert not any(run(Detector(), range(10), owned(devices={"MIG-b": [OWNER]})))
    assert not any(run(Detector(), range(10), owned(hosts={})))  # /proc unreadable for 7001: not "in no pod"


def test_the_process_ending_resolves_the_finding():
    detector = Detector()
    assert run(detector, range(5), owned())[-1]
    assert not run(detector, [5], owned(hosts={}), host_mem=None)[-1]
