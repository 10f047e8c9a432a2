"""Where an alert may act: only on its node (and device), never without a node, never for a report-only kind.

With `batch/train-big` over quota on node-a and a priority-50 `batch/small-job-b` on node-b, the controller chooses
among the tenant's pods on node-a only, so `small-job-b` is never a candidate.
"""

from __future__ import annotations

import io
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from controller_fakes import MemoryKube
from controller_payloads import alert, body
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler
from watchdog.controller.selection import decide_alert
from watchdog.controller.webhook import parse_payload, select_targets
from watchdog.model import EvictionResult as R
from watchdog.model import REPORT_ONLY_KINDS, PodInfo
from watchdog.publishing.controller_metrics import ControllerExposition, ControllerStatus

POLICY = ActionPolicy()


def gpu_pod(name: str, *, node: str, ns: str = "batch", priority: int = 0, **kw) -> PodInfo:
    return PodInfo(uid=f"u-{name}", namespace=ns, name=name, node=node, priority=priority,
                   gpu_resources=("nvidia.com/gpu",), **kw)


def target(**kw):
    kw.setdefault("namespace", "batch")
    kw.setdefault("pod", None)
    targets, _ = select_targets(parse_payload(body(alert(**kw))))
    return targets[0]


TRAIN_BIG = gpu_pod("train-big", node="node-a", priority=100)
SMALL_JOB_B = gpu_pod("small-job-b", node="node-b", priority=50)


def test_the_alert_labels_say_where():
    t = target(node="node-a", gpu_uuid="GPU-1", mig_uuid="MIG-7")
    assert (t.node, t.gpu_uuid, t.mig_uuid, t.device) == ("node-a", "GPU-1", "MIG-7", "MIG-7")
    assert (target(node=None).node, target().device) == ("", "")


def test_a_tenant_over_quota_on_one_node_is_relieved_on_that_node_only():
    d = decide_alert(target(node="node-a"), [SMALL_JOB_B, TRAIN_BIG], policy=POLICY)
    assert (d.pod, d.result) == ("train-big", None)
    assert d.request.evidence["node"] == "node-a"
    d = decide_alert(target(node="node-b"), [SMALL_JOB_B, TRAIN_BIG], policy=POLICY)
    assert (d.pod, d.result) == ("small-job-b", None)
    d = decide_alert(target(node="node-c"), [SMALL_JOB_B, TRAIN_BIG], policy=POLICY)
    assert (d.result, d.request) == (R.NO_CANDIDATE, None) and "node-c" in d.detail


def test_a_named_pod_on_another_node_is_not_what_fired():
    d = decide_alert(target(node="node-a", pod="small-job-b"), [SMALL_JOB_B, TRAIN_BIG], policy=POLICY)
    assert (d.result, d.request) == (R.NO_CANDIDATE, None) and "runs on node node-b" in d.detail


def test_only_the_nodes_pods_count_for_the_lower_priority_rule_and_the_terminating_hold():
    # A lower-priority pod on node-b cannot relieve node-a: it does not stop the named pod there.
    assert decide_alert(target(node="node-a", pod="train-big"), [TRAIN_BIG, SMALL_JOB_B], policy=POLICY).result is None
    low_here = gpu_pod("low", node="node-a", priority=1)
    d = decide_alert(target(node="node-a", pod="train-big"), [TRAIN_BIG, low_here], policy=POLICY)
    assert d.result is R.NOT_LOWER_PRIORITY and "batch/low" in d.detail
    # Nor does a pod terminating on node-b hold a namespace-only alert for node-a.
    leaving_b = gpu_pod("leaving", node="node-b", deleting=True)
    assert decide_alert(target(node="node-a"), [leaving_b, TRAIN_BIG], policy=POLICY).pod == "train-big"
    leaving_a = gpu_pod("leaving", node="node-a", deleting=True)
    assert decide_alert(target(node="node-a"), [leaving_a, TRAIN_BIG], policy=POLICY).result is R.ALREADY_EVICTED


def test_a_device_bound_alert_acts_only_on_the_pod_it_names():
    on_gpu = gpu_pod("on-gpu", node="node-a", priority=10)
    d = decide_alert(target(node="node-a", gpu_uuid="GPU-1"), [on_gpu, TRAIN_BIG], policy=POLICY)
    assert (d.result, d.request) == (R.UNSAFE, None) and "GPU-1" in d.detail  # never a guess among the node's pods
    d = decide_alert(target(node="node-a", gpu_uuid="GPU-1", pod="on-gpu"), [on_gpu, TRAIN_BIG], policy=POLICY)
    assert (d.pod, d.result) == ("on-gpu", None) and d.request.evidence["gpu_uuid"] == "GPU-1"


@pytest.mark.parametrize("kind", sorted(REPORT_ONLY_KINDS))
def test_a_report_only_kind_is_never_an_eviction_reason(kind):
    d = decide_alert(target(node="node-a", kind=kind.value), [TRAIN_BIG], policy=POLICY)
    assert d.finding_kind is kind
    assert (d.result, d.request) == (R.NO_CANDIDATE, None) and "report only" in d.detail


def test_an_alert_without_node_is_never_decided_on():
    d = decide_alert(target(node=None), [TRAIN_BIG], policy=POLICY)
    assert (d.result, d.request) == (R.UNSAFE, None) and "no node label" in d.detail


@pytest.fixture
async def webhook(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cr3t")
    kube = MemoryKube(pods=[TRAIN_BIG, SMALL_JOB_B])
    policy = ActionPolicy(mode="enforce")
    pacer = Pacer(policy.model_copy(update={"node_evictions_per_minute": 600, "node_eviction_burst": 5}))
    audit = io.StringIO()
    evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=audit), clock=lambda: 5000.0,
                      node="controller-0", kill_switch=None)
    handler = WebhookHandler(settings=ControllerSettings(token_file=str(token)), policy=policy, pods=kube,
                             evictor=evictor, pacer=pacer, is_leader=lambda: True, clock=lambda: 5000.0)
    client = TestClient(TestServer(handler.application()))
    await client.start_server()
    try:
        yield client, kube, evictor, audit
    finally:
        await client.close()


async def post(client, data: bytes):
    headers = {"Authorization": "Bearer s3cr3t", "Content-Type": "application/json"}
    response = await client.post("/api/v1/alertmanager", data=data, headers=headers)
    return response.status, await response.json()


async def test_an_eviction_alert_without_node_is_refused_audited_and_counted(webhook):
    client, kube, evictor, audit = webhook
    placed = alert(namespace="batch", pod=None, node="node-a", fingerprint="placed")
    status, answer = await post(client, body(placed, alert(namespace="batch", pod=None, node=None)))
    assert status == 400 and "no node label" in answer["error"]
    assert kube.evictions == []  # the whole notification is refused: nothing acted on, not even the placed alert
    (line,) = [json.loads(text) for text in audit.getvalue().splitlines()]
    assert (line["result"], line["reason"], line["pod"]["namespace"]) == ("unsafe", "alert", "batch")
    assert "no node label" in line["detail"]
    assert evictor.counts == {("unsafe", "alert", "batch"): 1}
    text, _ = ControllerExposition().render(ControllerStatus(evictions=evictor.counts), accept=None)
    assert 'gpu_watchdog_evictions_total{namespace="batch",reason="alert",result="unsafe"} 1' in text.decode()
    # Fixed rule, next delivery: the placed alert alone evicts on its node.
    status, answer = await post(client, body(placed))
    assert status == 200 and answer["results"][0]["pod"] == "train-big"
    assert kube.evictions == [("batch/train-big", False)]


def test_an_alert_never_evicts_a_virt_launcher_pod_even_one_that_holds_a_gpu():
    # A passthrough VM's launcher holds a whole nvidia.com/gpu: whether its eviction migrates or stops the VM is the
    # VMI's to say, and only the node agent reads VMIs.
    launcher = gpu_pod("virt-launcher-vm-a-x7k2p", node="node-a", priority=10, phase="Running",
                       labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid"})
    d = decide_alert(target(node="node-a", pod=launcher.name), [launcher], policy=POLICY)
    assert (d.result, d.pod) == (R.UNSAFE, launcher.name) and "KubeVirt VM" in d.detail
    plain = gpu_pod("vm-a-x7k2p", node="node-a", priority=10, phase="Running")
    assert decide_alert(target(node="node-a", pod=plain.name), [plain], policy=POLICY).result is None


def test_a_tenant_alert_passes_over_a_virt_launcher_pod_to_the_next_candidate():
    launcher = gpu_pod("virt-launcher-vm-a-x7k2p", node="node-a", priority=1, phase="Running",
                       labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid"})
    other = gpu_pod("train-0", node="node-a", priority=5, phase="Running")
    d = decide_alert(target(node="node-a"), [launcher, other], policy=POLICY)
    assert (d.pod, d.result) == ("train-0", None)
    alone = decide_alert(target(node="node-a"), [launcher], policy=POLICY)
    assert (alone.pod, alone.result) == (launcher.name, R.UNSAFE)
