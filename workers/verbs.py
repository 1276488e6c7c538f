"""The verbs of `bigfleet` that talk to Temporal: `rollup send`, `status`, `cluster`, `machine
history` and `drain escalate`, with their renderers, and the connection plumbing they share with
`bigfleet worker` and `bigfleet dev`. The parser and main() are in workers/cli.py.

Everything Temporal is imported inside the functions, so importing this module (as the offline
verbs do, through workers/cli.py) does not load Temporal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any


class CliError(Exception):
    """A failure to report in one line; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ---- plumbing ---------------------------------------------------------------------------------


def _async(coro: Callable[[argparse.Namespace], Awaitable[int]]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        return asyncio.run(coro(args))

    return run


def _display_address(args: argparse.Namespace) -> str:
    address = getattr(args, "address", None) or os.environ.get("TEMPORAL_ADDRESS")
    namespace = getattr(args, "namespace", None) or os.environ.get(
        "TEMPORAL_NAMESPACE", "default"
    )
    return f"{address or 'localhost:7233 (or the profile default)'}, namespace {namespace}"


async def _connect(args: argparse.Namespace, rt: Any = None, wait: float = 0.0) -> Any:
    """Connect, retrying for `wait` seconds (a worker may start before its server)."""
    from workers.connect import connect

    deadline = time.monotonic() + wait
    delay = 1.0
    while True:
        try:
            return await connect(args.address, args.namespace, rt)
        except Exception as err:  # RuntimeError from the core, or a bad config
            if time.monotonic() >= deadline:
                raise CliError(
                    f"cannot connect to Temporal at {_display_address(args)}: {err}"
                ) from None
            print(
                f"bigfleet {args.verb}: Temporal at {_display_address(args)} not reachable yet "
                f"({err}); retrying",
                file=sys.stderr,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


# ---- roll-ups ---------------------------------------------------------------------------------


def load_rollup(path: str) -> Any:
    """Read and validate a roll-up file; a CliError (exit 2) naming the field if it is bad."""
    import yaml
    from pydantic import ValidationError

    from bigfleet.inputs import explain
    from bigfleet.models import ClusterCapacityNeeds, from_wire

    try:
        raw = yaml.safe_load(pathlib.Path(path).read_text())
    except OSError as err:
        raise CliError(f"{path}: cannot read: {err.strerror}", code=2) from None
    except yaml.YAMLError as err:
        raise CliError(f"{path}: not valid JSON or YAML: {err}", code=2) from None
    if not isinstance(raw, dict):
        raise CliError(
            f"{path}: a roll-up is a mapping with cluster, generation and needs; "
            f"got {type(raw).__name__}",
            code=2,
        )
    if "generation" not in raw:
        raw = {**raw, "generation": time.time_ns() // 1_000_000}
    try:
        return from_wire(ClusterCapacityNeeds, raw)
    except ValidationError as err:
        raise CliError(f"{path}: invalid roll-up: {explain(err)}", code=2) from None
    except ValueError as err:
        raise CliError(f"{path}: invalid roll-up: {err}", code=2) from None


async def _running_shards(client: Any) -> list[int]:
    found = []
    async for wf in client.list_workflows(
        'WorkflowType = "Shard" AND ExecutionStatus = "Running"'
    ):
        if wf.id.startswith("shard-") and wf.id[6:].isdigit():
            found.append(int(wf.id[6:]))
    return sorted(found)


async def _shard_for(client: Any, args: argparse.Namespace, cluster: str) -> int:
    """`--shard` if given, else the coordinator's assignment (it is started if need be, for
    `--shards` or as many shards as are running)."""
    from workers.worker import assign_cluster

    if args.shard is not None:
        return args.shard
    shards = args.shards or len(await _running_shards(client)) or 1
    try:
        return await assign_cluster(client, cluster, shards)
    except Exception as err:
        raise _rpc_error(err, f"assigning cluster {cluster} (coordinator)") from None


async def _shard_serving(client: Any, args: argparse.Namespace, cluster: str) -> int:
    """The shard that serves `cluster` now (`--shard` if given), found without assigning it
    anywhere: the coordinator's map, else the running shards' own lists. A CliError if none
    does."""
    from activities.wire import shard_workflow_id

    if args.shard is not None:
        return int(args.shard)
    coordinator = await _coordinator_status(client)
    if coordinator and not coordinator.get("problem"):
        shard = coordinator["clusters"].get(cluster)
        if shard is not None:
            return int(shard)
    for shard in await _running_shards(client):
        status = await _query(client, shard_workflow_id(shard), "status")
        if cluster in status["clusters"]:
            return shard
    raise CliError(f"cluster {cluster}: no shard serves it (see `bigfleet status`)")


def _rpc_error(err: Exception, what: str) -> CliError:
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return CliError(f"{what}: not found (is it running? see `bigfleet status`)")
    return CliError(f"{what}: {err}")


@_async
async def _rollup_send(args: argparse.Namespace) -> int:
    rollup = load_rollup(args.file)  # before connecting: a bad file never reaches a shard
    from activities.wire import shard_workflow_id

    client = await _connect(args)
    shard = await _shard_for(client, args, rollup.cluster)
    wid = shard_workflow_id(shard)
    try:
        await client.get_workflow_handle(wid).signal("rollup", rollup.model_dump(mode="json"))
    except Exception as err:
        raise _rpc_error(err, wid) from None
    total = sum(n.count for n in rollup.needs)
    print(
        f"sent roll-up of cluster {rollup.cluster} (generation {rollup.generation}, "
        f"{len(rollup.needs)} need(s), {total} machine(s)) to {wid}"
    )
    return 0


# ---- status, cluster --------------------------------------------------------------------------


async def _query(client: Any, wid: str, name: str, *args: Any) -> Any:
    for attempt in range(20):
        try:
            return await client.get_workflow_handle(wid).query(name, *args)
        except Exception as err:
            # A large shard reads its state back for a moment after each continue-as-new.
            if "reading its snapshot back" in str(err) and attempt < 19:
                await asyncio.sleep(0.25)
                continue
            raise _rpc_error(err, wid) from None


@_async
async def _status(args: argparse.Namespace) -> int:
    from activities.wire import shard_workflow_id

    client = await _connect(args)
    shards = [args.shard] if args.shard is not None else await _running_shards(client)
    if not shards:
        raise CliError(f"no shard workflow is running on {_display_address(args)}")
    statuses = []
    for s in shards:
        # A wedged shard answers no query: say so instead of waiting for one.
        problem = await _health(client, shard_workflow_id(s))
        statuses.append(
            {"shard": s, "problem": problem}
            if problem
            else await _query(client, shard_workflow_id(s), "status")
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
    from temporalio.client import WorkflowExecutionStatus

    from activities.shards import wedged

    try:
        desc = await client.get_workflow_handle(wid).describe()
    except Exception as err:
        return f"not found ({_rpc_error(err, wid)})"
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
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.get_workflow_handle("coordinator").describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise _rpc_error(err, "coordinator") from None
    problem = await _health(client, "coordinator")
    if problem:
        return {"problem": problem}
    try:
        return await client.get_workflow_handle("coordinator").query("status")
    except RPCError as err:
        return {"problem": f"does not answer: {err}"}


def render_coordinator(st: dict[str, Any]) -> str:
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
    return "\n".join(lines)


def _requirements(reqs: list[dict[str, Any]]) -> str:
    parts = []
    for r in reqs:
        key = r["key"].removeprefix("node.kubernetes.io/")
        values = ",".join(r.get("values") or [])
        parts.append(f"{key} {r['operator']}" + (f" [{values}]" if values else ""))
    return "; ".join(parts) or "any machine"


def render_status(st: dict[str, Any]) -> str:
    if st.get("problem"):
        return f"shard-{st['shard']}  {st['problem']}"
    machines = {k: v for k, v in st["machines"].items() if v}
    lines = [
        f"shard-{st['shard']}  epoch {st['epoch']}  cycles {st['cycles']}  "
        f"last cycle {st['last_cycle_ms']} ms  coordinator term {st['coordinator_term']}",
        "  machines:   "
        + (", ".join(f"{k} {v}" for k, v in machines.items()) or "none")
        + f"  (total {sum(machines.values())})",
        f"  clusters:   {', '.join(st['clusters']) or 'none'}  ({st['needs']} need(s))",
    ]
    shortfalls = st.get("shortfalls") or []
    lines.append(f"  shortfalls: {len(shortfalls) or 'none'}")
    for s in shortfalls:
        lines.append(
            f"    {s['cluster']}: {s['count']} × {_requirements(s['requirements'])} at priority "
            f"{s['priority']}, {s['age']} cycle(s)" + (" ESCALATED" if s.get("escalated") else "")
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


@_async
async def _cluster(args: argparse.Namespace) -> int:
    from activities.wire import shard_workflow_id

    client = await _connect(args)
    shard = await _shard_serving(client, args, args.name)
    view = await _query(client, shard_workflow_id(shard), "cluster", args.name)
    view = {"shard": shard, **view}
    print(json.dumps(view, indent=2) if args.json else render_cluster(view))
    return 0


def render_cluster(view: dict[str, Any]) -> str:
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
    return "\n".join(lines)


# ---- machine history, drain escalate ----------------------------------------------------------


def machine_query(machine: str, *clauses: str) -> str:
    return " AND ".join([f'BigFleetMachineIds = "{machine}"', *clauses])


@_async
async def _history(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    from activities.wire import CLUSTER, RESULT_STATE, TRANSITION

    client = await _connect(args)
    rows = []
    try:
        async for wf in client.list_workflows(machine_query(args.machine)):
            sa = wf.typed_search_attributes
            running = wf.status == WorkflowExecutionStatus.RUNNING
            state = sa.get(RESULT_STATE) or (
                "(running)" if running else f"({wf.status.name.lower()})" if wf.status else "?"
            )
            rows.append(
                {
                    "start_time": wf.start_time.astimezone(UTC).isoformat(),
                    "close_time": wf.close_time.astimezone(UTC).isoformat()
                    if wf.close_time
                    else None,
                    "transition": sa.get(TRANSITION) or "?",
                    "state": state,
                    "cluster": sa.get(CLUSTER) or "",
                    "status": wf.status.name if wf.status else None,
                    "workflow_id": wf.id,
                    "run_id": wf.run_id,
                }
            )
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


@_async
async def _escalate(args: argparse.Namespace) -> int:
    client = await _connect(args)
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
            raise _rpc_error(err, wf.id) from None
        what = "forced (grace 0 s)" if args.grace == 0 else f"grace {args.grace:g} s"
        print(f"escalated {wf.id}: {what} (a longer grace than the current one changes nothing)")
    return 0
