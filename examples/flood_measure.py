"""How many signals of the largest size the server accepts it takes to end a run (issue 44, item
3): a throwaway dev server with `bigfleet dev`'s blob limits (workers/dev/server.py
BLOB_LIMITS), the two-shard fleet of tests/temporal/test_history_flood.py, then `rollup`
signals of `--bytes` (default: the largest payload the server takes) sent to shard-1 as fast as
one client sends them, then the same `shard_report` flood to the coordinator.

    .venv/bin/python examples/flood_measure.py [--bytes N] [--max N] [--pause S] [--cycle S]
        [--json]

For each target: how many signals went in until the server ended a run (or --max), and how
each run they reached closed (TERMINATED: ended by the server for its history's size;
CONTINUED_AS_NEW: the workflow handed its state to a new run first; RUNNING), with its history's
size; and whether the workflow id runs afterwards. Exit 0 if no run was ended by the server.
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

from activities.wire import SHARD_TASK_QUEUE, CoordinatorInput
from tests.conftest import TEMPORAL, eventually, fleet_workers
from tests.temporal.test_shard_restart import one_rack
from tests.temporal.test_temporal_coordinator import ask, machines_of, start
from workers.dev.server import BLOB_ERROR_BYTES, BLOB_LIMITS, throwaway_server
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID

FRAMING = 200  # a signal's JSON around its padding, and the payload's metadata


async def flood(
    client: Client, wid: str, signal: str, size: int, most: int, pause: float = 0.0
) -> dict[str, Any]:
    """`signal`s of `size` bytes to `wid` (whichever run is current), `pause` seconds apart,
    until the server ends a run or refuses a signal, or `most` went in: how many went in, and
    how each run they reached closed."""
    handle = client.get_workflow_handle(wid)
    runs = [(await handle.describe()).run_id]
    sent, refusal, began = 0, "", time.monotonic()
    for i in range(most):
        arg: dict[str, Any] = {"cluster": f"flood-{i}", "pad": "x" * (size - FRAMING)}
        if signal == "shard_report":
            arg = {"shard": 0, "pad": "x" * (size - FRAMING)}
        try:
            await handle.signal(signal, arg)
            sent += 1
        except RPCError as err:
            refusal = str(err)[:80]
            break
        if pause:
            await asyncio.sleep(pause)
        if i % 5 == 4:
            latest = await handle.describe()
            if latest.run_id != runs[-1]:
                runs.append(latest.run_id)
            if latest.status == WorkflowExecutionStatus.TERMINATED:
                break
    seconds = round(time.monotonic() - began, 1)
    # How each run closed (the last: once the server has said, or still running).
    await eventually(
        lambda: client.get_workflow_handle(wid, run_id=runs[-1]).describe(),
        lambda d: d.status != WorkflowExecutionStatus.RUNNING or sent == most,
        timeout=60,
    )
    closed = []
    for run in runs:
        d = await client.get_workflow_handle(wid, run_id=run).describe()
        size_mb = d.raw_description.workflow_execution_info.history_size_bytes / 1e6
        closed.append((d.status.name if d.status else "?", round(size_mb, 1)))
    latest = await handle.describe()
    return {
        "workflow": wid,
        "signal": signal,
        "bytes": size,
        "sent": sent,
        "seconds": seconds,
        "runs": closed,
        "terminated": any(status == "TERMINATED" for status, _ in closed),
        "refusal": refusal,
        "running_after": latest.status == WorkflowExecutionStatus.RUNNING,
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=BLOB_ERROR_BYTES - 1_000)
    ap.add_argument("--max", type=int, default=300)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between two signals")
    ap.add_argument(
        "--cycle", type=float, default=2.0,
        help="the shards' cycle and the coordinator's round, in seconds (production: 10)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: list[dict[str, Any]] = []
    async with await throwaway_server(TEMPORAL, BLOB_LIMITS) as env:
        client = env.client
        raw, _ = one_rack()
        raw["cycle_seconds"] = args.cycle
        async with fleet_workers(client, raw):
            await client.start_workflow(
                CoordinatorWorkflow.run,
                CoordinatorInput(shards=2, plan_seconds=args.cycle, missing_after_seconds=600),
                id=COORDINATOR_ID,
                task_queue=SHARD_TASK_QUEUE,
            )
            await start(client, raw)
            await ask(client, 1, raw["clusters"][0]["name"], 1_000_000, 4)
            await eventually(
                lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=90
            )
            for wid, signal in (("shard-1", "rollup"), (COORDINATOR_ID, "shard_report")):
                out.append(await flood(client, wid, signal, args.bytes, args.max, args.pause))
    result = {"blob_error_bytes": BLOB_ERROR_BYTES, "floods": out}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"server limit.blobSize.error = {BLOB_ERROR_BYTES}")
        for f in out:
            ends = ", ".join(f"{status} at {mb} MB" for status, mb in f["runs"])
            print(
                f"{f['workflow']}: {f['sent']} `{f['signal']}` signals of {f['bytes']} bytes in "
                f"{f['seconds']} s; runs: {ends}; running after: {f['running_after']}"
                + (f"; then refused: {f['refusal']}" if f["refusal"] else "")
            )
    return 0 if not any(f["terminated"] for f in out) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
