"""A shard dividing in two, or two merging (design §16), without Temporal: every cluster and every
machine ends on exactly one side, clusters keep their configured machines and their place in
the queue, free machines move by whole rack, and machines in a transition stay put."""

from __future__ import annotations

from collections import Counter

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from bigfleet.synthetic import OFFERS, machine

GPU = next(o for o in OFFERS if o.instance_type == "gpu-8xh100")
REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]
S = MachineState


def busy_shard() -> Shard:
    """Four clusters holding 8, 6, 4 and 2 configured GPUs; 3 free racks of 4; one creating."""
    shard = Shard(0)
    machines = []
    for cluster, n in (("a", 8), ("b", 6), ("c", 4), ("d", 2)):
        machines += [machine(f"{cluster}-{i}", GPU, S.CONFIGURED, cluster) for i in range(n)]
        need = {"requirements": REQ, "priority": 100_000, "count": n}
        shard.receive({"cluster": cluster, "generation": 1, "needs": [need]}, 0)
    for rack in ("r1", "r2", "r3"):
        machines += [machine(f"{rack}-{i}", GPU, S.IDLE, rack=rack) for i in range(4)]
    machines.append(machine("new-0", GPU, S.CREATING))
    shard.adopt(machines, 0)
    shard.cycle(10)
    return shard


def owned(shard: Shard) -> set[str]:
    inv = shard.inventory
    return {inv.machine_id(r) for r in range(inv.rows_used) if inv.ids.find(inv.machine_id(r)) == r}


def test_a_split_moves_half_the_clusters_with_their_machines_and_whole_free_racks():
    donor, new = busy_shard(), Shard(1)
    before = owned(donor)
    clusters, ids = donor.membership.split_plan(0.5)
    assert len(clusters) == 2
    needs = donor.membership.split_out(clusters, ids, to=1)
    machines = []
    while chunk := donor.membership.hand_out(5):
        machines += chunk
    new.membership.take_in(needs, machines, 20)

    assert sorted(new.needs.clusters()) == clusters
    assert sorted(set(donor.needs.clusters()) | set(new.needs.clusters())) == ["a", "b", "c", "d"]
    assert not set(donor.needs.clusters()) & set(new.needs.clusters())
    assert donor.moved == dict.fromkeys(clusters, 1)
    # Every machine on exactly one side; the one being created stays with its workflow's shard.
    assert owned(donor) | owned(new) == before and not owned(donor) & owned(new)
    assert "new-0" in owned(donor)
    # Half the machines each way, give or take a rack; free racks whole.
    assert abs(len(owned(new)) - len(before) / 2) <= 4
    racks = Counter(mid.split("-")[0] for mid in owned(new) if mid.startswith("r"))
    assert all(n == 4 for n in racks.values())
    # A moved cluster is served by its configured machines on the new shard: nothing to do.
    decision = new.cycle(30)
    assert not decision.shortfalls and not [a for a in decision.actions if a.kind != "verify"]
    for cluster in clusters:
        assert new.cluster_view(cluster)["needs"][0]["count"] > 0


def test_a_merge_moves_everything_that_is_not_in_a_transition():
    donor, into = busy_shard(), Shard(1)
    clusters, ids = donor.membership.split_plan(1.0)
    assert clusters == ["a", "b", "c", "d"]
    needs = donor.membership.split_out(clusters, ids, to=1)
    into.membership.take_in(needs, donor.membership.hand_out(10_000), 20)
    assert owned(donor) == {"new-0"} and len(owned(into)) == 32
    assert sum(into.machines_by_state().values()) == 32
    assert not donor.needs.clusters()


def test_a_failed_hand_over_returns_to_the_donor():
    donor = busy_shard()
    total = sum(donor.machines_by_state().values())
    clusters, ids = donor.membership.split_plan(0.5)
    needs = donor.membership.split_out(clusters, ids, to=1)
    assert sum(donor.machines_by_state().values()) == total  # leaving machines still counted
    part = donor.membership.hand_out(3)
    # The receiver refused: all back.
    donor.membership.take_in(needs, part + donor.membership.hand_out(10_000), 20)
    assert sum(donor.machines_by_state().values()) == total
    assert sorted(donor.needs.clusters()) == ["a", "b", "c", "d"] and not donor.moved
    decision = donor.cycle(30)
    assert not decision.shortfalls
