"""Generate the Python code of BigFleet's wire contracts (proto/bigfleet/v1/*.proto).

    python -m bigfleet.edge.codegen            # rewrite bigfleet/v1/ from proto/
    python -m bigfleet.edge.codegen --check    # exit 1 if bigfleet/v1/ is not what proto/ makes

The protobuf package `bigfleet.v1` is generated into the Python package `bigfleet.v1`, so the
generated imports (`from bigfleet.v1 import machine_pb2`) resolve as they are. The compiler is
grpcio-tools at the version pinned in pyproject.toml; tests/edge/test_codegen.py checks that
regenerating changes nothing.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUT_PACKAGE = Path("bigfleet") / "v1"
HEADER = '"""Generated from proto/bigfleet/v1 by bigfleet/edge/codegen.py: do not edit."""\n'


def protos(proto_dir: Path = PROTO_DIR) -> list[Path]:
    return sorted((proto_dir / "bigfleet" / "v1").glob("*.proto"))


def generate(out_root: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Compile every proto into `out_root`/bigfleet/v1/; the files written."""
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    files = [str(p.relative_to(proto_dir)) for p in protos(proto_dir)]
    (out_root / OUT_PACKAGE).mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{proto_dir}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    init = out_root / OUT_PACKAGE / "__init__.py"
    init.write_text(HEADER)
    return sorted((out_root / OUT_PACKAGE).iterdir())


def stale(root: Path = ROOT) -> list[str]:
    """The generated files that differ from what proto/ makes now (missing and extra ones too)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp)) if p.is_file()}
        have = {
            p.name: p
            for p in (root / OUT_PACKAGE).iterdir()
            if p.is_file() and p.suffix in (".py", ".pyi")
        }
        names = sorted(set(fresh) | set(have))
        return [
            n
            for n in names
            if n not in fresh or n not in have or not filecmp.cmp(fresh[n], have[n], shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bigfleet.edge.codegen", description=__doc__)
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        if bad:
            print(f"bigfleet/v1 is stale: {', '.join(bad)}; run python -m bigfleet.edge.codegen")
            return 1
        print("bigfleet/v1 matches proto/")
        return 0
    for path in generate(ROOT):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
