"""Run pytest and leave with its real exit status.

The Temporal Python SDK can abort at interpreter exit (sdk-python issue 300,
`Fatal Python error: PyGILState_Release`) after every test has passed; `os._exit`
skips the interpreter teardown where that happens, so a green run stays green.

The suite runs in parallel (pytest-xdist), a test file to a worker, one worker a core up to
four: most of its time is Temporal tests waiting on servers, timers and polls, not CPU, so
two workers on CI's two cores take ~9 minutes where one took ~16. A file's tests share a
worker because several start a server once per module (moto, the Redfish emulator). Pass
`-n 0` to run in one process (to read a test's output with `-s`, say).
"""

import os
import sys

import pytest

PARALLEL = ["-n", "auto", "--maxprocesses", "4", "--dist", "loadfile"]


def arguments(given: list[str]) -> list[str]:
    """`given`, after the parallel defaults unless it chooses for itself."""
    chooses = any(a.startswith(("-n", "--numprocesses", "--dist")) for a in given)
    return given if chooses or "no:xdist" in given else [*PARALLEL, *given]


if __name__ == "__main__":
    # Bytecode is cached (__pycache__, git-ignored) even where the environment says not to:
    # without it every test process, and every server process a test starts, compiles
    # BigFleet from source and pytest rewrites every test module's asserts again (~10 s of
    # the pure suite's minute on 2 cores).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    code = pytest.main(arguments(sys.argv[1:]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))
