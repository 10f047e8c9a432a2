"""The manifests in deploy/ hold settings and policies the agent accepts, and ship no kill switch to overwrite."""

from __future__ import annotations

from pathlib import Path

import yaml

from watchdog.config import check_file

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def documents():
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def test_every_mounted_settings_or_policy_file_validates(tmp_path):
    checked = 0
    for name, doc in documents():
        if doc.get("kind") != "ConfigMap":
            continue
        for key, text in (doc.get("data") or {}).items():
            if key.endswith(".yaml"):
                path = tmp_path / f"{name}-{key}"
                path.write_text(text)
                kind, problems = check_file(path)
                assert problems == [], (name, key, problems)
                checked += 1
    assert checked >= 2


def test_the_kill_switch_is_never_shipped_in_a_manifest():
    names = {doc["metadata"]["name"] for _, doc in documents() if doc.get("kind") == "ConfigMap"}
    assert "gpu-watchdog-kill-switch" not in names  # re-applying must not undo an operator's pause
