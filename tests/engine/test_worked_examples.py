"""The seed's worked examples (§4, §5, §8, §9), each run against both engines."""

import pytest

from bigfleet.cost import drain_grace_period, effective_cost
from bigfleet.models import CapacityType, DeleteReason, DrainReason
from bigfleet.policy import Policy
from tests.fleet import (
    AWS,
    ENGINES,
    S,
    bare_metal,
    configured,
    created,
    drained,
    ids,
    machine,
    many,
    need,
    of_kind,
    on_demand,
    rollup,
    shortfall_of,
    spot,
    table,
)

GPU_RACK = "bigfleet.io/rack"

# ---- §4 effective cost: spot or on-demand ----------------------------------------------------


def test_effective_cost_of_the_seed_examples():
    assert effective_cost(1.80, 0.10, 5.0) == pytest.approx(2.30)
    assert effective_cost(1.80, 0.10, 50.0) == pytest.approx(6.80)
    assert effective_cost(6.00, 0.0, 50.0) == pytest.approx(6.00)


@ENGINES
@pytest.mark.parametrize(
    ("penalty", "winner"), [(5.0, "spot-0000"), (50.0, "od-0000")], ids=["penalty-5", "penalty-50"]
)
def test_cheapest_effective_cost_is_created(make_shard, penalty, winner):
    shard = make_shard([spot(0, interruption=0.10), on_demand(0, price=6.0)])
    needs = table(rollup("a", 1, need(1, 1000, interruption_penalty=penalty)))

    decision = shard.decide(needs, 10)

    assert created(decision) == [winner]
    assert [a.cluster for a in of_kind(decision, "create")] == ["a"]
    assert decision.shortfalls == []


# ---- §8 the preemption walkthrough ----------------------------------------------------------

A_PRIORITY, B_PRIORITY = 500_000, 1_000_000


def walkthrough_needs():
    """t=0 cluster A runs 64 GPU nodes at 500000; t=7 s cluster B asks for 64 at 1000000."""
    needs = table(rollup("a", 1, need(64, A_PRIORITY, interruption_penalty=1.0)))
    needs.submit(rollup("b", 1, need(64, B_PRIORITY, interruption_penalty=1000.0)), 7)
    return needs


@ENGINES
def test_preemption_walkthrough(make_shard):
    fleet = many(bare_metal, 64, state=S.CONFIGURED, cluster="a")
    a_machines = ids(fleet)
    shard = make_shard(fleet)
    needs = walkthrough_needs()

    # t=10 s: the cycle finds no free GPU and drains all of A's machines for B, with 30 s grace.
    first = shard.cycle(needs, 10)
    drains = of_kind(first, "drain")
    assert sorted(drained(first)) == a_machines
    assert {(d.cluster, d.grace_seconds, d.reason) for d in drains} == {
        ("a", 30.0, DrainReason.PREEMPT)
    }
    assert {(d.preemptor_cluster, d.preemptor_priority, d.victim_priority) for d in drains} == {
        ("b", B_PRIORITY, A_PRIORITY)
    }
    assert sorted(p.machine_id for p in first.preemptions) == a_machines
    preempted = {
        (p.victim_cluster, p.preemptor_cluster, p.grace_seconds) for p in first.preemptions
    }
    assert preempted == {("a", "b", 30.0)}
    assert of_kind(first, "configure") == [] and created(first) == []

    # t=20 s: the machines are still draining; nothing is preempted twice, A now waits.
    second = shard.cycle(needs, 20)
    assert of_kind(second, "drain") == [] and second.preemptions == []
    assert second.earmarked["b#0"] == 64
    a_short = shortfall_of(second, "a")
    assert a_short is not None and a_short.count == 64 and a_short.priority == A_PRIORITY
    assert shortfall_of(second, "b") is None

    # The drains finish: the next cycle bootstraps all 64 for B.
    shard.finish(a_machines, S.IDLE, 45)
    third = shard.cycle(needs, 50)
    assert sorted(configured(third)) == a_machines
    assert {a.cluster for a in of_kind(third, "configure")} == {"b"}
    assert of_kind(third, "drain") == [] and third.preemptions == []
    assert third.satisfied["b#0"] == 64
    assert shortfall_of(third, "a").count == 64


@ENGINES
@pytest.mark.parametrize("free_state", [S.IDLE, S.SPECULATIVE])
def test_free_bare_metal_means_no_preemption(make_shard, free_state):
    free = many(bare_metal, 64, start=100, state=free_state, rack="r2")
    shard = make_shard(many(bare_metal, 64, state=S.CONFIGURED, cluster="a") + free)

    decision = shard.decide(walkthrough_needs(), 10)

    assert of_kind(decision, "drain") == [] and decision.preemptions == []
    served = configured(decision) if free_state is S.IDLE else created(decision)
    assert sorted(served) == ids(free)
    kind = "configure" if free_state is S.IDLE else "create"
    assert {a.cluster for a in of_kind(decision, kind)} == {"b"}
    assert decision.shortfalls == []


@ENGINES
def test_equal_priority_never_preempts(make_shard):
    shard = make_shard(many(bare_metal, 64, state=S.CONFIGURED, cluster="a"))
    needs = table(rollup("a", 1, need(64, A_PRIORITY)), rollup("b", 1, need(64, A_PRIORITY)))

    for now in (10, 20):
        decision = shard.cycle(needs, now)
        assert of_kind(decision, "drain") == [] and decision.preemptions == []
        assert shortfall_of(decision, "b").count == 64
        assert shortfall_of(decision, "a") is None


# ---- §8 drain grace from the priority gap (design §8) ---------------------------------


@pytest.mark.parametrize(
    ("gap", "grace"),
    [
        (1_000_000, 10.0),
        (900_001, 10.0),
        (900_000, 30.0),
        (899_999, 30.0),
        (500_001, 30.0),
        (500_000, 30.0),
        (499_999, 120.0),
        (100_001, 120.0),
        (100_000, 600.0),
        (99_999, 600.0),
        (1, 600.0),
    ],
)
def test_drain_grace_period_boundaries(gap, grace):
    assert drain_grace_period(1_000_000, 1_000_000 - gap) == grace
    assert drain_grace_period(gap, 0) == grace


@ENGINES
@pytest.mark.parametrize(
    ("victim_priority", "grace"), [(0, 10.0), (500_000, 30.0), (900_000, 600.0)]
)
def test_preemption_drains_with_the_grace_of_the_gap(make_shard, victim_priority, grace):
    shard = make_shard(many(bare_metal, 4, state=S.CONFIGURED, cluster="a"))
    needs = table(rollup("a", 1, need(4, victim_priority)), rollup("b", 1, need(4, 1_000_000)))

    decision = shard.decide(needs, 10)

    assert [d.grace_seconds for d in of_kind(decision, "drain")] == [grace] * 4


# ---- §8 Phase 1: idle before speculative ----------------------------------------------------


@ENGINES
def test_idle_machine_is_used_before_a_cheaper_speculative_slot(make_shard):
    shard = make_shard([on_demand(0, S.IDLE, price=6.0), spot(0, price=1.8)])
    needs = table(rollup("a", 1, need(1, 1000)))

    decision = shard.decide(needs, 10)

    assert configured(decision) == ["od-0000"]
    assert created(decision) == []


# ---- §8 Phase 3: reclaiming excess ----------------------------------------------------------


@ENGINES
def test_excess_returns_on_demand_before_bare_metal(make_shard):
    shard = make_shard(
        [bare_metal(0, S.CONFIGURED, cluster="a"), on_demand(0, S.CONFIGURED, cluster="a")]
    )
    needs = table(rollup("a", 1, need(2, 1000)))
    assert shard.cycle(needs, 10).actions == []

    needs.submit(rollup("a", 2, need(1, 1000)), 15)
    decision = shard.decide(needs, 20)

    drains = of_kind(decision, "drain")
    assert [(d.machine_id, d.cluster, d.reason) for d in drains] == [
        ("od-0000", "a", DrainReason.EXCESS)
    ]


@ENGINES
def test_excess_tie_is_broken_by_reclamation_penalty(make_shard):
    # Same price, same cluster; od-0000 holds the valuable need, od-0001 the replaceable one.
    shard = make_shard(many(on_demand, 2, state=S.CONFIGURED, cluster="a"))
    shard.set_holder("od-0000", 1000, 0.0, 10_000.0)
    shard.set_holder("od-0001", 1000, 0.0, 0.0)
    valuable = need(1, 1000, reclamation_penalty=10_000.0)
    needs = table(rollup("a", 1, need(1, 1000, reclamation_penalty=0.0), valuable))
    assert shard.cycle(needs, 10).actions == []

    needs.submit(rollup("a", 2, valuable), 15)
    decision = shard.decide(needs, 20)

    assert drained(decision) == ["od-0001"]


@ENGINES
@pytest.mark.parametrize("steady_cycles", [0, 1, 2])
def test_excess_drains_the_machine_the_departed_need_was_configured_for(make_shard, steady_cycles):
    shard = make_shard(many(on_demand, 2, state=S.IDLE))
    replaceable = need(1, 1000, reclamation_penalty=0.0)
    valuable = need(1, 1000, reclamation_penalty=10_000.0)
    needs = table(rollup("a", 1, replaceable))
    assert configured(shard.cycle(needs, 10)) == ["od-0000"]
    shard.finish(["od-0000"], S.CONFIGURED, 15)
    needs.submit(rollup("a", 2, replaceable, valuable), 15)
    assert configured(shard.cycle(needs, 20)) == ["od-0001"]
    shard.finish(["od-0001"], S.CONFIGURED, 25)
    for cycle in range(steady_cycles):
        assert shard.cycle(needs, 30 + 10 * cycle).actions == []

    needs.submit(rollup("a", 3, valuable), 95)
    decision = shard.decide(needs, 100)

    assert drained(decision) == ["od-0000"]


# ---- §16 no admission control ---------------------------------------------------------------


@ENGINES
def test_ten_million_machines_at_priority_zero_simply_wait(make_shard):
    prod = many(bare_metal, 4, state=S.CONFIGURED, cluster="prod")
    free = many(bare_metal, 8, start=10, state=S.IDLE)
    shard = make_shard(prod + free)
    needs = table(rollup("prod", 1, need(4, 1_000_000)))
    assert needs.submit(rollup("research", 1, need(10_000_000, 0)), 5)

    decision = shard.decide(needs, 10)

    assert sorted(configured(decision)) == ids(free)
    assert of_kind(decision, "drain") == [] and decision.preemptions == []
    waiting = shortfall_of(decision, "research")
    assert (waiting.count, waiting.priority) == (10_000_000 - 8, 0)
    assert shortfall_of(decision, "prod") is None


# ---- §5 topology: all N on one rack ---------------------------------------------------------


@ENGINES
def test_same_rack_need_is_not_split_across_racks(make_shard):
    shard = make_shard(many(bare_metal, 40, rack="r1") + many(bare_metal, 40, start=100, rack="r2"))
    needs = table(rollup("train", 1, need(64, 1000, same=GPU_RACK)))

    decision = shard.decide(needs, 10)

    assert configured(decision) == [] and created(decision) == []
    assert shortfall_of(decision, "train").count == 64


@ENGINES
def test_same_rack_need_fills_the_rack_that_holds_it_whole(make_shard):
    rack64 = many(bare_metal, 64, start=100, rack="r-big")
    shard = make_shard(many(bare_metal, 40, rack="r-small") + rack64)
    needs = table(rollup("train", 1, need(64, 1000, same=GPU_RACK)))

    decision = shard.decide(needs, 10)

    assert sorted(configured(decision)) == ids(rack64)
    assert decision.shortfalls == []


# ---- §9 shortfalls: bounded, ordered, aged --------------------------------------------------


@ENGINES
def test_at_most_100_shortfalls_highest_priority_first(make_shard):
    shard = make_shard([])
    needs = table(*(rollup(f"c{p:03d}", 1, need(1, p)) for p in range(150)))

    decision = shard.decide(needs, 10)

    assert [s.priority for s in decision.shortfalls] == list(range(149, 49, -1))


@ENGINES
def test_shortfall_ages_each_cycle_and_escalates_after_five(make_shard):
    shard = make_shard([])
    needs = table(rollup("a", 1, need(3, 1000)))
    seen = []
    for cycle in range(1, 8):
        # The operator re-sends the same roll-up every 10 s, as it does in steady state.
        needs.submit(rollup("a", cycle + 1, need(3, 1000)), cycle * 10 - 1)
        short = shortfall_of(shard.cycle(needs, cycle * 10), "a")
        seen.append((short.age, short.escalated, short.count))

    assert seen == [(age, age > 5, 3) for age in range(1, 8)]


# ---- §5, §8 idle cloud machines go back to speculative --------------------------------------


@ENGINES
@pytest.mark.parametrize(
    ("make", "timeout"), [(on_demand, 300), (spot, 120)], ids=["on-demand", "spot"]
)
def test_idle_cloud_machine_is_deleted_after_the_idle_timeout(make_shard, make, timeout):
    """Before `fleet_cost`: an idle cloud machine no forecast wants waits its timeout."""
    assert Policy().idle_timeout_seconds[make(0).capacity_type] == timeout
    idle = make(0, S.IDLE, since=1000)
    shard = make_shard([idle], Policy(fleet_cost=False))

    assert shard.decide(table(), 1000 + timeout - 1).actions == []
    deletes = of_kind(shard.decide(table(), 1000 + timeout), "delete")
    assert [(d.machine_id, d.reason) for d in deletes] == [(idle.id, DeleteReason.IDLE_TIMEOUT)]


@ENGINES
def test_idle_bare_metal_is_never_deleted(make_shard):
    shard = make_shard([bare_metal(0, S.IDLE, since=1000)])

    assert of_kind(shard.decide(table(), 1000 + 30 * 24 * 3600), "delete") == []


def _drive_demand_then_release(make_shard, demand: bool):
    """Cluster A holds od-0000; B (if `demand`) keeps asking for more of the same profile;
    then A lets od-0000 go, it drains and sits idle for a whole idle timeout."""
    shard = make_shard([on_demand(0, S.CONFIGURED, cluster="a")] + many(on_demand, 20, start=1))
    needs = table(rollup("a", 1, need(1, 1000)))
    for cycle in range(1, 4):
        if demand:
            needs.submit(rollup("b", cycle, need(5 * cycle, 1000)), cycle * 10 - 1)
        shard.cycle(needs, cycle * 10)
    needs.submit(rollup("a", 2, need(0, 1000)), 39)
    assert drained(shard.cycle(needs, 40)) == ["od-0000"]
    shard.finish(["od-0000"], S.IDLE, 45)
    return shard.decide(needs, 45 + 300)


@ENGINES
def test_idle_machine_of_a_profile_wanted_soon_is_held(make_shard):
    decision = _drive_demand_then_release(make_shard, demand=True)

    assert of_kind(decision, "delete") == []


@ENGINES
def test_idle_machine_nobody_wants_is_released(make_shard):
    decision = _drive_demand_then_release(make_shard, demand=False)

    assert [d.machine_id for d in of_kind(decision, "delete")] == ["od-0000"]


# ---- §9 stuck transitions -------------------------------------------------------------------


@ENGINES
def test_configuring_too_long_is_timed_out(make_shard):
    limit = Policy().transition_timeout_seconds[S.CONFIGURING]
    stuck = bare_metal(0, S.CONFIGURING, cluster="a", since=1000)
    shard = make_shard([stuck, bare_metal(1, S.CONFIGURING, cluster="a", since=1500)])
    needs = table(rollup("a", 1, need(2, 1000)))

    assert shard.decide(needs, 1000 + limit).timed_out == []
    decision = shard.cycle(needs, 1000 + limit + 1)

    assert decision.timed_out == [stuck.id]
    assert shard.state(stuck.id) is S.FAILED
    assert shard.state("gpu-0001") is S.CONFIGURING


@ENGINES
def test_a_policy_naming_some_idle_timeouts_keeps_the_others(make_shard):
    """`idle_timeout_seconds: {on-demand: 60}` (the example fleets name spot and on-demand
    only) changes on-demand's timeout; an idle spot machine keeps spot's default (120 s) and
    a reserved one its default (never) — none is left without a timeout to read."""
    policy = Policy.model_validate({"idle_timeout_seconds": {"on-demand": 60}, "fleet_cost": False})
    assert {t: policy.idle_timeout(t) for t in CapacityType} == {
        **Policy().idle_timeout_seconds,
        CapacityType.ON_DEMAND: 60.0,
    }
    reserved = machine("rs-0000", CapacityType.RESERVED, S.IDLE, provider=AWS, price=3.0)
    shard = make_shard([on_demand(0, S.IDLE), spot(0, S.IDLE), reserved], policy)

    assert ids_deleted(shard.cycle(table(), 60)) == ["od-0000"]
    assert ids_deleted(shard.cycle(table(), 119)) == []
    assert ids_deleted(shard.cycle(table(), 120)) == ["spot-0000"]
    assert ids_deleted(shard.cycle(table(), 10**7)) == []
    # Likewise a transition timeout: naming one state keeps the others'.
    drains = Policy.model_validate({"transition_timeout_seconds": {"DRAINING": 60}})
    assert drains.transition_timeouts() == {**Policy().transition_timeout_seconds, S.DRAINING: 60}


@ENGINES
@pytest.mark.parametrize("make", [on_demand, spot], ids=["on-demand", "spot"])
def test_idle_elastic_machine_no_forecast_wants_goes_at_once(make_shard, make):
    """With `fleet_cost` an idle spot or on-demand machine whose profile nobody has asked for
    is deleted in the first cycle that sees it idle, not after its 120 s / 300 s timeout; an
    idle bare-metal one stays."""
    idle = make(0, S.IDLE, since=1000)
    shard = make_shard([idle, bare_metal(0, S.IDLE, since=1000)])

    assert ids_deleted(shard.decide(table(), 1000)) == [idle.id]


@ENGINES
def test_idle_elastic_machines_beyond_the_forecast_go_longest_idle_first(make_shard):
    """Worked by hand, with a forecast decay of 0.5 (exact in binary): on-demand's idle
    timeout is 300 s, 30 cycles of 10 s, so a profile keeps forecast x 30 idle machines.
    Cluster b asks for 4 machines once: the forecast reads 0.5 x 4 = 2 after that cycle
    (60 may stay idle: none of the 16 left goes), then 1 (30), 0.5 (15: one goes, the
    longest idle), 0.25 (7.5 -> 7: 8 more), 0.125 (3), 0.0625 (1), 0.03125 (0: the last)."""
    machines = [on_demand(i, S.IDLE, since=i) for i in range(20)]
    shard = make_shard(machines, Policy(forecast_decay=0.5))
    needs = table(rollup("b", 1, need(4, 1000)))
    assert ids_deleted(shard.cycle(needs, 10)) == []  # b takes od-0000 .. od-0003
    gone = [ids_deleted(shard.cycle(needs, 10 * cycle)) for cycle in range(2, 9)]

    assert [len(g) for g in gone] == [0, 1, 8, 4, 2, 1, 0]
    assert sum(gone, []) == [f"od-{i:04d}" for i in range(4, 20)]


def ids_deleted(decision) -> list[str]:
    return [a.machine_id for a in of_kind(decision, "delete")]
