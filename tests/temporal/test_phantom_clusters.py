"""Direct signals create no phantom clusters; a decommission of nothing is an error (issue 30,
defect 6).

Anyone who can write to the Temporal namespace can signal a shard a roll-up. One for a cluster
not assigned to that shard (`кластер-😀`) used to be taken by shard 0 on sight: it configured 6
machines, all refused as `no_operator`, and counted them under a Prometheus label the sender
chose. A coordinator `decommission` naming an unknown provider answered
`{'shares': {0: 0, 1: 0}}` instead of an error.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.coordination import CoordinationActivities
from activities.operators import OperatorActivities
from activities.wire import BootstrapCall, DecommissionRequest
from bigfleet.assignment import cluster_shard
from bigfleet.coordinator import NO_SHARD, ClusterQuestion, Coordinator
from bigfleet.inputs import Rejected
from bigfleet.models import ClusterCapacityNeeds, ListFilter, from_wire
from bigfleet.operators import SimulatedOperator
from bigfleet.shard import Shard
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import (
    REQ,
    gpu_fleet,
    machines_of,
    on_shard,
    start,
    start_coordinator,
)
from workers.routing import assign_cluster
from workflows.new_clusters import HELD_BYTES, HELD_CLUSTERS, NewClusters
from workflows.sagas import COORDINATOR_ID

PHANTOM = "кластер-😀"


def rollup(cluster: str, count: int, generation: int = 1) -> dict[str, Any]:
    need = {"requirements": REQ, "priority": 1000, "count": count}
    return {"cluster": cluster, "generation": generation, "needs": [need]}


async def refusals(handle) -> str:
    return " | ".join(r["error"] for r in (await handle.query("rejections"))["recent"])


async def test_a_shard_takes_roll_ups_only_for_clusters_assigned_to_it(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    # Shard `w`, which the phantom is not assigned to (its home is the other), gets its
    # roll-ups; clusters a and b are w's by home, c the other's.
    w = 1 - cluster_shard(PHANTOM, 2)
    a, b, c = on_shard("a", w), on_shard("b", w), on_shard("c", 1 - w)
    raw = gpu_fleet(2, {on_shard("rack", w): 8}, [a, b])
    async with fleet_workers(client, raw) as sim:
        await start_coordinator(client)
        await start(client, raw)
        shard0, shard1 = (client.get_workflow_handle(f"shard-{s}") for s in (w, 1 - w))
        coordinator = client.get_workflow_handle(COORDINATOR_ID)
        await eventually(lambda: machines_of(client, w), lambda m: m["SPECULATIVE"] == 8)
        assert await assign_cluster(client, a, 2) == w
        assert await assign_cluster(client, PHANTOM, 2) == 1 - w  # its home

        # The reproduction: straight to shard w, which the cluster is not assigned to.
        await shard0.signal("rollup", rollup(PHANTOM, 6))
        # A cluster assigned to shard w is served as ever (asked about once: shard w did
        # not serve it yet).
        await shard0.signal("rollup", rollup(a, 2))
        await eventually(
            lambda: machines_of(client, w), lambda m: m["CONFIGURED"] == 2, timeout=60,
            what="a's machines",
        )
        refused = await eventually(
            lambda: refusals(shard0), lambda r: PHANTOM in r, what="the phantom refused"
        )
        assert f"{PHANTOM}' is not assigned to shard {w}" in refused, refused
        assert f"assigns it to shard {1 - w}" in refused, refused

        # First contact without asking: the coordinator's rule decides, as `assign_cluster`
        # would have: b is at home on shard w, and c sent to shard w is refused.
        await shard0.signal("rollup", rollup(b, 0))
        await eventually(
            lambda: shard0.query("status"), lambda s: b in s["clusters"], what="b taken"
        )
        await shard0.signal("rollup", rollup(c, 1))
        refused = await eventually(
            lambda: refusals(shard0), lambda r: f"'{c}' is not assigned" in r, what="c refused"
        )
        status = await shard0.query("status")
        clusters = (await coordinator.query("status"))["clusters"]
        held = await shard0.query("rejections")
        other = await shard1.query("status")

    assert sorted(status["clusters"]) == sorted([a, b])
    assert clusters == {a: w, PHANTOM: 1 - w, b: w, c: 1 - w}
    assert held["counts"]["rollup"] == 2
    # Nothing was configured for the phantom, nor started for it.
    bound = {m.cluster for m in sim.providers["dc"].list(ListFilter())}
    assert bound == {a, None}
    assert status["machines"].get("CONFIGURING", 0) == 0
    assert not other["clusters"]  # nobody sent the other shard anything


async def test_a_decommission_of_nothing_is_refused(dev_env: WorkflowEnvironment):
    client = dev_env.client
    raw = gpu_fleet(2, {on_shard("rack", 0): 4, on_shard("rack", 1): 4}, [])
    async with fleet_workers(client, raw):
        await start_coordinator(client)
        await start(client, raw)
        await eventually(lambda: machines_of(client, 1), lambda m: m["SPECULATIVE"] == 4)
        coordinator = client.get_workflow_handle(COORDINATOR_ID)
        await eventually(  # asked of the shards (they started after it: at its next round)
            lambda: coordinator.query("status"), lambda s: s.get("providers", ["dc"]) == ["dc"]
        )

        # The reproduction: an unknown provider is refused by the validator, naming the field,
        # and nothing enters the coordinator's history.
        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await coordinator.execute_update(
                "decommission", DecommissionRequest(provider="nope", count=1)
            )
        message = str(unknown.value.cause)
        assert "provider: 'nope' is not a provider of this fleet" in message, message
        assert "dc" in message
        history = [e async for e in coordinator.fetch_history_events()]
        assert not [
            e for e in history if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]

        # A known provider with a zone no machine is in: an error, not every share of nothing.
        with pytest.raises(WorkflowUpdateFailedError) as nothing:
            await coordinator.execute_update(
                "decommission", DecommissionRequest(provider="dc", zone="nowhere-1", count=1)
            )
        message = str(nothing.value.cause)
        assert "no shard has a machine of provider 'dc', zone 'nowhere-1'" in message, message
        status = await coordinator.query("status")
        left = [sum((await machines_of(client, shard)).values()) for shard in (0, 1)]
    assert status["sagas_running"] == []
    assert left == [4, 4]  # nothing taken


# ---- the parts, without a server ------------------------------------------------------------


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_bootstrap_metrics_carry_no_name_without_an_operator():
    acts = OperatorActivities({"web": SimulatedOperator("web", "https://web")})
    before = sample("bigfleet_bootstraps_total", cluster="unknown", outcome="no_operator")
    refusals_before = sample("bigfleet_bootstrap_refusals_total", cluster="unknown")
    answer = await acts.generate_bootstrap(BootstrapCall(cluster=PHANTOM, machine_id="m-1"))
    assert answer.refused == f"no operator for cluster {PHANTOM} in the fleet file"
    assert sample("bigfleet_bootstraps_total", cluster=PHANTOM, outcome="no_operator") == 0
    assert sample("bigfleet_bootstrap_refusals_total", cluster=PHANTOM) == 0
    assert sample("bigfleet_bootstraps_total", cluster="unknown", outcome="no_operator") == (
        before + 1
    )
    assert sample("bigfleet_bootstrap_refusals_total", cluster="unknown") == refusals_before + 1
    every = {
        s.labels.get("cluster")
        for metric in REGISTRY.collect()
        for s in metric.samples
        if metric.name.startswith("bigfleet_bootstrap")
    }
    assert PHANTOM not in every


def test_first_contact_goes_where_assign_cluster_would_send_it():
    c = Coordinator(term=1, shards=[0, 1, 2], clusters={"a": 0, "b": 1})
    twin = copy.deepcopy(c)
    # A new cluster asked about by any shard goes where `assign_cluster` sends it: home.
    assert c.owners(0, ["new", "x"]) == {"new": twin.assign("new"), "x": twin.assign("x")}
    assert c.clusters == twin.clusters
    assert {c.clusters["new"], c.clusters["x"]} == {cluster_shard(n, 3) for n in ("new", "x")}
    # Runs begun before that rule: the least-loaded, the asking shard first among them.
    old = Coordinator(term=1, shards=[0, 1, 2], clusters={"a": 0, "b": 1}, by_home=False)
    assert old.owners(0, ["new"]) == {"new": 2}
    assert old.owners(1, ["x"]) == {"x": 1}
    # Assigned already: as assigned, whoever asks; a split from 0 to 2 makes a 0's for 2.
    assert c.owners(2, ["a", "b"]) == {"a": 0, "b": 1}
    assert c.owners(2, ["a", "b"], moving={0: 2}) == {"a": 2, "b": 1}
    # No room in the map: nobody's, and not stored.
    c.clusters.update({f"{i:0>250}": 0 for i in range(4_000)})
    assert c.owners(0, ["one-more"]) == {"one-more": NO_SHARD}
    assert "one-more" not in c.clusters


async def test_the_deployment_refuses_a_cluster_it_gives_no_operator_before_asking():
    acts = CoordinationActivities(None, known_cluster=lambda c: c == "web")  # type: ignore[arg-type]
    answer = await acts.cluster_owners(ClusterQuestion(shard=0, clusters=[PHANTOM]))
    assert not answer.owners
    assert "no operator endpoint" in answer.refused[PHANTOM]


def test_waiting_roll_ups_are_bounded_one_per_cluster():
    owner = SimpleNamespace(shard=Shard(3), early_rollups=[], early_bytes=0)
    new = NewClusters(owner)  # type: ignore[arg-type]

    def hold(raw: dict[str, Any]) -> None:
        new._hold(raw, from_wire(ClusterCapacityNeeds, raw))

    hold(rollup("x", 1, generation=2))
    hold(rollup("x", 5, generation=1))  # older: the waiting one stands
    hold(rollup("x", 3, generation=3))  # newer: replaces it
    assert owner.early_rollups == [rollup("x", 3, generation=3)]
    assert owner.early_bytes == len(json.dumps(rollup("x", 3, generation=3)))
    for i in range(HELD_CLUSTERS - 1):
        hold(rollup(f"c{i}", 1))
    with pytest.raises(Rejected, match="wait for the coordinator's answer already"):
        hold(rollup("one-too-many", 1))
    assert len(owner.early_rollups) == HELD_CLUSTERS
    owner.early_rollups, owner.early_bytes = [], 0
    big = {**rollup("big", 1), "needs": [rollup("big", 1)["needs"][0]] * 1500}
    assert len(json.dumps(big)) < HELD_BYTES
    hold(big)
    with pytest.raises(Rejected):
        hold({**big, "cluster": "big2"})  # over the bytes


def test_a_deployment_knows_the_clusters_it_gives_an_operator():
    from bigfleet.deployment import Deployment
    from workers.worker import RemoteFleet, SimulatedFleet, known_cluster

    base = {"name": "d", "providers": [{"name": "cloud", "endpoint": "127.0.0.1:1"}]}
    listed = {"operators": {"clusters": [{"cluster": "web", "endpoint": "127.0.0.1:2"}]}}
    fleet = RemoteFleet(from_wire(Deployment, {**base, **listed}))
    try:
        known = known_cluster(fleet)
        assert known is not None and known("web") and not known(PHANTOM)
    finally:
        fleet.close()
    bare = RemoteFleet(from_wire(Deployment, base))  # names no operator: a shadow fleet, say
    try:
        assert known_cluster(bare) is None
    finally:
        bare.close()
    assert known_cluster(SimulatedFleet(from_wire(Scenario, gpu_fleet(1, {"r": 1}, [])))) is None
