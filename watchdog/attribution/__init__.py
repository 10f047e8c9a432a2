"""Attribution: who owns each GPU, MIG instance and GPU process on this node.

Three sources, all kept off the scrape path: the kubelet's PodResources API (device → pod/container, refreshed on a
timer by ``assignments.KubeletAssignments``), ``/proc/<pid>/cgroup`` (process → pod UID/container ID, read by
``cgroups.ProcReader``) and a watch-fed pod cache (``pods.PodCache``). ``join.attribute`` combines them, purely,
into one ``model.Attribution`` per tick. Only ``kubelet`` (and the generated ``proto`` modules) import grpc.
"""
