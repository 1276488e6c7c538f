"""How many signals of the largest size the server accepts it takes to end a run (issue 44, item
3): a throwaway dev server with `bigfleet dev`'s blob limits (workers/dev/server.py
BLOB_LIMITS), the two-shard fleet of tests/temporal/test_history_flood.py, then `rollup`
signals of `--bytes` (default: the largest payload the server takes) sent to shard-1 as fast as
one client sends them, then the same `shard_report` flood to the coordinator.

    .venv/bin/python examples/flood_measure.py [--bytes N] [--max N] [--json]

For each target: how many signals went in before its run closed, and how it closed
(TERMINATED: ended by the server for its history's size; CONTINUED_AS_NEW: the workflow handed
its state to a new run first), or `held` if --max signals went in and the run still stands;
and whether the workflow id runs again afterwards. Exit 0 if no run was ended by the server.
"""
# ruff: noqa: E402  (the repository root goes on sys.path before its modules are imported)

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from tests.conftest import TEMPORAL, eventually, fleet_workers
from tests.temporal.test_shard_restart import one_rack
from tests.temporal.test_temporal_coordinator import ask, machines_of, start, start_coordinator
from workers.dev.server import BLOB_ERROR_BYTES, BLOB_LIMITS, throwaway_server
from workflows.sagas import COORDINATOR_ID

FRAMING = 200  # a signal's JSON around its padding, and the payload's metadata


async def flood(client: Client, wid: str, signal: str, size: int, most: int) -> dict[str, Any]:
    """`signal`s of `size` bytes to `wid` until its run closes or `most` went in."""
    handle = client.get_workflow_handle(wid)
    first = await handle.describe()
    sent, refusal, began = 0, "", time.monotonic()
    for i in range(most):
        arg = {"cluster": f"flood-{i}", "pad": "x" * (size - FRAMING)}
        if signal == "shard_report":
            arg = {"shard": 0, "pad": "x" * (size - FRAMING)}
        try:
            await handle.signal(signal, arg)
            sent += 1
        except RPCError as err:
            refusal = str(err)[:80]
            break
        if i % 5 == 4:
            d = await client.get_workflow_handle(wid, run_id=first.run_id).describe()
            if d.status != WorkflowExecutionStatus.RUNNING:
                break
    seconds = round(time.monotonic() - began, 1)
    old = client.get_workflow_handle(wid, run_id=first.run_id)
    closed = await eventually(
        old.describe,
        lambda d: d.status != WorkflowExecutionStatus.RUNNING or sent == most,
        timeout=60,
    )
    status = closed.status.name if closed.status else "?"
    if closed.status == WorkflowExecutionStatus.RUNNING:
        status = "held"
    latest = await handle.describe()
    return {
        "workflow": wid,
        "signal": signal,
        "bytes": size,
        "sent": sent,
        "seconds": seconds,
        "first_run": status,
        "history_mb_at_close": round(
            closed.raw_description.workflow_execution_info.history_size_bytes / 1e6, 1
        ),
        "refusal": refusal,
        "running_after": latest.status == WorkflowExecutionStatus.RUNNING,
        "runs": "same" if latest.run_id == first.run_id else "new",
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=BLOB_ERROR_BYTES - 1_000)
    ap.add_argument("--max", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: list[dict[str, Any]] = []
    async with await throwaway_server(TEMPORAL, BLOB_LIMITS) as env:
        client = env.client
        raw, _ = one_rack()
        async with fleet_workers(client, raw):
            await start_coordinator(client, missing_after_seconds=600)
            await start(client, raw)
            await ask(client, 1, raw["clusters"][0]["name"], 1_000_000, 4)
            await eventually(
                lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=90
            )
            out.append(await flood(client, "shard-1", "rollup", args.bytes, args.max))
            out.append(await flood(client, COORDINATOR_ID, "shard_report", args.bytes, args.max))
    result = {"blob_error_bytes": BLOB_ERROR_BYTES, "floods": out}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"server limit.blobSize.error = {BLOB_ERROR_BYTES}")
        for f in out:
            print(
                f"{f['workflow']}: {f['sent']} `{f['signal']}` signals of {f['bytes']} bytes in "
                f"{f['seconds']} s; first run {f['first_run']} at {f['history_mb_at_close']} MB"
                f"; running after: {f['running_after']} ({f['runs']} run)"
                + (f"; then refused: {f['refusal']}" if f["refusal"] else "")
            )
    return 0 if all(f["first_run"] != "TERMINATED" for f in out) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
