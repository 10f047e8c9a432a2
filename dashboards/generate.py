"""Writes the gpu-watchdog Grafana dashboards as JSON: `.venv/bin/python dashboards/generate.py`.

The dashboards are code so that a metric rename is a review diff, not a blank panel discovered in an incident:
every query is checked against the metric catalogue (watchdog.publishing.ALL_FAMILIES) before anything is
written, and the generated JSON is committed so Grafana provisioning (or a human import) needs no Python. Output
is deterministic (sorted keys, ids in build order), so `--check` can tell in CI whether the committed files are
current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterator

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboard_actions import build_actions_dashboard
from dashboard_node import build_node_dashboard
from promql_names import legend_problems, problems

HERE = Path(__file__).resolve().parent
BUILDERS = {
    "gpu-watchdog-node.json": build_node_dashboard,
    "gpu-watchdog-actions.json": build_actions_dashboard,
}


def render(builder) -> str:
    """The dashboard as the exact text written to disk (sorted keys, two-space indent, final newline)."""
    return JSONEncoder(sort_keys=True, indent=2).encode(builder.build()) + "\n"


def queries(document: dict) -> Iterator[tuple[str, str, str]]:
    """(where, expr, legend) for every panel target and every query variable of a dashboard document."""
    for panel in document.get("panels", []):
        for nested in [panel, *panel.get("panels", [])]:
            where = f"panel {nested.get('id')} {nested.get('title')!r}"
            for target in nested.get("targets", []):
                yield where, target["expr"], target.get("legendFormat", "")
    for variable in document.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            yield f"variable {variable['name']}", variable["query"], ""


def validate(document: dict) -> list[str]:
    """Every way the dashboard's PromQL disagrees with the metric catalogue; empty when it agrees."""
    found = []
    for where, expr, legend in queries(document):
        found += [f"{where}: {problem}" for problem in problems(expr) + legend_problems(legend, expr)]
    return found


def generate() -> dict[str, str]:
    """File name -> JSON text of every dashboard; raises ValueError when a query uses an unknown metric/label."""
    rendered = {name: render(build()) for name, build in BUILDERS.items()}
    errors = [f"{name}: {problem}" for name, text in rendered.items() for problem in validate(json.loads(text))]
    if errors:
        raise ValueError("dashboard queries disagree with the metric catalogue:\n" + "\n".join(errors))
    return rendered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=HERE, help="where to write (default: dashboards/)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    try:
        rendered = generate()
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    stale = []
    for name, text in rendered.items():
        path = args.output_dir / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        args.output_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print("out of date (run dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
