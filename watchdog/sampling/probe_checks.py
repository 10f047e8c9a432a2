"""The driver side of the node prerequisites ``gpu-watchdog probe`` prints first: versions, persistence, MIG, GPM.

The sampler adapts to what a driver answers (fallbacks, calls it stops asking), so an old driver or a GPU without
GPM never stops the agent; it quietly gives fewer metrics. These checks say so up front, one line each, from the
answers the probe already recorded: pure functions over the report, no NVML call of their own.

``DRIVER_FEATURES`` is the one place that says which driver branch brings what the sampler relies on; a driver
newer than ``NEWEST_KNOWN_BRANCH`` works through the same calls but is past what the bindings describe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from watchdog.model.prerequisites import Prerequisite

Answer = Mapping[str, Any]  # one recorded call: {"supported": True, "value": …} or {"supported": False, "error": …}


@dataclass(frozen=True, slots=True)
class DriverFeature:
    branch: int  # the first driver branch (R<branch>) that has it
    feature: str
    without: str  # what the sampler does on an older driver


# Sources: the process calls' _v3 arrived with R510 (nvidia-settings 510.39.01's nvml.h, as nvitop PR #89 traces);
# the GPM group first appears in the R520 NVML API reference (docs.nvidia.com/deploy/archive/R520/nvml-api); the
# ClocksEventReasons rename is R535's nvml.h; the GR*_CTXSW_* GPM metrics are NVML 12.9, the R575 branch.
DRIVER_FEATURES = (
    DriverFeature(510, "process lists _v3", "falls back to the _v2 process calls"),
    DriverFeature(520, "GPM (Hopper or newer GPUs)", "no GPM: no per-MIG SM activity or DRAM bandwidth"),
    DriverFeature(535, "nvmlDeviceGetCurrentClocksEventReasons", "reads the older ClocksThrottleReasons"),
    DriverFeature(575, "GPM context-switch metrics (NVML 12.9)", "time-slicing is judged without switch time"),
)
# nvidia-ml-py 13.615.71, the bindings the NVML layer follows (pyproject.toml requires >= 13.580; README, Status and
# limits): the newest driver branch whose calls and structs the sampler was written against.
NEWEST_KNOWN_BRANCH = 615
BINDINGS = "nvidia-ml-py 13.615.71"
_BRANCH = re.compile(r"^(\d+)\.")
_ENABLED = 1  # nvml.h: NVML_FEATURE_ENABLED (nvmlEnableState_t), as nvmlDeviceGetPersistenceMode answers it


def driver_branch(version: str | None) -> int | None:
    """580 for "580.82.07"; None for anything that does not start with a number and a dot."""
    found = _BRANCH.match(version or "")
    return int(found.group(1)) if found else None


def check_driver(driver: Answer | None, nvml_version: Answer | None, *, init: Answer | None = None) -> Prerequisite:
    """nvmlSystemGetDriverVersion and nvmlSystemGetNVMLVersion against the branches the sampler knows."""
    title = "driver and NVML versions"
    if init is not None and not init.get("supported"):
        return Prerequisite("driver", title, "missing", f"nvmlInit failed ({init.get('error')})",
                            "the NVIDIA driver's libnvidia-ml must be visible in the pod (NVIDIA container runtime, "
                            "NVIDIA_DRIVER_CAPABILITIES=utility)")
    version = driver.get("value") if driver and driver.get("supported") else None
    library = nvml_version.get("value") if nvml_version and nvml_version.get("supported") else None
    branch = driver_branch(version)
    found = f"driver {version or '?'}, NVML {library or '?'}"
    if branch is None:
        return Prerequisite("driver", title, "warn", f"{found}: the driver's branch cannot be read",
                            "run nvidia-smi on the host and compare with docs/probe.md")
    if library and not str(library).endswith(str(version)):
        return Prerequisite("driver", title, "warn", f"{found}: the library is not the kernel driver's",
                            "the container's libnvidia-ml must come from the host's driver (reinstall or reboot)")
    lacking = [feature for feature in DRIVER_FEATURES if branch < feature.branch]
    if lacking:
        return Prerequisite("driver", title, "warn",
                            f"{found}; before R{lacking[-1].branch}: "
                            + "; ".join(f"{f.feature} missing, {f.without}" for f in lacking),
                            f"upgrade to R{DRIVER_FEATURES[-1].branch} or newer for every metric")
    if branch > NEWEST_KNOWN_BRANCH:
        return Prerequisite("driver", title, "warn",
                            f"{found}: newer than R{NEWEST_KNOWN_BRANCH} ({BINDINGS}, what the sampler follows)",
                            "check the table below for calls that changed")
    return Prerequisite("driver", title, "ok",
                        f"{found}: every feature the sampler uses "
                        f"(R{DRIVER_FEATURES[-1].branch}-R{NEWEST_KNOWN_BRANCH})")


def check_persistence(answers: Mapping[int, Answer]) -> Prerequisite:
    """nvmlDeviceGetPersistenceMode per GPU; off costs every GPU re-initialisation when its last client exits."""
    readings = tuple((index, _state(answer, {_ENABLED: "on", 0: "off"})) for index, answer in answers.items())
    off = [index for index, reading in readings if reading == "off"]
    unknown = [index for index, reading in readings if reading not in ("on", "off")]
    if off:
        return Prerequisite(
            "persistence_mode", "persistence mode", "warn",
            f"off on GPU {_list(off)}: the driver tears a GPU down when its last client exits and sets it up "
            "again for the next (1-3 s per GPU, ECC scrubbing; NVIDIA Driver Persistence)",
            "on the host: nvidia-persistenced --persistence-mode (or nvidia-smi -pm 1); the GPU Operator's driver "
            "does this", readings)
    if unknown:
        return Prerequisite("persistence_mode", "persistence mode", "warn",
                            f"unreadable on GPU {_list(unknown)}", "", readings)
    return Prerequisite("persistence_mode", "persistence mode", "ok", _summary(readings) or "no GPU", "", readings)


def check_mig(answers: Mapping[int, Answer]) -> Prerequisite:
    """nvmlDeviceGetMigMode per GPU: (current, pending); a pending change waits for a GPU reset."""
    readings = []
    pending = []
    for index, answer in answers.items():
        value = answer.get("value") if answer.get("supported") else None
        if isinstance(value, (list, tuple)) and len(value) == 2:
            current, wanted = (("on" if mode else "off") for mode in value)
            readings.append((index, current if current == wanted else f"{current}, pending {wanted}"))
            if current != wanted:
                pending.append(index)
        elif answer.get("error") == "not_supported":
            readings.append((index, "not MIG-capable"))
        else:
            readings.append((index, f"error ({answer.get('error')})"))
    if pending:
        return Prerequisite("mig_mode", "MIG mode", "warn",
                            f"{_summary(readings)}: a change takes effect only after a GPU reset",
                            "finish the MIG change (drain, reset the GPU) or undo it; the agent reads the current "
                            "mode", tuple(readings))
    return Prerequisite("mig_mode", "MIG mode", "ok", _summary(tuple(readings)) or "no GPU", "", tuple(readings))


def check_gpm(answers: Mapping[int, Answer]) -> Prerequisite:
    """nvmlGpmQueryDeviceSupport per GPU: GPM is the only per-MIG SM activity and DRAM bandwidth (Hopper+)."""
    readings = []
    for index, answer in answers.items():
        value = answer.get("value") if answer.get("supported") else None
        if isinstance(value, Mapping):
            readings.append((index, "supported" if value.get("isSupportedDevice") else "not supported"))
        else:
            readings.append((index, "not supported" if answer.get("error") == "not_supported"
                             else f"error ({answer.get('error')})"))
    lacking = [index for index, reading in readings if reading != "supported"]
    if lacking:
        return Prerequisite("gpm", "GPM", "warn",
                            f"{_summary(tuple(readings))}. GPM needs a Hopper or newer GPU and R520+; without it, "
                            "SM activity and DRAM bandwidth come from nvmlDeviceGetUtilizationRates alone (none per "
                            "MIG instance)", "", tuple(readings))
    return Prerequisite("gpm", "GPM", "ok", _summary(tuple(readings)) or "no GPU", "", tuple(readings))


def nvml_prerequisites(report: Mapping[str, Any]) -> list[Prerequisite]:
    """The driver's lines from a probe report: versions, then per-GPU persistence, MIG and GPM."""
    driver = check_driver(report.get("nvmlSystemGetDriverVersion"), report.get("nvmlSystemGetNVMLVersion"),
                          init=report.get("nvmlInit"))
    if driver.status == "missing":
        return [driver]
    gpus = [gpu for gpu in report.get("gpus", ())
            if gpu["calls"].get("nvmlDeviceGetHandleByIndex", {}).get("supported")]

    def answers(call: str) -> dict[int, Answer]:
        return {gpu["index"]: gpu["calls"].get(call, {"supported": False, "error": "not_asked"}) for gpu in gpus}

    return [driver, check_persistence(answers("nvmlDeviceGetPersistenceMode")),
            check_mig(answers("nvmlDeviceGetMigMode")), check_gpm(answers("nvmlGpmQueryDeviceSupport"))]


def _state(answer: Answer, names: Mapping[int, str]) -> str:
    if answer.get("supported"):
        return names.get(answer.get("value"), str(answer.get("value")))
    return "not supported" if answer.get("error") == "not_supported" else f"error ({answer.get('error')})"


def _summary(readings: tuple[tuple[int, str], ...] | list[tuple[int, str]]) -> str:
    """"GPU 0,1: on; GPU 2: off": GPUs grouped by reading, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index, reading in readings:
        groups.setdefault(reading, []).append(index)
    return "; ".join(f"GPU {_list(indexes)}: {reading}" for reading, indexes in groups.items())


def _list(indexes: list[int]) -> str:
    return ",".join(str(index) for index in indexes)
