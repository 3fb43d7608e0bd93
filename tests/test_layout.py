"""The package's shape: private modules behind one public namespace, no import cycles, and
classes and functions small enough to read in one sitting."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import autotune

PACKAGE = Path(autotune.__file__).parent
PUBLIC_MODULES = {"__init__", "__main__", "examples"}
MAX_CLASS_LINES = 350
MAX_FUNCTION_LINES = 120


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(("autotune", *parts))] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, known: set[str]) -> set[str]:
    """autotune modules ``module`` imports when it runs (function-local imports included,
    ``if TYPE_CHECKING:`` blocks left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                pkg = module.split(".")[: -node.level]
                base = ".".join([*pkg, node.module])
            if base in known:
                found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found - {module}


def test_no_import_cycles() -> None:
    modules = _modules()
    known = set(modules)
    graph = {m: _imports(ast.parse(p.read_text()), m, known) for m, p in modules.items()}
    # A package's __init__ is not a dependency of what it contains.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                walk(dep, [*path, dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_internal_modules_are_private() -> None:
    for module, path in _modules().items():
        name = path.stem
        if module == "autotune" or name in PUBLIC_MODULES:
            continue
        parts = module.split(".")[1:]
        assert parts[0].startswith("_"), f"{module} is public by name"


def test_classes_and_functions_are_small() -> None:
    too_big = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                too_big.append(f"{module}.{node.name}: {lines} lines (limit {limit})")
    assert not too_big, "\n".join(too_big)


def test_every_public_name_is_exported_and_importable() -> None:
    for name in autotune.__all__:
        assert hasattr(autotune, name), name
    # A fresh interpreter imports the package with no cycle hidden by import order.
    proc = subprocess.run(
        [sys.executable, "-c", "import autotune._cli, autotune._search.distributed"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
