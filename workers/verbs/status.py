"""`bigfleet status` (what each shard holds, and the coordinator) and `bigfleet cluster NAME`
(one cluster as its shard sees it, `--reset-generation`, `--mode`), with their text renderers.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from activities.shards import wedged
from activities.wire import COORDINATOR_ID, shard_workflow_id
from workers.args import cluster_name, connection_options, shard_number, shard_options
from workers.errors import CliError
from workers.plumbing import blocking, connect, query, rpc_error, running_shards, shards_asked
from workers.verbs.rollout import build_label


def register(verbs: argparse._SubParsersAction) -> None:
    """`status` and `cluster NAME`."""
    s = verbs.add_parser("status", help="what each shard holds: machines, needs, shortfalls")
    connection_options(s)
    s.add_argument("--shard", type=shard_number, metavar="N", help="one shard (default: all)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(run=run_status)

    c = verbs.add_parser("cluster", help="one cluster as its shard sees it")
    c.add_argument("name", type=cluster_name, metavar="NAME")
    connection_options(c)
    shard_options(c)
    c.add_argument("--json", action="store_true", help="print JSON")
    c.add_argument(
        "--reset-generation",
        action="store_true",
        help="forget the cluster's roll-up generation, so that its next roll-up applies "
        "whatever its generation (one far ahead of what its operator sends made every later "
        "roll-up stale); its needs stay in force until then",
    )
    c.add_argument(
        "--mode",
        choices=("managed", "unmanaged", "shadow"),
        help="change the cluster's mode through the coordinator, audited (docs/adoption.md): "
        "unmanaged hands its machines back as they stand and refuses its roll-ups; shadow "
        "leaves them alone too and records what BigFleet would do (`bigfleet shadow report "
        "--clusters`); managed takes them back as the providers list them",
    )
    c.add_argument(
        "--reason", default="", metavar="TEXT", help="why (recorded by the shard, with "
        "--reset-generation; by the coordinator, with --mode)"
    )
    c.set_defaults(run=run_cluster)


@blocking
async def run_status(args: argparse.Namespace) -> int:

    """`bigfleet status`: every shard's (or one's) status and the coordinator's; exit 1 if any
    of them is not running or wedged."""
    client = await connect(args)
    shards = await shards_asked(client, args)
    statuses = []
    for s in shards:
        # A wedged shard answers no query: say so instead of waiting for one.
        problem = await _health(client, shard_workflow_id(s))
        statuses.append(
            {"shard": s, "problem": problem}
            if problem
            else await query(client, shard_workflow_id(s), "status")
        )
    coordinator = await _coordinator_status(client) if args.shard is None else None
    if args.json:
        out: Any = statuses if args.shard is None else statuses[0]
        if coordinator is not None:
            out = {"shards": statuses, "coordinator": coordinator}
        print(json.dumps(out, indent=2))
    else:
        text = [render_status(st) for st in statuses]
        if coordinator is not None:
            text.append(render_coordinator(coordinator))
        print("\n\n".join(text))
    return 0 if not any(st.get("problem") for st in [*statuses, coordinator or {}]) else 1


async def _health(client: Any, wid: str) -> str | None:
    """What is wrong with a workflow that should be running: not running, or wedged (its
    workflow task fails on every attempt); None if it runs."""


    try:
        desc = await client.get_workflow_handle(wid).describe()
    except Exception as err:
        return f"not found ({rpc_error(err, wid)})"
    if desc.status != WorkflowExecutionStatus.RUNNING:
        name = desc.status.name.lower() if desc.status else "gone"
        when = f" at {desc.close_time:%Y-%m-%d %H:%M:%S}Z" if desc.close_time else ""
        return f"NOT RUNNING: {name}{when}"
    failing = await wedged(client, wid, desc)
    return f"WEDGED: {failing}" if failing else None


async def _coordinator_status(client: Any) -> dict[str, Any] | None:
    """The coordinator's view, or what is wrong with it; None if the fleet never had one (a
    single shard runs without one). A coordinator that ended still answers queries with its
    last state, so it is described first."""

    try:
        await client.get_workflow_handle("coordinator").describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise rpc_error(err, "coordinator") from None
    problem = await _health(client, "coordinator")
    if problem:
        return {"problem": problem}
    try:
        return await client.get_workflow_handle("coordinator").query("status")
    except RPCError as err:
        return {"problem": f"does not answer: {err}"}


def render_coordinator(st: dict[str, Any]) -> str:
    """The coordinator's status (or what is wrong with it) as text."""
    if st.get("problem"):
        return (
            f"coordinator  {st['problem']}\n  (a `bigfleet worker` with the shards role "
            "restarts it within a cycle; shards keep serving meanwhile)"
        )
    lines = [f"coordinator  term {st['term']}  shards {st['shards']}"]
    lines.append(f"  sagas running:     {len(st['sagas_running'])}")
    if st.get("membership"):
        lines.append(f"  split/merge:       {', '.join(st['membership'])}")
    if st.get("retiring"):
        lines.append(f"  retiring shards:   {st['retiring']}")
    lines.append(f"  missing shards:    {st['missing_shards'] or 'none'}")
    escalated = [f"{e['cluster']} ({e['priority']}, {e['count']})" for e in st["escalations"]]
    lines.append(f"  escalated:         {', '.join(escalated) or 'none'}")
    shared = ", ".join(st["shared_shortfalls"])
    lines.append(f"  fleet-wide short:  {shared + ' (time to buy capacity)' if shared else 'none'}")
    if "pool" in st:  # (a coordinator from before issue 45 does not say)
        lines.append(render_pool(st["pool"]))
    return "\n".join(lines)


def render_pool(pool: dict[str, Any]) -> str:
    """The coordinator's pool line: elastic machines beside idle owned ones in another shard,
    per profile (the largest 5), and the machines moved for cost in the last hour; then the
    shards proposed for a split, if any."""
    n = pool["elastic_beside_idle_owned"]
    moved = f"moved for cost this hour: {pool['moved_for_cost_last_hour']}"
    proposed = [
        f"shard {p['shard']} (short {p['rounds']} rounds, {p['free_elsewhere']} fitting "
        "machines free elsewhere)"
        for p in pool.get("split_proposed", [])  # (a coordinator from before does not say)
    ]
    split = f"\n  split proposed:    {', '.join(proposed)}" if proposed else ""
    if not n:
        line = f"  pool:              no elastic machine runs beside idle owned ones; {moved}"
        return line + split
    ranked = sorted(pool["by_profile"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{p}: {k}" for p, k in ranked[:5])
    more = f", … {len(ranked) - 5} more" if len(ranked) > 5 else ""
    return (
        f"  pool:              {n} elastic machine(s) run beside idle owned ones in another "
        f"shard ({shown}{more}); {moved}" + split
    )


def _requirements(reqs: list[dict[str, Any]]) -> str:
    parts = []
    for r in reqs:
        key = r["key"].removeprefix("node.kubernetes.io/")
        values = ",".join(r.get("values") or [])
        parts.append(f"{key} {r['operator']}" + (f" [{values}]" if values else ""))
    return "; ".join(parts) or "any machine"


def render_status(st: dict[str, Any]) -> str:
    """One shard's status as text."""
    if st.get("problem"):
        return f"shard-{st['shard']}  {st['problem']}"
    machines = {k: v for k, v in st["machines"].items() if v}
    lines = [
        f"shard-{st['shard']}  epoch {st['epoch']}  cycles {st['cycles']}  "
        f"last cycle {st['last_cycle_ms']} ms  coordinator term {st['coordinator_term']}"
        + build_label(st),
        "  machines:   "
        + (", ".join(f"{k} {v}" for k, v in machines.items()) or "none")
        + f"  (total {sum(machines.values())})",
        f"  clusters:   {', '.join(st['clusters']) or 'none'}  ({st['needs']} need(s))",
    ]
    if "spend" in st:  # (a shard from before issue 31 does not say)
        lines.append(render_spend(st["spend"]))
    if "oldest_queued_seconds" in st:  # (a shard from before issue 32 does not say)
        lines.append(render_backlog(st))
    for f in st.get("fences_escalated") or []:  # (issue 44: said before "shortfalls: none")
        since = time.strftime("%H:%M:%S", time.gmtime(f["since"]))
        lines.append(
            f"  FENCED OUT: provider {f['provider']} refuses shard {st['shard']} as stale: it "
            f"keeps epoch {f['kept_epoch']} (ours {st['epoch']}) since {since}Z, past the new "
            f"epochs allowed an hour (bigfleet provider fence show|reset)"
        )
    shortfalls = st.get("shortfalls") or []
    lines.append(f"  shortfalls: {len(shortfalls) or 'none'}")
    for s in shortfalls:
        lines.append(
            f"    {s['cluster']}: {s['count']} × {_requirements(s['requirements'])} at priority "
            f"{s['priority']}, {s['age']} cycle(s)" + (" ESCALATED" if s.get("escalated") else "")
            + (f": {s['why']}" if s.get("why") else "")
        )
    if st.get("rejections"):
        lines.append("  rejected roll-ups (latest last):")
        lines += [f"    {r}" for r in st["rejections"]]
    rejected = st.get("rejected_inputs") or {}
    if rejected:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(rejected.items()))
        lines.append(f"  rejected signals: {counts}  (the last ones: query `rejections`)")
    if st.get("failures"):
        lines.append("  failed calls, retried next cycle (latest last):")
        lines += [
            f"    {time.strftime('%H:%M:%S', time.gmtime(f['at']))}Z {f['error']}"
            for f in st["failures"]
        ]
    return "\n".join(lines)


def render_backlog(st: dict[str, Any]) -> str:
    """The outbox line of `bigfleet status`: what the shard decided and has not started yet
    (the server is behind), what runs, and the intervals between its last cycles."""
    ends = st.get("cycle_ends") or []
    gaps = sorted(b - a for a, b in zip(ends, ends[1:], strict=False))
    every = f"; cycles every {gaps[len(gaps) // 2]:.1f} s (max {gaps[-1]:.1f} s)" if gaps else ""
    dropped = st.get("dropped_notices") or 0
    return (
        f"  outbox:     {st['queued_starts']} start(s) queued, oldest "
        f"{st['oldest_queued_seconds']:.0f} s; {st.get('in_flight', 0)} in flight; "
        f"{st.get('queued_notices', 0)} cycle(s) of notices waiting"
        + (f", {dropped} dropped" if dropped else "")
        + every
    )


def _dollars(by_type: dict[str, float]) -> str:
    return ", ".join(f"{k} ${v:,.2f}" for k, v in by_type.items() if v)


def render_spend(spend: dict[str, Any] | None) -> str:
    """The shard's $/h line of `bigfleet status` (bigfleet/spend.py's `Spend.summary`)."""
    if spend is None:
        return "  cost:       not measured yet (no decision cycle in this run)"
    line = f"  cost:       ${spend['dollars_per_hour']:,.2f}/h"
    by_type = _dollars(spend["by_capacity_type"])
    line += f" ({by_type})" if by_type else ""
    idle = sum(spend["idle_owned_machines"].values())
    line += f"; idle owned {idle}"
    pairs = spend["elastic_while_owned_idle_machines"]
    if pairs:
        line += f"; elastic while owned idle {pairs} (an idle owned machine would do)"
    return line


async def _shard_serving(client: Any, args: argparse.Namespace, cluster: str) -> int:
    """The shard that serves `cluster` now (`--shard` if given), found without assigning it
    anywhere: the coordinator's map, else the running shards' own lists. A CliError if none
    does."""

    if args.shard is not None:
        return int(args.shard)
    coordinator = await _coordinator_status(client)
    if coordinator and not coordinator.get("problem"):
        shard = coordinator["clusters"].get(cluster)
        if shard is not None:
            return int(shard)
    for shard in await running_shards(client):
        status = await query(client, shard_workflow_id(shard), "status")
        if cluster in status["clusters"]:
            return shard
    raise CliError(f"cluster {cluster}: no shard serves it (see `bigfleet status`)")


@blocking
async def run_cluster(args: argparse.Namespace) -> int:

    """`bigfleet cluster NAME`: the cluster as the shard serving it sees it."""
    client = await connect(args)
    if args.mode:
        return await cluster_mode(client, args.name, args.mode, args.reason)
    shard = await _shard_serving(client, args, args.name)
    if args.reset_generation:
        return await _reset_generation(client, shard, args.name, args.reason)
    view = await query(client, shard_workflow_id(shard), "cluster", args.name)
    view = {"shard": shard, **view}
    print(json.dumps(view, indent=2) if args.json else render_cluster(view))
    return 0


async def cluster_mode(client: Any, cluster: str, mode: str, reason: str) -> int:
    """`bigfleet cluster NAME --mode M`: the coordinator's `cluster_mode` update."""
    try:
        by = getpass.getuser()
    except (OSError, KeyError):  # (no login name where it runs)
        by = ""
    req = {"cluster": cluster, "mode": mode, "reason": reason, "by": by[:200]}
    try:
        entry = await client.get_workflow_handle(COORDINATOR_ID).execute_update(
            "cluster_mode", req
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the coordinator refused: {err.cause}") from None
    except RPCError as err:
        raise rpc_error(err, COORDINATOR_ID) from None
    print(f"cluster {cluster} is now {mode}; shards answered: {json.dumps(entry['answers'])}")
    return 0


def _disruption_lines(d: dict[str, Any]) -> list[str]:
    """Each budget of the cluster (its own, or the deployment's), whether it holds now, how
    many more machines each reason may take now, the marks in force and what was held back."""
    budgets = d.get("budgets") or []
    lines = [
        f"  disruption: {d['draining']} of {d['machines']} machines draining; "
        + (f"{len(budgets)} budget(s) from the {d['source']}" if budgets else "no budget")
    ]
    for b in budgets:
        when = (
            f" for {b['duration_seconds']:g} s from each '{b['schedule']}'"
            if b.get("schedule")
            else ""
        )
        reasons = ", ".join(b.get("reasons") or ["every reason"])
        holds = ", ".join(b["holds_now"]) or "nothing now"
        lines.append(f"    {b['machines']} (= {b['limit']}) for {reasons}{when}: holds {holds}")
    room = d.get("room") or {}
    lines.append(
        "    room now: "
        + ", ".join(f"{r} {'unbounded' if n < 0 else n}" for r, n in room.items())
    )
    if d.get("do_not_disrupt"):
        lines.append(f"    do-not-disrupt: {d['do_not_disrupt']} machine(s) marked")
    held = d.get("held_back") or {}
    if held:
        lines.append(
            "    held back last cycle: " + ", ".join(f"{r} {n}" for r, n in held.items())
        )
    return lines


def _health_lines(h: dict[str, Any]) -> list[str]:
    """The cluster's machines under a provider's notice, and whether its repair is held."""
    notices = h.get("notices") or {}
    held = h.get("repair_held")
    lines = [
        "  health:    "
        + (f"{len(notices)} machine(s) under notice" if notices else "no notice")
        + (
            f"; REPAIR HELD: {held['unhealthy']} unhealthy at once, max_unhealthy allows "
            f"{held['allowed']} (escalated)"
            if held
            else ""
        )
    ]
    for mid, n in list(notices.items())[:20]:
        deadline = f" by {n['deadline_unix']}" if n.get("deadline_unix") else ""
        lines.append(f"    {mid}: {n['kind']}{deadline} ({n.get('detail') or 'no detail'})")
    if len(notices) > 20:
        lines.append(f"    … and {len(notices) - 20} more (--json shows all)")
    return lines


async def _reset_generation(client: Any, shard: int, cluster: str, reason: str) -> int:
    """`bigfleet cluster NAME --reset-generation`: the shard's `reset_generation` update."""
    if len(reason) > 200:
        raise CliError(f"--reason: at most 200 characters, got {len(reason)}", code=2)
    wid = shard_workflow_id(shard)
    try:
        done = await client.get_workflow_handle(wid).execute_update(
            "reset_generation", {"cluster": cluster, "reason": reason}
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"{wid} refused: {err.cause}") from None
    except Exception as err:
        raise rpc_error(err, wid) from None
    print(
        f"cluster {cluster}: generation {done['was']} forgotten by {wid}; its next roll-up "
        "applies, whatever its generation"
    )
    return 0


def render_cluster(view: dict[str, Any]) -> str:
    """One cluster's view (`bigfleet cluster`) as text."""
    lines = [f"cluster {view['cluster']} (shard-{view['shard']})"]
    needs = view.get("needs") or []
    lines.append(f"  needs: {len(needs) or 'none (no roll-up, or it aged out)'}")
    for n in needs:
        extra = []
        for field in ("interruption_penalty", "reclamation_penalty"):
            if n.get(field):
                extra.append(f"{field.split('_')[0]} penalty {n[field]:g}")
        if n.get("same"):
            extra.append(f"same {n['same']}")
        lines.append(
            f"    {n['count']} × {_requirements(n['requirements'])} at priority {n['priority']}"
            + (f" ({', '.join(extra)})" if extra else "")
        )
    lines += _machine_lines(view)
    upcoming = view.get("upcoming") or []
    lines.append(f"  upcoming:  {len(upcoming) or 'none'}")
    lines += [f"    {u['machine']} ({u['instance_type']})" for u in upcoming]
    reclaims = view.get("reclaims") or []
    lines.append(f"  reclaims:  {len(reclaims) or 'none'}")
    lines += [f"    {r['machine']} grace {r['grace_seconds']:g} s" for r in reclaims]
    available = view.get("available") or {}
    lines.append(
        "  available: " + (", ".join(f"{k} {v}" for k, v in available.items()) or "none")
    )
    if view.get("disruption"):  # (a shard from before issue 33 does not say)
        lines += _disruption_lines(view["disruption"])
    if view.get("health"):  # (likewise)
        lines += _health_lines(view["health"])
    if "spend" in view:  # (a shard from before issue 31 does not say)
        spend = view["spend"]
        if spend is None:
            lines.append("  cost:      not measured yet (no decision cycle in this run)")
        else:
            lines.append(f"  cost:      ${spend['dollars_per_hour']:,.2f}/h")
            lines += [f"    {band}: {_dollars(row)}" for band, row in spend["by_band"].items()]
    return "\n".join(lines)




def _machine_lines(view: dict[str, Any]) -> list[str]:
    """The machines the cluster holds: id, state, profile and since when (UTC)."""
    if "machines" not in view:  # (a shard from before issue 48 does not say)
        return []
    machines, total = view["machines"], view.get("machines_total", len(view["machines"]))
    more = f" (the first {len(machines)} shown)" if total > len(machines) else ""
    lines = [f"  machines:  {total or 'none'}{more}"]
    if machines:
        width = max(len(m["id"]) for m in machines)
        lines.append(f"    {'ID':<{width}}  {'STATE':<11}  {'SINCE (UTC)':<19}  PROFILE")
    for m in machines:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m["since"])) if m["since"] else "-"
        lines.append(f"    {m['id']:<{width}}  {m['state']:<11}  {since:<19}  {m['profile']}")
    return lines
