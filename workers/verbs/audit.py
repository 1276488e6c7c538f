"""`bigfleet audit [--repair] [--json]`: every provider's listing against every shard's holdings
(issue 9). Its parser is registered here (`register`), main() is in workers/cli.py; the
workflow, the activity and the repair are in workflows/audit.py, activities/audit.py and
workflows/audit_handlers.py.

`audit(client, ...)` is the library form (tests and scripts): it finds the scope (the
coordinator's shards, the running shards, their providers and assignment rule), runs the
`FleetAudit` workflow, and with `repair` sends the report to the coordinator's `repair` update
and audits again.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError

from activities.audit_wire import AuditScope
from activities.wire import SHARD_TASK_QUEUE, shard_workflow_id
from workers.args import bounded_int, connection_options
from workers.errors import CliError
from workers.plumbing import blocking, connect, query, rpc_error, running_shards
from workflows.audit import FleetAuditWorkflow
from workflows.sagas import COORDINATOR_ID

EXIT_FOUND = 3  # discrepancies (or shards not running): distinct from 1 (the server said no)
LABELS = {
    "orphan": "owned by no shard",
    "double": "owned by two or more shards",
    "mismatch": "state or cluster differs",
    "unlisted": "held, not listed by its provider",
}
SHOWN = 20  # example findings the text output prints


async def _coordinator(client: Any) -> dict[str, Any] | None:
    handle = client.get_workflow_handle(COORDINATOR_ID)
    try:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return None
        return await handle.query("status")
    except RPCError:
        return None


async def audit_scope(client: Any, limit: int, settle_seconds: float) -> Any:
    """What to audit: the shards the coordinator counts and those running (a shard the
    coordinator counts that does not run is reported: its machines look nobody's until it is
    revived), the providers in their configs, and who takes each share of the assignment
    rule (a shard, and those merged into it)."""
    coordinator = await _coordinator(client)
    members = set(coordinator["shards"]) if coordinator else set()
    running = await running_shards(client)
    if not running:
        raise CliError("no shard workflow is running: nothing to audit")
    providers: set[str] = set()
    rule_shards = 1
    shares: dict[int, int] = {}
    for shard in running:
        cfg = await query(client, shard_workflow_id(shard), "config")
        status = await query(client, shard_workflow_id(shard), "status")
        providers.update(cfg["providers"])
        rule_shards = int(cfg["shards"])
        shares[shard] = shard
        for inherited in status.get("inherited") or []:
            shares[int(inherited)] = shard
    return AuditScope(
        providers=sorted(providers),
        shards=running,
        not_running=sorted(members - set(running)),
        rule_shards=rule_shards,
        shares=shares,
        limit=limit,
        settle_seconds=settle_seconds,
    )


async def run_audit(client: Any, scope: Any) -> Any:
    """One `FleetAudit` workflow: the merged report of every provider."""
    try:
        return await client.execute_workflow(
            FleetAuditWorkflow.run,
            scope,
            id=f"audit-{time.time_ns() // 1_000_000}",
            task_queue=SHARD_TASK_QUEUE,
            execution_timeout=timedelta(minutes=15),
            static_summary=f"audit of {', '.join(scope.providers)} against shards {scope.shards}",
        )
    except Exception as err:
        cause = getattr(err, "cause", None) or err
        raise CliError(f"the audit workflow failed: {cause}") from None


async def send_repair(client: Any, report: Any) -> dict[str, Any]:
    try:
        return await client.get_workflow_handle(COORDINATOR_ID).execute_update(
            "repair", report, result_type=dict
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the coordinator refused the repair: {err.cause}") from None
    except Exception as err:
        raise rpc_error(err, f"{COORDINATOR_ID} (repair)") from None


async def audit(
    client: Any, repair: bool = False, limit: int = 1000, settle_seconds: float = 2.0
) -> dict[str, Any]:
    """Audit the fleet; with `repair`, have the coordinator resolve what was found and audit
    again. Returns {"report", "repair", "after", "clean"} (JSON-ready; "clean" is the last
    report's)."""
    scope = await audit_scope(client, limit, settle_seconds)
    report = await run_audit(client, scope)
    out: dict[str, Any] = {"report": report.model_dump(mode="json"), "repair": None, "after": None}
    last = report
    if repair and report.discrepancies():
        out["repair"] = await send_repair(client, report)
        last = await run_audit(client, await audit_scope(client, limit, settle_seconds))
        out["after"] = last.model_dump(mode="json")
    out["clean"] = last.clean()
    return out


# ---- the verb ---------------------------------------------------------------------------------


def register(verbs: argparse._SubParsersAction) -> None:
    """`audit [--repair] [--json] [--limit N] [--settle SECONDS]`."""
    au = verbs.add_parser(
        "audit",
        help="compare every provider's machines with every shard's (after an incident)",
        description="List machines owned by no shard, by two shards, or in another state (or "
        "cluster) at their shard than at their provider; exit 3 if there are any, 0 if none. "
        "--repair has the coordinator resolve them with fenced instructions, then audits again.",
    )
    au.add_argument("--repair", action="store_true", help="resolve what is found, then re-audit")
    au.add_argument("--json", action="store_true", help="print JSON")
    au.add_argument(
        "--limit", type=bounded_int("a number of examples", 0, 1000), default=1000,
        metavar="N", help="example machines to report (default and most 1000)",
    )
    au.add_argument(
        "--settle", type=settle_seconds, default=2.0, metavar="SECONDS",
        help="time between the audit's two looks (default 2)",
    )
    connection_options(au)
    au.set_defaults(run=run_audit_verb)


def render_report(r: dict[str, Any]) -> str:
    counts = r["counts"]
    lines = [
        f"audit of provider(s) {', '.join(r['providers'])} against shard(s) {r['shards']}: "
        f"{r['listed']} machines listed, {r['held']} held"
    ]
    if r["not_running"]:
        lines.append(
            f"  NOT RUNNING: shard(s) {r['not_running']} (their machines look nobody's; the "
            "coordinator revives them, or `bigfleet shard revive N`)"
        )
    for kind, label in LABELS.items():
        lines.append(f"  {label + ':':<36}{counts.get(kind, 0)}")
    lines.append(
        f"  (settling, not counted: {counts.get('in_flight', 0)} in a transition; "
        f"{counts.get('decommissioned', 0)} decommissioned, nobody's on purpose; "
        f"{counts.get('unmanaged', 0)} of unmanaged clusters, left alone)"
    )
    configured = ", ".join(f"{c} {n}" for c, n in sorted(r["configured"].items()))
    lines.append(f"  configured at the providers: {configured or 'none'}")
    findings = r["findings"]
    if findings:
        total = sum(counts.get(k, 0) for k in LABELS)
        lines.append(f"  examples ({min(SHOWN, len(findings))} of {total}; --json for up to "
                     f"{len(findings)}):")
    for f in findings[:SHOWN]:
        at = f["provider_state"] or "not listed"
        if f["provider_cluster"]:
            at += f" for {f['provider_cluster']}"
        held = ", ".join(
            f"shard {h['shard']} {h['state']}" + (f" for {h['cluster']}" if h["cluster"] else "")
            for h in f["holders"]
        ) or "no shard"
        rule = f"; rule: shard {f['rule_shard']}" if f.get("rule_shard") is not None else ""
        lines.append(f"    {f['kind']:<9}{f['machine_id']}  {f['provider']}: {at}; {held}{rule}")
    return "\n".join(lines)


def render_repair(rep: dict[str, Any]) -> str:
    def per(d: dict[str, int]) -> str:
        return ", ".join(f"shard {s}: {n}" for s, n in sorted(d.items())) or "none"

    lines = [
        f"repair (coordinator term {rep['term']}):",
        f"  disowned: {per(rep['disowned'])}",
        f"  adopted:  {per(rep['adopted'])}",
        f"  observed: {per(rep['observed'])}",
    ]
    if rep["skipped_count"]:
        lines.append(f"  left alone: {rep['skipped_count']}")
        lines += [f"    {mid}: {why}" for mid, why in rep["skipped"][:SHOWN]]
    for refused in rep["refused"]:
        lines.append(
            f"  REFUSED by shard {refused['shard']}: {refused['update']} of "
            f"{refused['machines']}: {refused['error']}"
        )
    return "\n".join(lines)


@blocking
async def run_audit_verb(args: argparse.Namespace) -> int:
    client = await connect(args)
    out = await audit(client, repair=args.repair, limit=args.limit, settle_seconds=args.settle)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        text = [render_report(out["report"])]
        if out["repair"] is not None:
            text += [render_repair(out["repair"]), "after the repair:", render_report(out["after"])]
        elif args.repair:
            text.append("nothing to repair")
        print("\n".join(text))
    return 0 if out["clean"] else EXIT_FOUND


def settle_seconds(text: str) -> float:
    """`--settle`: 0 … 300 seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value <= 300:
        raise argparse.ArgumentTypeError(f"expected seconds 0..300, got {text!r}")
    return value
