"""A cluster in shadow inside a shard that acts for the others (issue 46, design §13 phase 1
cluster by cluster; bigfleet/shadow_clusters.py): its machines are left alone, its roll-ups
never reach the shard's needs, and its report compares what BigFleet would have done with what
the cluster has, at the same prices. The numbers are worked by hand below."""

import pytest

from bigfleet.cluster_modes import ClusterModes
from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.fleet import bare_metal, need, on_demand, rollup

S = MachineState


def reported(cluster: str, generation: int, count: int, machines: list[str]) -> dict:
    """A roll-up whose operator reports the nodes the cluster has."""
    return {**rollup(cluster, generation, need(count, 500)), "health": {"machine_ids": machines}}


def fleet() -> tuple[Shard, list]:
    """web (managed) holds 2 bare-metal machines at $2/h and asks for 2; 3 more sit idle; ml
    (shadow) runs 2 on-demand machines at $6/h of its own autoscaler's, on a provider the
    shard lists too."""
    shard = Shard(0, Policy(max_silence_seconds=300))
    shard.modes = ClusterModes(shadow=["ml"])
    web = [bare_metal(i, S.CONFIGURED, cluster="web", price=2.0) for i in range(2)]
    free = [bare_metal(i, S.IDLE, price=2.0) for i in range(2, 5)]
    ml = [on_demand(i, S.CONFIGURED, cluster="ml", price=6.0) for i in range(2)]
    shard.adopt(web + free + ml, 0)
    assert shard.receive(rollup("web", 1, need(2, 100)), 1) is None
    return shard, ml


def test_a_shadow_cluster_is_decided_for_recorded_and_never_touched():
    shard, ml = fleet()
    assert len(shard.inventory) == 5  # ml's machines are not the shard's
    assert shard.receive(reported("ml", 1, 4, ["od-0000", "od-0001"]), 1) is None
    decision = shard.cycle(10)
    assert shard.needs.clusters() == ["web"]  # ml's roll-up is the shadow's alone
    touched = {getattr(a, "machine_id", None) for a in decision.actions}
    assert not touched & {"od-0000", "od-0001"} and not decision.shortfalls
    assert all(getattr(a, "cluster", None) != "ml" for a in decision.actions)
    assert shard.machines_by_state()["IDLE"] == 3  # the free machines stay free for real

    [r] = shard.shadows.report("ml")
    # Asked 4, has 2 at $6/h = $12/h; BigFleet would configure 2 of the idle $2/h machines:
    # 4 machines at $12 + $4 = $16/h, covered at once (would-be time to capacity 0 s).
    assert r["asked"] == 4 and r["short_since"] == 10
    assert r["actual"]["machines"] == 2 and r["actual"]["cost_per_hour"] == 12.0
    assert r["would_be"]["machines"] == 4 and r["would_be"]["cost_per_hour"] == 16.0
    assert r["would_be"]["actions"] == {"configure": 2}
    assert r["would_be"]["time_to_capacity"] == {"count": 1, "p50": 0.0, "p99": 0.0}
    assert r["actual"]["time_to_capacity"]["count"] == 0

    # Its own autoscaler brings 2 more at t=70: covered there after 60 s. The minute between
    # cost $12/h × 1/60 h = $0.20 actual and $16/h × 1/60 h ≈ $0.2667 would-be.
    more = [on_demand(i, S.CONFIGURED, cluster="ml", price=6.0) for i in range(2, 4)]
    shard.reconcile_listing([*ml, *more, *shard_machines(shard)], 69)
    assert shard.receive(reported("ml", 2, 4, [m.id for m in ml + more]), 69) is None
    shard.cycle(70)
    [r] = shard.shadows.report("ml")
    assert r["actual"]["time_to_capacity"] == {"count": 1, "p50": 60.0, "p99": 60.0}
    assert r["actual"]["cost_usd"] == pytest.approx(0.2)
    assert r["would_be"]["cost_usd"] == pytest.approx(16 / 60, abs=1e-4)
    assert r["actual"]["cost_per_hour"] == 24.0 and r["would_be"]["machines"] == 4
    assert r["short_since"] is None


def shard_machines(shard: Shard) -> list:
    inv = shard.inventory
    return [inv.machine(r) for r in inv.live_rows().tolist()]


def test_a_need_withdrawn_before_it_is_covered_is_no_time_to_capacity():
    """Seen on a dev fleet: a shadow cluster whose needs ended (it asks for 0) while short was
    counted as covered by its own autoscaler after 418 s."""
    shard, _ = fleet()
    shard.receive(reported("ml", 1, 4, ["od-0000", "od-0001"]), 1)
    shard.cycle(10)
    shard.receive(reported("ml", 2, 0, ["od-0000", "od-0001"]), 60)
    shard.cycle(70)
    [r] = shard.shadows.report("ml")
    assert r["actual"]["time_to_capacity"]["count"] == 0 and r["withdrawn"] == 1
    assert r["would_be"]["time_to_capacity"]["count"] == 1 and r["short_since"] is None


def test_without_node_reports_what_a_cluster_has_is_what_the_providers_list_in_its_name():
    shard, _ = fleet()
    assert shard.receive(rollup("ml", 1, need(2, 500)), 1) is None  # (no health)
    shard.cycle(10)
    [r] = shard.shadows.report("ml")
    assert r["actual"]["machines"] == 2 and r["would_be"]["machines"] == 2
    assert r["would_be"]["actions"] == {} and r["short_since"] is None


def test_the_shadow_crosses_a_snapshot_and_a_cluster_moved_to_managed_leaves_it():
    shard, ml = fleet()
    shard.receive(reported("ml", 1, 4, ["od-0000", "od-0001"]), 1)
    shard.cycle(10)
    again = Shard(0, Policy(max_silence_seconds=300))
    again.modes = ClusterModes(shadow=["ml"])  # (what the run's config says)
    restore_shard(shard_state(shard), again)
    assert again.shadows.needs.clusters() == ["ml"] and again.needs.clusters() == ["web"]
    assert again.shadows.report("ml")[0]["cycles"] == 1

    # Managed from now on (`bigfleet cluster ml --mode managed`): its machines are adopted as
    # listed, its next roll-up is the shard's, and the shadow forgets it.
    assert again.modes.set("ml", "managed") == "shadow"
    again.shadows.forget(again.modes.shadow)
    assert again.adopt(ml, 20) == 2
    assert again.receive(reported("ml", 2, 4, ["od-0000", "od-0001"]), 20) is None
    assert sorted(again.needs.clusters()) == ["ml", "web"] and again.shadows.report() == []
    decision = again.cycle(30)
    assert sum(a.kind == "configure" and a.cluster == "ml" for a in decision.actions) == 2


@pytest.mark.parametrize(
    "state",
    [
        {"needs": [{"cluster": "x"}], "records": "nonsense"},
        {"records": {"x": {"open": "zz"}}},
        {"records": {"x": {"usd": {"actual": "a lot"}}}},
        {"records": {"x": []}},
    ],
)
def test_a_shadow_state_that_does_not_read_starts_the_record_afresh(state):
    shard = Shard(0)
    shard.shadows.restore(state)
    assert shard.shadows.report() == [] and "restoring" in shard.shadows.error


def test_a_cluster_has_one_mode_in_a_deployment():
    from bigfleet.deployment import Deployment
    from tests.core.test_cluster_modes import deployment

    dep = Deployment.model_validate(deployment(shadow_clusters=["ml"]))
    assert dep.shadow_clusters == ["ml"]
    with pytest.raises(ValueError, match="shadow_clusters: ml also in unmanaged_clusters"):
        Deployment.model_validate(deployment(shadow_clusters=["ml"], unmanaged_clusters=["ml"]))
