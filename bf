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
  if [ -x "$venv/bin/python" ]; then
    echo "== pyproject.toml changed: re-installing BigFleet into .venv (a minute or two)" >&2
  else
    echo "== first run: installing BigFleet and its tools into .venv (a few minutes, once)" >&2
  fi
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$here[test]" >&2
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
# The commands `./bf dev` prints run as printed from the checkout: `./bf ...`.
export BIGFLEET_COMMAND=./bf
cd "$here"
case "${1:-}" in
  test)
    shift
    # Debian's chromium renders the HTML report in a test; docker-compose validates the compose
    # file. Where they are missing those tests skip, saying why; they are installed from Debian
    # only when asked (BF_INSTALL_SYSTEM=1, as root with apt: CI does), and said so first.
    missing=()
    command -v chromium >/dev/null || missing+=(chromium)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "${BF_INSTALL_SYSTEM:-}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null
      then
        echo "== installing ${missing[*]} from Debian (BF_INSTALL_SYSTEM=1)" >&2
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            "${missing[@]}"; } >/dev/null 2>&1 \
          || echo "   could not install ${missing[*]}; the tests that need them skip" >&2
      else
        echo "== no ${missing[*]} on this machine: the tests that need them skip (install" \
          "them yourself, or run as root with BF_INSTALL_SYSTEM=1 to have apt-get do it)" >&2
      fi
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
