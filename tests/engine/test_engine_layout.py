"""The engine's modules import one way: phases receive a declared `CycleState` instead of the
engine, so nothing under bigfleet/engine/ but its entry points imports `fast`, no engine module
imports another lazily (inside a function or under TYPE_CHECKING), and they form no cycle."""

import ast
import pathlib

# The repository root, wherever under tests/ this file lives.
ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / "bigfleet").is_dir())
ENGINE = ROOT / "bigfleet" / "engine"
MAX_FUNCTION_LINES, MAX_FILE_LINES = 60, 400


def engine_imports(path: pathlib.Path) -> list[tuple[str, int, bool]]:
    """(sibling module imported, line, at module top level) for each relative import; an import
    inside a function or under `if TYPE_CHECKING:` is not at top level."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            found.extend((name, node.lineno, id(node) in top) for name in names)
    return found


def graph(root: pathlib.Path = ENGINE) -> dict[str, set[str]]:
    return {
        p.stem: {name for name, _, _ in engine_imports(p)} for p in sorted(root.glob("*.py"))
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(path[path.index(node) :] + [node])
            return
        if node in done:
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(edges):
        visit(node, [])
    return found


def test_engine_modules_import_each_other_without_a_cycle():
    assert cycles(graph()) == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    assert cycles(graph(tmp_path)) == [["a", "b", "a"]]


def test_no_engine_module_imports_a_sibling_lazily():
    lazy = {
        f"{p.name} imports .{name} at line {line}"
        for p in ENGINE.glob("*.py")
        for name, line, top in engine_imports(p)
        if not top
    }
    assert lazy == set()


def test_only_the_package_entry_imports_the_engine_class():
    importers = {p.stem for p in ENGINE.glob("*.py") if "fast" in graph().get(p.stem, set())}
    assert importers == {"__init__"}


def test_engine_functions_and_files_stay_small():
    too_long = []
    for p in sorted(ENGINE.glob("*.py")):
        text = p.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            too_long.append(f"{p.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{p.name}: {node.name} is {lines} lines")
    assert too_long == []
