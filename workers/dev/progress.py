"""What `bigfleet dev` prints while it runs: a line per shard every PROGRESS_SECONDS, a machine
with a history to look up (with its Temporal UI link), and activity failures in one line rather
than a traceback. The orchestration is in workers/dev/launcher.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import urllib.parse
from typing import Any

from activities.wire import MACHINE_IDS, shard_workflow_id

PROGRESS_SECONDS = 30.0


async def progress(
    client: Any, fleet: Any, started: float, ui: str, stop: asyncio.Event
) -> None:
    """A line per shard every 30 s, and, once transitions exist, a real machine to look up.
    `started`: when `bigfleet dev` started (time.monotonic), for the t+ offsets."""
    hinted = False
    seen: set[str] = set()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROGRESS_SECONDS)
        if stop.is_set():
            return
        now = time.monotonic() - started
        await _sagas(client, now, seen)
        try:
            shards = (await client.get_workflow_handle("coordinator").query("status"))["shards"]
        except Exception:
            shards = list(range(fleet.shards))
        for shard in shards:
            try:
                st = await client.get_workflow_handle(shard_workflow_id(shard)).query("status")
            except Exception as err:
                print(f"  t+{now:4.0f}s shard-{shard}: no answer ({err})", flush=True)
                continue
            machines = ", ".join(f"{k} {v}" for k, v in st["machines"].items() if v and
                                 k != "SPECULATIVE")
            print(
                f"  t+{now:4.0f}s shard-{shard}: {machines or 'no machines in use'}; "
                f"{len(st['shortfalls'])} shortfall(s); cycle {st['last_cycle_ms']} ms",
                flush=True,
            )
        if not hinted:
            hinted = await _hint_machine(client, ui)


async def _sagas(client: Any, now: float, seen: set[str]) -> None:
    """One line per saga the coordinator started since the last look: what moved where."""
    query = 'WorkflowType = "TransferSaga" OR WorkflowType = "MembershipSaga"'
    try:
        fresh = [wf async for wf in client.list_workflows(query) if wf.id not in seen]
        for wf in sorted(fresh, key=lambda w: w.start_time):
            seen.add(wf.id)
            summary = await (await client.get_workflow_handle(wf.id).describe()).static_summary()
            print(f"  t+{now:4.0f}s coordinator: {summary} ({wf.id})", flush=True)
    except Exception as err:
        print(f"  t+{now:4.0f}s coordinator: sagas not listed ({err})", flush=True)


async def _hint_machine(client: Any, ui: str) -> bool:
    """Point at a machine that has been through the most: a drain if there was one."""
    for query in (
        'WorkflowType = "MachineTransition" AND BigFleetTransition = "drain"',
        'WorkflowType = "MachineTransition" AND BigFleetTransition = "configure"',
    ):
        try:
            async for wf in client.list_workflows(query, limit=1):
                ids = wf.typed_search_attributes.get(MACHINE_IDS) or []
                if ids:
                    print(
                        f"  a machine with a history: {command()} machine history {ids[0]}\n"
                        f"    or in the UI: {ui_query_url(ui, ids[0])}",
                        flush=True,
                    )
                    return True
        except Exception:
            return False
    return False


def ui_query_url(ui: str, machine: str) -> str:
    query = f'BigFleetMachineIds = "{machine}"'
    return f"{ui}/namespaces/default/workflows?query={urllib.parse.quote(query)}"


def one_line(record: logging.LogRecord) -> bool:
    """A failed activity attempt (a throttled provider call, say) is retried by Temporal: in dev,
    one line for it rather than a traceback. `bigfleet worker` logs the whole traceback."""
    if record.exc_info and record.exc_info[1] is not None:
        err = record.exc_info[1]
        record.msg = f"{record.getMessage()}: {type(err).__name__}: {err}"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
    return True


def command() -> str:
    """How a printed `bigfleet` command is run: `./bf` when `./bf` started this process (it
    sets BIGFLEET_COMMAND; the commands then run as printed from the checkout, where `./bf`
    made .venv), else `bigfleet`."""
    return os.environ.get("BIGFLEET_COMMAND") or "bigfleet"


def runnable(path: Any) -> str:
    """`path` as a command: relative to here when it is below the working directory."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") and os.sep in rel else str(path)
