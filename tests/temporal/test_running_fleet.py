"""Several fresh shards started over a fleet that already serves its clusters (issue 32).

Machines used to be shared out by rack or machine id, so each of 4 shards held a quarter of
every cluster's machines while the coordinator sent the cluster's roll-ups to one of them:
the other three gave theirs up after `max_silence_seconds`, and the cluster's own shard bought
replacements. Now a configured machine is adopted by its cluster's home, and the coordinator
gives a new cluster its home (bigfleet/assignment.py).
"""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from bigfleet.assignment import cluster_shard
from bigfleet.models import ListFilter, from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import (
    ask,
    gpu_fleet,
    machines_of,
    on_shard,
    start,
    start_coordinator,
)
from tests.temporal.test_temporal_transitions import configure_directly
from workers.routing import assign_cluster
from workers.worker import SimulatedFleet

EACH = 2  # machines configured for each cluster before BigFleet starts


async def test_fresh_shards_keep_every_clusters_machines_where_its_roll_ups_go(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    clusters = [f"team-{i}" for i in range(6)]
    homes = {c: cluster_shard(c, 2) for c in clusters}
    assert set(homes.values()) == {0, 1}  # (both shards are some cluster's home)
    # One rack, shard 0's by the rack rule: by rack, shard 1 would hold none of them.
    raw = gpu_fleet(2, {on_shard("rack", 0): 16}, clusters)
    sim = SimulatedFleet(from_wire(Scenario, raw))
    ids = sorted(m.id for m in sim.providers["dc"].list(ListFilter()))[: EACH * len(clusters)]
    for i, cluster in enumerate(clusters):
        configure_directly(sim, ids[i * EACH : (i + 1) * EACH], cluster)
    on = {s: EACH * sum(1 for c in clusters if homes[c] == s) for s in (0, 1)}

    async with fleet_workers(client, sim):
        await start_coordinator(client)
        await start(client, raw)
        for shard in (0, 1):
            await eventually(
                lambda s=shard: machines_of(client, s),
                lambda m, s=shard: m["CONFIGURED"] == on[s],
                what=f"shard {shard} holding its clusters' machines",
            )
        assert {c: await assign_cluster(client, c, 2) for c in clusters} == homes
        for cluster in clusters:
            await ask(client, homes[cluster], cluster, 1000, EACH)

        def settled(status: dict) -> bool:
            return set(status["clusters"]) == {c for c in clusters if homes[c] == status["shard"]}

        for shard in (0, 1):
            handle = client.get_workflow_handle(f"shard-{shard}")
            status = await eventually(lambda h=handle: h.query("status"), settled)
            cycles = status["cycles"]
            # A few cycles later, every machine still serves its cluster: none drained.
            status = await eventually(
                lambda h=handle: h.query("status"), lambda s, c=cycles: s["cycles"] >= c + 3
            )
            assert status["machines"]["CONFIGURED"] == on[shard], status["machines"]
            assert status["machines"].get("DRAINING", 0) == 0
            assert not status["shortfalls"]
