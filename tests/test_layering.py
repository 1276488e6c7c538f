"""bigfleet/ is the pure core: it must run inside a workflow sandbox, a simulator and a
benchmark alike, so it never imports Temporal."""

import ast
import pathlib
import subprocess
import sys

CORE = pathlib.Path(__file__).resolve().parent.parent / "bigfleet"


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
