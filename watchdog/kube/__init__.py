"""The only door to the Kubernetes API (the only package that imports ``kubernetes``).

``KubeApi`` owns the connection and ``connect`` opens it from the kubeconfig kubectl would use; ``PodWatcher`` feeds
the pod cache; ``ResourceSliceWatcher`` feeds the DRA slice cache; ``NodeLabels`` keeps the agent's own Node's labels
(GPU Feature Discovery's); ``KubeEvictions`` evicts, records Events, reads the kill switch and lists pods;
``LeaseElector`` elects one controller replica; ``read_cluster`` lists what the tenant isolation audit checks. Errors
surface as the ``KubeError`` tree, never as the client library's exceptions.
"""

from watchdog.kube.client import KubeApi
from watchdog.kube.cluster_read import read_cluster
from watchdog.kube.errors import (KubeConfigUnusable, KubeConflict, KubeError, KubeForbidden, KubeGone, KubeNotFound,
                                  KubeRejected, KubeUnavailable)
from watchdog.kube.eviction import EvictionReply, KubeEvictions
from watchdog.kube.kubeconfig import command_line_access, connect, kubeconfig_path
from watchdog.kube.lease import LeaseElector
from watchdog.kube.node_labels import NodeLabels
from watchdog.kube.pods import PodWatcher, pod_info
from watchdog.kube.resourceslices import ResourceSliceWatcher

__all__ = [
    "command_line_access", "connect", "EvictionReply", "KubeApi", "KubeConfigUnusable", "KubeConflict", "KubeError",
    "KubeEvictions", "KubeForbidden", "KubeGone", "kubeconfig_path", "KubeNotFound", "KubeRejected", "KubeUnavailable",
    "LeaseElector", "NodeLabels", "PodWatcher", "pod_info", "read_cluster", "ResourceSliceWatcher",
]
