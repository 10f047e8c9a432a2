"""The driver's prerequisites: versions against the known branches, persistence, MIG mode and GPM per GPU.

Pure checks over recorded answers, and the same checks over a simulated node's probe report (an old driver with
persistence off, the demo node).
"""

from __future__ import annotations

from watchdog.sampling import probe
from watchdog.sampling.probe_checks import (DRIVER_FEATURES, NEWEST_KNOWN_BRANCH, check_driver, check_gpm, check_mig,
                                            check_persistence, driver_branch, nvml_prerequisites)
from watchdog.testbed import SimClock, SimulatedGpuNode


def ok(value) -> dict:
    return {"supported": True, "value": value}


def failed(error: str) -> dict:
    return {"supported": False, "error": error}


def test_a_current_driver_is_ok() -> None:
    line = check_driver(ok("580.82.07"), ok("13.580.82.07"), init=ok(None))

    assert line.status == "ok" and line.check == "driver"
    assert line.detail.startswith("driver 580.82.07, NVML 13.580.82.07")
    assert driver_branch("580.82.07") == 580 and driver_branch("garbage") is None


def test_an_old_driver_warns_with_each_missing_feature() -> None:
    line = check_driver(ok("535.104.05"), ok("12.535.104.05"))

    assert line.status == "warn"
    assert "before R575" in line.detail and "GPM context-switch metrics (NVML 12.9) missing" in line.detail
    assert "_v3" not in line.detail  # R510's process lists are there
    older = check_driver(ok("470.82.01"), ok("11.470.82.01"))
    assert [feature.feature in older.detail for feature in DRIVER_FEATURES] == [True] * len(DRIVER_FEATURES)
    assert f"R{DRIVER_FEATURES[-1].branch}" in older.fix


def test_a_driver_newer_than_the_bindings_warns() -> None:
    newer = f"{NEWEST_KNOWN_BRANCH + 10}.10.01"

    line = check_driver(ok(newer), ok(f"13.{newer}"))

    assert line.status == "warn" and f"newer than R{NEWEST_KNOWN_BRANCH}" in line.detail


def test_no_nvml_is_missing_and_an_unreadable_or_mismatched_version_warns() -> None:
    assert check_driver(None, None, init=failed("library_not_found")).status == "missing"
    unreadable = check_driver(failed("unknown"), ok("13.580.82.07"))
    assert unreadable.status == "warn" and "cannot be read" in unreadable.detail
    mismatch = check_driver(ok("580.82.07"), ok("12.575.51.03"))
    assert mismatch.status == "warn" and "not the kernel driver's" in mismatch.detail


def test_persistence_off_says_the_cost_and_how_to_enable_it() -> None:
    line = check_persistence({0: ok(1), 1: ok(0), 2: ok(0)})

    assert line.status == "warn"
    assert line.detail.startswith("off on GPU 1,2") and "1-3 s per GPU" in line.detail
    assert "nvidia-persistenced --persistence-mode" in line.fix and "nvidia-smi -pm 1" in line.fix
    assert line.as_json()["gpus"] == {"0": "on", "1": "off", "2": "off"}
    assert check_persistence({0: ok(1), 1: ok(1)}).status == "ok"
    assert check_persistence({0: failed("not_supported")}).status == "warn"


def test_mig_mode_pending_change_and_a_gpu_without_mig() -> None:
    assert check_mig({0: ok([1, 1]), 1: ok([0, 0]), 2: failed("not_supported")}).detail == (
        "GPU 0: on; GPU 1: off; GPU 2: not MIG-capable")
    pending = check_mig({0: ok([0, 1])})
    assert pending.status == "warn" and "GPU 0: off, pending on" in pending.detail and "reset" in pending.detail


def test_gpm_per_gpu() -> None:
    line = check_gpm({0: ok({"isSupportedDevice": 1}), 1: ok({"isSupportedDevice": 0}), 2: failed("gpu_is_lost")})

    assert line.status == "warn"
    assert line.detail.startswith("GPU 0: supported; GPU 1: not supported; GPU 2: error (gpu_is_lost)")
    assert check_gpm({0: ok({"isSupportedDevice": 1})}).status == "ok"


def test_an_old_driver_with_persistence_off_from_a_simulated_node() -> None:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario({
        "name": "old", "driver_version": "535.104.05",
        "gpus": [{"model": "H100-80GB-HBM3", "persistence_mode": False}, {"model": "A100-SXM4-40GB"}],
    }, clock)
    try:
        report = probe(node.nvml, sleep=clock.advance, event_wait_ms=5)
    finally:
        node.close()

    lines = {line.check: line for line in nvml_prerequisites(report)}
    assert list(lines) == ["driver", "persistence_mode", "mig_mode", "gpm"]
    assert lines["driver"].status == "warn" and "NVML 12.535.104.05" in lines["driver"].detail
    assert (lines["persistence_mode"].status, lines["persistence_mode"].gpus) == ("warn", ((0, "off"), (1, "on")))
    assert lines["mig_mode"].gpus == ((0, "off"), (1, "off"))
    assert lines["gpm"].gpus == ((0, "supported"), (1, "not supported"))


def test_without_nvml_only_the_driver_line() -> None:
    lines = nvml_prerequisites({"nvmlInit": failed("driver_not_loaded"), "gpus": []})

    assert [(line.check, line.status) for line in lines] == [("driver", "missing")]
