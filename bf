#!/usr/bin/env bash
# One entry point that does its own set-up: a virtualenv in .venv with BigFleet and its test
# tools, re-installed only when pyproject.toml changes.
#   ./bf dev            run BigFleet locally (embedded Temporal dev server, workers, example fleet)
#   ./bf test [ARGS]    lint, type-check and run the test suite (extra ARGS go to pytest)
#   ./bf ARGS...        any other `bigfleet` command, e.g. ./bf bench engine
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.installed-$(sha1sum "$here/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$here[test]" >&2
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$here"
case "${1:-}" in
  test)
    shift
    ruff check bigfleet workflows activities workers tests
    mypy  # bigfleet/ and workflows/ (pyproject.toml [tool.mypy])
    exec python -m tests.run "$@"
    ;;
  "")
    exec bigfleet --help
    ;;
  *)
    exec bigfleet "$@"
    ;;
esac
