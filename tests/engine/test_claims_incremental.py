"""Claims worked out per group of needs and only where something changed (`claim_cluster`
with the cluster's previous claims and the profiles touched since) are exactly the claims
worked out afresh, cycle after cycle of count changes, new needs, finishing transitions and
forgotten change logs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bigfleet import held as held_module
from bigfleet import labels as L
from bigfleet.engine import FastEngine
from bigfleet.engine.claims import ClusterClaims, claim_cluster
from bigfleet.held import HeldTallies
from bigfleet.inventory import CODE, Inventory
from bigfleet.models import (
    CapacityNeed,
    ClusterCapacityNeeds,
    MachineState,
    NodeSelectorRequirement,
    Operator,
)
from bigfleet.needs import NeedsTable
from bigfleet.policy import Policy
from bigfleet.synthetic import fleet, need, rollups

S = MachineState
CLUSTERS = 6


def _view(cc: ClusterClaims) -> tuple:
    claims = {
        key: [(c.need.key, c.profile, c.slot, c.count, c.offset) for c in taken]
        for key, taken in cc.claims.items()
    }
    return claims, dict(cc.claimed), dict(cc.excess), set(cc.pending)


def _check(engine: FastEngine, table: NeedsTable) -> int:
    """Every cluster's claims this cycle against claims worked out from nothing; how many
    clusters were compared."""
    by_cluster: dict[str, list] = {}
    for n in table:
        by_cluster.setdefault(n.cluster, []).append(n)
    for cluster, needs in by_cluster.items():
        fresh = claim_cluster(engine.inventory, cluster, needs, engine.supply)
        assert _view(engine.claims[cluster]) == _view(fresh), cluster
    return len(by_cluster)


def _churn(rng: random.Random, table: NeedsTable, generation: int, now: float) -> None:
    """A few clusters change some counts; now and then one gains a need."""
    for cluster in rng.sample(table.clusters(), 3):
        specs = [n.spec for n in table.needs_of(cluster)]
        for i in rng.sample(range(len(specs)), min(2, len(specs))):
            specs[i] = specs[i].model_copy(update={"count": rng.randint(0, 12)})
        if rng.random() < 0.3:
            specs.append(need(rng, 12))
        table.apply(ClusterCapacityNeeds(cluster=cluster, generation=generation, needs=specs), now)


def _finish_some(rng: random.Random, inv: Inventory, now: float) -> None:
    """Some transitions under way finish, as their workflows' results would report."""
    n = inv.rows_used
    for state, done in ((S.CONFIGURING, S.CONFIGURED), (S.DRAINING, S.IDLE)):
        rows = np.flatnonzero(inv.state[:n] == CODE[state])
        for r in rows[: max(1, len(rows) // 3)].tolist():
            inv.move(r, done, now)


def _run(seed: int, cycles: int) -> int:
    rng = random.Random(seed)
    inv = Inventory(capacity=3000)
    inv.add(fleet(rng, 3000, CLUSTERS), 0)
    engine = FastEngine(inv, Policy())
    table = NeedsTable(max_silence_seconds=float("inf"))
    for rollup in rollups(rng, CLUSTERS, 8, 12):
        table.apply(rollup, 0)
    compared = 0
    for generation in range(2, cycles + 2):
        now = generation * 10.0
        _churn(rng, table, generation, now)
        decision = engine.decide(table, now)
        compared += _check(engine, table)
        engine.apply(decision, now)
        _finish_some(rng, inv, now)
    return compared


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claims_kept_per_group_equal_claims_from_nothing(seed: int) -> None:
    assert _run(seed, cycles=12) >= 12 * CLUSTERS // 2


def test_a_forgotten_change_log_claims_the_cluster_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A log cut after every few changes: readers are told they no longer know what changed.
    monkeypatch.setattr(held_module, "TOUCHED_LIMIT", 3)
    assert _run(4, cycles=8) > 0


def test_touched_reports_changed_profiles_since_a_position() -> None:
    t = HeldTallies()
    _, start = t.touched(0, None)
    t.count(0, 5, 0, +1)
    t.count(0, 7, 1, +1)
    t.count(1, 5, 0, +1)
    changed, now = t.touched(0, start)
    assert changed == {5, 7}
    assert t.touched(0, now) == (set(), now)
    assert t.touched(1, 0)[0] == {5}
    # No position, or one it never gave: not known.
    assert t.touched(0, None)[0] is None
    assert t.touched(0, now + 1)[0] is None


def test_touched_forgets_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_module, "TOUCHED_LIMIT", 4)
    t = HeldTallies()
    for pid in range(3):
        t.count(0, pid, 0, +1)
    changed, position = t.touched(0, 0)
    assert changed == {0, 1, 2}
    for pid in range(3, 6):  # the log passes its limit and is cut
        t.count(0, pid, 0, +1)
    assert t.touched(0, position)[0] is None
    t.count(0, 9, 0, +1)
    _, later = t.touched(0, None)
    assert t.touched(0, later - 1)[0] == {9}


def _instance(name: str, priority: int = 0, count: int = 1) -> CapacityNeed:
    return CapacityNeed(
        requirements=[
            NodeSelectorRequirement(key=L.INSTANCE_TYPE, operator=Operator.IN, values=[name])
        ],
        priority=priority,
        count=count,
    )


def test_needs_sharing_no_profile_are_separate_groups() -> None:
    inv = Inventory(capacity=500)
    inv.add(fleet(random.Random(5), 500, 2), 0)
    engine = FastEngine(inv, Policy())
    table = NeedsTable()
    specs = [_instance("cpu-64"), _instance("m6i.xlarge"), _instance("cpu-64", priority=9)]
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=1, needs=specs), 0)
    needs = table.needs_of("c000")
    groups = engine.supply.components(needs)
    cpu, m6i = (groups.of_signature[n.signature] for n in needs[:2])
    assert cpu != m6i and groups.of_signature[needs[2].signature] == cpu
    assert groups.count == 2
    for p, profile in enumerate(inv.profiles.profiles):
        expected = {"cpu-64": cpu, "m6i.xlarge": m6i}.get(profile.instance_type, -1)
        assert groups.of_pid[p] == expected, profile.name
    # A need any of those machines satisfies links them all into one group.
    table.apply(
        ClusterCapacityNeeds(
            cluster="c000", generation=2, needs=[*specs, CapacityNeed(priority=1, count=1)]
        ),
        10,
    )
    linked = engine.supply.components(table.needs_of("c000"))
    assert linked.count == 1
    assert set(linked.of_pid) == {0}


def _partition(groups, needs) -> tuple[set, list[int]]:
    """Components as a partition of the needs' signatures, and each profile's group given by
    the smallest signature in it (so labels do not matter)."""
    members: dict[int, list[str]] = {}
    for signature, g in groups.of_signature.items():
        members.setdefault(g, []).append(signature)
    name = {g: min(sigs) for g, sigs in members.items()}
    return (
        {frozenset(sigs) for sigs in members.values()},
        [name[g] if g >= 0 else "" for g in groups.of_pid],
    )


def test_groups_interleaved_in_signature_order() -> None:
    # Signatures sort as cpu-64, m6i.xlarge, then the zone need, which shares cpu-64's
    # machines in ams-1: the first and last signatures are one group, the middle another.
    inv = Inventory(capacity=500)
    inv.add(fleet(random.Random(5), 500, 2), 0)
    engine = FastEngine(inv, Policy())
    zone = CapacityNeed(
        requirements=[NodeSelectorRequirement(key=L.ZONE, operator=Operator.IN, values=["ams-1"])],
        priority=0,
        count=1,
    )
    table = NeedsTable()
    specs = [_instance("cpu-64"), _instance("m6i.xlarge"), zone]
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=1, needs=specs), 0)
    needs = table.needs_of("c000")
    assert sorted(n.signature for n in needs) == [n.signature for n in needs]
    groups = engine.supply.components(needs)
    assert _partition(groups, needs) == _linked(engine, needs)
    assert groups.count == 2


def test_a_need_no_profile_matches_is_a_group_of_its_own() -> None:
    # A rack-wide `Same` need for a cloud instance type: no cloud machine carries a rack.
    inv = Inventory(capacity=500)
    inv.add(fleet(random.Random(5), 500, 2), 0)
    engine = FastEngine(inv, Policy())
    nowhere = _instance("m6i.xlarge").model_copy(update={"same": L.RACK})
    table = NeedsTable()
    specs = [_instance("cpu-64"), nowhere]
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=1, needs=specs), 0)
    needs = table.needs_of("c000")
    assert not engine.supply.matching(needs[1])
    split = engine.supply.components(needs)
    assert split.count == 2 and _partition(split, needs) == _linked(engine, needs)
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=2, needs=specs[:1]), 10)
    first = engine.supply.components(table.needs_of("c000"))
    grown = engine.supply.components(needs, first)
    assert grown.renamed is not None
    assert _partition(grown, needs) == _partition(split, needs)


@pytest.mark.parametrize("seed", range(6))
def test_components_grown_by_new_needs_equal_components_split_afresh(seed: int) -> None:
    rng = random.Random(seed)
    inv = Inventory(capacity=2000)
    inv.add(fleet(rng, 2000, 3), 0)
    engine = FastEngine(inv, Policy())
    table = NeedsTable()
    specs = [need(rng, 5) for _ in range(rng.randint(1, 6))]
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=1, needs=specs), 0)
    first = engine.supply.components(table.needs_of("c000"))
    # Broad needs now and then: they link groups together.
    more = [
        need(rng, 5) if rng.random() < 0.7 else CapacityNeed(priority=1, count=1) for _ in range(4)
    ]
    table.apply(ClusterCapacityNeeds(cluster="c000", generation=2, needs=specs + more), 10)
    needs = table.needs_of("c000")
    grown = engine.supply.components(needs, first)
    split = engine.supply.components(needs)
    assert grown is not split
    assert _partition(grown, needs) == _partition(split, needs) == _linked(engine, needs)
    assert grown.count == split.count == len(_partition(split, needs)[0])


def _linked(engine: FastEngine, needs: list) -> tuple[set, list[str]]:
    """`_partition` worked out plainly: signatures are linked when their matching profiles
    meet, and a group is everything linked to anything in it."""
    uses = {n.signature: engine.supply.matching(n) for n in needs}
    groups: list[tuple[set[str], set[int]]] = []
    for signature, pids in uses.items():
        joined = [g for g in groups if g[1] & pids]
        merged = ({signature}, set(pids))
        for g in joined:
            merged[0].update(g[0])
            merged[1].update(g[1])
            groups.remove(g)
        groups.append(merged)
    of_pid = [""] * len(engine.inventory.profiles)
    for sigs, pids in groups:
        for p in pids:
            of_pid[p] = min(sigs)
    return {frozenset(sigs) for sigs, _ in groups}, of_pid
