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
    """Exactly the values docs/detection.md states: a change here is a change there."""
    policy = DetectionPolicy()
    p = policy.interference
    assert (p.k_sigma, p.min_deviation, p.flags_needed, p.flags_window, p.clear_flags) == (3.0, 0.05, 3, 5, 2)
    assert (p.baseline_alpha, p.baseline_min_ticks, p.correlation_window, p.min_correlation) == (0.05, 10, 24, 0.5)
    assert (p.min_points, p.min_steady_ticks, p.min_antagonist_use, p.min_antagonist_rise) == (8, 4, 0.3, 0.15)
    assert (p.steady_tolerance, p.victim_min_activity, p.saturation, p.dram_saturation) == (0.2, 0.1, 0.9, 0.8)
    assert p.contention_reasons == 0x4 | 0x20  # SwPowerCap, SwThermalSlowdown: not HwSlowdown/HwThermal/PowerBrake
    assert (p.fair_share_tolerance, p.cross_tenant_only, p.stale_ticks) == (0.02, True, 120)
    assert (p.common_driver_correlation, p.release_low_ticks, p.release_window, p.merge_gap_ticks) == (0.3, 4, 6, 60)
    m = policy.memory_pressure
    assert (m.min_free_bytes, m.min_free_ratio, m.band_bytes, m.band_ratio) == (1 << 30, 0.05, 512 << 20, 0.02)
    assert (m.for_ticks, m.growth_window, m.min_growth_share, m.stale_ticks) == (3, 30, 0.1, 60)
    q = policy.quota
    assert (q.tenants, q.memory_warning_ratio, q.for_ticks, q.stale_ticks) == ({}, 0.9, 5, 60)
    u = policy.unauthorized
    assert (u.for_ticks, u.min_pod_age_seconds, u.stale_ticks, u.exempt_labels) == (5, 30.0, 60, {})
    assert u.exempt_namespaces == ("gpu-operator", "nvidia-gpu-operator", "kube-system")
    x = policy.xid
    assert x.application == (13, 31, 43, 45, 68, 109) and x.contained == (94,)
    assert x.reset == (48, 63, 64, 74, 79, 92, 95, 119, 120) and x.ignore == ()
    assert (x.drain, x.hold_seconds) == (False, 300.0)
    assert policy.victim_signal_overrides == {}


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
        ({"unauthorized": {"exempt_labels": {"": "x"}}}, "unauthorized.exempt_labels..[key]"),
        ({"memory_pressure": {"min_growth_share": 2}}, "memory_pressure.min_growth_share"),
        ({"quota": {"stale_ticks": 0}}, "quota.stale_ticks"),
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
