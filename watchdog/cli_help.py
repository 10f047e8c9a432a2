"""How every `gpu-watchdog` subcommand's ``--help`` is built, so that each one reads alike wherever it is declared.

``build_parser`` hands ``CommandParser`` to argparse as the class of every subcommand parser, including those other
modules register (``watchdog.answers``): each gets the same formatter — its description wrapped, its examples printed
as written, every flag's default shown — and takes ``examples=`` beside argparse's own arguments, printed under its
flags. A subcommand is declared as::

    sub.add_parser("demo", help="one line for `gpu-watchdog --help`", description="a paragraph atop `demo --help`",
                   examples=["gpu-watchdog demo --speed 5"])
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, Sequence


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each line of a description or epilog is a paragraph wrapped to the terminal, and an indented line (an
    example command) is kept as written, as RawDescriptionHelpFormatter would keep every line; a flag's default is
    appended unless there is nothing to say (no default, an off switch) or its help already words it ("default:
    its pod IP on the pod's node")."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for line in text.splitlines():
            if not line.strip() or line.startswith(" "):
                lines.append(indent + line if line.strip() else "")
            else:
                lines += textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
        return "\n".join(lines)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # The hook argparse's own ArgumentDefaultsHelpFormatter overrides (Lib/argparse.py).
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def examples_text(examples: Sequence[str]) -> str:
    """The epilog block: "example:" (or "examples:") then one indented command line each."""
    head = "example:" if len(examples) == 1 else "examples:"
    return "\n".join([head, *(f"  {line}" for line in examples)])


class CommandParser(argparse.ArgumentParser):
    """The parser of one subcommand (``add_subparsers(parser_class=CommandParser)``)."""

    def __init__(self, *args: Any, examples: Sequence[str] = (), **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if examples:
            epilog = kwargs.get("epilog")
            kwargs["epilog"] = examples_text(examples) + (f"\n\n{epilog}" if epilog else "")
        super().__init__(*args, **kwargs)
