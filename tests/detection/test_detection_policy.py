"""The detection policy: sane defaults, and errors that name the offending field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from watchdog.config.detection import DetectionPolicy


def error_fields(data: dict) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        DetectionPolicy.model_validate(data)
    return [".".join(str(part) for part in error["loc"]) for error in caught.value.errors()]


def test_defaults_are_the_documented_ones():
    policy = DetectionPolicy()
    p = policy.interference
    assert (p.k_sigma, p.flags_needed, p.flags_window, p.min_correlation) == (3.0, 3, 5, 0.5)
    assert 20 <= p.correlation_window <= 30
    assert 13 in policy.xid.application and 79 in policy.xid.reset and 94 in policy.xid.contained
    assert policy.xid.drain is False


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"interference": {"k_sigma": 0}}, "interference.k_sigma"),
        ({"interference": {"min_correlation": 1.5}}, "interference.min_correlation"),
        ({"interference": {"flags_needed": 6, "flags_window": 5}}, "interference"),
        ({"interference": {"flags_needed": 0}}, "interference.flags_needed"),
        ({"interference": {"clear_flags": 4}}, "interference"),
        ({"memory_pressure": {"for_ticks": 0}}, "memory_pressure.for_ticks"),
        ({"memory_pressure": {"min_free_ratio": 1.0}}, "memory_pressure.min_free_ratio"),
        ({"quota": {"tenants": {"ml": {"gpu_memory_bytes": -1}}}}, "quota.tenants.ml.gpu_memory_bytes"),
        ({"quota": {"tenants": {"ml": {"instances": {"1g.10gb": -1}}}}}, "quota.tenants.ml"),
        ({"quota": {"tenants": {"ml": {"dram_share": 1.5}}}}, "quota.tenants.ml.dram_share"),
        ({"xid": {"application": [13], "reset": [13]}}, "xid"),
        ({"victim_signal_overrides": {"ml": {"query": ""}}}, "victim_signal_overrides.ml.query"),
        ({"victim_signal_overrides": {"ml": {}}}, "victim_signal_overrides.ml.query"),
        ({"interference": {"kk_sigma": 3}}, "interference.kk_sigma"),
    ],
)
def test_invalid_values_name_the_field(data, field):
    assert field in error_fields(data)


def test_cross_field_errors_say_what_is_wrong():
    with pytest.raises(ValidationError, match=r"flags_needed \(6\) must be ≤ flags_window \(5\)"):
        DetectionPolicy.model_validate({"interference": {"flags_needed": 6}})
    with pytest.raises(ValidationError, match="Xid 13 is listed in both application and reset"):
        DetectionPolicy.model_validate({"xid": {"reset": [13, 79]}})


def test_a_full_policy_round_trips():
    data = {
        "interference": {"k_sigma": 2.5, "correlation_window": 30},
        "quota": {"tenants": {"ml": {"gpu_memory_bytes": 1 << 34, "dram_share": 0.5, "instances": {"1g.10gb": 2}}}},
        "victim_signal_overrides": {"ml": {"query": "histogram_quantile(0.99, rate(x[1m]))", "threshold": 0.2}},
    }
    policy = DetectionPolicy.model_validate(data)
    assert DetectionPolicy.model_validate(policy.model_dump()) == policy
    with pytest.raises(ValidationError):
        policy.interference.k_sigma = 1.0  # frozen
