"""The simulated NVML must be indistinguishable from pynvml where the sampler can tell.

Signatures, constants, error classes and struct classes are checked against the installed nvidia-ml-py; the
names the sampler uses are found by parsing watchdog/sampling with ``ast`` (attribute uses *and* string names
passed to getattr/guards), so a new NVML call in the sampler fails here until the simulation answers it.
"""

from __future__ import annotations

import ast
import ctypes
import inspect
import re
from pathlib import Path

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import DEMO_SCENARIO, SimClock, SimulatedGpuNode

pynvml = nvml_library.load()
ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^(NVML_[A-Z0-9_]+|nvml[A-Z]\w*|NVMLError\w*|c_nvml\w+|NVMLLibraryMismatchError)$")
COMMENTED_CONSTANT = re.compile(r"^(\w+) = (0x[0-9a-fA-F]+|\d+)\s+#\s*(nvml\w+|NVML_\w+)")

BRIEF_FUNCTIONS = """nvmlInit nvmlInitWithFlags nvmlShutdown nvmlSystemGetDriverVersion nvmlDeviceGetCount
nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByUUID nvmlDeviceGetUUID nvmlDeviceGetName nvmlDeviceGetIndex
nvmlDeviceGetMigMode nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMigDeviceHandleByIndex nvmlDeviceIsMigDeviceHandle
nvmlDeviceGetDeviceHandleFromMigDeviceHandle nvmlDeviceGetGpuInstanceId nvmlDeviceGetComputeInstanceId
nvmlDeviceGetAttributes nvmlDeviceGetMemoryInfo nvmlDeviceGetUtilizationRates nvmlDeviceGetPowerUsage
nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetPowerManagementLimit nvmlDeviceGetTemperature nvmlDeviceGetClockInfo
nvmlDeviceGetMaxClockInfo nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons
nvmlDeviceGetPcieThroughput nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v2
nvmlDeviceGetProcessUtilization nvmlGpmQueryDeviceSupport nvmlGpmSampleAlloc nvmlGpmSampleFree nvmlGpmSampleGet
nvmlGpmMigSampleGet nvmlGpmMetricsGet nvmlEventSetCreate nvmlDeviceGetSupportedEventTypes nvmlDeviceRegisterEvents
nvmlEventSetWait_v2 nvmlEventSetWait nvmlEventSetFree""".split()

VGPU_FUNCTIONS = """nvmlDeviceGetVirtualizationMode nvmlDeviceGetHostVgpuMode nvmlDeviceGetActiveVgpus
nvmlDeviceGetVgpuSchedulerState nvmlDeviceGetVgpuSchedulerLog nvmlDeviceGetVgpuUtilization
nvmlDeviceGetVgpuInstancesUtilizationInfo
nvmlVgpuInstanceGetUUID nvmlVgpuInstanceGetVmID nvmlVgpuInstanceGetType nvmlVgpuInstanceGetFbUsage
nvmlVgpuInstanceGetGpuInstanceId nvmlVgpuTypeGetName nvmlVgpuTypeGetFramebufferSize""".split()

# The fields the simulation writes into each vGPU struct: ctypes accepts any attribute name on a Structure
# instance, so a misspelt field would be set silently and never reach a reader of the real layout.
VGPU_STRUCT_FIELDS = {
    "c_nvmlVgpuInstanceUtilizationSample_t": {"vgpuInstance", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil"},
    "c_nvmlVgpuInstanceUtilizationInfo_v1_t": {"vgpuInstance", "timeStamp", "smUtil", "memUtil", "encUtil",
                                               "decUtil"},
    "c_nvmlVgpuSchedulerGetState_t": {"schedulerPolicy", "arrMode", "schedulerParams"},
    "c_nvmlVgpuSchedulerParams_t": {"vgpuSchedDataWithARR"},
    "c_nvmlVgpuSchedDataWithARR_t": {"avgFactor", "timeslice"},
    "c_nvmlVgpuSchedulerLog_t": {"engineId", "schedulerPolicy", "arrMode", "schedulerParams", "entriesCount",
                                 "logEntries"},
    "c_nvmlVgpuSchedulerLogEntry_t": {"timestamp", "timeRunTotal", "timeRun", "swRunlistId", "targetTimeSlice",
                                      "cumulativePreemptionTime"},
    "c_nvmlValue_t": {"uiVal"},
}


@pytest.fixture
def node():
    sim = SimulatedGpuNode.from_scenario(DEMO_SCENARIO, SimClock())
    sim.nvml.nvmlInit()
    yield sim
    sim.close()


def _struct_fields() -> set[str]:
    """Field names of pynvml's ctypes structs (``metrics[i].nvmlReturn`` is a field, not a module name)."""
    fields: set[str] = set()
    for value in vars(pynvml).values():
        if isinstance(value, type) and issubclass(value, (ctypes.Structure, ctypes.Union)):
            fields.update(field[0] for field in getattr(value, "_fields_", ()))
    return fields


def _names_used(directory: Path) -> tuple[set[str], set[str]]:
    """NVML names a package's source mentions: (must exist, check if they exist).

    Attribute uses (``nvml.NAME``) and getattr's name argument must exist in pynvml. Other string literals that
    look like NVML names (``guard.call(key, "nvmlDeviceGetPowerUsage", …)``) are checked when pynvml has them;
    one it lacks is only a label (``"nvmlDeviceGetMemoryInfo_v2"`` naming a metric), not a call.
    """
    required: set[str] = set()
    mentioned: set[str] = set()
    fields = _struct_fields()
    for path in sorted(directory.rglob("*.py")):
        for item in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(item, ast.Attribute) and NAME.match(item.attr) and item.attr not in fields:
                required.add(item.attr)
            elif (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "getattr"
                  and len(item.args) >= 2 and isinstance(item.args[1], ast.Constant)
                  and isinstance(item.args[1].value, str) and NAME.match(item.args[1].value)):
                required.add(item.args[1].value)
            elif isinstance(item, ast.Constant) and isinstance(item.value, str) and NAME.match(item.value):
                mentioned.add(item.value)
    return required, {name for name in mentioned - required if hasattr(pynvml, name)}


def _literal_values(directory: Path) -> list[tuple[str, str, object]]:
    """(file, NVML name, value) for ``NVML_X = 3`` assignments and ``{"NVML_X": 3}`` dict entries."""
    found = []
    for path in sorted(directory.rglob("*.py")):
        for item in ast.walk(ast.parse(path.read_text())):
            if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                for target in item.targets:
                    if isinstance(target, ast.Name) and NAME.match(target.id):
                        found.append((path.name, target.id, item.value.value))
            elif isinstance(item, ast.Dict):
                for key, value in zip(item.keys, item.values):
                    if (isinstance(key, ast.Constant) and isinstance(key.value, str) and NAME.match(key.value)
                            and isinstance(value, ast.Constant) and isinstance(value.value, int)):
                        found.append((path.name, key.value, value.value))
        for line in path.read_text().splitlines():
            match = COMMENTED_CONSTANT.match(line)
            if match:
                found.append((path.name, match.group(3), int(match.group(2), 0)))
    return found


def test_every_simulated_function_has_pynvmls_signature(node):
    simulated = node.nvml.simulated_functions()
    assert set(BRIEF_FUNCTIONS) <= set(simulated)
    assert set(VGPU_FUNCTIONS) <= set(simulated)
    for name in simulated:
        assert hasattr(pynvml, name), f"{name} is not a pynvml function"
        assert inspect.signature(getattr(node.nvml, name)) == inspect.signature(getattr(pynvml, name)), name


def test_constants_errors_and_structs_are_pynvmls_own(node):
    nvml = node.nvml
    for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_GPM_METRICS_GET_VERSION", "nvmlMemory_v2", "NVML_CLOCK_SM",
                 "nvmlEventTypeXidCriticalError", "nvmlClocksEventReasonSwPowerCap", "NVML_DEVICE_MIG_ENABLE"):
        assert getattr(nvml, name) == getattr(pynvml, name)
    for name in ("NVMLError", "NVMLError_NotSupported", "NVMLError_GpuIsLost", "NVMLLibraryMismatchError",
                 "c_nvmlGpmMetricsGet_t", "c_nvmlMemory_v2_t", "c_nvmlDevice_t", "c_nvmlEventData_t"):
        assert getattr(nvml, name) is getattr(pynvml, name)


@pytest.mark.parametrize("package", ["sim", "sampling"])
def test_nvml_names_used_in_source_exist_in_pynvml_with_the_same_value(node, package):
    directory = ROOT / "watchdog" / package
    required, mentioned = _names_used(directory)
    for name in sorted(required | mentioned):
        assert hasattr(pynvml, name), f"watchdog/{package} uses {name}, which pynvml does not have"
        real = getattr(pynvml, name)
        if inspect.isfunction(real):
            if package == "sim":
                continue  # the simulation calls pynvml's own helpers (nvmlStructToFriendlyObject)
            assert name in node.nvml.simulated_functions(), f"watchdog/{package} calls {name}: not simulated"
        else:
            assert getattr(node.nvml, name) is real or getattr(node.nvml, name) == real, name
    for file, name, value in _literal_values(directory):
        assert hasattr(pynvml, name), f"{file}: {name} is not a pynvml name"
        assert getattr(pynvml, name) == value, f"{file}: {name} = {value}, pynvml says {getattr(pynvml, name)}"


def test_sampling_gpm_metric_ids_match_pynvml():
    # gpm.py names metric ids without the NVML_GPM_METRIC_ prefix; hold them to pynvml too.
    for file, name, value in _module_ints(ROOT / "watchdog" / "sampling"):
        candidate = f"NVML_GPM_METRIC_{name}"
        if hasattr(pynvml, candidate):
            assert getattr(pynvml, candidate) == value, f"{file}: {name} = {value} but {candidate} differs"


def _module_ints(directory: Path) -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(directory.rglob("*.py")):
        for item in ast.parse(path.read_text()).body:
            if (isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant)
                    and isinstance(item.value.value, int) and not isinstance(item.value.value, bool)):
                for target in item.targets:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        found.append((path.name, target.id, item.value.value))
    return found


def test_errors_raised_are_the_real_classes(node):
    nvml = node.nvml
    a100 = nvml.nvmlDeviceGetHandleByIndex(2)
    h100 = nvml.nvmlDeviceGetHandleByIndex(0)
    cases = [
        (lambda: nvml.nvmlGpmSampleGet(a100, nvml.nvmlGpmSampleAlloc()), pynvml.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetUtilizationRates(h100), pynvml.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetMigDeviceHandleByIndex(h100, 1), pynvml.NVMLError_NotFound),
        (lambda: nvml.nvmlDeviceGetHandleByIndex(9), pynvml.NVMLError_InvalidArgument),
        (lambda: nvml.nvmlDeviceGetHandleByUUID("GPU-nope"), pynvml.NVMLError_NotFound),
        (lambda: nvml.nvmlDeviceGetFieldValues(h100, [186]), pynvml.NVMLError_FunctionNotFound),
    ]
    for call, expected in cases:
        with pytest.raises(pynvml.NVMLError) as raised:
            call()
        assert type(raised.value) is expected
        assert raised.value.value == expected().value


def test_structs_and_handles_are_the_real_ctypes_types(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    assert isinstance(gpu, pynvml.c_nvmlDevice_t) and isinstance(mig, pynvml.c_nvmlDevice_t)
    assert type(nvml.nvmlDeviceGetMemoryInfo(mig)) is pynvml.c_nvmlMemory_t
    assert type(nvml.nvmlDeviceGetMemoryInfo(mig, pynvml.nvmlMemory_v2)) is pynvml.c_nvmlMemory_v2_t
    assert type(nvml.nvmlDeviceGetAttributes(mig)) is pynvml.c_nvmlDeviceAttributes
    assert type(nvml.nvmlGpmQueryDeviceSupport(gpu)) is pynvml.c_nvmlGpmSupport_t
    assert isinstance(nvml.nvmlGpmSampleAlloc(), pynvml.c_nvmlGpmSample_t)
    assert isinstance(nvml.nvmlEventSetCreate(), pynvml.c_nvmlEventSet_t)
    flag = nvml.nvmlDeviceIsMigDeviceHandle(mig)
    assert type(flag) is ctypes.c_uint and bool(flag) and flag != 1  # raw c_uint, like pynvml.py
    assert not bool(nvml.nvmlDeviceIsMigDeviceHandle(gpu))
    a100 = nvml.nvmlDeviceGetHandleByIndex(2)
    samples = nvml.nvmlDeviceGetProcessUtilization(a100, 0)
    assert all(type(sample) is pynvml.c_nvmlProcessUtilizationSample_t for sample in samples)
    assert type(nvml.nvmlDeviceGetUtilizationRates(a100)) is pynvml.c_nvmlUtilization_t
    process = nvml.nvmlDeviceGetComputeRunningProcesses(a100)[0]
    assert type(process) is pynvml.nvmlFriendlyObject
    assert process.gpuInstanceId == process.computeInstanceId == 0xFFFFFFFF


def test_calls_before_init_and_after_last_shutdown_are_uninitialized():
    sim = SimulatedGpuNode.from_scenario(DEMO_SCENARIO, SimClock())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvml.nvmlDeviceGetCount()
    sim.nvml.nvmlInit()
    sim.nvml.nvmlInit()
    sim.nvml.nvmlShutdown()
    assert sim.nvml.nvmlDeviceGetCount() == 3  # NVML counts inits (nvml.h, nvmlInit_v2)
    sim.nvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvml.nvmlDeviceGetCount()
    assert sim.nvml.calls["nvmlDeviceGetCount"] == 3  # refused calls are counted too
    sim.close()


def _getattr_fallbacks(directory: Path) -> list[tuple[str, str, int]]:
    """(file, NVML name, fallback) for ``getattr(nvml, "NAME", 3)``/``getattr(nvml, "NAME", CONST)`` and for
    ``("label", "function", "NAME", 3)`` argument tables: fallbacks used when a module lacks the name."""
    found = []
    for path in sorted(directory.rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {name: value for _, name, value in _module_ints_of(tree)}
        for item in ast.walk(tree):
            if (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "getattr"
                    and len(item.args) == 3 and isinstance(item.args[1], ast.Constant)
                    and isinstance(item.args[1].value, str) and NAME.match(item.args[1].value)):
                default = item.args[2]
                if isinstance(default, ast.Constant) and isinstance(default.value, int):
                    found.append((path.name, item.args[1].value, default.value))
                elif isinstance(default, ast.Name) and default.id in constants:
                    found.append((path.name, item.args[1].value, constants[default.id]))
            elif isinstance(item, ast.Tuple):
                for name, value in zip(item.elts, item.elts[1:]):
                    if (isinstance(name, ast.Constant) and isinstance(name.value, str) and NAME.match(name.value)
                            and isinstance(value, ast.Constant) and type(value.value) is int):
                        found.append((path.name, name.value, value.value))
    return found


def _module_ints_of(tree: ast.Module) -> list[tuple[str, str, int]]:
    return [("", target.id, item.value.value) for item in tree.body
            if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant)
            and type(item.value.value) is int for target in item.targets if isinstance(target, ast.Name)]


def test_sampling_getattr_fallback_values_are_pynvmls():
    fallbacks = _getattr_fallbacks(ROOT / "watchdog" / "sampling")
    names = {name for _, name, _ in fallbacks}  # the walk must see the known fallbacks, or it checks nothing
    assert {"nvmlMemory_v2", "nvmlEventTypeXidCriticalError", "nvmlEventMigConfigChange", "NVML_CLOCK_SM"} <= names
    for file, name, value in fallbacks:
        assert hasattr(pynvml, name), f"{file}: {name} is not a pynvml name"
        assert getattr(pynvml, name) == value, f"{file}: fallback {name} = {value}, pynvml says {getattr(pynvml, name)}"


def test_event_bits_of_the_xid_watcher_are_pynvmls():
    from watchdog.sampling import xid_watcher as events

    assert events.XID_CRITICAL == pynvml.nvmlEventTypeXidCriticalError
    assert events.DOUBLE_BIT_ECC == pynvml.nvmlEventTypeDoubleBitEccError
    assert events.SINGLE_BIT_ECC == pynvml.nvmlEventTypeSingleBitEccError
    assert events.MIG_CONFIG_CHANGE == pynvml.nvmlEventMigConfigChange
    assert events.wanted_event_mask(pynvml) == events.wanted_event_mask(object()) == (
        events.XID_CRITICAL | events.DOUBLE_BIT_ECC | events.SINGLE_BIT_ECC | events.MIG_CONFIG_CHANGE)


def test_clock_event_reason_table_of_the_exporter_is_pynvmls():
    from watchdog.publishing.device_series import CLOCK_EVENT_REASONS

    assert len(CLOCK_EVENT_REASONS) == 9
    for label, bit in CLOCK_EVENT_REASONS:
        constant = "nvmlClocksEventReason" + "".join(part.capitalize() for part in label.split("_"))
        assert getattr(pynvml, constant) == bit, f"{label} = {bit:#x}, but pynvml's {constant} differs"


def _vgpu_node() -> SimulatedGpuNode:
    sim = SimulatedGpuNode.from_scenario({"name": "vgpu", "gpus": [{"model": "A100-SXM4-40GB", "vgpu": {
        "vms": [{"name": "vm-a", "type": "GRID A100-10C", "sm": {"base": 0.4}}]}}]}, SimClock())
    sim.nvml.nvmlInit()
    return sim


def test_vgpu_struct_fields_written_are_pynvmls():
    for struct, fields in VGPU_STRUCT_FIELDS.items():
        declared = {field[0] for field in getattr(pynvml, struct)._fields_}
        assert fields <= declared, f"{struct} has no field {sorted(fields - declared)}"
    source = (ROOT / "watchdog" / "testbed" / "nvml" / "vgpu.py").read_text()
    paths = re.findall(r"\b(?:sample|state|log|entry)\.([\w.]+) = ", source)
    written = {part for path in paths for part in path.split(".") if part != "uiVal"}
    every = set().union(*(fields for name, fields in VGPU_STRUCT_FIELDS.items() if name != "c_nvmlValue_t"))
    assert written and written <= every, f"vgpu.py writes {sorted(written - every)}, not in VGPU_STRUCT_FIELDS"


def test_vgpu_answers_have_pynvmls_types():
    sim = _vgpu_node()
    nvml = sim.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    (instance,) = nvml.nvmlDeviceGetActiveVgpus(gpu)
    assert type(instance) is int  # a c_uint array element reads back as int (pynvml.py, nvmlDeviceGetActiveVgpus)
    vm_id, id_type = nvml.nvmlVgpuInstanceGetVmID(instance)
    assert isinstance(vm_id, str) and id_type == pynvml.NVML_VGPU_VM_ID_UUID
    assert isinstance(nvml.nvmlVgpuInstanceGetUUID(instance), str)
    (sample,) = nvml.nvmlDeviceGetVgpuUtilization(gpu, 0)
    assert type(sample) is pynvml.c_nvmlVgpuInstanceUtilizationSample_t
    assert sample.vgpuInstance == instance and sample.smUtil.uiVal == 40
    (info,) = nvml.nvmlDeviceGetVgpuInstancesUtilizationInfo(gpu, 0)
    assert type(info) is pynvml.c_nvmlVgpuInstanceUtilizationInfo_v1_t
    state = nvml.nvmlDeviceGetVgpuSchedulerState(gpu)
    assert type(state) is pynvml.c_nvmlVgpuSchedulerGetState_t
    assert state.schedulerPolicy == pynvml.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetVgpuUtilization(gpu, sample.timeStamp + 1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlVgpuInstanceGetUUID(instance + 1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlVgpuInstanceGetUUID(0)
    sim.close()


def test_vgpu_calls_on_a_gpu_that_is_no_vgpu_host_answer_not_supported(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetVirtualizationMode(gpu) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
    for name in VGPU_FUNCTIONS:
        if name.startswith("nvmlDevice") and name != "nvmlDeviceGetVirtualizationMode":
            args = (gpu, 0) if "Utilization" in name else (gpu,)
            with pytest.raises(pynvml.NVMLError_NotSupported):
                getattr(nvml, name)(*args)
