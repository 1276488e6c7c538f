"""The `bigfleet` verbs that change the fleet's shape (design §16) through the coordinator —
`shard add`, `shard split`, `shard merge`, `decommission` — and `shard revive`, which brings
back a shard workflow that is gone. Their parsers are registered here (`register`); the
parser and main() are in workers/cli.py.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowUpdateFailedError

from activities.shards import revive
from activities.wire import DecommissionRequest
from bigfleet.inputs import explain
from workers.args import connection_options, seconds, shard_number
from workers.errors import CliError
from workers.plumbing import blocking, connect, rpc_error
from workflows.sagas import COORDINATOR_ID


def register(verbs: argparse._SubParsersAction) -> None:
    """`shard add|split|merge|revive` and `decommission`."""
    sh = verbs.add_parser("shard", help="fleet membership: add, split, merge or revive shards")
    shverbs = sh.add_subparsers(dest="what", required=True)
    _register_add_split_merge(shverbs)
    rv = shverbs.add_parser(
        "revive",
        help="bring back a shard whose workflow was terminated or failed",
        description="Bring back shard N's workflow (the coordinator does this by itself for a "
        "shard that stops reporting): its last run is reset to where it ended and replays to "
        "the state it died with, then reconciles with its providers under a new epoch.",
    )
    rv.add_argument("shard", type=shard_number, metavar="N")
    rv.add_argument(
        "--from-snapshot",
        action="store_true",
        help="restart from its last continue-as-new snapshot instead of replaying its last run "
        "(after a code change that makes that history unreplayable). Machines it released since "
        "are given up; machines it adopted since are owned by no shard until handed back",
    )
    connection_options(rv)
    rv.set_defaults(run=run_revive)

    dc = verbs.add_parser(
        "decommission",
        help="take machines out of the fleet, proportionally across shards",
        description="Ask the coordinator to take COUNT machines of a provider out of the fleet "
        "(design §16): each shard gives its proportional share, free machines first, configured "
        "ones drained with --grace; cloud machines are deleted, bare metal is left to its "
        "provider.",
    )
    dc.add_argument("--provider", required=True, metavar="NAME")
    dc.add_argument("--count", type=int, required=True, metavar="N")
    dc.add_argument("--zone", metavar="ZONE")
    dc.add_argument("--instance-type", metavar="TYPE")
    dc.add_argument("--rack", metavar="RACK")
    dc.add_argument(
        "--grace", dest="grace_seconds", type=seconds, metavar="SECONDS",
        help="drain grace for configured machines (default 600)",
    )
    connection_options(dc)
    dc.set_defaults(run=run_decommission)


def _register_add_split_merge(shverbs: argparse._SubParsersAction) -> None:
    ad = shverbs.add_parser(
        "add",
        help="start a new, empty shard",
        description="Ask the coordinator for a new, empty shard (design §16): new clusters go to "
        "it first, and capacity follows its shortfalls.",
    )
    connection_options(ad)
    ad.set_defaults(run=run_add_shard)
    sp = shverbs.add_parser(
        "split",
        help="divide a shard: half its clusters and machines go to a new shard",
        description="Ask the coordinator to split shard N (design §16): a new shard takes half "
        "its clusters, their machines, and free machines by whole rack. The coordinator also "
        "splits on its own when a shard exceeds its thresholds.",
    )
    sp.add_argument("shard", type=shard_number, metavar="N")
    sp.add_argument("--wait", action="store_true", help="wait for the split and print it")
    connection_options(sp)
    sp.set_defaults(run=run_split)
    mg = shverbs.add_parser(
        "merge",
        help="merge shard N into another; N's workflow ends",
        description="Ask the coordinator to merge shard N into shard --into (design §16): all of "
        "N's clusters and machines move (those in a transition once it ends), then N retires.",
    )
    mg.add_argument("shard", type=shard_number, metavar="N")
    mg.add_argument("--into", type=shard_number, required=True, metavar="M")
    mg.add_argument("--wait", action="store_true", help="wait for the merge and print it")
    connection_options(mg)
    mg.set_defaults(run=run_merge)


# ---- the verbs --------------------------------------------------------------------------------


async def _coordinator_update(args: argparse.Namespace, update: str, arg: Any) -> Any:
    client = await connect(args)
    try:
        return client, await client.get_workflow_handle(COORDINATOR_ID).execute_update(
            update, args=[] if arg is None else [arg]
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the coordinator refused: {err.cause}") from None
    except Exception as err:
        raise rpc_error(err, COORDINATOR_ID) from None


async def _await_saga(client: Any, saga: str, wait: bool) -> int:
    print(f"started {saga}: watch it in the Temporal UI or with `bigfleet status`")
    if not wait:
        return 0
    result: dict[str, Any] = await client.get_workflow_handle(saga).result()
    print(json.dumps(result, indent=2))
    return 1 if result.get("failed_step") else 0


@blocking
async def run_split(args: argparse.Namespace) -> int:
    client, saga = await _coordinator_update(args, "split_shard", args.shard)
    return await _await_saga(client, saga, args.wait)


@blocking
async def run_add_shard(args: argparse.Namespace) -> int:
    _, shard = await _coordinator_update(args, "add_shard", None)
    print(f"started shard-{shard}: new clusters go to it first")
    return 0


@blocking
async def run_revive(args: argparse.Namespace) -> int:
    client = await connect(args)
    try:
        outcome = await revive(client, args.shard, from_snapshot=args.from_snapshot)
    except Exception as err:
        raise rpc_error(err, f"shard-{args.shard}") from None
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


@blocking
async def run_merge(args: argparse.Namespace) -> int:
    client, saga = await _coordinator_update(args, "merge_shards", [args.shard, args.into])
    return await _await_saga(client, saga, args.wait)


@blocking
async def run_decommission(args: argparse.Namespace) -> int:
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
