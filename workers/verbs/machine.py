"""The `bigfleet` verbs about one machine's transitions: `machine history` (every transition
workflow of a machine, found by its search attribute) and `drain escalate` (a signal to its
running drain). The parser and main() are in workers/cli.py.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC
from typing import Any

from temporalio.client import WorkflowExecutionStatus

from activities.wire import CLUSTER, MACHINE_IDS, RESULT_STATE, TRANSITION
from workers.args import connection_options, machine_id, seconds
from workers.errors import CliError
from workers.plumbing import blocking, connect, rpc_error


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
    """The visibility query for `machine`'s transition workflows, with more `clauses` ANDed."""
    return " AND ".join([f'BigFleetMachineIds = "{machine}"', *clauses])


async def transition_row(client: Any, wf: Any) -> dict[str, Any]:
    """One transition workflow (a `list_workflows` entry) as a row of `machine history`: its
    search attributes, and from its memo (set at its start, activities/starter.py `memo`) the
    summary, a drain's grace and force, and the reason. A workflow started before it had a
    memo is read from its first history event instead (a call per such workflow)."""
    sa = wf.typed_search_attributes
    running = wf.status == WorkflowExecutionStatus.RUNNING
    state = sa.get(RESULT_STATE) or (
        "(running)" if running else f"({wf.status.name.lower()})" if wf.status else "?"
    )
    transition = sa.get(TRANSITION) or "?"
    memo = dict(await wf.memo())
    if "summary" not in memo:
        memo = await _started_with(client, wf, transition)
    return {
        "start_time": wf.start_time.astimezone(UTC).isoformat(),
        "close_time": wf.close_time.astimezone(UTC).isoformat() if wf.close_time else None,
        "transition": transition,
        "state": state,
        "cluster": sa.get(CLUSTER) or "",
        "grace_seconds": memo.get("grace_seconds"),
        "force": memo.get("force"),
        "escalated_grace_seconds": memo.get("escalated_grace_seconds"),
        "reason": memo.get("reason"),
        "machines": len(sa.get(MACHINE_IDS) or []),
        "summary": memo.get("summary"),
        "status": wf.status.name if wf.status else None,
        "workflow_id": wf.id,
        "run_id": wf.run_id,
    }


async def _started_with(client: Any, wf: Any, transition: str) -> dict[str, Any]:
    """What the memo would say, from the workflow's start event: its input and summary."""
    try:
        handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
        async for event in handle.fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            (inp,) = await client.data_converter.decode(started.input.payloads)
            told = {}
            if event.user_metadata.HasField("summary"):
                (told["summary"],) = await client.data_converter.decode(
                    [event.user_metadata.summary]
                )
            if transition == "drain":
                told["grace_seconds"] = inp.get("grace_seconds")
                told["force"] = inp.get("force")
            if inp.get("reason"):
                told["reason"] = inp["reason"]
            return told
    except Exception:  # (not readable: the row without them)
        pass
    return {}


def _grace(r: dict[str, Any]) -> str:
    if r["grace_seconds"] is None:
        return "-"
    text = "forced" if r["force"] else f"{r['grace_seconds']:g} s"
    if r["escalated_grace_seconds"] is not None:
        text += f" → {r['escalated_grace_seconds']:g} s"
    return text


def history_table(rows: list[dict[str, Any]]) -> str:
    """The transitions as a table whose columns are as wide as their widest value (a
    kubectl-style listing: ~80 characters for everyday names), each row followed by its
    summary and workflow id."""
    header = ("STARTED (UTC)", "CLOSED", "TRANSITION", "STATE", "CLUSTER", "GRACE", "REASON",
              "MACHINES")
    cells = []
    for r in rows:
        started = r["start_time"][:19].replace("T", " ")
        closed = r["close_time"][11:19] if r["close_time"] else "-"
        if r["close_time"] and r["close_time"][:10] != r["start_time"][:10]:
            closed = r["close_time"][:19].replace("T", " ")
        cells.append((started, closed, r["transition"], r["state"], r["cluster"] or "-",
                      _grace(r), r["reason"] or "-", str(r["machines"])))
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]

    def line(values: tuple[str, ...]) -> str:
        return "  " + "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [line(header)]
    for r, c in zip(rows, cells, strict=True):
        out.append(line(c))
        if r["summary"]:
            out.append(f"      {r['summary']}")
        out.append(f"      workflow {r['workflow_id']}")
    return "\n".join(out)


@blocking
async def run_history(args: argparse.Namespace) -> int:
    """`bigfleet machine history MACHINE_ID`: each transition workflow of the machine."""
    client = await connect(args)
    try:
        listed = [wf async for wf in client.list_workflows(machine_query(args.machine))]
        rows = [await transition_row(client, wf) for wf in listed]
    except Exception as err:
        raise CliError(f"listing workflows of {args.machine}: {err}") from None
    rows.sort(key=lambda r: (r["start_time"], r["workflow_id"]))
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no transitions found for machine {args.machine}")
        print(f"  (query: {machine_query(args.machine)})")
        return 0
    print(f"machine {args.machine}: {len(rows)} transition(s), oldest first")
    print(history_table(rows))
    return 0


@blocking
async def run_escalate(args: argparse.Namespace) -> int:
    """`bigfleet drain escalate MACHINE_ID`: signal the machine's running drain to escalate."""
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
