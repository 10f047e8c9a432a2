"""Scenario loading: the demo is valid, errors name the field, identities are filled deterministically."""

from __future__ import annotations

import pytest

from watchdog.testbed import DEMO_SCENARIO, ScenarioError, SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.curves import Curve, CurveEvaluator, parse_quantity
from watchdog.testbed.profiles import GPU_MODELS, place_instances


def minimal(**overrides) -> dict:
    base = {"name": "m", "gpus": [{"model": "H100-80GB-HBM3", "mig": ["1g.10gb", "1g.10gb"]},
                                  {"model": "A100-SXM4-40GB", "replicas": 2}]}
    base.update(overrides)
    return base


def test_demo_scenario_loads_and_has_the_promised_shape():
    demo = load_scenario(DEMO_SCENARIO)
    assert [gpu.model for gpu in demo.gpus] == ["H100-80GB-HBM3", "H100-80GB-HBM3", "A100-SXM4-40GB"]
    assert {pod.namespace for pod in demo.pods} >= {"ml-prod", "ml-research", "batch", "analytics"}
    assert any(xid.xid == 13 and xid.gpu == 1 for xid in demo.xids)
    node = SimulatedGpuNode.from_scenario(demo, SimClock())
    capped = [tick for tick in range(0, 240, 5) if node.state(tick).gpus[0].clock_reasons & 0x4]
    assert capped and len(capped) < 48  # GPU 0 is power capped periodically, not always
    assert len({process.pid for process in node.processes()}) == len({p.pod for p in node.processes()})
    node.close()


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": [{"model": "H100-80GB"}]}, "gpus.0.model"),
    ({"gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "3g.40gb", "2g.20gb"]}]}, "gpus.0.mig[2] 2g.20gb"),
    ({"gpus": [{"model": "A100-SXM4-40GB", "mig": ["1g.20gb"]}]}, "gpus.0.mig[0] A100-SXM4-40GB has no MIG profile"),
    ({"pods": [{"namespace": "a", "name": "b", "device": {"gpu": 0, "instance": 5}}]}, "pods.0.device.instance"),
    ({"pods": [{"namespace": "a", "name": "b", "device": {"gpu": 0}}]}, "pods.0.device.instance"),
    ({"pods": [{"namespace": "a", "name": "b", "device": {"gpu": 7}}]}, "pods.0.device.gpu"),
    ({"pods": [{"namespace": "a", "name": "b", "device": {"gpu": 1, "replica": 2}}]}, "pods.0.device.replica"),
    ({"pods": [{"namespace": "a", "name": "b", "workload": {"sm": {"bsae": 1}}}]}, "pods.0.workload.sm.bsae"),
    ({"pods": [{"namespace": "a", "name": "b", "workload": {"memory": {"base": "8 gallons"}}}]},
     "pods.0.workload.memory.base"),
    ({"xids": [{"at": 1, "gpu": 1, "instance": 0, "xid": 13}]}, "xids.0.instance"),
    ({"faults": [{"at": 1, "gpu": 0}]}, "faults.0"),
    ({"tick_seconds": 0}, "tick_seconds"),
    ({"pods": [{"namespace": "a", "name": "b", "device": {"gpu": 1}, "claim": "c"}]}, "pods.0.claim: only a DRA"),
    ({"dra": {}, "pods": [{"namespace": "a", "name": "b", "claim": "c"}]}, "pods.0.claim: a claim needs"),
    ({"dra": {}, "pods": [{"namespace": "a", "name": "b", "device": {"gpu": 1}, "claim": "c"},
                          {"namespace": "a", "name": "d", "device": {"gpu": 0, "instance": 0}, "claim": "c"}]},
     "pods.1.device: claim a/c is shared"),
    ({"dra": {"slice_lag_ticks": -1}}, "dra.slice_lag_ticks"),
])
def test_errors_name_the_field(change, field):
    with pytest.raises(ScenarioError) as raised:
        load_scenario(minimal(**change))
    assert field in str(raised.value)


def test_missing_files_and_bad_yaml_are_clear(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    with pytest.raises(ScenarioError, match="must be a mapping"):
        load_scenario(listed)


def test_uids_pids_and_replicas_are_filled_deterministically():
    pods = [{"namespace": "a", "name": f"p{n}", "device": {"gpu": 1}} for n in range(3)]
    first, second = load_scenario(minimal(pods=pods)), load_scenario(minimal(pods=pods))
    assert [p.uid for p in first.pods] == [p.uid for p in second.pods]
    assert [p.pid for p in first.pods] == [p.pid for p in second.pods]
    assert len({p.pid for p in first.pods}) == 3 and all(10_000 <= p.pid < 400_010 for p in first.pods)
    assert [p.device.replica for p in first.pods] == [0, 1, 0]
    node = SimulatedGpuNode.from_scenario(first, SimClock())
    assert [a.device_id.rsplit("::", 1)[1] for a in node.assignments()] == ["0", "1", "0"]
    node.close()


def test_curves_combine_steps_ramp_sine_noise_and_windows():
    assert parse_quantity("8Gi") == 8 * 2**30 and parse_quantity("1.5G") == 1.5e9 and parse_quantity(3) == 3
    steps = CurveEvaluator(Curve(base=1, steps=[{"at": 10, "value": 5}]), seed_parts=(1,))
    assert (steps(9), steps(10), steps(99)) == (1, 5, 5)
    ramp = CurveEvaluator(Curve(base=0, ramp={"from_tick": 10, "to_tick": 20, "to": 100}), seed_parts=(1,))
    assert (ramp(5), ramp(15), ramp(25)) == (0, 50, 100)
    sine = CurveEvaluator(Curve(base=0.5, sine={"period": 4, "amplitude": 0.5}), seed_parts=(1,), upper=1.0)
    assert sine(1) == pytest.approx(1.0) and sine(3) == pytest.approx(0.0)
    windows = CurveEvaluator(Curve(base=2, active=[(5, 8)]), seed_parts=(1,))
    assert [windows(t) for t in (4, 5, 7, 8)] == [0, 2, 2, 0]
    noisy = Curve(base=10, noise=1)
    a, b = CurveEvaluator(noisy, seed_parts=(1, 2)), CurveEvaluator(noisy, seed_parts=(1, 2))
    assert [a(t) for t in (700, 3, 256)] == [b(t) for t in (700, 3, 256)]
    assert a(3) != CurveEvaluator(noisy, seed_parts=(1, 3))(3)


def test_placement_gives_real_gpu_instance_ids():
    h100 = GPU_MODELS["H100-80GB-HBM3"]
    placed = place_instances(h100, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    assert [(p.slot, p.gpu_instance) for p in placed] == [(0, 1), (4, 5), (3, 10), (6, 13)]
    assert [p.gpu_instance for p in place_instances(h100, ["7g.80gb"])] == [0]
    with pytest.raises(ValueError, match="at most 1"):
        place_instances(h100, ["4g.40gb", "4g.40gb"])
