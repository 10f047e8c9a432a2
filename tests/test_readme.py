"""What the README shows a user works: the policy example validates, the commands it names exist."""

from __future__ import annotations

import re
from pathlib import Path

from watchdog.cli import build_parser
from watchdog.config import check_file

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_policy_example_validates(tmp_path):
    block = re.search(r"```yaml\n# policy.yaml\n(.*?)```", README, re.S)
    assert block is not None
    path = tmp_path / "policy.yaml"
    path.write_text(block.group(1))
    assert check_file(path) == ("policy", [])


def test_every_command_in_the_table_exists():
    commands = set(re.findall(r"^\| `gpu-watchdog ([a-z-]+)", README, re.M))
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)  # argparse keeps subcommands here
    assert commands and commands <= known


def test_inline_policy_example_validates(tmp_path):
    block = re.search(r"```yaml\n# settings.yaml\n(.*?)```", README, re.S)
    assert block is not None
    path = tmp_path / "settings.yaml"
    path.write_text(block.group(1))
    assert check_file(path) == ("settings", [])


def test_the_gzip_default_the_readme_states_is_the_settings_default():
    from watchdog.config import PublishingSettings

    default = PublishingSettings.model_fields["gzip"].default
    stated = re.findall(r"gzip, (on|off) by default \(`publishing\.gzip`", README)
    assert stated == ["on" if default else "off"]
