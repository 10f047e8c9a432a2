"""The scenario the sharing tests share: an H100 shared by MPS in 4 replicas beside an unshared one."""

from __future__ import annotations

SCENARIO = {
    "name": "mps-replicas", "seed": 5, "duration_ticks": 20,
    "gpus": [{"model": "H100-80GB-HBM3", "mps": True, "replicas": 4}, {"model": "H100-80GB-HBM3"}],
    "pods": [
        {"namespace": "team-a", "name": "train", "device": {"gpu": 0},
         "workload": {"memory": {"base": "6Gi"}, "sm": {"base": 0.4}}},
        {"namespace": "team-b", "name": "infer", "device": {"gpu": 0},
         "workload": {"memory": {"base": "3Gi"}, "sm": {"base": 0.3}}},
    ],
}
