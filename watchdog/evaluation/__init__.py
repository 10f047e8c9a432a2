"""Offline evaluation: replay a recorded trace, run the labelled scenario suite, score detection against truth.

Public API: ``replay(trace_path, *, policy=None) -> report dict`` (docs/report-format.md; None: the policy the
trace recorded), ``run_scenario(scenario, *,
policy)`` / ``simulate(scenario)`` (the real stages on the simulator, tick by tick), ``evaluate(paths) ->
Evaluation`` and ``format_table(evaluation)`` (docs/evaluation.md). Nothing here talks to Kubernetes.
"""

from watchdog.evaluation.evaluate import Evaluation, ScenarioResult, evaluate, format_table, scenario_files
from watchdog.evaluation.replay import replay
from watchdog.evaluation.report import REPORT_FORMAT, REPORT_VERSION, report_schema
from watchdog.evaluation.scenario_run import run_scenario, simulate
from watchdog.evaluation.stages import OfflineAgent, StepResult
from watchdog.evaluation.truth import Truth, TruthError, parse_truth

__all__ = [
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "Evaluation",
    "OfflineAgent",
    "ScenarioResult",
    "StepResult",
    "Truth",
    "TruthError",
    "evaluate",
    "format_table",
    "parse_truth",
    "replay",
    "report_schema",
    "run_scenario",
    "scenario_files",
    "simulate",
]
