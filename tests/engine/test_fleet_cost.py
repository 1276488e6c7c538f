"""Placement by the fleet's cost (`Policy.fleet_cost`, docs/decisions/0012), worked by hand on
both engines, and held to one property: it never leaves a higher priority short where the
engine before it served it.

The fleet of the worked examples: research (priority 0, bare metal only, 4 GPUs configured
for it) and a 900 000 inference cluster that may run on the same GPU racks or on on-demand
p5 at $98/h. Inference asks for 2 machines."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bigfleet import labels as L
from bigfleet.engine import FastEngine
from bigfleet.inventory import Inventory
from bigfleet.models import DrainReason
from bigfleet.needs import NeedsTable
from bigfleet.policy import Policy
from bigfleet.synthetic import fleet
from tests.engine.test_engine_equivalence import PROPERTY, gpu_rollups
from tests.fleet import (
    ENGINES,
    GPU,
    S,
    bare_metal,
    created,
    many,
    need,
    of_kind,
    on_demand,
    rollup,
    shortfall_of,
    spot,
    table,
)

P5 = "p5.48xlarge"
BARE = {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["bare-metal"]}


def fleet_of_research():
    return many(bare_metal, 4, state=S.CONFIGURED, cluster="research") + many(
        on_demand, 4, price=98.0, instance_type=P5
    )


def needs_of(research_priority=0, reclamation=0.0):
    research = need(4, research_priority, reclamation_penalty=reclamation)
    research["requirements"].append(BARE)
    return table(
        rollup("research", 1, research),
        rollup("infer", 1, need(2, 900_000, types=(GPU, P5))),
    )


def infer_key(needs: NeedsTable) -> str:
    return next(n.key for n in needs if n.cluster == "infer")


@ENGINES
def test_backfill_yields_its_owned_machines_before_the_fleet_buys_on_demand(make_shard):
    """Buying 2 p5 costs $98/h each over the 1 h horizon: $98 > research's reclamation
    penalty ($0), and research has no elastic option of its own (it waits: $0). So 2 of
    research's GPUs drain for inference with the grace of a 900 000 gap (30 s), and nothing
    is bought. (A cycle may drain half the shard's 4 configured machines for cost here:
    `consolidation_max_fraction` 0.5; the next test has the default bound.)"""
    shard = make_shard(fleet_of_research(), Policy(consolidation_max_fraction=0.5))
    needs = needs_of()
    decision = shard.cycle(needs, 10)

    assert created(decision) == []
    drains = of_kind(decision, "drain")
    assert [(d.cluster, d.reason, d.grace_seconds) for d in drains] == [
        ("research", DrainReason.PREEMPT, 30.0)
    ] * 2
    key = infer_key(needs)
    assert decision.earmarked[key] == 2 and decision.satisfied[key] == 0
    assert decision.cost_moves == {key: 2}
    # The next cycle inference waits for the machines draining for it: no purchase, no
    # second displacement.
    again = shard.cycle(needs, 20)
    assert created(again) == [] and of_kind(again, "drain") == []
    assert again.earmarked[key] == 2 and again.cost_moves == {}


@ENGINES
def test_a_cycle_drains_a_bounded_share_of_the_shard_for_cost(make_shard):
    """The default bound is 2 % of the configured machines, at least one: of 4, one. So one
    of research's machines drains for inference and one p5 is still bought."""
    decision = make_shard(fleet_of_research()).cycle(needs_of(), 10)

    assert len(of_kind(decision, "drain")) == 1 and len(created(decision)) == 1
    assert list(decision.cost_moves.values()) == [1]


@ENGINES
@pytest.mark.parametrize(
    ("research_priority", "reclamation"),
    [(100_000, 0.0), (0, 500.0)],
    ids=["gap-below-displace-gap", "reclamation-penalty-above-the-saving"],
)
def test_backfill_keeps_its_machines_when_moving_it_does_not_pay(
    make_shard, research_priority, reclamation
):
    """A gap of 800 000 is under `displace_gap` (900 000): preemption stays the last resort.
    A reclamation penalty of $500 is more than the $98 the hour of on-demand would cost."""
    shard = make_shard(fleet_of_research())
    decision = shard.cycle(needs_of(research_priority, reclamation), 10)

    assert len(created(decision)) == 2
    assert of_kind(decision, "drain") == [] and decision.cost_moves == {}


@ENGINES
def test_before_fleet_cost_the_fleet_buys(make_shard):
    shard = make_shard(fleet_of_research(), Policy(fleet_cost=False))
    decision = shard.cycle(needs_of(), 10)

    assert len(created(decision)) == 2 and of_kind(decision, "drain") == []


@ENGINES
def test_owned_capacity_priced_above_on_demand_is_kept_when_a_need_shrinks(make_shard):
    """A rack machine amortised at $15/h and an on-demand one at $6/h serve one need, which
    drops to 1: the rack is paid for whether used or not, so the on-demand machine drains
    (before `fleet_cost`, "most expensive first" by list price drained the rack)."""
    machines = [bare_metal(0, S.CONFIGURED, cluster="a", price=15.0)] + [
        on_demand(0, S.CONFIGURED, cluster="a", price=6.0)
    ]
    needs = table(rollup("a", 1, need(1, 500_000)))

    assert [d.machine_id for d in of_kind(make_shard(machines).decide(needs, 10), "drain")] == [
        "od-0000"
    ]
    before = make_shard(machines, Policy(fleet_cost=False)).decide(needs, 10)
    assert [d.machine_id for d in of_kind(before, "drain")] == ["gpu-0000"]


# ---- the property ----------------------------------------------------------------------------


def coverage(seed, machines, clusters, needs, scale, policy):
    """One cycle on a random busy shard: per need in table order, (key, priority, machines
    held or assigned, machines on their way)."""
    rng = random.Random(seed)
    inv = Inventory()
    inv.add(fleet(rng, machines, clusters, busy=rng.uniform(0.5, 0.95)), 0)
    engine = FastEngine(inv, policy)
    table = NeedsTable()
    for r in gpu_rollups(rng, clusters, needs, scale, 1):
        table.apply(r, 10)
    decision = engine.decide(table, 10)
    got, waits = decision.satisfied, decision.earmarked
    rows = [(n.key, n.priority, got.get(n.key, 0), waits.get(n.key, 0)) for n in table]
    return rows, decision


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    machines=st.integers(10, 150),
    clusters=st.integers(1, 6),
    needs=st.integers(1, 4),
    scale=st.sampled_from([1, 5, 30]),
)
def test_displacing_never_leaves_a_higher_priority_short_where_it_was_served(
    seed, machines, clusters, needs, scale
):
    """The same shard and needs decided with displacement (gap 100 000, so it happens often)
    and without (gap 1 000 000: no synthetic need is that far above another). A need that
    yielded (bought fewer machines, took owned ones instead) has as many machines held or on
    their way as without; a need left with fewer is not above the highest need that yielded:
    nobody is left short for a need below it. (One of equal priority, later in table order,
    can be: the yielding need took a draining machine first, as table order says it may.)"""
    moved, _ = coverage(seed, machines, clusters, needs, scale, Policy(displace_gap=100_000))
    kept, _ = coverage(seed, machines, clusters, needs, scale, Policy(displace_gap=1_000_000))
    assert [r[0] for r in moved] == [r[0] for r in kept]
    yielded = [
        (a[1], a[2] + a[3] - b[2] - b[3])
        for a, b in zip(moved, kept, strict=True)
        if a[2] < b[2] and a[3] > b[3]
    ]
    assert all(more >= 0 for _, more in yielded), (moved, kept)
    top = max((priority for priority, _ in yielded), default=None)
    for a, b in zip(moved, kept, strict=True):
        if a[2] + a[3] < b[2] + b[3]:
            assert top is not None and a[1] <= top, (a, moved, kept)


def test_the_property_scenarios_do_displace():
    """The generator above is worth running: many of its shards displace backfill."""
    rng = random.Random(7)
    displaced = 0
    for _ in range(60):
        args = (rng.getrandbits(32), rng.randint(10, 150), rng.randint(1, 6), rng.randint(1, 4))
        _, decision = coverage(*args, rng.choice([1, 5, 30]), Policy(displace_gap=100_000))
        displaced += bool(decision.cost_moves)
    assert displaced >= 5, displaced


@ENGINES
def test_a_spread_need_takes_the_idle_rack_machine_backfill_was_given(make_shard):
    """Inference spreads over zones (max skew 10) and holds one rack machine in ams-1, so
    Phase 1 fills its least-filled zone first and buys a p5 in eu-west-1a, while research
    (priority 0) is given the idle rack machine. Yielding, inference is configured on that
    machine instead: nothing is bought, nothing drains, research waits. (Before, the p5 was
    bought; displacing research's configured machines instead would loop: each freed machine
    went back to research in the next cycle's Phase 1.)"""
    machines = [
        bare_metal(0, S.CONFIGURED, cluster="infer"),
        bare_metal(1, S.IDLE),
        *many(on_demand, 2, price=98.0, instance_type=P5, zone="eu-west-1a"),
    ]
    research = need(1, 0)
    research["requirements"].append(BARE)
    spread = [{"key": L.ZONE, "max_skew": 10}]
    needs = table(
        rollup("research", 1, research),
        rollup("infer", 1, need(2, 900_000, types=(GPU, P5), spread=spread)),
    )
    decision = make_shard(machines).cycle(needs, 10)

    assert [(a.kind, a.cluster, a.machine_id) for a in decision.actions] == [
        ("configure", "infer", "gpu-0001")
    ]
    before = make_shard(machines, Policy(fleet_cost=False)).decide(needs, 10)
    assert sorted(a.kind for a in before.actions) == ["configure", "create"]


@ENGINES
def test_owned_machines_go_to_the_need_whose_next_best_option_costs_most(make_shard):
    """One idle rack machine. Training (1 000 000, interruption penalty $10) could run on spot
    at $25 + 5 % x $10 = $25.50; serving (900 000) may not run on spot: its next best is
    on-demand at $98. Walked by priority, training takes the rack machine and serving buys
    on-demand; swapped, serving gets the rack machine and training buys spot: $25.50 an hour
    instead of $98, and both are served."""
    machines = [
        bare_metal(0, S.IDLE),
        *many(spot, 2, price=25.0, interruption=0.05),
        *many(on_demand, 2, price=98.0),
    ]
    no_spot = {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["bare-metal", "on-demand"]}
    serving = need(1, 900_000)
    serving["requirements"].append(no_spot)
    needs = table(
        rollup("train", 1, need(1, 1_000_000, interruption_penalty=10.0)),
        rollup("serve", 1, serving),
    )

    decision = make_shard(machines).cycle(needs, 10)
    assert [(a.kind, a.cluster) for a in of_kind(decision, "configure")] == [("configure", "serve")]
    assert [(a.cluster, a.machine_ids[0][:4]) for a in of_kind(decision, "create")] == [
        ("train", "spot")
    ]
    assert of_kind(decision, "drain") == []
    before = make_shard(machines, Policy(fleet_cost=False)).cycle(needs, 10)
    assert [a.cluster for a in of_kind(before, "configure")] == ["train"]
    assert [a.machine_ids[0][:2] for a in of_kind(before, "create")] == ["od"]


# ---- the swap, fast engine against the reference -----------------------------------------------


def swap_fleet(rng: random.Random):
    """Idle rack machines, spot and on-demand GPU slots; needs of random priority and
    interruption penalty, some not allowed on spot: Phase 1 often gives the racks to a need
    whose next best option is cheaper than another's."""
    machines = [bare_metal(i, S.IDLE) for i in range(rng.randint(1, 6))]
    machines += many(spot, rng.randint(0, 6), price=25.0, interruption=0.05)
    machines += many(on_demand, rng.randint(0, 6), price=98.0)
    no_spot = {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["bare-metal", "on-demand"]}
    rollups = []
    for c in range(rng.randint(2, 5)):
        n = need(
            rng.randint(1, 4),
            rng.choice([100_000, 500_000, 900_000, 1_000_000]),
            interruption_penalty=rng.choice([0.0, 10.0, 100.0, 2000.0]),
        )
        if rng.random() < 0.4:
            n["requirements"].append(no_spot)
        rollups.append(rollup(f"c{c}", 1, n))
    return machines, table(*rollups)


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1))
def test_the_engines_swap_owned_machines_alike(seed):
    from tests.engine.test_engine_equivalence import summary
    from tests.fleet import fast_shard, reference_shard

    machines, needs = swap_fleet(random.Random(seed))
    a = fast_shard(machines).decide(needs, 10)
    b = reference_shard(machines).decide(needs, 10)
    assert summary(a) == summary(b)


def test_the_swap_scenarios_do_swap():
    """The generator above is worth running: it swaps in many of its fleets (a swap shows as
    a need that Phase 1 walked later configured on a rack machine)."""
    from bigfleet.engine import phase2

    swapped, original = [], phase2.swap_owned

    def counting(state, assignments):
        n = original(state, assignments)
        swapped.append(n)
        return n

    phase2.swap_owned = counting
    try:
        rng = random.Random(5)
        for _ in range(60):
            machines, needs = swap_fleet(rng)
            FastEngine(inventory_of(machines), Policy()).decide(needs, 10)
    finally:
        phase2.swap_owned = original
    assert sum(1 for n in swapped if n) >= 5, swapped


def inventory_of(machines):
    inv = Inventory()
    inv.add(machines, 0)
    return inv


# ---- moves for cost keep to marks and budgets (issue 44, item 5) ------------------------------

RESEARCH_GPUS = [f"gpu-{i:04d}" for i in range(4)]
HALF = Policy(consolidation_max_fraction=0.5)  # (a cycle may drain 2 of the 4 for cost)


def infer_at(priority: int, *, od: bool = True):
    """Research (priority 0) on the 4 racks; inference asks for 2 at `priority`, on-demand p5
    for sale (`od`) or not."""
    machines = many(bare_metal, 4, state=S.CONFIGURED, cluster="research")
    if od:
        machines += many(on_demand, 4, price=98.0, instance_type=P5)
    research = need(4, 0)
    research["requirements"].append(BARE)
    needs = table(
        rollup("research", 1, research),
        rollup("infer", 1, need(2, priority, types=(GPU, P5))),
    )
    return machines, needs


@ENGINES
@pytest.mark.parametrize("priority", [900_000, 1_000_000])
def test_marked_backfill_is_not_displaced_for_cost_the_need_buys(make_shard, priority):
    """The issue's scenario: research marked its 4 machines do-not-disrupt. Displacing them
    would be held back (at 900 000: the drains dropped, nothing bought, inference waiting for
    the mark's life, unreported) or would override the marks (at 1 000 000, the override
    gap); a move for cost does neither: inference buys 2 p5 now and nothing drains."""
    machines, needs = infer_at(priority)
    shard = make_shard(machines, HALF)
    shard.mark(RESEARCH_GPUS)
    decision = shard.cycle(needs, 10)

    assert len(created(decision)) == 2
    assert of_kind(decision, "drain") == [] and decision.preemptions == []
    assert decision.cost_moves == {} and decision.shortfalls == []
    # Unmarked, the same machines are displaced (the move pays).
    unmarked = make_shard(machines, HALF).cycle(needs, 10)
    assert len(of_kind(unmarked, "drain")) == 2 and created(unmarked) == []


@ENGINES
@pytest.mark.parametrize(("room", "drains"), [(0, 0), (1, 1)])
def test_backfill_is_displaced_for_cost_only_within_its_budget(make_shard, room, drains):
    """Research's preempt budget allows `room` more drains now ("0": none): a move for cost
    drains no more of it, at 1 000 000 too, and inference buys the rest."""
    machines, needs = infer_at(1_000_000)
    shard = make_shard(machines, HALF)
    shard.bound(research=room)
    decision = shard.cycle(needs, 10)

    assert len(of_kind(decision, "drain")) == drains
    assert len(created(decision)) == 2 - drains
    assert all(p.for_cost for p in decision.preemptions)
    assert shortfall_of(decision, "infer") is None


@ENGINES
def test_a_need_that_can_only_wait_on_held_machines_is_a_shortfall(make_shard):
    """Nothing to buy: inference (900 000) preempts research by priority, below the override
    gap (1 000 000), and research marked two of its machines and allows one drain: of the 3
    it asks for (the unmarked ones first), one is marked and one over the budget. Those
    drains are asked for (the shard holds them back and counts them) and inference waits on
    them: a shortfall of 2 that says why. Research keeps those 2: it is short only the one
    that drains."""
    machines, needs = infer_at(900_000, od=False)
    needs = table(
        rollup("research", 1, {**need(4, 0), "requirements": [BARE]}),
        rollup("infer", 1, need(3, 900_000, types=(GPU, P5))),
    )
    shard = make_shard(machines)
    shard.mark(RESEARCH_GPUS[:2])
    shard.bound(research=1)
    decision = shard.decide(needs, 10)

    assert len(of_kind(decision, "drain")) == 3
    assert not any(p.for_cost for p in decision.preemptions)
    short = shortfall_of(decision, "infer")
    assert short is not None and (short.count, short.held_back) == (2, 2)
    assert shortfall_of(decision, "research").count == 1
    assert short.why == (
        "waiting on 2 machine(s) it preempts that their clusters hold back "
        "(cluster research: 1 marked do-not-disrupt, 1 over its disruption budget)"
    )


@ENGINES
def test_above_the_override_gap_a_preemption_by_priority_waits_on_nothing_held(make_shard):
    """At 1 000 000 inference's preemption overrides research's marks and budget (design §5:
    priority is the only throttle), so it is no shortfall."""
    machines, _ = infer_at(1_000_000, od=False)
    _, needs = infer_at(1_000_000)
    shard = make_shard(machines)
    shard.mark(RESEARCH_GPUS)
    shard.bound(research=0)
    decision = shard.decide(needs, 10)

    assert len(of_kind(decision, "drain")) == 2 and shortfall_of(decision, "infer") is None
