"""The layer and third-party-boundary contracts in pyproject.toml hold (run through import-linter itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_contracts_cover_every_layer():
    """A new top-level package must be placed in the layers contract, or it escapes the checks."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    packages = {
        f"watchdog.{p.stem if p.is_file() else p.name}"
        for p in (REPO / "watchdog").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert packages <= named, packages - named


def test_every_production_package_is_kept_from_the_test_bed():
    """Only the demo, the evaluation and the CLI may import the simulated node and cluster; every other package,
    including one added later, is named in the contract that forbids it."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c.get("forbidden_modules") == ["watchdog.testbed"])
    packages = {
        f"watchdog.{p.stem if p.is_file() else p.name}"
        for p in (REPO / "watchdog").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")
    }
    # The command line (cli, its error wording, the explain/inventory answers) may build a simulated node.
    allowed = {"watchdog.cli", "watchdog.cli_errors", "watchdog.answers", "watchdog.demo", "watchdog.evaluation",
               "watchdog.testbed"}
    assert packages - allowed == set(contract["source_modules"]), packages - allowed ^ set(contract["source_modules"])
