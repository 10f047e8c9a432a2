"""Answers for tenants and operators: `gpu-watchdog explain NAMESPACE/POD`, `gpu-watchdog inventory` and the
support bundle a user attaches to a bug report (`gpu-watchdog bundle`).

Each reads what already exists (the agent's JSON API and metrics, the pod's Events, NVML, the flight recorder) and
words or packs it for a person; none of them decides or acts.
"""
