"""A YAML reader for settings and policies that refuses what PyYAML would silently accept or crash on.

PyYAML's ``safe_load`` keeps the *last* of two equal keys (``mode: observe`` then ``mode: enforce`` gives enforce,
although YAML 1.2 §3.2.1.1 requires the keys of a mapping to be unique), recurses once per nesting level (a file
nested a few thousand levels deep ends in RecursionError), and lets Python's own limits escape as ValueError: an
integer of more than 4,300 digits (CPython's int/str conversion limit, ``sys.set_int_max_str_digits``) or a
timestamp such as ``2026-13-45``. Each of these becomes a :class:`MalformedYaml` naming the line, so
``check-config`` and a reload say where the file is wrong instead of printing a traceback.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

# Far beyond any settings or policy file (they nest five or six levels), far below Python's recursion limit.
MAX_DEPTH = 64
# No setting needs an integer this long; CPython refuses to convert more than 4,300 digits at all.
MAX_INTEGER_CHARACTERS = 100


class MalformedYaml(ValueError):
    """Text that is not a YAML document we accept; ``line`` is 1-based (None when the parser gave no position)."""

    def __init__(self, reason: str, line: int | None) -> None:
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.reason = reason
        self.line = line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with unique keys, bounded nesting, bounded integers and no ValueError escaping construction."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. "month must be in 1..12" from a timestamp
            raise ConstructorError(None, None, f"cannot read {node.value!r:.40}: {exc}", node.start_mark) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked before the base class flattens merge keys (<<): a key given beside a merge may override it.
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class refuses it with its own message
            if first is not None:
                reason = f"duplicate key {key!r} (first given on line {first})"
                raise ConstructorError(None, None, reason, key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Node) -> int:
        text = str(node.value)
        if len(text) > MAX_INTEGER_CHARACTERS:
            raise ConstructorError(None, None, f"an integer written with {len(text)} characters is too large",
                                   node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def parse_yaml(text: str) -> Any:
    """The one YAML document in ``text``; raises MalformedYaml with the line at fault."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise MalformedYaml(str(exc.problem or exc.context), mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise MalformedYaml(str(exc), None) from None
    except RecursionError:  # a belt to MAX_DEPTH's braces: nothing below may recurse further than it allows
        raise MalformedYaml(f"nested deeper than {MAX_DEPTH} levels", None) from None
