"""`bigfleet gateway`: serve the roll-up gateway (workers/gateway.py) for a deployment config,
delivering through a ShardRouter (workers/routing.py), until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from bigfleet.deployment import Deployment
from workers.args import connection_options, http_and_log_options, port
from workers.errors import CliError
from workers.gateway import TokenTable, start_gateway, watch_temporal
from workers.generations import Generations
from workers.health import Health, serve_health
from workers.plumbing import blocking, connect, display_address
from workers.process import install_stop_handlers, load_deployment, serve_metrics
from workers.routing import ShardRouter


def register(verbs: argparse._SubParsersAction) -> None:
    """`gateway --config FILE ...`."""
    g = verbs.add_parser(
        "gateway",
        help="serve the roll-up gateway: cluster operators send roll-ups here over gRPC",
        description="Serve the Rollups gRPC service on the deployment config's gateway.listen: "
        "authenticate each roll-up as its cluster's (TLS client certificate or bearer token), "
        "validate it and signal it to the cluster's shard. Runs until SIGINT/SIGTERM.",
    )
    g.add_argument("--config", required=True, metavar="FILE", help="deployment config")
    connection_options(g)
    g.add_argument("--listen", metavar="HOST:PORT", help="override gateway.listen")
    g.add_argument(
        "--health-port", type=port, metavar="N",
        help="/healthz and /readyz on N (default: gateway.health_port; 0: none)",
    )  # fmt: skip
    g.add_argument(
        "--metrics-port", type=port, default=0, metavar="N",
        help="Prometheus metrics on N (default 0: none)",
    )  # fmt: skip
    http_and_log_options(g)
    g.set_defaults(run=run_gateway)


@blocking
async def run_gateway(args: argparse.Namespace) -> int:


    """`bigfleet gateway`: serve roll-ups until SIGINT/SIGTERM, ready while Temporal answers."""
    dep: Deployment = load_deployment(args.config, uses=("gateway",))
    tokens = TokenTable.load(dep)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _warn_about_credentials(dep, tokens)
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    state = Health()
    state.check = lambda: "connecting to Temporal"
    health_port = args.health_port if args.health_port is not None else dep.gateway.health_port
    if health_port:
        serve_health(args.http_host, health_port, state)
    if args.metrics_port:
        serve_metrics(args.http_host, args.metrics_port)
    connecting = asyncio.create_task(connect(args, wait=300.0))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():  # stopped before Temporal answered
        connecting.cancel()
        print("bigfleet gateway: stopped", flush=True)
        return 0
    stopping.cancel()
    client = connecting.result()
    listen = args.listen or dep.gateway.listen
    router = ShardRouter(client, dep.shards)
    try:
        gateway = await start_gateway(
            dep, tokens, router, listen, Generations(router.generation)
        )
    except OSError as err:
        raise CliError(str(err)) from None
    reason: list[str | None] = ["checking Temporal"]
    state.check = lambda: reason[0]
    watcher = asyncio.create_task(
        watch_temporal(client, gateway, lambda why: reason.__setitem__(0, why), stop)
    )
    host = listen.rsplit(":", 1)[0]
    tls = "mutual TLS" if dep.gateway.tls and dep.gateway.tls.client_ca else (
        "TLS" if dep.gateway.tls else "plaintext"
    )
    print(
        f"bigfleet gateway: serving roll-ups on {host}:{gateway.port} ({tls}, "
        f"{len(tokens.entries)} token(s)) for {dep.name} ({dep.shards} shard(s)), Temporal "
        f"{display_address(args)}",
        flush=True,
    )
    if gateway.token_port:
        print(f"  tokens over TLS on {host}:{gateway.token_port} (token_listen)", flush=True)
    if health_port:
        print(f"  health: http://{args.http_host}:{health_port}/readyz", flush=True)
    if args.metrics_port:
        print(f"  metrics: http://{args.http_host}:{args.metrics_port}/metrics", flush=True)
    await stop.wait()
    await watcher
    await gateway.stop()
    print("bigfleet gateway: stopped", flush=True)
    return 0


def _warn_about_credentials(dep: Deployment, tokens: TokenTable) -> None:
    tls = dep.gateway.tls
    mutual = tls is not None and tls.client_ca is not None
    if not tokens.entries and not mutual:
        print(
            "bigfleet gateway: warning: no tokens and no tls.client_ca: every roll-up will be "
            "refused (UNAUTHENTICATED)",
            file=sys.stderr,
        )
    if tokens.entries and tls is None:
        print(
            "bigfleet gateway: warning: tokens over plaintext: use gateway.tls beyond loopback",
            file=sys.stderr,
        )
