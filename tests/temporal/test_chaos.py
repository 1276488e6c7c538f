"""Chaos (issue 9): a fleet under churning roll-ups survives its worker process SIGKILLed twice
and its Temporal server SIGKILLed once — each started again, the server from its SQLite file —
and converges: `bigfleet audit` is clean (every machine owned once, as its provider has it) and
every cluster has exactly its count configured at the providers.

Everything runs in its own process, as in production: `temporal server start-dev` with a
database file, `bigfleet worker --role shards,transitions` (the process that is killed), and
`bigfleet worker --role providers`. The providers' process is not killed: its simulated
providers hold the machines' real state in memory, and a real provider does not forget its
machines when a worker dies (killing it would model every provider losing its whole fleet).
The deadline is generous: this checks correctness, not speed (activities a killed worker held
are retried after their start-to-close timeout, up to a minute).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import TEMPORAL
from tests.procs import Proc, free_port, retrying
from workers import cli
from workers.connect import connect
from workers.dev.server import SQLITE_PRAGMAS, search_attribute_flags
from workers.routing import assign_cluster
from workers.verbs.audit import audit
from workers.worker import ensure_shards

ROOT = Path(__file__).resolve().parents[2]
GPU = "gpu-8xh100"
VM = "m6i.xlarge"
FLEET = {
    "name": "chaos",
    "seed": 7,
    "cycle_seconds": 1,
    "duration_seconds": 1,
    "shards": 2,
    "policy": {
        "excess_grace_seconds": 1,
        "idle_timeout_seconds": {"on-demand": 5},
        "max_silence_seconds": 3600,
    },
    "providers": [
        {
            "name": "dc",
            "kind": "bare-metal",
            "configure_latency": 1,
            "drain_latency": 1,
            "racks": [
                {"rack": r, "zone": "z-1", "instance_type": GPU, "count": 6}
                for r in ("rack-a", "rack-b")
            ],
        },
        {
            "name": "cloud",
            "kind": "cloud",
            "region": "r",
            "api_calls_per_second": 20,
            "create_latency": [1, 2],
            "configure_latency": 1,
            "delete_latency": 1,
            "drain_latency": 1,
            "quota": [
                {"instance_type": VM, "zone": "r-a", "capacity_type": "on-demand", "count": 12,
                 "price_per_hour": 6.0}
            ],
        },
    ],
    "clusters": [{"name": c} for c in ("train", "web", "batch")],
}
KIND = {"train": GPU, "web": VM, "batch": VM}
# Counts per round of churn, every ~2 s; the last is where the fleet must settle.
ROUNDS = [
    {"train": 3, "web": 2, "batch": 4},
    {"train": 6, "web": 5, "batch": 1},
    {"train": 2, "web": 3, "batch": 3},
    {"train": 5, "web": 6, "batch": 2},
    {"train": 4, "web": 4, "batch": 3},
]
FINAL = ROUNDS[-1]


async def shard_views(client: Any) -> list[Any]:
    """What each shard says of itself and its clusters (for a failure's message)."""
    out: list[Any] = []
    for shard in range(FLEET["shards"]):
        handle = client.get_workflow_handle(f"shard-{shard}")
        try:
            status = await handle.query("status")
            views = [await handle.query("cluster", c) for c in KIND]
        except Exception as err:  # (a failure's message: what could be read)
            out.append({"shard": shard, "error": str(err)[:300]})
            continue
        keep = ("machines", "failures", "in_flight", "queued_starts", "cycles", "outbox")
        out.append({"shard": shard, **{k: status.get(k) for k in keep}, "clusters": views})
    return out


def rollup(cluster: str, count: int) -> dict[str, Any]:
    need = {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [KIND[cluster]]}
        ],
        "priority": 500_000,
        "count": count,
    }
    return {"cluster": cluster, "generation": time.time_ns() // 1_000_000, "needs": [need]}


@pytest.mark.skipif(not TEMPORAL.exists(), reason=f"no Temporal CLI at {TEMPORAL}")
async def test_a_fleet_converges_after_its_worker_and_server_are_killed(tmp_path: Path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(FLEET))
    fleet = from_wire(Scenario, FLEET)
    server = Proc(
        "temporal server",
        [str(TEMPORAL), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--db-filename", str(tmp_path / "temporal.db"), *SQLITE_PRAGMAS,
         "--log-level", "error", *search_attribute_flags()],
        tmp_path / "temporal.log",
    )
    worker = [sys.executable, "-m", "workers.cli", "worker", "--fleet", str(fleet_file),
              "--address", address, "--metrics-port", "0", "--log-level", "warning",
              "--snapshot-dir", str(tmp_path / "snapshots")]
    shards = Proc("worker (shards, transitions)", [*worker, "--role", "shards,transitions"],
                  tmp_path / "shards.log")
    providers = Proc("worker (providers)", [*worker, "--role", "providers"],
                     tmp_path / "providers.log")
    procs = [shards, providers, server]
    started = time.monotonic()
    try:
        server.start()
        client = await retrying("connecting", lambda: connect(address, "default"), 60)
        await retrying("the server answering", client.count_workflows, 60)
        # Shards and coordinator as the tests run them (quick reports and reconciles; a task
        # the killed worker held times out after 10 s, not the default 60: a small fleet
        # replays in well under a second), before the workers start theirs (which then find
        # them running).
        await ensure_shards(
            client, fleet, plan_seconds=2, transition_poll_seconds=1.0, report_seconds=1.0,
            reconcile_seconds=5.0, task_timeout_seconds=10,
        )
        providers.start()
        shards.start()
        assigned = {c: await assign_cluster(client, c, fleet.shards) for c in KIND}

        async def send(counts: dict[str, int]) -> None:
            for cluster, count in counts.items():
                handle = client.get_workflow_handle(f"shard-{assigned[cluster]}")
                await retrying(
                    f"roll-up of {cluster}", lambda h=handle, c=cluster, n=count: h.signal(
                        "rollup", rollup(c, n)
                    ),
                )

        # Churn, and chaos in between: the worker killed twice, the server once.
        chaos: dict[int, Callable[[], Any]] = {
            1: lambda: kill_and_restart(shards),
            2: lambda: kill_and_restart(server, pause=1.0),
            3: lambda: kill_and_restart(shards),
        }
        for i, counts in enumerate(ROUNDS):
            await send(counts)
            await asyncio.sleep(2.0)
            if i in chaos:
                await chaos[i]()
        assert shards.started == 3 and server.started == 2 and providers.started == 1
        await send(FINAL)  # once more, after every restart
        churned = time.monotonic()

        # Converged: the audit is clean and every cluster has its count configured.
        last: dict[str, Any] = {}
        seen: list[str] = []  # what the audits on the way said
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            for p in procs:
                assert p.alive(), p.tail()
            try:
                last = await audit(client, settle_seconds=1.0)
            except Exception as err:  # the server said no for now: ask again
                last = {"error": str(err)}
                seen.append(f"{time.monotonic() - churned:.0f}s: {str(err)[:200]}")
            else:
                r = last["report"]
                seen.append(
                    f"{time.monotonic() - churned:.0f}s: "
                    + " ".join(f"{k} {n}" for k, n in r["counts"].items() if n)
                    + f" configured {r['configured']}"
                )
                if last["clean"] and r["configured"] == FINAL:
                    break
            await asyncio.sleep(2.0)
        else:
            raise AssertionError(
                f"not converged: {last}\naudits: {seen}\nshards: {await shard_views(client)}\n"
                + "\n".join(p.tail() for p in procs)
            )
        converged = time.monotonic()
        for cluster, count in FINAL.items():
            view = await client.get_workflow_handle(f"shard-{assigned[cluster]}").query(
                "cluster", cluster
            )
            assert [n["count"] for n in view["needs"]] == [count], view
        # And `bigfleet audit` says so with its exit status.
        assert await asyncio.to_thread(cli.main, ["audit", "--address", address]) == 0
        transitions = (
            await client.count_workflows('WorkflowType = "MachineTransition"')
        ).count
        print(
            f"chaos: churn and kills {churned - started:.0f} s, converged "
            f"{converged - churned:.0f} s later; {last['report']['listed']} machines listed, "
            f"in flight at the end {last['report']['counts']['in_flight']}; "
            f"{transitions} transitions; audits on the way:\n  " + "\n  ".join(seen)
        )
    finally:
        for p in procs:
            p.kill()


async def kill_and_restart(p: Proc, pause: float = 0.0) -> None:
    assert p.alive(), p.tail()
    p.kill()
    await asyncio.sleep(pause)
    p.start()
