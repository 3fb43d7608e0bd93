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


def _imports(tree: ast.AST, module: str, known: set[str], *, typing: bool = False) -> set[str]:
    """autotune modules ``module`` imports when it runs (function-local imports included,
    ``if TYPE_CHECKING:`` blocks left out unless ``typing``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing:
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


def _graph(*, typing: bool = False) -> dict[str, set[str]]:
    """Each autotune module -> the autotune modules it imports (type-only ones if ``typing``).
    A package's __init__ is not a dependency of what it contains."""
    modules = _modules()
    known = set(modules)
    graph = {
        m: _imports(ast.parse(p.read_text()), m, known, typing=typing) for m, p in modules.items()
    }
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}


def _cycles_of(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return out


def test_no_import_cycles() -> None:
    graph = _graph()
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


def test_no_import_cycle_between_packages_type_only_imports_included() -> None:
    # Modules of one subpackage may name one another's types (a config and the code that
    # applies it); across packages, and between the top-level modules, every import points
    # one way even where it is only for a type.
    crossing = []
    for component in _cycles_of(_graph(typing=True)):
        parents = {m.rpartition(".")[0] for m in component}
        if len(parents) > 1 or parents == {"autotune"}:
            crossing.append(" <-> ".join(sorted(component)))
    assert not crossing, "\n".join(crossing)


# What the knob package stands on: the shared leaves (values, errors, devices), never the
# code that runs trials, searches, results or the entry points.
KNOBS_MAY_NOT_IMPORT = (
    "autotune._trial",
    "autotune._search",
    "autotune._result",
    "autotune._api",
    "autotune._run",
    "autotune._tune",
    "autotune._cli",
    "autotune._verify",
    "autotune._train",
    "autotune._space",
    "autotune._options",
    "autotune._task",
)


def test_the_knob_package_imports_nothing_above_it() -> None:
    graph = _graph(typing=True)
    knob_modules = [m for m in graph if m == "autotune._knobs" or m.startswith("autotune._knobs.")]
    assert len(knob_modules) > 1
    upward = [
        f"{m} imports {d}"
        for m in knob_modules
        for d in sorted(graph[m])
        if d == "autotune" or any(d == up or d.startswith(up + ".") for up in KNOBS_MAY_NOT_IMPORT)
    ]
    assert not upward, "\n".join(upward)


def test_the_layout_checks_see_an_upward_import_and_a_type_only_cycle() -> None:
    # The checks above on a made-up graph: one that cannot fail is no check.
    assert _cycles_of({"a.x": {"b.y"}, "b.y": {"a.x"}, "c": set()}) == [{"a.x", "b.y"}]
    assert _cycles_of({"a.x": {"b.y"}, "b.y": set()}) == []
    source = "if TYPE_CHECKING:\n    from autotune._trial import runner\n"
    tree = ast.parse(source)
    known = {"autotune._trial", "autotune._trial.runner"}
    assert _imports(tree, "autotune._knobs.x", known) == set()
    assert _imports(tree, "autotune._knobs.x", known, typing=True) == {
        "autotune._trial",
        "autotune._trial.runner",
    }


def _layers() -> list[list[str]]:
    """ARCHITECTURE.md's layer diagram, top first: each layer the modules it names (a name
    ending in ``/*`` is the rest of that package)."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    block = text.split("<!-- layers -->")[1]
    return [line.split("|", 1)[1].split() for line in block.splitlines() if "|" in line]


def test_the_layer_diagram_holds_every_module_and_every_import_points_down() -> None:
    graph = _graph(typing=True)
    layers = _layers()
    at: dict[str, int] = {}
    for depth, names in enumerate(layers):
        for name in names:
            if not name.endswith("/*"):
                module = "autotune" if name == "autotune" else "autotune." + name.replace("/", ".")
                assert module in graph, f"ARCHITECTURE.md names {name}, which is not a module"
                assert module not in at, f"{name} is in two layers"
                at[module] = depth
    for depth, names in enumerate(layers):
        for name in (n for n in names if n.endswith("/*")):
            package = "autotune." + name[:-2].replace("/", ".")
            for module in graph:
                if module.startswith(package + ".") or module == package:
                    at.setdefault(module, depth)
    assert set(at) == set(graph), f"not in the diagram: {sorted(set(graph) - set(at))}"
    upward = [
        f"{m} (layer {at[m] + 1}) imports {d} (layer {at[d] + 1})"
        for m, deps in graph.items()
        for d in sorted(deps)
        # Down, or within one layer inside one package (the package's own order).
        if at[d] < at[m] or (at[d] == at[m] and m.rpartition(".")[0] != d.rpartition(".")[0])
    ]
    assert not upward, "\n".join(upward)


# The guard's modules that decide, and the modules that write words.
GUARD_DECISIONS = ("stats", "confirmation", "guard", "plan")
WORDS = (
    "autotune._guard.words",
    "autotune._search.words",
    "autotune._result",
    "autotune._progress",
)
# Inputs that are names, not results: the guarded metric's own name.
NAMES = {"AccuracyGuard.metric_name"}


def test_the_guards_decisions_import_no_words() -> None:
    """No module of the guard that decides imports, even through another, a module that
    writes sentences: its decisions are codes and numbers, rendered by ``_guard/words.py``."""
    graph = _graph(typing=True)
    for name in GUARD_DECISIONS:
        seen, todo = set(), [f"autotune._guard.{name}"]
        while todo:
            module = todo.pop()
            for dep in graph[module] - seen:
                seen.add(dep)
                todo.append(dep)
        words = sorted(m for m in seen if m.startswith(WORDS))
        assert not words, f"autotune._guard.{name} imports {words}"


def test_the_guards_decisions_and_plans_return_no_sentences() -> None:
    """No function of the guard's decision and planning modules returns a ``str``, and no
    field of their results is one (an enum member is: it is a code)."""
    found = []
    for name in ("stats", "guard", "plan"):
        tree = ast.parse((PACKAGE / "_guard" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            returns = getattr(node, "returns", None)
            if returns is not None and "str" in ast.unparse(returns).split(" | "):
                found.append(f"{name}.{node.name} returns {ast.unparse(returns)}")
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        field = f"{node.name}.{item.target.id}"
                        kinds = ast.unparse(item.annotation).split(" | ")
                        if "str" in kinds and field not in NAMES:
                            found.append(f"{name}.{field}: {ast.unparse(item.annotation)}")
    assert not found, "\n".join(found)
