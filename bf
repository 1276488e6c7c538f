#!/usr/bin/env bash
# One entry point that does its own set-up: a virtualenv in .venv with BigFleet and its test
# tools, re-installed only when pyproject.toml changes.
#   ./bf dev            run BigFleet locally (embedded Temporal dev server, workers, example fleet)
#   ./bf test [ARGS]    lint, type-check and run the test suite (extra ARGS go to pytest);
#                       a full run (no ARGS) then prints the engine and snapshot benchmarks
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
    # Debian's chromium renders the HTML report in a test; docker-compose validates the compose
    # file. Installed once where this runs as root with apt (CI does); else those tests skip.
    missing=()
    command -v chromium >/dev/null || missing+=(chromium)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "== installing ${missing[*]} from Debian (once)" >&2
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
          "${missing[@]}"; } >/dev/null 2>&1 \
        || echo "   could not install ${missing[*]}; the tests that need them skip" >&2
    fi
    ruff check bigfleet workflows activities workers tests
    mypy  # bigfleet/ and workflows/ (pyproject.toml [tool.mypy])
    python -m tests.run "$@" || exit $?
    if [ $# -eq 0 ]; then
      # Every full run shows the decision core's numbers in its log: numbers, not a gate.
      echo "== benchmarks (numbers, not a gate): the engine and the snapshot at 50 000 machines"
      bigfleet bench engine --sizes 50000 --reference-max 0 --phases || true
      bigfleet bench snapshot --sizes 50000 || true
    fi
    ;;
  "")
    exec bigfleet --help
    ;;
  *)
    exec bigfleet "$@"
    ;;
esac
