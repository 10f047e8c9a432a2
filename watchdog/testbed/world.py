"""The simulated node and its cluster boundary, kept consistent tick by tick.

The scenario is the single source of truth: the simulated NVML reports its workloads, the fake kubelet lists the
devices its pods were given, the fake API server holds those pods (same UIDs, same container IDs), and the /proc
tree places each GPU process in its pod's cgroup. When the agent evicts a pod through the API, its workload ends in
the simulation too, so an eviction has the effect it would have on a real node. Around the node, the API server
holds what a multi-tenant cluster holds (namespaces, quotas, policies, taints: the scenario's ``cluster:``,
testbed/cluster/tenancy.py), a vGPU host's VMs as KubeVirt VMIs with their virt-launcher pods
(testbed/cluster/kubevirt.py) and, once the agent listens, the agent's own DaemonSet pod (``add_agent_pod``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from watchdog.config import Settings, load_settings
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.testbed.cluster.apiserver_pods import build_pod
from watchdog.testbed.cluster.device_plugin import advertised_devices, gfd_node_labels
from watchdog.testbed.cluster.dra import DraPublisher, claim_uses, dra_devices
from watchdog.testbed.cluster.kubelet import FakeKubelet
from watchdog.testbed.cluster.kubevirt import KubevirtSync
from watchdog.testbed import SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.scenario import Scenario, format_uuid, stable_digest
from watchdog.testbed.scenario_parts import PodSpec
from watchdog.model import MIRROR_ANNOTATION
from watchdog.testbed.cluster.proc_tree import ProcTree, container_id_for
from watchdog.testbed.cluster.tenancy import refresh_quotas, set_up

log = logging.getLogger(__name__)

GPU_MEMORY_RESOURCE = "nvidia.com/gpumem"  # MiB, as HAMi names it; only set on pods that state a request
AGENT_NAMESPACE = "gpu-watchdog"  # where the agent's DaemonSet runs (deploy/daemonset.yaml)
NODE_ADDRESS = "127.0.0.1"  # the simulated node is this machine: its agent listens on the loopback
# The priority classes every cluster has (scheduling/v1 SystemPriorityClasses).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # generated name suffixes (apimachinery/pkg/util/rand)


class SimulatedWorld:
    """``async with SimulatedWorld(scenario, workdir=…) as world: agent = Agent(world.settings(), nvml=world.nvml, …)``."""

    def __init__(
        self,
        scenario: Scenario | str | Path | dict,
        *,
        workdir: str | Path,
        deletion_delay: float | None = None,
        clock: SimClock | None = None,
    ) -> None:
        self.scenario = load_scenario(scenario)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.clock = clock or SimClock()
        self.node = SimulatedGpuNode.from_scenario(self.scenario, self.clock)
        # The API server shares the simulated clock: pod creation times and sample timestamps are one time line.
        self.api = FakeApiServer(instant_deletes=deletion_delay is None, deletion_delay=deletion_delay, clock=self.clock)
        self.kubelet = FakeKubelet(str(self.workdir / "kubelet.sock"))
        dra = self.scenario.dra
        self.dra = DraPublisher(self.api.store, node=self.scenario.node, driver=dra.driver,
                                slice_lag_ticks=dra.slice_lag_ticks) if dra is not None else None
        self.proc = ProcTree(self.workdir / "proc")
        self.kubevirt = KubevirtSync(self.api, self.scenario, node=self.node)  # the VMs as VMIs and launcher pods
        self._published: set[str] = set()  # pods put into the API server
        self.ended: dict[str, int] = {}  # pod key → tick its workload ended because it left the API server

    @property
    def nvml(self) -> Any:
        return self.node.nvml

    @property
    def tick(self) -> int:
        return self.node.tick

    async def start(self) -> str:
        await self.api.start()
        # The node the pods run on, as its kubelet registered it: `kubectl get nodes`, `cordon` and `drain` need it;
        # GFD's labels say what its GPUs are and how the device plugin shares them.
        cluster = self.scenario.cluster
        self.api.add_node(self.scenario.node, labels={**gfd_node_labels(self.scenario), **cluster.node_labels},
                          address=NODE_ADDRESS, taints=[t.model_dump() for t in cluster.node_taints] or None)
        classes = {**SYSTEM_PRIORITY_CLASSES, **{p.priority_class: p.priority for p in self.scenario.pods
                                                 if p.priority_class}}
        for name, value in sorted(classes.items()):
            self.api.add_priority_class(name, value)
        set_up(self.api.store, cluster, namespaces={AGENT_NAMESPACE, *(p.namespace for p in self.scenario.pods),
                                                    *self.kubevirt.namespaces})
        await self.kubelet.start()
        self.sync()
        return self.api.url

    async def stop(self) -> None:
        await self.kubelet.stop()
        await self.api.stop()
        self.node.close()

    async def __aenter__(self) -> SimulatedWorld:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def settings(self, path: str | None = None, **flags: Any) -> Settings:
        """Agent settings pointing at this world's fakes; ``flags`` (nested dicts) override the file."""
        base = {
            "node_name": self.scenario.node,
            "kube": {"access": "url", "url": self.api.url},
            "attribution": {
                "kubelet_socket": str(self.workdir / "kubelet.sock"),
                "proc_root": str(self.workdir / "proc"),
                "gpu_memory_request_resource": GPU_MEMORY_RESOURCE,
                **({"dra_driver": self.scenario.dra.driver} if self.scenario.dra is not None else {}),
            },
            "publishing": {"host": "127.0.0.1", "port": 0},
            "sampling": {"interval_seconds": self.scenario.tick_seconds},
        }
        if self.scenario.policy:
            base["policy"] = self.scenario.policy
        from watchdog.config.loading import deep_merge

        return load_settings(path, flags=deep_merge(base, flags), environ={})

    def advance(self, seconds: float) -> None:
        """Move simulated time and bring the kubelet, the API server and /proc in step with it."""
        self.clock.advance(seconds)
        self.sync()

    # ----------------------------------------------------------------------------------------- sync

    def sync(self) -> None:
        tick = self.node.tick
        for pod in self.scenario.pods:
            self._sync_pod(pod, tick)
        self.kubevirt.sync(tick)
        if self.dra is None:
            self.kubelet.set_pods(self._kubelet_view(tick))
        else:  # pods with a claim get their device through DRA, the others still from the device plugin
            uses = claim_uses(self.scenario, self.node, tick, ended=self.ended)
            driver, node = self.dra.driver, self.scenario.node
            self.kubelet.set_pods(self._kubelet_view(tick), claims=[
                (u.namespace, u.pod, u.container, u.namespace, u.claim, driver, node, u.device) for u in uses])
            self.dra.sync(tick=tick, devices=dra_devices(self.node, tick), uses=uses)
        self.kubelet.set_allocatable(advertised_devices(self.node, tick))
        self.proc.sync(self.node.processes(tick))
        refresh_quotas(self.api.store)  # pods came or went: the quota controller's status.used follows
        if self.scenario.kubelet_outages:  # the kubelet answers as a failing one would while an outage lasts
            self.kubelet.rate_limit = any(outage.covers(tick) for outage in self.scenario.kubelet_outages)

    def _sync_pod(self, pod: PodSpec, tick: int) -> None:
        key = pod.key
        running = pod.running(tick) and key not in self.ended
        in_api = self.api.get_pod(pod.namespace, pod.name)
        if key in self._published:
            if running and in_api is None:
                # Evicted (or deleted by someone) through the API: its processes end with it.
                self.node.end_pod(pod.namespace, pod.name, tick)
                self.ended[key] = tick
                log.info("pod %s left the API server at tick %d: its GPU work stops", key, tick)
            elif not running and in_api is not None:
                self.api.pods.delete(pod.namespace, pod.name, {"gracePeriodSeconds": 0}, dry_run=False)
            return
        if running:
            self.api.add_pod(self._pod_object(pod))
            self._published.add(key)

    def _pod_object(self, pod: PodSpec) -> dict[str, Any]:
        requests: dict[str, str] = {}
        for row in self.node.assignments(self.node.tick) if pod.claim is None else ():
            if (row.namespace, row.pod) == (pod.namespace, pod.name):
                requests[row.resource] = "1"
        if pod.gpu_memory_request_bytes:
            requests[GPU_MEMORY_RESOURCE] = str(pod.gpu_memory_request_bytes // 2**20)
        owner = None if pod.owner_kind == "Node" else pod.owner_kind
        annotations = dict(pod.annotations)
        if pod.owner_kind == "Node":
            annotations[MIRROR_ANNOTATION] = "simulated"
        body = build_pod(
            namespace=pod.namespace,
            name=pod.name,
            node=self.scenario.node,
            priority=pod.priority,
            priority_class=pod.priority_class,
            labels=dict(pod.labels),
            annotations=annotations,
            phase="Running",
            ready=True,
            containers=[pod.container],
            owner_kind=owner,
            qos=pod.qos_class or "Burstable",
            requests=requests or None,
        )
        body["metadata"]["uid"] = pod.uid
        body["spec"]["tolerations"] = self._tolerations()
        if pod.claim is not None:
            body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": pod.claim}]
        for status in body["status"]["containerStatuses"]:
            status["containerID"] = f"containerd://{container_id_for(pod.uid or '', status['name'])}"
        return body

    def _tolerations(self) -> list[dict[str, str]]:
        """A pod runs on a tainted node only if it tolerates the taint (its template's, or the operator's admission
        webhook's), so every pod of the scenario tolerates its node's NoSchedule and NoExecute taints."""
        return [{"key": taint.key, "operator": "Exists", "effect": taint.effect}
                for taint in self.scenario.cluster.node_taints if taint.effect != "PreferNoSchedule"]

    def add_agent_pod(self, *, port: int, image: str = "ghcr.io/gpu-watchdog/gpu-watchdog:dev",
                      whatif_port: int | None = None) -> dict[str, Any]:
        """The agent's own pod, as its DaemonSet (deploy/daemonset.yaml) would have created it on this node: labelled
        ``app.kubernetes.io/name=gpu-watchdog`` in the agent's namespace, its container port ``metrics`` the port
        the agent listens on (``whatif``: its what-if API's, when given), and a pod IP that reaches it (the
        loopback, where the simulated agent listens). So `gpu-watchdog explain`, `inventory` and `whatif` find it as
        they find a real one. Call it once the port is bound."""
        digest = stable_digest(self.scenario.seed, "agent-pod", self.scenario.node)
        name = "gpu-watchdog-" + "".join(_NAME_ALPHABET[byte % len(_NAME_ALPHABET)] for byte in digest[:5])
        body = build_pod(namespace=AGENT_NAMESPACE, name=name, node=self.scenario.node,
                         priority=SYSTEM_PRIORITY_CLASSES["system-node-critical"],
                         priority_class="system-node-critical",
                         labels={"app.kubernetes.io/name": "gpu-watchdog",
                                 "app.kubernetes.io/part-of": "gpu-watchdog", "pod-template-generation": "1"},
                         annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(port)},
                         phase="Running", ready=True, owner_kind="DaemonSet", qos="Burstable", requests=None,
                         containers=[{"name": "agent", "image": image,
                                      "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"},
                                                *([{"name": "whatif", "containerPort": whatif_port,
                                                    "protocol": "TCP"}] if whatif_port else [])]}])
        body["metadata"]["ownerReferences"][0]["name"] = "gpu-watchdog"
        body["metadata"]["uid"] = format_uuid(digest[5:])
        body["spec"]["tolerations"] = self._tolerations()
        body["status"].update(podIP=NODE_ADDRESS, podIPs=[{"ip": NODE_ADDRESS}], hostIP=NODE_ADDRESS)
        return self.api.add_pod(body)

    def _kubelet_view(self, tick: int) -> list[tuple[str, str, list[tuple[str, str, list[str]]]]]:
        by_pod: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
        claimed = {pod.key for pod in self.scenario.pods if pod.claim is not None}
        for row in self.node.assignments(tick):
            if f"{row.namespace}/{row.pod}" in self.ended or f"{row.namespace}/{row.pod}" in claimed:
                continue  # the kubelet frees a deleted pod's devices; a claimed device is not the plugin's
            by_pod[(row.namespace, row.pod)][(row.container, row.resource)].append(row.device_id)
        return [
            (namespace, name, [(container, resource, ids) for (container, resource), ids in containers.items()])
            for (namespace, name), containers in sorted(by_pod.items())
        ]
