"""Attribution: who owns each GPU, MIG instance and GPU process on this node.

Three sources, all kept off the scrape path: the kubelet's PodResources API (device → pod/container, refreshed on a
timer by ``assignments.KubeletAssignments``), ``/proc/<pid>/cgroup`` (process → pod UID/container ID, read by
``proc.ProcReader`` through the pure ``cgroups`` parser) and a watch-fed pod cache (``pods.PodCache``), plus the
DRA driver's ResourceSlices (``slices.SliceCache``). ``join.attribute`` combines them, purely, into one
``model.Attribution`` per tick; ``stage.NodeAttributor`` is the stateful stage around that join (which kubelet List
to trust, hold-backs, the tick's pod index with its tenant label). Only ``kubelet`` (and the generated ``proto``
modules) import grpc.
"""
