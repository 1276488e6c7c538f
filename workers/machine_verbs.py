"""The `bigfleet` verbs about one machine's transitions: `machine history` (every transition
workflow of a machine, found by its search attribute) and `drain escalate` (a signal to its
running drain). The parser and main() are in workers/cli.py.

Everything Temporal is imported inside the functions (see workers/plumbing.py).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC
from typing import Any

from workers.args import connection_options, machine_id, seconds
from workers.plumbing import CliError, blocking, connect, rpc_error


def register(verbs: argparse._SubParsersAction) -> None:
    """`machine history` and `drain escalate`."""
    m = verbs.add_parser("machine", help="one machine's life")
    mverbs = m.add_subparsers(dest="what", required=True)
    h = mverbs.add_parser(
        "history",
        help="every transition workflow of a machine, oldest first",
        description='Every transition workflow of a machine (BigFleetMachineIds = "ID"), '
        "oldest first.",
    )
    h.add_argument("machine", type=machine_id, metavar="MACHINE_ID")
    connection_options(h)
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(run=run_history)

    dr = verbs.add_parser("drain", help="act on a running drain")
    dverbs = dr.add_subparsers(dest="what", required=True)
    e = dverbs.add_parser(
        "escalate",
        help="shorten the grace period of a machine's running drain (0 = force)",
    )
    e.add_argument("machine", type=machine_id, metavar="MACHINE_ID")
    e.add_argument(
        "--grace", type=seconds, required=True, metavar="SECONDS", help="new grace (>= 0)"
    )
    connection_options(e)
    e.set_defaults(run=run_escalate)


def machine_query(machine: str, *clauses: str) -> str:
    return " AND ".join([f'BigFleetMachineIds = "{machine}"', *clauses])


def transition_row(wf: Any) -> dict[str, Any]:
    """One transition workflow (a `list_workflows` entry) as a row of `machine history`."""
    from temporalio.client import WorkflowExecutionStatus

    from activities.wire import CLUSTER, RESULT_STATE, TRANSITION

    sa = wf.typed_search_attributes
    running = wf.status == WorkflowExecutionStatus.RUNNING
    state = sa.get(RESULT_STATE) or (
        "(running)" if running else f"({wf.status.name.lower()})" if wf.status else "?"
    )
    return {
        "start_time": wf.start_time.astimezone(UTC).isoformat(),
        "close_time": wf.close_time.astimezone(UTC).isoformat() if wf.close_time else None,
        "transition": sa.get(TRANSITION) or "?",
        "state": state,
        "cluster": sa.get(CLUSTER) or "",
        "status": wf.status.name if wf.status else None,
        "workflow_id": wf.id,
        "run_id": wf.run_id,
    }


@blocking
async def run_history(args: argparse.Namespace) -> int:
    client = await connect(args)
    try:
        listed = client.list_workflows(machine_query(args.machine))
        rows = [transition_row(wf) async for wf in listed]
    except Exception as err:
        raise CliError(f"listing workflows of {args.machine}: {err}") from None
    rows.sort(key=lambda r: (r["start_time"], r["workflow_id"]))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no transitions found for machine {args.machine}")
        print(f"  (query: {machine_query(args.machine)})")
        return 0
    print(f"machine {args.machine}: {len(rows)} transition(s), oldest first")
    print(f"  {'STARTED (UTC)':<23} {'TRANSITION':<10} {'STATE':<14} {'CLUSTER':<12} WORKFLOW ID")
    for r in rows:
        started = r["start_time"][:23].replace("T", " ")
        print(
            f"  {started:<23} {r['transition']:<10} {r['state']:<14} {r['cluster']:<12} "
            f"{r['workflow_id']}"
        )
    return 0


@blocking
async def run_escalate(args: argparse.Namespace) -> int:
    from activities.wire import MACHINE_IDS

    client = await connect(args)
    query = machine_query(
        args.machine, 'BigFleetTransition = "drain"', 'ExecutionStatus = "Running"'
    )
    found = []
    try:
        async for wf in client.list_workflows(query):
            found.append(wf)
    except Exception as err:
        raise CliError(f"listing drains of {args.machine}: {err}") from None
    if not found:
        raise CliError(
            f"no running drain for machine {args.machine} (query: {query}); "
            f"see `bigfleet machine history {args.machine}`"
        )
    for wf in found:
        try:
            await client.get_workflow_handle(wf.id, run_id=wf.run_id).signal(
                "escalate_drain", args.grace
            )
        except Exception as err:
            raise rpc_error(err, wf.id) from None
        what = "forced (grace 0 s)" if args.grace == 0 else f"grace {args.grace:g} s"
        print(f"escalated {wf.id}: {what} (a longer grace than the current one changes nothing)")
        batch = wf.typed_search_attributes.get(MACHINE_IDS) or []
        if len(batch) > 1:  # (a shard merges drains of a cluster: ShardConfig.drain_batch)
            print(f"  the workflow drains {len(batch)} machines; each of them is escalated")
    return 0
