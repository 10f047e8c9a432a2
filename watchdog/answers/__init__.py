"""Answers for tenants and operators: `gpu-watchdog explain NAMESPACE/POD` and `gpu-watchdog inventory`.

Each reads what already exists (the agent's JSON API, the pod's Events, NVML's inventory) and words it for a person;
none of them decides or acts.
"""
