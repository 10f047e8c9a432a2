"""The probe report as a person reads it first: node prerequisites, then one aligned line per call.

The JSON (``gpu-watchdog probe --json``) keeps every answer for a tool or an issue report, and runs to thousands of
lines on a MIG node. This rendering keeps what an operator decides on: each call and GPM metric the sampler reads,
answered ``supported`` (with its value and unit), ``not supported`` or ``error (<NVML error name>)``: one block per
GPU, then one line per call for all of that GPU's MIG devices together (their values in device order) and likewise
for its GPU instances, so a dense MIG node stays a few screens long. Devices that answer a call differently get a
line per answer, naming them. A fallback call is shown only where its primary failed, since only then does the
sampler use it. Pure: a report in, text out, at most ``width`` columns.
"""

from __future__ import annotations

import textwrap
from typing import Any, Callable, Mapping, Sequence

from watchdog.sampling.probe_gpm import GR0_CTXSW, OTHER_ENGINES_CTXSW_ACTIVE_PCT

Answer = Mapping[str, Any]
Device = tuple[str, Mapping[str, Answer]]  # (its short name, label → answer)
_GIB = float(1 << 30)
_LABEL_WIDTH = 44
_ANSWER_WIDTH = 13  # "not supported"


def _memory(value: Any) -> str:
    used = f"{value['used'] / _GIB:.1f} of {value['total'] / _GIB:.1f} GiB used"
    return used + (f", {value['reserved'] / _GIB:.1f} GiB reserved" if "reserved" in value else "")


# format → (one device's value as a short text, the unit after it, the full text of a lone device or None)
_FORMATS: dict[str, tuple[Callable[[Any], str], str, Callable[[Any], str] | None]] = {
    "text": (str, "", None),
    "memory": (lambda value: f"{value['used'] / _GIB:.1f}", " GiB used", _memory),
    "utilisation": (lambda value: f"{value['gpu']}/{value['memory']}", " % (gpu/memory)", None),
    "milliwatts": (lambda value: f"{value / 1000:.1f}", " W", None),
    "celsius": (str, " °C", None),
    "mhz": (str, " MHz", None),
    "mask": (lambda value: f"0x{int(value):x}", "", None),
    "kb_per_second": (str, " KB/s", None),
    "generation": (lambda value: f"gen {value}", "", None),
    "lanes": (lambda value: f"x{value}", "", None),
    "processes": (lambda value: str(len(value)), " processes", None),
    "samples": (lambda value: str(len(value)), " samples", None),
    "gpm_support": (lambda value: "GPM capable" if value.get("isSupportedDevice") else "not GPM capable", "", None),
    "percent": (lambda value: f"{value:.1f}", " %", None),
    "mib_per_second": (lambda value: f"{value:.1f}", " MiB/s", None),  # nvml.h: PCIE_TX/RX_PER_SEC are MiB/s
    "per_second": (lambda value: f"{value:.1f}", " /s", None),
    # vGPU host calls (nvml.h: NVML_GPU_VIRTUALIZATION_MODE_*, NVML_HOST_VGPU_MODE_*, NVML_VGPU_SCHEDULER_POLICY_*)
    "virtualization": (lambda value: _VIRTUALIZATION.get(value, str(value)), "", None),
    "host_vgpu_mode": (lambda value: {0: "non-SR-IOV", 1: "SR-IOV"}.get(value, str(value)), "", None),
    "vgpus": (lambda value: str(len(value)), " active vGPUs", None),
    "vgpu_scheduler": (lambda value: _scheduler_text(value), "", None),
    "vgpu_scheduler_log": (lambda value: f"{value.get('entriesCount')} entries, {_scheduler_text(value)}", "", None),
    "vm_id": (lambda value: f"{value[0]} ({'uuid' if value[1] == 1 else 'domain id'})", "", None),
    "gib": (lambda value: f"{value / _GIB:.1f}", " GiB", None),
    "gpu_instance": (lambda value: "none" if value == 0xFFFFFFFF else str(value), "", None),
}
_VIRTUALIZATION = {0: "none (bare metal)", 1: "passthrough", 2: "vGPU guest", 3: "vGPU host", 4: "vSGA host"}
_POLICIES = {1: "best_effort", 2: "equal_share", 3: "fixed_share"}
_ARR = {0: "ARR default", 1: "ARR off", 2: "ARR on"}  # NVML_VGPU_SCHEDULER_ARR_*


def _scheduler_text(value: dict) -> str:
    """Policy, adaptive round-robin and time slice of a scheduler state (or log) struct, as the probe recorded it."""
    arr = value.get("arrMode")
    params = (value.get("schedulerParams") or {}).get("vgpuSchedDataWithARR" if arr == 2 else "vgpuSchedData") or {}
    timeslice = params.get("timeslice")
    text = f"{_POLICIES.get(value.get('schedulerPolicy'), 'unknown')}, {_ARR.get(arr, f'ARR {arr}')}"
    return text + (f", {timeslice / 1e6:g} ms slice" if timeslice else "")
# (call as the report names it, its fallback or None, format), in the sampler's order.
_PROCESS_ROWS = (
    ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2", "processes"),
    ("nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2", "processes"),
    ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2", "processes"),
)
_GPU_ROWS = (
    ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "memory"),
    ("nvmlDeviceGetUtilizationRates", None, "utilisation"),
    ("nvmlDeviceGetPowerUsage", None, "milliwatts"),
    ("nvmlDeviceGetEnforcedPowerLimit", None, "milliwatts"),
    ("nvmlDeviceGetTemperature(GPU)", None, "celsius"),
    ("nvmlDeviceGetClockInfo(SM)", None, "mhz"),
    ("nvmlDeviceGetMaxClockInfo(SM)", None, "mhz"),
    ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons", "mask"),
    ("nvmlDeviceGetPcieThroughput(TX)", None, "kb_per_second"),
    ("nvmlDeviceGetPcieThroughput(RX)", None, "kb_per_second"),
    ("nvmlDeviceGetCurrPcieLinkGeneration", None, "generation"),
    ("nvmlDeviceGetCurrPcieLinkWidth", None, "lanes"),
    *_PROCESS_ROWS,
    ("nvmlDeviceGetProcessUtilization", None, "samples"),
    ("nvmlGpmQueryDeviceSupport", None, "gpm_support"),
    ("nvmlDeviceGetVirtualizationMode", None, "virtualization"),
    ("nvmlDeviceGetHostVgpuMode", None, "host_vgpu_mode"),
    ("nvmlDeviceGetActiveVgpus", None, "vgpus"),
    ("nvmlDeviceGetVgpuSchedulerState", None, "vgpu_scheduler"),
    ("nvmlDeviceGetVgpuSchedulerLog", None, "vgpu_scheduler_log"),
    ("nvmlDeviceGetVgpuUtilization", None, "samples"),
    ("nvmlDeviceGetVgpuInstancesUtilizationInfo", None, "samples"),
)
_VGPU_ROWS = (
    ("nvmlVgpuInstanceGetUUID", None, "text"),
    ("nvmlVgpuInstanceGetVmID", None, "vm_id"),
    ("nvmlVgpuInstanceGetType", None, "text"),
    ("nvmlVgpuTypeGetName", None, "text"),
    ("nvmlVgpuTypeGetFramebufferSize", None, "gib"),
    ("nvmlVgpuInstanceGetFbUsage", None, "gib"),
    ("nvmlVgpuInstanceGetGpuInstanceId", None, "gpu_instance"),
)
_MIG_ROWS = (("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "memory"), *_PROCESS_ROWS)
_GPU_IDENTITY = ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMigMode",
                 "nvmlDeviceGetMaxMigDeviceCount")
_MIG_IDENTITY = ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
                 "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId")
# Answers that mean "supported, nothing to report" (watchdog.sampling.processes: NotFound, or pynvml's
# NVMLError(SUCCESS), when no utilisation sample is newer than the timestamp asked for).
_EMPTY = {"nvmlDeviceGetProcessUtilization": {"not_found", "nvml_error_0"},
          "nvmlDeviceGetVgpuUtilization": {"not_found"}, "nvmlDeviceGetVgpuInstancesUtilizationInfo": {"not_found"}}
_UNUSED_GPM = {GR0_CTXSW[0], GR0_CTXSW[1], GR0_CTXSW[3]}  # asked to see them answered; the sampler reads neither
_OTHER_ENGINES = "GPM GR1..GR7_CTXSW_ACTIVE_PCT"


def answer_text(answer: Answer) -> str:
    """supported / not supported / error (<name>)."""
    if answer.get("supported"):
        return "supported"
    error = answer.get("error", "not_asked")
    return "not supported" if error == "not_supported" else f"error ({error})"


def render_table(report: Mapping[str, Any], *, width: int = 100) -> str:
    """Prerequisites, the system calls, each GPU with its MIG devices and GPU instances, the event steps, a count."""
    table = _Table(width)
    _prerequisites(table, report.get("prerequisites", ()))
    init = report.get("nvmlInit", {})
    if not init.get("supported"):
        table.text(f"nvmlInit: {answer_text(init)}: no NVML call could be made")
        return table.render()
    table.text("NVML")
    system = {label: (report[label], "text") for label in
              ("nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlDeviceGetCount") if label in report}
    table.rows(2, [("", system)], list(system))
    interval = float(report.get("gpm", {}).get("interval_seconds") or 0.0)
    for gpu in report.get("gpus", ()):
        _gpu(table, gpu, interval=interval)
    _events(table, report.get("events"))
    counts = table.counts
    table.text()
    table.text(f"{sum(counts.values())} answers: {counts['supported']} supported, "
               f"{counts['not supported']} not supported, {counts['error']} errors")
    return table.render()


class _Table:
    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []
        self.counts = {"supported": 0, "not supported": 0, "error": 0}

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"

    def text(self, line: str = "") -> None:
        self.lines.append(_clip(line, self.width))

    def wrapped(self, line: str, indent: int) -> None:
        self.lines.extend(textwrap.wrap(line, width=self.width, subsequent_indent=" " * indent,
                                        break_long_words=False, break_on_hyphens=False))

    def row(self, indent: int, label: str, answer: str, value: str = "", *, count: int = 1) -> None:
        self.counts["error" if answer.startswith("error") else answer] += count
        head = f"{' ' * indent}{label}".ljust(_LABEL_WIDTH) + "  "
        self.lines.append(_clip(f"{head}{answer.ljust(_ANSWER_WIDTH)}  {value}".rstrip(), self.width))

    def rows(self, indent: int, devices: Sequence[Device], labels: Sequence[str],
             fallbacks: Mapping[str, str] | None = None) -> None:
        """One line per label for all ``devices`` (values in device order); a line per answer where they differ."""
        for label in labels:
            present = [(name, calls[label]) for name, calls in devices if label in calls]
            if not present:
                continue
            groups: dict[str, list[tuple[str, Any]]] = {}
            for name, (answer, fmt) in present:
                groups.setdefault(_answer(label, answer), []).append((name, (answer, fmt)))
            for text, members in groups.items():
                names = "" if len(groups) == 1 else "on " + ",".join(name for name, _ in members) + ": "
                value = _values([entry for _, entry in members], lone=len(present) == 1) if text == "supported" else ""
                self.row(indent, label, text, (names + value).rstrip(": "), count=len(members))
            fallback = (fallbacks or {}).get(label)
            if fallback and any(text != "supported" for text in groups):
                self.rows(indent, devices, [fallback])


def _answer(label: str, answer: Answer) -> str:
    return "supported" if answer.get("error") in _EMPTY.get(label, ()) else answer_text(answer)


def _values(entries: list[tuple[Answer, str]], *, lone: bool) -> str:
    """The devices' values in order, the unit once; a lone device's in full ("55.1 of 79.6 GiB used, …")."""
    texts = []
    unit = ""
    for answer, fmt in entries:
        if not answer.get("supported"):  # an "empty" answer such as NotFound: supported, no value
            texts.append("none")
            continue
        short, unit, full = _FORMATS[fmt]
        try:
            texts.append(full(answer["value"]) if lone and full else short(answer["value"]))
        except (KeyError, TypeError, ValueError):  # an answer of an unexpected shape: shown raw
            texts.append(str(answer.get("value")))
    if lone and entries and _FORMATS[entries[0][1]][2]:
        return texts[0]
    return ", ".join(texts) + unit


def _prerequisites(table: _Table, prerequisites: Any) -> None:
    if not prerequisites:
        return
    table.text("Node prerequisites")
    title_width = max(len(entry["title"]) for entry in prerequisites)
    indent = 2 + 8 + 1 + title_width + 2
    for entry in prerequisites:
        head = f"  {entry['status'].ljust(8)} {entry['title'].ljust(title_width)}  "
        text = entry["detail"] + (f". Fix: {entry['fix']}" if entry.get("fix") else "")
        # paths stay whole (one may run past the width) so that they can be copied
        wrapped = textwrap.wrap(text, width=max(20, table.width - indent), break_long_words=False,
                                break_on_hyphens=False) or [""]
        table.lines.append(head + wrapped[0])
        table.lines.extend(" " * indent + line for line in wrapped[1:])
    table.text()


def _gpu(table: _Table, gpu: Mapping[str, Any], *, interval: float) -> None:
    calls = gpu.get("calls", {})
    name = calls.get("nvmlDeviceGetName", {}).get("value", "")
    mig = calls.get("nvmlDeviceGetMigMode", {})
    mode = ("MIG on" if mig["value"][0] else "MIG off") if mig.get("supported") else ""
    table.text()
    table.text(f"GPU {gpu['index']}  {name}  {gpu.get('uuid', '')}  {mode}".rstrip())
    _failed_only(table, 2, calls, _GPU_IDENTITY)
    if not calls.get("nvmlDeviceGetHandleByIndex", {}).get("supported"):
        return
    _device_rows(table, 2, [("", calls)], _GPU_ROWS)
    _gpm_rows(table, 2, [("", gpu.get("gpm"))], interval=interval)
    migs = gpu.get("mig_devices", ())
    if migs:
        table.wrapped("  MIG devices (slot:profile(GI/CI)) " + "  ".join(_mig_name(mig) for mig in migs), 4)
        for mig in migs:
            _failed_only(table, 4, mig.get("calls", {}), _MIG_IDENTITY, prefix=f"MIG {mig['slot']} ")
        live = [(str(mig["slot"]), mig.get("calls", {}), mig.get("gpm")) for mig in migs
                if mig.get("calls", {}).get("nvmlDeviceGetMigDeviceHandleByIndex", {}).get("supported")]
        _device_rows(table, 4, [(name, calls) for name, calls, _ in live], _MIG_ROWS)
        _gpm_rows(table, 4, [(name, gpm) for name, _, gpm in live], interval=interval)
    vgpus = gpu.get("vgpus", ())
    if vgpus:
        table.wrapped("  vGPUs (nvmlDeviceGetActiveVgpus) " + ", ".join(str(vgpu["instance"]) for vgpu in vgpus), 4)
        _device_rows(table, 4, [(str(vgpu["instance"]), vgpu.get("calls", {})) for vgpu in vgpus], _VGPU_ROWS)
    instances = gpu.get("gpu_instances", ())
    if instances:
        table.wrapped("  GPU instances (nvmlGpmMigSampleGet on the GPU's handle) "
                      + ", ".join(str(gi["gpu_instance"]) for gi in instances), 4)
        _gpm_rows(table, 4, [(str(gi["gpu_instance"]), gi.get("gpm")) for gi in instances], interval=interval)


def _mig_name(mig: Mapping[str, Any]) -> str:
    """"0:3g.40gb(1/0)": the slot, the profile and GI/CI ids, from the MIG device's own answers."""
    calls = mig.get("calls", {})
    name = str(calls.get("nvmlDeviceGetName", {}).get("value", ""))
    profile = name.rpartition(" MIG ")[2] if " MIG " in name else "?"
    gi = calls.get("nvmlDeviceGetGpuInstanceId", {}).get("value", "?")
    ci = calls.get("nvmlDeviceGetComputeInstanceId", {}).get("value", "?")
    return f"{mig['slot']}:{profile}({gi}/{ci})"


def _device_rows(table: _Table, indent: int, devices: Sequence[tuple[str, Mapping[str, Answer]]], rows) -> None:
    formats = {label: fmt for label, _, fmt in rows} | {fallback: fmt for _, fallback, fmt in rows if fallback}
    annotated = [(name, {label: (answer, formats[label]) for label, answer in calls.items() if label in formats})
                 for name, calls in devices]
    table.rows(indent, annotated, [label for label, _, _ in rows],
               {label: fallback for label, fallback, _ in rows if fallback})


def _failed_only(table: _Table, indent: int, calls: Mapping[str, Answer], labels: tuple[str, ...],
                 prefix: str = "") -> None:
    """Identity calls fill a header; only a failure of one becomes a line."""
    for label in labels:
        if label in calls and not calls[label].get("supported"):
            table.row(indent, prefix + label, answer_text(calls[label]))


def _gpm_rows(table: _Table, indent: int, streams: Sequence[tuple[str, Any]], *, interval: float) -> None:
    """The GPM metrics the sampler reads on each stream, every stream's answer on one line per metric."""
    devices = [(name, _gpm_answers(gpm, interval=interval)) for name, gpm in streams if gpm]
    labels: list[str] = []
    for _, answers in devices:
        labels.extend(label for label in answers if label not in labels)
    table.rows(indent, devices, labels)


def _gpm_answers(gpm: Mapping[str, Any], *, interval: float) -> dict[str, tuple[Answer, str]]:
    """One stream's GPM answers as label → (answer, format): a failed step, or each metric read."""
    for step, label in (("nvmlGpmSampleAlloc", "nvmlGpmSampleAlloc"), ("first sample", "nvmlGpmSampleGet"),
                        ("second sample", "nvmlGpmSampleGet")):
        if step in gpm and not gpm[step].get("supported"):
            return {label: (gpm[step], "text")}
    metrics = gpm.get("metrics")
    if not metrics:
        return {}
    if not metrics.get("supported"):
        return {"nvmlGpmMetricsGet": (metrics, "text")}
    answers: dict[str, tuple[Answer, str]] = {}
    engines = []
    for key, entry in metrics.get("value", {}).items():
        metric, name = int(key), entry["name"]
        if metric in _UNUSED_GPM:
            continue
        if metric in OTHER_ENGINES_CTXSW_ACTIVE_PCT:
            engines.append(entry)
            continue
        value, fmt = float(entry.get("value", 0.0)), "percent"
        if name.endswith("_PER_SEC"):
            fmt = "mib_per_second"
        elif name.endswith("_REQUESTS") and interval > 0:  # a count between the two samples
            value, fmt = value / interval, "per_second"
        answers[f"GPM {name}"] = ({**entry, "value": value}, fmt)
    if engines:
        answered = sum(1 for entry in engines if entry.get("supported"))
        engine_answer = {"supported": True, "value": f"{answered} of {len(engines)} engines"} if answered \
            else engines[0]
        answers[_OTHER_ENGINES] = (engine_answer, "text")
    return answers


def _events(table: _Table, events: Mapping[str, Any] | None) -> None:
    """The Xid watcher's steps: a wait that timed out is the normal answer on a quiet node, shown as supported."""
    if not events:
        return
    table.text()
    table.text(f"Xid events (the watcher's mask 0x{int(events.get('wanted_mask', 0)):x})")
    if "nvmlEventSetCreate" in events:
        table.row(2, "nvmlEventSetCreate", answer_text(events["nvmlEventSetCreate"]))
    for gpu in events.get("gpus", ()):
        label = f"GPU {gpu['index']} nvmlDeviceRegisterEvents"
        if "nvmlDeviceRegisterEvents" in gpu:
            registered = gpu["nvmlDeviceRegisterEvents"]
            mask = f"mask 0x{gpu['mask']:x}" if registered.get("supported") else ""
            table.row(2, label, answer_text(registered), mask)
        elif not gpu.get("nvmlDeviceGetSupportedEventTypes", {}).get("supported"):
            table.row(2, f"GPU {gpu['index']} nvmlDeviceGetSupportedEventTypes",
                      answer_text(gpu.get("nvmlDeviceGetSupportedEventTypes", {})))
        elif gpu.get("mask") == 0:
            table.row(2, label, "not supported", "none of the watcher's event types")
    if "mig_device" in events:
        answer = events["mig_device"].get("nvmlDeviceGetSupportedEventTypes", {})
        table.row(2, "MIG nvmlDeviceGetSupportedEventTypes", answer_text(answer),
                  "" if answer.get("supported") else "expected: Xid events come per GPU")
    wait = events.get("nvmlEventSetWait_v2")
    if wait is not None:
        seconds = f"{wait.get('waited_ms', 0) / 1000:g} s"
        outcome = {"no_event": f"no event in {seconds}", "event": "an event arrived"}.get(wait.get("outcome"), "")
        table.row(2, "nvmlEventSetWait_v2", answer_text(wait), outcome)
    if "nvmlEventSetFree" in events:
        table.row(2, "nvmlEventSetFree", answer_text(events["nvmlEventSetFree"]))


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"
