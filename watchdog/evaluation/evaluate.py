"""`gpu-watchdog evaluate`: run the labelled scenario suite through the real pipeline and score detection.

The numbers a user is asked to trust ("interference precision ≥ 0.95, no finding on benign load, reported within
3 ticks of the configured hysteresis") must come from somewhere reproducible. This runs each scenario in-process
(simulated NVML, real sampler, attribution, detector and eviction rules; see ``scenario_run``), folds the ticks
into the same report ``replay`` prints, scores it against the scenario's ``truth`` (``matching``) and prints one
table. docs/evaluation.md explains the truth format and every column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from watchdog.config import DetectionPolicy, Policy
from watchdog.config.loading import deep_merge, validate
from watchdog.evaluation.matching import KINDS, KindScore, Scored, score
from watchdog.evaluation.report import ReportBuilder
from watchdog.evaluation.report_text import plural
from watchdog.evaluation.scenario_run import run_scenario
from watchdog.evaluation.truth import Truth, parse_truth
from watchdog.model import Severity
from watchdog.testbed import Scenario, SimClock, SimulatedGpuNode, load_scenario


def hysteresis_ticks(detection: DetectionPolicy) -> dict[str, int]:
    """Least ticks each kind waits, by configuration, between its onset and the first report.

    A kind that needs N consecutive (or N of M) bad ticks counts the onset tick as the first, so it can report
    N − 1 ticks after the onset at the earliest.
    """
    return {
        "interference": detection.interference.flags_needed - 1,
        "memory_pressure": detection.memory_pressure.for_ticks - 1,
        "quota": detection.quota.for_ticks - 1,
        "memory_warning": detection.quota.for_ticks - 1,
        "unauthorized": detection.unauthorized.for_ticks - 1,
        "xid": 0,
        "culprit_unknown": detection.interference.flags_needed - 1,
        "unauthorized_host": detection.unauthorized.for_ticks - 1,
        "mps_memory_limit": detection.mps.for_ticks - 1,
    }


def scenario_policy(overrides: Mapping[str, Any], *, base: Policy, source: str) -> Policy:
    """``base`` with the scenario's ``policy:`` section merged over it; ConfigError names a bad field."""
    if not overrides:
        return base
    return validate(Policy, deep_merge(base.model_dump(mode="python"), dict(overrides)), source=f"{source}: policy")


@dataclass(slots=True)
class ScenarioResult:
    """One scenario's report, scores and eviction check."""

    name: str
    path: str
    truth: Truth
    report: dict[str, Any]
    scored: Scored
    requested: tuple[str, ...]  # pods the offline evictor was asked to evict, in order
    sent: tuple[tuple[int, str], ...] = ()  # (tick, "ns/pod") of every request that reached the evictor

    @property
    def benign(self) -> bool:
        """No interference is labelled: every interference finding here is a false alarm."""
        return not self.truth.interference

    @property
    def interference_findings(self) -> int:
        return self.scored.kinds["interference"].findings

    @property
    def evictions_ok(self) -> bool | None:
        expected = self.truth.expect_evictions
        return None if expected is None else set(expected) == set(self.requested)

    @property
    def quiet_violations(self) -> list[tuple[int, str]]:
        """Requests sent inside a ``no_evictions`` window of the truth."""
        windows = self.truth.no_evictions
        return [(tick, pod) for tick, pod in self.sent
                if any(w.onset <= tick and (w.offset is None or tick < w.offset) for w in windows)]


@dataclass(slots=True)
class Evaluation:
    scenarios: list[ScenarioResult]
    kinds: dict[str, KindScore]

    @property
    def benign_interference_findings(self) -> int:
        return sum(s.interference_findings for s in self.scenarios if s.benign)


def scenario_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named explicitly, plus every *.yaml of each directory named whose ``truth`` is not empty (sorted).

    ``truth: {}`` (the demo) means "not labelled"; a benign scenario says so with ``interference: []``.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for candidate in sorted(path.glob("*.yaml")):
                data = yaml.safe_load(candidate.read_text(encoding="utf-8"))
                if isinstance(data, dict) and data.get("truth"):
                    found.append(candidate)
        else:
            found.append(path)
    return found


def _resolve_xid_instances(truth: Truth, scenario: Scenario) -> Truth:
    """Xid truth names an instance by its index in the GPU's mig list; findings carry the GPU instance id."""
    if not any(entry.instance is not None for entry in truth.xid):
        return truth
    node = SimulatedGpuNode(scenario, SimClock())
    try:
        resolved = []
        for entry in truth.xid:
            if entry.instance is not None:
                devices = node.device_uuids(entry.at)
                ids = [d.gpu_instance for d in devices if d.gpu_index == entry.gpu and d.instance == entry.instance]
                entry = entry.model_copy(update={"instance": ids[0] if ids else entry.instance})
            resolved.append(entry)
    finally:
        node.close()
    return truth.model_copy(update={"xid": tuple(resolved)})


def evaluate_scenario(path: str | Path, *, base_policy: Policy | None = None) -> ScenarioResult:
    scenario = load_scenario(path)
    truth = _resolve_xid_instances(parse_truth(scenario.truth, source=str(path)), scenario)
    policy = scenario_policy(scenario.policy, base=base_policy or Policy(), source=str(path))
    source = {"path": str(path), "node": scenario.node, "tick_seconds": scenario.tick_seconds,
              "started": 0.0, "agent_version": "evaluation", "source": f"simulator:{scenario.name}"}
    builder = ReportBuilder(source=source, mode=policy.action.mode.value)
    requested: list[str] = []
    sent: list[tuple[int, str]] = []
    gpu_uuids: dict[int, str] = {}
    episode_ticks: dict[tuple[str, int], dict[int, bool]] = {}  # for recall by ticks (matching.coverage)
    last_tick = -1
    for step in run_scenario(scenario, policy=policy):
        if not gpu_uuids:
            gpu_uuids = {gpu.index: gpu.uuid for gpu in step.sample.gpus}
        builder.add(step)
        last_tick = step.sample.tick
        for finding in step.findings:
            if finding.observed:
                ticks = episode_ticks.setdefault((finding.key, finding.first_tick), {})
                ticks[last_tick] = finding.severity is Severity.CRITICAL
        for decision in step.decisions:
            key = f"{decision.namespace}/{decision.pod}"
            if f"{decision.finding_key}|{key}" in step.sent:
                sent.append((step.sample.tick, key))
                if key not in requested:
                    requested.append(key)
    report = builder.finish()
    scored = score(report["findings"], truth, hysteresis=hysteresis_ticks(policy.detection), gpu_uuids=gpu_uuids,
                   episode_ticks=episode_ticks, end_tick=last_tick)
    return ScenarioResult(scenario.name, str(path), truth, report, scored, tuple(requested), tuple(sent))


def evaluate(paths: Iterable[str | Path], *, base_policy: Policy | None = None,
             on_result: Callable[[ScenarioResult], None] | None = None) -> Evaluation:
    """Evaluate every scenario in ``paths`` (files, or directories of labelled scenarios); ``on_result`` sees each
    scenario's result as it is done (progress)."""
    results = []
    for path in scenario_files(paths):
        results.append(evaluate_scenario(path, base_policy=base_policy))
        if on_result is not None:
            on_result(results[-1])
    totals = {kind: KindScore(kind) for kind in KINDS}
    for result in results:
        for kind in KINDS:
            totals[kind].merge(result.scored.kinds[kind])
    return Evaluation(results, totals)


def _cell(value: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


LEGEND = (
    "rec.ticks, rec.t.min: recall by ticks, median and worst entry (share of its window with an actionable finding)",
    "lat.med, lat.max: ticks from onset to the first report, median and max; hyst.: the configured hysteresis "
    "(the least latency possible); med-hyst: median latency minus it",
    "prec.ticks: precision by ticks (finding ticks inside a matched window); ovh.med, ovh.max: ticks a true "
    "episode outlived its offset + slack; dup.: duplicate episodes per entry; —: nothing to measure",
)
"""Printed under the table: what each abbreviated column means (docs/evaluation.md, "Scores", says it in full)."""


def format_table(evaluation: Evaluation) -> str:
    """The per-kind table, then per-scenario problems (false positives, misses, overhang, flapping, evictions)."""
    header = f"{'kind':<18}{'findings':>9}{'truths':>7}{'precision':>10}{'recall':>7}{'rec.ticks':>10}{'rec.t.min':>10}"
    header += f"{'lat.med':>8}{'lat.max':>8}{'hyst.':>6}{'med-hyst':>9}"
    header += f"{'prec.ticks':>11}{'ovh.med':>8}{'ovh.max':>8}{'dup.':>5}"
    lines = [header, "-" * len(header)]
    for kind in KINDS:
        k = evaluation.kinds[kind]
        lines.append(
            f"{kind:<18}{k.findings:>9}{k.truths:>7}{_cell(k.precision):>10}{_cell(k.recall):>7}"
            f"{_cell(k.recall_ticks_median):>10}{_cell(k.recall_ticks_min):>10}"
            f"{_cell(k.latency_median, '{:g}'):>8}{_cell(k.latency_max, '{:d}'):>8}{k.hysteresis:>6}"
            f"{_cell(k.latency_median_after_hysteresis, '{:g}'):>9}"
            f"{_cell(k.precision_ticks):>11}{_cell(k.overhang_median, '{:g}'):>8}"
            f"{_cell(k.overhang_max, '{:d}'):>8}{k.duplicates:>5}"
        )
    lines.extend(["", *LEGEND])
    benign = [s for s in evaluation.scenarios if s.benign]
    lines.append("")
    lines.append(f"scenarios: {len(evaluation.scenarios)}; benign (no interference labelled): {len(benign)}; "
                 f"interference findings on benign scenarios: {evaluation.benign_interference_findings}")
    for result in evaluation.scenarios:
        problems = _problems(result)
        status = "ok" if not problems else plural(len(problems), "problem")
        lines.append(f"  {result.name:<34} {status}")
        lines.extend(f"      {problem}" for problem in problems)
    return "\n".join(lines)


def _problems(result: ScenarioResult) -> list[str]:
    scored = result.scored
    problems = [f"false positive {f['kind']} {f['key']} ticks {f['reported_tick']}–{f['last_tick']}"
                for f in scored.false_positives]
    problems += [f"missed {kind} {entry.model_dump(exclude_defaults=True)}" for kind, entry in scored.misses]
    problems += [f"overhang {f['kind']} {f['key']}: {plural(ticks, 'tick')} past offset + slack "
                 f"(last tick {f['last_tick']})" for f, ticks in scored.overhanging]
    problems += [f"flapping {kind}: {plural(episodes, 'episode')} for {entry.model_dump(exclude_defaults=True)}"
                 for kind, entry, episodes in scored.flapping]
    if result.evictions_ok is False:
        expected = sorted(result.truth.expect_evictions or ())
        problems.append(f"evictions {sorted(result.requested)} ≠ expected {expected}")
    problems += [f"eviction of {pod} sent at tick {tick}, inside a no_evictions window"
                 for tick, pod in result.quiet_violations]
    return problems
