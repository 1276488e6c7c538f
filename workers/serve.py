"""`bigfleet worker`: the serving side of the command. The fleet file, the metrics servers
(BigFleet's and the Temporal SDK's), the stop handlers and the check that the namespace has
BigFleet's search attributes; `bigfleet dev` uses them too. The workers themselves are built
in workers/worker.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from workers.args import DEFAULT_METRICS_PORT, ROLES, connection_options, port, roles
from workers.health import Health, serve_health
from workers.plumbing import CliError, blocking, connect, display_address


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
        help="BigFleet's Prometheus metrics on N, the Temporal SDK's on N+1 (0: none; "
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
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    w.set_defaults(run=run_worker)


# ---- worker -----------------------------------------------------------------------------------


def load_fleet(path: str) -> Any:
    from bigfleet.simulation.scenario import ScenarioError, load

    try:
        return load(path)
    except ScenarioError as err:
        raise CliError(str(err), code=2) from None


@blocking
async def run_worker(args: argparse.Namespace) -> int:
    import logging
    import signal

    fleet = load_deployment(args.config) if args.config else load_fleet(args.fleet)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from workers.connect import runtime
    from workers.worker import (
        RemoteFleet,
        SimulatedFleet,
        build_workers,
        ensure_shards,
        keep_coordinator,
        run_workers,
    )

    rt = None
    if args.metrics_port:
        serve_metrics(args.metrics_host, args.metrics_port)
        rt = sdk_runtime(args.metrics_host, args.metrics_port + 1, runtime)
    health = Health()  # "starting" until the workers run
    if args.health_port:
        serve_health("0.0.0.0", args.health_port, health)
    client = await connect(args, rt, wait=300.0)
    await check_search_attributes(client, f"bigfleet {args.verb}")
    # (A worker of role `shards` alone calls no provider or operator: it builds none.)
    sim: Any = None
    if {"transitions", "providers"} & set(args.role):
        sim = RemoteFleet(fleet) if args.config else SimulatedFleet(fleet)
    workers = build_workers(client, sim, args.role, snapshot_dir=args.snapshot_dir)
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    task = asyncio.create_task(run_workers(workers, stop))
    health.check = workers_running(workers, task)
    keeper = None
    if "shards" in args.role:
        await ensure_shards(client, fleet, **({"shadow": True} if args.shadow else {}))
        await warn_mode_mismatch(client, fleet, args.shadow)
        # For the process's life: it ends when `stop` is set.
        keeper = asyncio.create_task(keep_coordinator(client, fleet.shards, stop))
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
            f"  metrics: http://{args.metrics_host}:{args.metrics_port}/metrics (BigFleet), "
            f"http://{args.metrics_host}:{args.metrics_port + 1}/metrics (Temporal SDK)",
            flush=True,
        )
    await task
    if keeper is not None:
        await keeper
    if sim is not None:
        sim.close()
    print("bigfleet worker: stopped", flush=True)
    return 0


async def warn_mode_mismatch(client: Any, fleet: Any, shadow: bool) -> None:
    """A shard keeps the mode it was started in (its config travels with it): say so when a
    running shard is not in the mode asked for now."""
    from activities.wire import shard_workflow_id

    for shard in range(fleet.shards):
        want = shadow or bool(getattr(fleet, "shadow_shard", lambda _: False)(shard))
        try:
            cfg = await client.get_workflow_handle(shard_workflow_id(shard)).query("config")
        except Exception:  # not running, or busy reading its state: nothing to compare
            continue
        have = bool(cfg.get("shadow", False)) if isinstance(cfg, dict) else bool(cfg.shadow)
        if have != want:
            print(
                f"bigfleet worker: warning: shard {shard} runs {'in' if have else 'out of'} "
                f"shadow mode (it was started so); asked for {'in' if want else 'out of'} it. "
                "See docs/shadow.md, 'Switching'.",
                file=sys.stderr,
                flush=True,
            )


def describe_tls(tls: Any) -> str:
    if tls is None:
        return "plaintext"
    return "mutual TLS" if tls.cert else "TLS"


def load_deployment(path: str, uses: tuple[str, ...] = ("providers", "operators")) -> Any:
    """The deployment config, with the files of the sections this process `uses` checked
    (workers: providers and operators; the gateway: its own section)."""
    from bigfleet.deployment import DeploymentError, load

    try:
        return load(path, uses)
    except DeploymentError as err:
        raise CliError(str(err), code=2) from None


def workers_running(workers: Sequence[Any], task: asyncio.Task[None]) -> Callable[[], str | None]:
    """The worker's readiness: `run_workers` still running and every worker it started polling
    (a worker the SDK shut down after a fatal error is not)."""

    def check() -> str | None:
        if task.done():
            return "the workers stopped"
        waiting = [w.task_queue for w in workers if not getattr(w, "is_running", True)]
        return f"starting workers for {', '.join(sorted(set(waiting)))}" if waiting else None

    return check


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

    from activities.wire import SEARCH_ATTRIBUTES

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
