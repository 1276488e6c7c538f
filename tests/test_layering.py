"""The four layers import one way only (docs/design.md, "Layers"): workers → workflows →
activities → bigfleet. bigfleet/ is the pure core: it must run inside a workflow sandbox, a
simulator and a benchmark alike, so it never imports Temporal either. What crosses the Temporal
boundary lives in activities/wire/, which both workflows and activities import. Nothing imports
in a circle, and no source file is over 450 lines."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE = ROOT / "bigfleet"
# Each layer, and the packages above it that it must never import (at any depth: a lazy import
# inside a function is an arrow up all the same).
ABOVE = {
    "bigfleet": {"activities", "workflows", "workers", "temporalio"},
    "activities": {"workflows", "workers"},
    "workflows": {"workers"},
}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_core_module_imports_temporalio():
    offenders = {
        str(path.relative_to(CORE.parent))
        for path in CORE.rglob("*.py")
        if any(name.split(".")[0] == "temporalio" for name in imported_modules(path))
    }
    assert offenders == set()


def test_importing_the_whole_core_loads_no_temporalio():
    modules = sorted(
        ".".join(p.relative_to(CORE.parent).with_suffix("").parts)
        for p in CORE.rglob("*.py")
        if p.name != "__main__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m.removesuffix('.__init__'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('temporalio')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def upward_imports(layer: str, root: pathlib.Path = ROOT) -> set[str]:
    return {
        f"{path.relative_to(root)} imports {name}"
        for path in (root / layer).rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in ABOVE[layer]
    }


def test_each_layer_imports_only_downwards():
    offenders = set().union(*(upward_imports(layer) for layer in ABOVE))
    assert offenders == set()


def test_the_check_sees_an_upward_import(tmp_path):
    """The rule itself: a module of activities/ that imports workflows/ is an offender."""
    layer = tmp_path / "activities"
    layer.mkdir()
    (layer / "bad.py").write_text("def f():\n    from workflows.shard import ShardWorkflow\n")
    assert upward_imports("activities", tmp_path) == {
        "activities/bad.py imports workflows.shard"
    }


# ---- no import cycles, no crowded files (issue 35) ----------------------------------------------

PACKAGES = ("bigfleet", "workflows", "activities", "workers")
LONGEST = 450  # lines a source file may have (generated code aside)


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module → the project modules it imports, at any depth (a lazy import inside a function
    closes a cycle all the same when it runs), except under `if TYPE_CHECKING:`; `from p import
    n` counts as importing module p.n when there is one, else p."""
    paths = [p for pkg in PACKAGES if (root / pkg).is_dir() for p in (root / pkg).rglob("*.py")]
    modules = {module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skipped = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for a in node.names:
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The rule itself: two modules that import each other, one of them lazily, are a cycle."""
    pkg = tmp_path / "workers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("from workers import dev\n")
    (pkg / "dev.py").write_text("def main():\n    from .cli import main\n")
    assert cycles(import_graph(tmp_path)) == [["workers.cli", "workers.dev"]]


def test_no_source_file_is_over_450_lines():
    """Source files stay readable in one sitting; generated protobuf code is exempt."""
    sources = [
        p
        for pkg in (*PACKAGES, "examples")
        for p in (ROOT / pkg).rglob("*.py")
        if not p.name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi"))
    ]
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sources}
    assert {path: n for path, n in lengths.items() if n > LONGEST} == {}
