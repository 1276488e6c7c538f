"""The four layers import one way only (DESIGN §2): workers → workflows → activities →
bigfleet. bigfleet/ is the pure core: it must run inside a workflow sandbox, a simulator and a
benchmark alike, so it never imports Temporal either. What crosses the Temporal boundary lives
in activities/wire/, which both workflows and activities import."""

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
