"""What `bench fleet` reads while it runs: every SAMPLE seconds each shard's `status` and
history, the RSS and CPU of its processes (`Run` gathers them), and after the run the
configure workflows closed (`Closed`), the history events a transition costs and the
provider's calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.wire import CLUSTER, MACHINE_IDS, SHARD
from bigfleet.models import Transition
from workers.bench.history import run_size, status_of

SAMPLE = 3.0  # seconds between samples


PROGRESS = ("cycles", "cycle_ms", "configured", "queued_starts", "events")  # per shard, a/b/..


QUERY_TIMEOUT = 10.0  # a sample's `status` query gives up after this long


TICKS = os.sysconf("SC_CLK_TCK")


COST_SAMPLE = 20  # completed workflows of each kind whose histories are counted


LIFECYCLE = ("create", "configure", "drain", "delete")  # the provider calls its rate limits


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


async def shard_sample(shard: Any, i: int, run: Run) -> dict[str, Any]:
    """One shard's part of a sample: its `status` (the last answered one if this query goes
    unanswered) and its history's size."""
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
    calls = {kind: float(provider.calls.get(kind, 0)) for kind in LIFECYCLE}
    return {
        **calls,
        "refused": float(getattr(provider, "rate_limited", 0)),
        "created": float(provider.started.get(Transition.CREATE, 0)),
        "configured": float(provider.started.get(Transition.CONFIGURE, 0)),
    }
