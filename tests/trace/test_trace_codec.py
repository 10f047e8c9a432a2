"""The codec's round trip is exact: replay must see the very values the agent saw."""

import json

import pytest

from watchdog.model import Attribution, GpuSample, NodeSample, PodRef
from watchdog.trace import decode_tick, decode_tick_signals, encode_tick


def test_round_trip_is_exact(recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    decoded_sample, decoded_attribution = decode_tick(encode_tick(sample, attribution))
    assert decoded_sample == sample
    assert dict(decoded_attribution.devices) == dict(attribution.devices)
    assert dict(decoded_attribution.processes) == dict(attribution.processes)
    assert dict(decoded_attribution.pods) == dict(attribution.pods)
    assert (decoded_attribution.healthy, decoded_attribution.kubelet_ok, decoded_attribution.api_ok) == (
        False, True, False)


def test_round_trip_survives_json_text_and_keeps_types(recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    text = json.dumps(encode_tick(sample, attribution))
    decoded_sample, decoded_attribution = decode_tick(json.loads(text))
    assert decoded_sample == sample
    assert isinstance(decoded_sample.gpus[0].power_limit_watts, float)
    assert decoded_attribution.pods["u-1"].labels == {"tenant": "ml"}
    assert list(decoded_attribution.processes) == [4242]


def test_whole_number_floats_come_back_as_floats_and_ints_as_ints() -> None:
    data = {"tick": 1, "timestamp": 5, "sample": {"node": "n", "gpus": [
        {"index": 0.0, "uuid": "GPU-x", "name": "g", "power_watts": 300}]}, "attribution": {}}
    sample, _ = decode_tick(data)
    assert type(sample.timestamp) is float and type(sample.gpus[0].power_watts) is float
    assert type(sample.gpus[0].index) is int


def test_non_finite_readings_are_recorded_as_not_available(recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    gpu = sample.gpus[1]
    broken = NodeSample(node="n", tick=1, timestamp=1.0, gpus=(GpuSample(index=1, uuid=gpu.uuid, name=gpu.name,
                                                                           power_watts=float("nan")),))
    encoded = encode_tick(broken, attribution)
    assert encoded["sample"]["gpus"][0]["power_watts"] is None


def test_sample_may_omit_what_the_line_and_header_say() -> None:
    sample, attribution = decode_tick({"tick": 3, "timestamp": 9.5, "sample": {"gpus": []},
                                       "attribution": {"healthy": True}}, node="node-h")
    assert (sample.node, sample.tick, sample.timestamp) == ("node-h", 3, 9.5)
    assert attribution.healthy and not attribution.pods


def test_attribution_without_healthy_decodes_as_unhealthy() -> None:
    """The schema requires `healthy`; data that skipped it must never license acting on absences."""
    _, attribution = decode_tick({"tick": 3, "timestamp": 9.5, "sample": {"gpus": []}, "attribution": {}}, node="n")
    assert attribution.healthy is False


def test_external_signals_round_trip_and_stay_optional(recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    assert "external_signals" not in encode_tick(sample, attribution)  # not recorded: not written
    assert decode_tick_signals(encode_tick(sample, attribution)) is None
    line = json.loads(json.dumps(encode_tick(sample, attribution, {"ml/trainer-0": 0.25, "web/api": 3,
                                                                   "web/broken": float("nan")})))
    assert line["external_signals"] == {"ml/trainer-0": 0.25, "web/api": 3.0}  # NaN carries nothing: dropped
    signals = decode_tick_signals(line)
    assert dict(signals) == {"ml/trainer-0": 0.25, "web/api": 3.0} and type(signals["web/api"]) is float
    assert decode_tick(line)[0] == sample  # the 2-tuple API is unchanged
    assert decode_tick_signals({**line, "external_signals": {}}) == {}  # recorded, but none that tick


def test_contradicting_tick_is_refused_with_the_field() -> None:
    with pytest.raises(ValueError, match=r"sample\.tick: 4 differs from the line's 3"):
        decode_tick({"tick": 3, "timestamp": 1.0, "sample": {"tick": 4, "gpus": []}, "attribution": {}}, node="n")


def test_hand_written_pod_refs_and_pod_devices() -> None:
    _, attribution = decode_tick({
        "tick": 0, "timestamp": 0.0, "sample": {"gpus": []},
        "attribution": {
            "devices": {"GPU-a": ["ml/a"]},
            "processes": {"12": "ml/a"},
            "pods": [{"uid": "u-a", "namespace": "ml", "name": "a", "devices": ["GPU-a", "GPU-b"]}],
        },
    }, node="n")
    assert attribution.devices["GPU-a"] == (PodRef("ml", "a"),)  # not duplicated by the pod's own list
    assert attribution.devices["GPU-b"] == (PodRef("ml", "a", uid="u-a"),)
    assert attribution.processes[12].key == "ml/a"
