"""The `bigfleet` verbs that change the fleet's shape (seed §16) through the coordinator —
`shard add`, `shard split`, `shard merge`, `decommission` — and `shard revive`, which brings
back a shard workflow that is gone. The parser is in workers/cli.py.

Everything Temporal is imported inside the functions (see workers/verbs.py).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from workers.verbs import CliError, _async, _connect, _rpc_error


async def _coordinator_update(args: argparse.Namespace, update: str, arg: Any) -> Any:
    from temporalio.client import WorkflowUpdateFailedError

    from workflows.sagas import COORDINATOR_ID

    client = await _connect(args)
    try:
        return client, await client.get_workflow_handle(COORDINATOR_ID).execute_update(
            update, args=[] if arg is None else [arg]
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the coordinator refused: {err.cause}") from None
    except Exception as err:
        raise _rpc_error(err, COORDINATOR_ID) from None


async def _await_saga(client: Any, saga: str, wait: bool) -> int:
    print(f"started {saga}: watch it in the Temporal UI or with `bigfleet status`")
    if not wait:
        return 0
    result: dict[str, Any] = await client.get_workflow_handle(saga).result()
    print(json.dumps(result, indent=2))
    return 1 if result.get("failed_step") else 0


@_async
async def _split(args: argparse.Namespace) -> int:
    client, saga = await _coordinator_update(args, "split_shard", args.shard)
    return await _await_saga(client, saga, args.wait)


@_async
async def _add_shard(args: argparse.Namespace) -> int:
    _, shard = await _coordinator_update(args, "add_shard", None)
    print(f"started shard-{shard}: new clusters go to it first")
    return 0


@_async
async def _revive(args: argparse.Namespace) -> int:
    from activities.shards import revive

    client = await _connect(args)
    try:
        outcome = await revive(client, args.shard, from_snapshot=args.from_snapshot)
    except Exception as err:
        raise _rpc_error(err, f"shard-{args.shard}") from None
    print(
        {
            "running": f"shard-{args.shard} is running: nothing to revive",
            "completed": f"shard-{args.shard} retired (merged away): not revived",
            "unknown": f"shard-{args.shard} never ran: nothing to revive it from",
            "reset": f"shard-{args.shard} reset to the end of its last run; it reconciles with "
            "its providers next cycle",
            "restarted": f"shard-{args.shard} restarted from its last snapshot (or from scratch "
            "if it had none) with a new epoch",
        }[outcome]
    )
    return 0 if outcome in ("reset", "restarted", "running") else 1


@_async
async def _merge(args: argparse.Namespace) -> int:
    client, saga = await _coordinator_update(args, "merge_shards", [args.shard, args.into])
    return await _await_saga(client, saga, args.wait)


@_async
async def _decommission(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from activities.wire import DecommissionRequest
    from bigfleet.inputs import explain

    fields = {
        k: getattr(args, k)
        for k in ("provider", "count", "zone", "instance_type", "rack", "grace_seconds")
    }
    try:
        req = DecommissionRequest(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        raise CliError(f"invalid decommission: {explain(err)}", code=2) from None
    _, out = await _coordinator_update(args, "decommission", req)
    shares = ", ".join(f"shard {s}: {n}" for s, n in sorted(out["shares"].items()))
    print(f"decommissioning {sum(out['shares'].values())} machines ({shares})")
    for saga in out["sagas"]:
        print(f"  {saga}")
    return 0
