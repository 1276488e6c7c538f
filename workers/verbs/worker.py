"""`bigfleet worker`: run BigFleet's Temporal workers, of some or all roles, until a signal
stops them. What a serving process sets up (metrics, stop handlers, the search-attribute check)
is in workers/process.py; the workers themselves are built in workers/worker.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import signal
import sys
from typing import Any

from activities.wire import shard_workflow_id
from workers.args import (
    DEFAULT_METRICS_PORT,
    ROLES,
    build_name,
    connection_options,
    describe_tls,
    port,
    roles,
)
from workers.connect import runtime
from workers.health import Health, serve_health
from workers.node_costs import keep_node_costs
from workers.plumbing import blocking, connect, display_address
from workers.process import (
    check_search_attributes,
    install_stop_handlers,
    load_deployment,
    load_fleet,
    serve_metrics,
    workers_running,
)
from workers.worker import (
    RemoteFleet,
    SimulatedFleet,
    build_workers,
    ensure_shards,
    keep_coordinator,
    run_workers,
)


def register(verbs: argparse._SubParsersAction) -> None:
    """`worker --fleet FILE [--role ROLES] ...`."""
    w = verbs.add_parser(
        "worker",
        help="run BigFleet's workers against a Temporal server",
        description="Run BigFleet's Temporal workers until SIGINT/SIGTERM: against the gRPC "
        "providers and operators of a deployment config (--config), or simulated ones from a "
        "fleet file (--fleet). With role `shards` it also starts every shard "
        "workflow that is not running yet.",
    )
    source = w.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config",
        metavar="FILE",
        help="deployment config: the gRPC endpoints of your providers and cluster operators "
        "(docs/operations.md, 'Your own providers and operators')",
    )
    source.add_argument(
        "--fleet",
        metavar="FILE",
        help="fleet file (scenario schema): simulated providers and operators in this process",
    )
    connection_options(w)
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
        help="Prometheus metrics on N: BigFleet's, the workflows' and the Temporal SDK's (0: none; "
        f"default {DEFAULT_METRICS_PORT})",
    )
    w.add_argument(
        "--metrics-host", default="0.0.0.0", metavar="ADDR", help="bind address for metrics"
    )
    w.add_argument(
        "--health-port",
        type=port,
        default=0,
        metavar="N",
        help="serve GET /healthz (liveness) and /readyz (ready once connected to Temporal and "
        "every worker polls) on 0.0.0.0:N (default 0: none)",
    )
    w.add_argument(
        "--snapshot-dir",
        type=pathlib.Path,
        default=None,
        metavar="DIR",
        help="the snapshot store for shard state too large for one Temporal payload; every "
        "worker with role shards must see the same directory (default: $BIGFLEET_SNAPSHOT_DIR, "
        "else .bigfleet/snapshots)",
    )
    w.add_argument(
        "--shadow",
        action="store_true",
        help="start every shard in shadow mode: it decides and records what it would do, and "
        "calls no mutating provider or operator method (docs/shadow.md; a deployment config "
        "can name some shards with `shadow:`)",
    )
    w.add_argument(
        "--build",
        default="",
        metavar="NAME",
        type=build_name,
        help="the build these shard workers are (letters, digits, . _ -): they poll its own "
        "task queue, and run the shards `bigfleet rollout` moves to it (docs/rollout.md); "
        "default: the default build",
    )
    w.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    w.set_defaults(run=run_worker)


@blocking
async def run_worker(args: argparse.Namespace) -> int:
    """`bigfleet worker`: build the workers of the roles asked, start the shards if a role
    says so, and run until SIGINT/SIGTERM."""
    fleet = load_deployment(args.config) if args.config else load_fleet(args.fleet)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    rt = None
    if args.metrics_port:
        rt = runtime()
        serve_metrics(args.metrics_host, args.metrics_port)
    health = Health()  # "starting" until the workers run
    if args.health_port:
        serve_health("0.0.0.0", args.health_port, health)
    client = await connect(args, rt, wait=300.0)
    await check_search_attributes(client, f"bigfleet {args.verb}")
    # (A worker of role `shards` alone calls no provider or operator: it builds none.)
    sim: Any = None
    if {"transitions", "providers"} & set(args.role):
        sim = RemoteFleet(fleet) if args.config else SimulatedFleet(fleet)
    workers = build_workers(
        client, sim, args.role, snapshot_dir=args.snapshot_dir, build=args.build
    )
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    task = asyncio.create_task(run_workers(workers, stop))
    health.check = workers_running(workers, task)
    keeper = costs = None
    if "shards" in args.role:
        await ensure_shards(client, fleet, **({"shadow": True} if args.shadow else {}))
        await warn_mode_mismatch(client, fleet, args.shadow)
        # For the process's life: it ends when `stop` is set.
        keeper = asyncio.create_task(keep_coordinator(client, fleet.shards, stop))
        if args.metrics_port:  # OpenCost's node metrics of the shards' machines
            costs = asyncio.create_task(keep_node_costs(client, stop))
    queues = sorted({w.task_queue for w in workers})
    print(
        f"bigfleet worker: fleet {fleet.name} ({fleet.shards} shard(s)), roles "
        f"{','.join(args.role)}, Temporal {display_address(args)}",
        flush=True,
    )
    print(f"  task queues: {', '.join(queues)}", flush=True)
    if args.config:
        for spec in fleet.providers:
            print(f"  provider {spec.name}: {spec.endpoint} ({describe_tls(spec.tls)})", flush=True)
    if args.metrics_port:
        print(
            f"  metrics: http://{args.metrics_host}:{args.metrics_port}/metrics (BigFleet's, "
            "the workflows' and the Temporal SDK's)",
            flush=True,
        )
    await task
    if keeper is not None:
        await keeper
    if costs is not None:
        await costs
    if sim is not None:
        sim.close()
    print("bigfleet worker: stopped", flush=True)
    return 0


async def warn_mode_mismatch(client: Any, fleet: Any, shadow: bool) -> None:
    """A shard keeps the mode it was started in (its config travels with it): say so when a
    running shard is not in the mode asked for now."""
    for shard in range(fleet.shards):
        want = shadow or bool(getattr(fleet, "shadow_shard", lambda _: False)(shard))
        try:
            cfg = await client.get_workflow_handle(shard_workflow_id(shard)).query("config")
        except Exception:  # not running, or busy reading its state: nothing to compare
            continue
        conf = cfg if isinstance(cfg, dict) else vars(cfg)
        have = bool(conf.get("shadow", False))
        if have != want:
            print(
                f"bigfleet worker: warning: shard {shard} runs {'in' if have else 'out of'} "
                f"shadow mode (it was started so); asked for {'in' if want else 'out of'} it. "
                "See docs/shadow.md, 'Switching'.",
                file=sys.stderr,
                flush=True,
            )
        # Likewise the clusters it leaves alone (docs/adoption.md).
        wanted = sorted(getattr(fleet, "unmanaged_clusters", None) or [])
        running = sorted(conf.get("unmanaged") or [])
        if running != wanted:
            print(
                f"bigfleet worker: warning: shard {shard} leaves {len(running)} cluster(s) "
                f"alone (it was started so); the config names {len(wanted)} (unmanaged_clusters)."
                " See docs/adoption.md.",
                file=sys.stderr,
                flush=True,
            )


