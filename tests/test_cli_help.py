"""`gpu-watchdog --help` lists every subcommand, and each subcommand's --help has a description, its flags' defaults
and an example of its own, however and wherever the subcommand is registered."""

from __future__ import annotations

import argparse
import re

import pytest

from watchdog.cli import build_parser, main


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def help_text(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_subcommand_with_its_summary(capsys):
    text = help_text(capsys, [])
    names = set(subcommands())
    assert {"run", "demo", "explain", "inventory", "controller", "audit"} <= names
    listed = set(re.findall(r"^    (\S+)\s{2,}\S", text, flags=re.MULTILINE))
    assert names <= listed, names - listed
    assert "COMMAND --help" in text


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_has_a_description_defaults_and_an_example(capsys, name):
    parser = subcommands()[name]
    assert parser.description and len(parser.description) > 40, f"{name}: no description"
    text = help_text(capsys, [name])
    assert re.search(r"^examples?\b.*:$", text, flags=re.MULTILINE), f"{name}: no example line"
    examples = example_commands(text)
    assert examples and all(line.startswith(f"gpu-watchdog {name}") for line in examples), examples
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in formatter._get_help_string(action), (
                f"{name} {action.option_strings[0]}: default {action.default!r} not shown")


def example_commands(text: str) -> list[str]:
    """The indented `gpu-watchdog …` lines of a help text, a line ending in a backslash joined to the next."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return re.findall(r"^  (gpu-watchdog .*)$", joined, flags=re.MULTILINE)


def test_every_example_is_a_valid_command_line_of_its_own_command():
    parser = build_parser()
    for name, sub in subcommands().items():
        for line in example_commands(sub.epilog or ""):
            args = parser.parse_args(line.split()[1:])
            assert args.command == name, line
