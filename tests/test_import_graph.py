"""No import circle among the production modules: the layers import downward, and inside a layer too.

import-linter checks the layers between packages; a circle between two modules of one package (each importing the
other, one of them inside a function to dodge the ImportError) passes it, yet makes each module's meaning depend on
which is imported first. This walks the source itself: every ``import`` and ``from … import`` of every module under
``watchdog/``, at module level or inside a function, relative ones resolved, ``from package import module`` taken
as an import of that module; imports under ``if TYPE_CHECKING:`` never run, so they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "watchdog"


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package (a package is its ``__init__.py``)."""
    names: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The modules of the package one module imports, wherever in it the import statement stands."""

    def __init__(self, module: str, *, is_package: bool, known: set[str]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if _type_checking(node.test):
            for child in node.orelse:  # the else branch does run
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in self.known:
                self.found.add(submodule)  # `from package import module`
            else:
                self._add(source)

    def _add(self, name: str) -> None:
        if name in self.known:
            self.found.add(name)


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, is_package=path.name == "__init__.py", known=known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[name] = visitor.found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a → … → a) for each strongly connected set of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # recursion depth is bounded by the module count (a few hundred)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_circle(graph, set(component)) for component in components]


def _circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, through the component only."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_no_import_circle_in_production_code():
    found = circles(import_graph(ROOT))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


# ------------------------------------------------------------------------------------- the walk itself


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("a_imports", "circular"),
    [
        ("from watchdog.pkg.b import thing", True),
        ("from . import b", True),
        ("from .b import thing", True),
        ("def f():\n    from watchdog.pkg import b\n", True),  # inside a function still runs, later
        ("import watchdog.pkg.b", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from watchdog.pkg.b import thing\n", False),
        ("from watchdog.pkg import c", False),
    ],
    ids=["absolute", "relative-module", "relative-name", "in-function", "import", "type-checking", "elsewhere"],
)
def test_the_walk_finds_a_circle_however_it_is_written(tmp_path, a_imports, circular):
    root = _tree(tmp_path, {
        "watchdog/__init__.py": "",
        "watchdog/pkg/__init__.py": "",
        "watchdog/pkg/a.py": a_imports + "\n",
        "watchdog/pkg/b.py": "from watchdog.pkg.a import other\n",
        "watchdog/pkg/c.py": "",
    })
    found = circles(import_graph(root))
    assert found == ([["watchdog.pkg.a", "watchdog.pkg.b", "watchdog.pkg.a"]] if circular else [])
