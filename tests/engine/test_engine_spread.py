"""Topology spread (docs/engine.md, The cycle 2) directly, against both engines: a spread need
fills the least-filled zone one machine at a time and stops rather than put a zone more than
`max_skew` above the least-filled zone it could use; what it cannot place is a shortfall."""

from collections import Counter, defaultdict
from itertools import islice

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bigfleet import labels as L
from bigfleet.engine.domains import pick_spread_domain
from bigfleet.engine.phase1 import _spread_domains
from bigfleet.needs import NeedsTable
from tests.fleet import (
    ENGINES,
    S,
    bare_metal,
    configured,
    created,
    fast_shard,
    many,
    need,
    on_demand,
    rollup,
    shortfall_of,
    table,
)


def slots(zone: str, count: int, start: int, **kw):
    return many(on_demand, count, start=start, zone=zone, **kw)


def spread_need(count: int, max_skew: int, priority: int = 1000) -> dict:
    return need(count, priority, spread=[{"key": L.ZONE, "max_skew": max_skew}])


def created_per_zone(decision, fleet) -> Counter:
    zone = {m.id: m.zone for m in fleet}
    return Counter(zone[mid] for mid in created(decision))


@ENGINES
def test_a_spread_need_lands_evenly_when_every_zone_has_room(make_shard):
    fleet = slots("z1", 3, 0) + slots("z2", 3, 10) + slots("z3", 3, 20)
    shard = make_shard(fleet)

    decision = shard.decide(table(rollup("a", 1, spread_need(6, max_skew=1))), 10)

    assert created_per_zone(decision, fleet) == {"z1": 2, "z2": 2, "z3": 2}
    assert decision.shortfalls == []


@ENGINES
@pytest.mark.parametrize(
    ("max_skew", "z1", "short"), [(1, 2, 3), (2, 3, 2), (5, 5, None)], ids=lambda v: f"{v}"
)
def test_max_skew_caps_how_far_one_zone_runs_ahead(make_shard, max_skew, z1, short):
    """z2 has a single free machine, z1 five: once z2 is spent, z1 may only run `max_skew`
    ahead of it; the rest of the need is reported short, not piled into z1."""
    fleet = slots("z1", 5, 0) + slots("z2", 1, 10)
    shard = make_shard(fleet)

    decision = shard.decide(table(rollup("a", 1, spread_need(6, max_skew))), 10)

    assert created_per_zone(decision, fleet) == {"z1": z1, "z2": 1}
    found = shortfall_of(decision, "a")
    assert (found.count if found else None) == short


@ENGINES
def test_a_zone_with_machines_but_no_free_ones_still_holds_the_others_back(make_shard):
    """z3's only machine serves another cluster (at a priority the spread need cannot
    preempt): the need could use z3, so z1 and z2 may each be at most one ahead of it."""
    taken = slots("z3", 1, 20, state=S.CONFIGURED, cluster="other")
    fleet = slots("z1", 3, 0) + slots("z2", 3, 10) + taken
    shard = make_shard(fleet)
    needs = table(rollup("other", 1, need(1, 2000)), rollup("a", 1, spread_need(4, 1)))

    decision = shard.decide(needs, 10)

    assert created_per_zone(decision, fleet) == {"z1": 1, "z2": 1}
    assert shortfall_of(decision, "a").count == 2
    assert decision.satisfied["other#0"] == 1


@given(
    current=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 6), max_size=6),
    free=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 5), max_size=6),
    eligible=st.sets(st.sampled_from("abcdef")),
    max_skew=st.integers(1, 3),
    deficit=st.integers(0, 30),
)
def test_the_fast_spread_picks_the_domains_one_machine_at_a_time_would(
    current, free, eligible, max_skew, deficit
):
    """The fast engine's heap of open domains gives `pick_spread_domain`'s picks, machine by
    machine, whether or not every domain with supply is eligible."""
    slow_current, slow_free = defaultdict(int, current), dict(free)
    slow = []
    while len(slow) < deficit:
        d = pick_spread_domain(slow_current, slow_free, eligible, max_skew)
        if d is None:
            break
        slow_free[d] -= 1
        slow_current[d] += 1
        slow.append(d)
    fast_current, fast_free = defaultdict(int, current), dict(free)
    fast = list(islice(_spread_domains(fast_current, fast_free, eligible, max_skew), deficit))
    assert fast == slow
    assert (fast_current, fast_free) == (slow_current, slow_free)


@ENGINES
def test_a_spread_need_preempts_only_where_its_skew_allows(make_shard):
    """Phase 1 gives the need one free machine in z1 and one in z2: z3 has none free, and
    its rule allows no zone more than one ahead of z3. For the rest it preempts the lower
    cluster's machines where the rule allows, z3 first (the least filled), then one in z1,
    never a third one there with z2 at one; the last machine is short. (It used to preempt
    both of z1's and both of z3's: z1 three ahead of z2's one.)"""
    fleet = skew_held_fleet()
    shard = make_shard(fleet)

    decision = shard.decide(SKEW_HELD_NEEDS, 10)

    assert created_per_zone(decision, fleet) == {"z1": 1, "z2": 1}
    assert preempted_per_zone(decision, fleet) == {"z3": 2, "z1": 1}
    assert shortfall_of(decision, "a").count == 1


def skew_held_fleet() -> list:
    low = slots("z1", 2, 30, state=S.CONFIGURED, cluster="low")
    low += slots("z3", 2, 20, state=S.CONFIGURED, cluster="low")
    return slots("z1", 3, 0) + slots("z2", 3, 10) + low


SKEW_HELD_NEEDS = table(rollup("low", 1, need(4, 100)), rollup("a", 1, spread_need(6, 1)))


def preempted_per_zone(decision, fleet) -> Counter:
    zone = {m.id: m.zone for m in fleet}
    return Counter(zone[p.machine_id] for p in decision.preemptions)


def test_a_shard_run_begun_before_preempts_for_a_spread_need_as_it_did():
    """A shard workflow begun before the rule (patch `spread-in-phase-2`) decides, on
    replay, as it did then: the spread need preempts every lower machine that matches."""
    fleet = skew_held_fleet()
    shard = fast_shard(fleet)
    shard.engine.memory.spread_in_phase_2 = False

    decision = shard.decide(SKEW_HELD_NEEDS, 10)

    assert preempted_per_zone(decision, fleet) == {"z1": 2, "z3": 2}


@ENGINES
def test_a_spread_over_hostnames_holds_by_itself(make_shard):
    """No machine carries `kubernetes.io/hostname` as a profile label: every machine is a
    host of its own, so a need's machines are never more than one apart there. Such a rule
    places as no rule; beside a zone rule, the zone rule decides. (It used to bind as any
    key: no domain had supply, and the need got no machine at all.)"""
    fleet = slots("z1", 4, 0) + slots("z2", 4, 10)
    host = {"key": L.HOSTNAME, "max_skew": 1}
    zone = {"key": L.ZONE, "max_skew": 1}
    shard = make_shard(fleet)

    decision = shard.decide(table(rollup("a", 1, need(3, 1000, spread=[host]))), 10)

    assert len(created(decision)) == 3 and shortfall_of(decision, "a") is None
    shard = make_shard(fleet)
    both = table(rollup("b", 1, need(6, 1000, spread=[host, zone])))
    assert created_per_zone(shard.decide(both, 10), fleet) == {"z1": 3, "z2": 3}


def test_a_shard_run_begun_before_reads_a_hostname_spread_as_binding():
    """A shard workflow begun before (patch `host-spread-holds`) replays as it decided: the
    needs table builds its needs with every rule binding, and the need gets nothing."""
    fleet = slots("z1", 4, 0)
    shard = fast_shard(fleet)
    needs = NeedsTable()
    needs.host_spread_holds = False
    needs.submit(rollup("a", 1, need(3, 1000, spread=[{"key": L.HOSTNAME, "max_skew": 1}])), 0)

    decision = shard.decide(needs, 10)

    assert created(decision) == [] and shortfall_of(decision, "a").count == 3


def racks_of(decision, fleet) -> Counter:
    rack = {m.id: m.labels.get(L.RACK) for m in fleet}
    return Counter(rack[mid] for mid in configured(decision))


@ENGINES
def test_a_need_with_two_spread_rules_keeps_to_both(make_shard):
    """Bare metal in two zones of two racks each. By zone alone, z1's two machines would both
    come from its first rack; with a rack rule too (max_skew 1), each rack gives one. (Until
    2026-12-06 placement kept to the first rule only.)"""
    fleet = []
    for n, (zone, rack) in enumerate([("z1", "r1"), ("z1", "r2"), ("z2", "r3"), ("z2", "r4")]):
        fleet += many(bare_metal, 3, start=10 * n, zone=zone, rack=rack)
    rules = [{"key": L.ZONE, "max_skew": 1}, {"key": L.RACK, "max_skew": 1}]
    shard = make_shard(fleet)

    decision = shard.decide(table(rollup("a", 1, need(4, 1000, spread=rules))), 10)

    assert racks_of(decision, fleet) == {"r1": 1, "r2": 1, "r3": 1, "r4": 1}
    by_zone = table(rollup("a", 1, need(4, 1000, spread=rules[:1])))
    zone_only = make_shard(fleet).decide(by_zone, 10)
    assert racks_of(zone_only, fleet) == {"r1": 2, "r3": 2}


def test_a_shard_run_begun_before_places_by_the_first_spread_rule_only():
    """Patch `every-spread-rule`: a run begun before places as it did, by the zone rule."""
    fleet = []
    for n, (zone, rack) in enumerate([("z1", "r1"), ("z1", "r2"), ("z2", "r3"), ("z2", "r4")]):
        fleet += many(bare_metal, 3, start=10 * n, zone=zone, rack=rack)
    rules = [{"key": L.ZONE, "max_skew": 1}, {"key": L.RACK, "max_skew": 1}]
    shard = fast_shard(fleet)
    shard.engine.memory.every_spread_rule = False

    decision = shard.decide(table(rollup("a", 1, need(4, 1000, spread=rules))), 10)

    assert racks_of(decision, fleet) == {"r1": 2, "r3": 2}
