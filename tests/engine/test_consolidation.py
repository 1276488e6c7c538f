"""Consolidation toward cheaper capacity (docs/engine.md, The cycle 5), worked by hand on both
engines: work running on on-demand machines ($6/h) moves to bare metal ($0/h) that sits idle,
or to spot, when the saving beats the policy's minimum and the need's reclamation penalty."""

import pydantic
import pytest

from bigfleet import labels as L
from bigfleet.models import DrainReason
from bigfleet.policy import Policy
from tests.fleet import (
    ENGINES,
    S,
    bare_metal,
    configured,
    created,
    drained,
    ids,
    many,
    need,
    of_kind,
    on_demand,
    rollup,
    spot,
    table,
)

# Needs count as stable at once (the stability wait has its own test below).
AT_ONCE = {"consolidation_stable_seconds": 0}
EVERY_MOVE = Policy(consolidation_max_fraction=1.0, **AT_ONCE)


def od_fleet(count=4, **kw):
    return many(on_demand, count, state=S.CONFIGURED, cluster="a", **kw)


@ENGINES
def test_idle_bare_metal_takes_the_work_then_the_on_demand_machines_drain(make_shard):
    dear, cheap = od_fleet(), many(bare_metal, 4)
    shard = make_shard(dear + cheap, EVERY_MOVE)
    needs = table(rollup("a", 1, need(4, 1000)))

    # t=10: four configures on bare metal for the same need; nothing drains yet.
    first = shard.cycle(needs, 10)
    assert sorted(configured(first)) == ids(cheap)
    assert {(a.cluster, a.need) for a in of_kind(first, "configure")} == {("a", "a#0")}
    assert first.consolidations == {"a#0": 4}
    assert drained(first) == [] and created(first) == []
    assert first.satisfied == {"a#0": 4} and first.shortfalls == []

    # t=20: the replacements are still coming up: no second move, no drain.
    second = shard.cycle(needs, 20)
    assert second.actions == [] and second.consolidations == {}

    # t=30: they are configured; the on-demand machines are excess and drain in full grace.
    shard.finish(ids(cheap), S.CONFIGURED, 25)
    third = shard.cycle(needs, 30)
    assert sorted(drained(third)) == ids(dear)
    drains = of_kind(third, "drain")
    assert {(d.cluster, d.reason, d.grace_seconds) for d in drains} == {
        ("a", DrainReason.EXCESS, 600.0)
    }
    assert configured(third) == [] and third.consolidations == {}


@ENGINES
def test_the_dearest_machine_of_the_need_is_the_one_drained(make_shard):
    """On-demand at $6/h and at $9/h, one bare-metal machine free: it replaces the $9 one."""
    dear = [
        on_demand(0, S.CONFIGURED, cluster="a", price=6.0),
        on_demand(1, S.CONFIGURED, cluster="a", price=9.0),
    ]
    cheap = many(bare_metal, 1)
    shard = make_shard(dear + cheap, EVERY_MOVE)
    needs = table(rollup("a", 1, need(2, 1000)))

    assert configured(shard.cycle(needs, 10)) == ["gpu-0000"]
    shard.finish(["gpu-0000"], S.CONFIGURED, 15)
    assert drained(shard.cycle(needs, 20)) == ["od-0001"]


@ENGINES
@pytest.mark.parametrize(("penalty", "moves"), [(5.9, 4), (6.0, 0)])
def test_a_reclamation_penalty_above_the_horizon_saving_keeps_the_work(
    make_shard, penalty, moves
):
    """Saving $6/h over the default 1 h horizon is $6: it must exceed the penalty."""
    shard = make_shard(od_fleet() + many(bare_metal, 4), EVERY_MOVE)
    decision = shard.decide(table(rollup("a", 1, need(4, 1000, reclamation_penalty=penalty))), 10)
    assert len(configured(decision)) == moves


@ENGINES
@pytest.mark.parametrize(("minimum", "moves"), [(6.0, 4), (6.5, 0)])
def test_a_minimum_saving_above_the_price_difference_keeps_the_work(make_shard, minimum, moves):
    policy = Policy(
        consolidation_min_saving_per_hour=minimum, consolidation_max_fraction=1.0, **AT_ONCE
    )
    shard = make_shard(od_fleet() + many(bare_metal, 4), policy)
    decision = shard.decide(table(rollup("a", 1, need(4, 1000))), 10)
    assert len(configured(decision)) == moves


@ENGINES
def test_moves_a_cycle_are_bounded_and_wait_for_the_replacement(make_shard):
    """2 % (the default) of 4 configured machines rounds to 0, so one move a cycle; the next
    starts once the first replacement is configured, in the cycle its on-demand machine drains."""
    cheap = many(bare_metal, 4)
    shard = make_shard(od_fleet() + cheap, Policy(**AT_ONCE))
    needs = table(rollup("a", 1, need(4, 1000)))

    assert configured(shard.cycle(needs, 10)) == [cheap[0].id]
    assert shard.cycle(needs, 20).actions == []
    shard.finish([cheap[0].id], S.CONFIGURED, 25)
    third = shard.cycle(needs, 30)
    assert configured(third) == [cheap[1].id]
    assert [mid[:3] for mid in drained(third)] == ["od-"]


@ENGINES
def test_a_need_moves_once_its_count_has_held_for_the_stable_time(make_shard):
    """Default 300 s: the engine first sees the need at t=10, so it may move from t=310; a
    new count at t=400 starts the wait again."""
    shard = make_shard(od_fleet() + many(bare_metal, 4), Policy(consolidation_max_fraction=1.0))
    needs = table(rollup("a", 1, need(4, 1000)))
    assert shard.decide(needs, 10).actions == []
    assert shard.decide(needs, 300).actions == []
    assert len(configured(shard.decide(needs, 310))) == 4

    needs.submit(rollup("a", 2, need(3, 1000)), 400)
    assert configured(shard.decide(needs, 400)) == []
    assert configured(shard.decide(needs, 690)) == []
    assert len(configured(shard.decide(needs, 700))) == 3


@ENGINES
def test_a_short_need_fills_its_deficit_and_moves_nothing(make_shard):
    shard = make_shard(od_fleet() + many(bare_metal, 4), EVERY_MOVE)
    decision = shard.decide(table(rollup("a", 1, need(5, 1000))), 10)
    assert configured(decision) == ["gpu-0000"] and decision.consolidations == {}


@ENGINES
def test_consolidation_off(make_shard):
    off = Policy(consolidation_max_fraction=0, **AT_ONCE)
    shard = make_shard(od_fleet() + many(bare_metal, 4), off)
    assert shard.decide(table(rollup("a", 1, need(4, 1000))), 10).actions == []


@ENGINES
@pytest.mark.parametrize(("penalty", "moves"), [(5.0, 2), (50.0, 0)])
def test_spot_replaces_on_demand_when_its_effective_cost_is_lower(make_shard, penalty, moves):
    """Spot at $1.80 with a 10 % interruption costs 1.80 + 0.1 × penalty: $2.30 at a penalty
    of 5 (a saving of $3.70/h, so created), $6.80 at 50 (dearer than on-demand: nothing)."""
    shard = make_shard(od_fleet(2) + many(spot, 2, interruption=0.1), EVERY_MOVE)
    decision = shard.decide(table(rollup("a", 1, need(2, 1000, interruption_penalty=penalty))), 10)
    assert len(created(decision)) == moves
    assert configured(decision) == []


@ENGINES
@pytest.mark.parametrize(("zone", "moves"), [("ams-1", 2), ("ams-2", 0)])
def test_a_same_need_moves_only_inside_its_domain(make_shard, zone, moves):
    shard = make_shard(od_fleet(2) + many(bare_metal, 2, zone=zone), EVERY_MOVE)
    decision = shard.decide(table(rollup("a", 1, need(2, 1000, same=L.ZONE))), 10)
    assert len(configured(decision)) == moves


@ENGINES
def test_a_spread_need_moves_a_machine_only_within_its_zone(make_shard):
    """One on-demand machine in each zone, free bare metal only in ams-2: only the machine in
    ams-2 is replaced, so the spread stays one and one."""
    dear = [
        on_demand(0, S.CONFIGURED, cluster="a", zone="ams-1"),
        on_demand(1, S.CONFIGURED, cluster="a", zone="ams-2"),
    ]
    shard = make_shard(dear + many(bare_metal, 2, zone="ams-2"), EVERY_MOVE)
    spread = [{"key": L.ZONE, "max_skew": 1}]
    decision = shard.decide(table(rollup("a", 1, need(2, 1000, spread=spread))), 10)
    assert configured(decision) == ["gpu-0000"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("consolidation_min_saving_per_hour", 0),
        ("consolidation_horizon_hours", -1),
        ("consolidation_max_fraction", 1.5),
    ],
)
def test_bad_consolidation_knobs_are_refused_by_name(field, value):
    with pytest.raises(pydantic.ValidationError, match=field):
        Policy(**{field: value})
