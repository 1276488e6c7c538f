"""The fast engine against the reference engine (the seed's pseudo-code, plainly) on random
fleets and roll-ups: same satisfied counts per need, same preemptions, same shortfalls, same
consolidations toward cheaper capacity."""

import random
from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bigfleet import labels as L
from bigfleet.engine import FastEngine
from bigfleet.engine.reference import ReferenceEngine
from bigfleet.inventory import GONE, STATES, Inventory
from bigfleet.models import (
    CapacityNeed,
    ClusterCapacityNeeds,
    MachineState,
    NodeSelectorRequirement,
    Operator,
    TopologySpread,
)
from bigfleet.needs import NeedsTable
from bigfleet.policy import Policy
from bigfleet.synthetic import OFFERS, PRIORITIES, fleet, rollups

S = MachineState


def summary(decision):
    def action_key(a):
        if a.kind == "create":
            return ("create", a.provider, a.cluster, len(a.machine_ids))
        if a.kind == "drain":
            return ("drain", a.cluster, a.reason.value, a.grace_seconds)
        return (a.kind, getattr(a, "cluster", None))

    return {
        "satisfied": decision.satisfied,
        "earmarked": decision.earmarked,
        "preemptions": Counter(
            (p.victim_cluster, p.victim_priority, p.preemptor_cluster, p.grace_seconds, p.for_cost)
            for p in decision.preemptions
        ),
        "shortfalls": [
            (s.cluster, s.priority, s.count, s.profile, s.why) for s in decision.shortfalls
        ],
        "actions": Counter(action_key(a) for a in decision.actions),
        "timed_out": sorted(decision.timed_out),
        "consolidations": decision.consolidations,
        "cost_moves": decision.cost_moves,
    }


def run_both(seed, machines, clusters, needs, scale, cycles, shape=None):
    """Both engines over the same random fleet and roll-ups, cycle by cycle; `shape(rng,
    rollup)` may change each roll-up first."""
    rng = random.Random(seed)
    fleet_machines = fleet(rng, machines, clusters, busy=rng.random())
    inv = Inventory()
    inv.add(fleet_machines, 0)
    fast = FastEngine(inv, Policy())
    ref = ReferenceEngine(fleet_machines, Policy())
    table = NeedsTable()
    for generation in range(1, cycles + 1):
        for rollup in rollups(rng, clusters, needs, scale, generation):
            if generation == 1 or rng.random() < 0.3:
                table.apply(shape(rng, rollup) if shape else rollup, generation * 10)
        now = generation * 10
        a, b = fast.decide(table, now), ref.decide(table, now)
        assert summary(a) == summary(b), f"cycle {generation}"
        fast.apply(a, now)
        ref.apply(b, now)


# Derandomized: CI runs the same examples every time (a random search that finds an old
# difference must not fail an unrelated change); what a search found is kept as an @example.
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    database=None,
)


def shards(machines, clusters, needs, scale, cycles):
    """Strategies for a random shard's size and history: (low, high) bounds, scales to pick."""
    return {
        "seed": st.integers(0, 2**32 - 1),
        "machines": st.integers(*machines),
        "clusters": st.integers(*clusters),
        "needs": st.integers(*needs),
        "scale": st.sampled_from(scale),
        "cycles": st.integers(*cycles),
    }


@PROPERTY
@given(**shards((0, 120), (1, 6), (0, 4), [1, 5, 30], (1, 3)))
def test_fast_engine_decides_like_the_reference(seed, machines, clusters, needs, scale, cycles):
    run_both(seed, machines, clusters, needs, scale, cycles)


def two_rules(rng, rollup):
    """Some needs spread by zone and by rack (a hostname rule beside, at times): every rule
    counts in placement, preemption and waiting."""
    needs = []
    for n in rollup.needs:
        if not n.same and rng.random() < 0.4:
            rules = [
                TopologySpread(key=L.ZONE, max_skew=rng.randint(1, 2)),
                TopologySpread(key=L.RACK, max_skew=rng.randint(1, 3)),
            ]
            if rng.random() < 0.3:
                rules.insert(rng.randint(0, 2), TopologySpread(key=L.HOSTNAME, max_skew=1))
            n = n.model_copy(update={"spread": rules})
        needs.append(n)
    return rollup.model_copy(update={"needs": needs})


@PROPERTY
@given(**shards((0, 120), (1, 6), (0, 4), [1, 5, 30], (1, 3)))
def test_fast_engine_keeps_several_spread_rules_like_the_reference(
    seed, machines, clusters, needs, scale, cycles
):
    run_both(seed, machines, clusters, needs, scale, cycles, two_rules)


# ---- consolidation: GPU needs any GPU offer fits, transitions that complete between cycles ----

GPU_TYPES = sorted({o.instance_type for o in OFFERS if o.gpu})
# Where a transition in flight ends when its provider reports back (a created machine comes up
# IDLE and the transition pipeline configures it for the cluster it was created for).
NEXT = {
    S.CREATING: (S.IDLE, S.CONFIGURING),
    S.CONFIGURING: (S.CONFIGURED,),
    S.DRAINING: (S.IDLE,),
    S.DELETING: (S.SPECULATIVE,),
}


def gpu_rollups(rng, clusters, needs, scale, generation):
    """Needs any GPU machine fits (bare metal, reserved, spot, on-demand), so a need running on
    dear capacity has cheaper free capacity to move to; some `Same` or spread by zone."""

    def one():
        kind = rng.random()
        return CapacityNeed(
            requirements=[
                NodeSelectorRequirement(key=L.INSTANCE_TYPE, operator=Operator.IN, values=GPU_TYPES)
            ],
            priority=rng.choice(PRIORITIES),
            count=rng.randint(1, scale),
            same=L.ZONE if kind < 0.15 else None,
            spread=[TopologySpread(key=L.ZONE, max_skew=1)] if 0.15 <= kind < 0.3 else [],
            interruption_penalty=rng.choice((0.0, 5.0, 50.0)),
            reclamation_penalty=rng.choice((0.0, 10.0, 100.0)),
        )

    return [
        ClusterCapacityNeeds(
            cluster=f"c{c:03d}", generation=generation, needs=[one() for _ in range(needs)]
        )
        for c in range(clusters)
    ]


def finish_transitions(fast, ref, kinds, now):
    """The providers report every transition of the given kinds complete, on both engines."""
    inv = fast.inventory
    for row, code in enumerate(inv.state[: inv.rows_used].tolist()):
        state = STATES[code] if code != GONE else None
        if state in kinds:
            cluster = inv.clusters.names[int(inv.cluster[row])] if state is S.CREATING else None
            for target in NEXT[state]:
                inv.move(row, target, now, cluster=cluster)
    for rec in ref.machines:
        if rec.state in kinds:
            cluster = rec.cluster
            for target in NEXT[rec.state]:
                ref._move(rec, target, now, cluster)
    codes = inv.state[: inv.rows_used]
    assert Counter(STATES[c] for c in codes.tolist() if c != GONE) == Counter(
        r.state for r in ref.machines
    )


def run_consolidation(seed, machines, clusters, needs, scale, cycles, policy):
    rng = random.Random(seed)
    fleet_machines = fleet(rng, machines, clusters, busy=rng.uniform(0.3, 0.9))
    inv = Inventory()
    inv.add(fleet_machines, 0)
    fast, ref = FastEngine(inv, policy), ReferenceEngine(fleet_machines, policy)
    table = NeedsTable(max_silence_seconds=float("inf"))
    moved = 0
    for generation in range(1, cycles + 1):
        now = generation * 10
        if generation == 1 or rng.random() < 0.2:
            for rollup in gpu_rollups(rng, clusters, needs, scale, generation):
                table.apply(rollup, now)
        a, b = fast.decide(table, now), ref.decide(table, now)
        assert summary(a) == summary(b), f"cycle {generation}"
        moved += sum(a.consolidations.values())
        fast.apply(a, now)
        ref.apply(b, now)
        kinds = {s for s in NEXT if rng.random() < 0.7}
        finish_transitions(fast, ref, kinds, now + 5)
    return moved


@PROPERTY
@given(
    **shards((20, 150), (1, 4), (1, 3), [2, 6, 20], (2, 8)),
    min_saving=st.sampled_from([0.5, 40.0]),
    horizon=st.sampled_from([1.0, 10.0]),
    fraction=st.sampled_from([0.0, 0.02, 0.5]),
    stable=st.sampled_from([0.0, 20.0]),
    gap=st.sampled_from([100_000, 900_000]),
)
# Found by a random search: a purchase undone by displacement freed speculative machines the
# fast engine's `Same` wait did not count (its column of incoming supply was not given them
# back); the reference did.
@example(seed=268, machines=81, clusters=3, needs=3, scale=20, cycles=2, min_saving=0.5,
         horizon=1.0, fraction=0.0, stable=0.0, gap=100_000)  # fmt: skip
def test_fast_engine_consolidates_like_the_reference(
    seed, machines, clusters, needs, scale, cycles, min_saving, horizon, fraction, stable, gap
):
    """... and displaces backfill for the fleet's cost like it (`displace_gap` 100 000 makes
    it frequent: tests/engine/test_fleet_cost.py counts it)."""
    policy = Policy(
        consolidation_min_saving_per_hour=min_saving,
        consolidation_horizon_hours=horizon,
        consolidation_max_fraction=fraction,
        consolidation_stable_seconds=stable,
        displace_gap=gap,
    )
    run_consolidation(seed, machines, clusters, needs, scale, cycles, policy)


AT_ONCE = Policy(consolidation_stable_seconds=0)


def test_the_consolidation_scenarios_do_consolidate():
    """The generator above is worth running: most of its fleets move work to cheaper capacity."""
    rng = random.Random(13)
    moved = [
        run_consolidation(rng.randrange(2**32), 100, 3, 2, 6, 6, AT_ONCE) for _ in range(20)
    ]
    assert sum(1 for m in moved if m) >= 10, moved


# ---- marks and budgets: what a move may drain (`fleet_cost.DrainRoom`) -----------------------


def bound_both(rng, fast, ref):
    """Each engine told the same random do-not-disrupt marks and preempt budgets (some
    clusters allow 0-2 more drains), as the shard tells its engine. The engines may have
    configured different machines of a (cluster, profile): each marks as many of its own."""
    inv = fast.inventory
    inv.kept[:] = 0
    groups: dict[tuple, list] = {}
    for rec in ref.machines:
        rec.kept = False
        if rec.state is S.CONFIGURED:
            groups.setdefault((rec.cluster, rec.profile.name), []).append(rec)
    rows: dict[tuple, list[int]] = {}
    names = inv.profiles.profiles
    for row in range(inv.rows_used):
        if inv.state[row] == STATES.index(S.CONFIGURED):
            key = (inv.clusters.names[int(inv.cluster[row])], names[int(inv.profile[row])].name)
            rows.setdefault(key, []).append(row)
    for key in sorted(groups):
        marked = rng.randint(0, len(groups[key])) if rng.random() < 0.4 else 0
        for rec in groups[key][:marked]:
            rec.kept = True
        inv.kept[rows[key][:marked]] = 1
    clusters = sorted({c for c, _ in groups})
    room = {c: rng.randint(0, 2) for c in clusters if rng.random() < 0.5}
    fast.memory.drain_room = dict(room)
    ref.memory.drain_room = dict(room)
    inv.version += 1


@PROPERTY
@given(
    **shards((20, 150), (1, 4), (1, 3), [2, 6, 20], (2, 6)),
    gap=st.sampled_from([100_000, 900_000]),
    override=st.sampled_from([300_000, 1_000_000]),
)
def test_fast_engine_keeps_to_marks_and_budgets_like_the_reference(
    seed, machines, clusters, needs, scale, cycles, gap, override
):
    """Moves for cost skip what their clusters hold back and buy instead; a need waiting on
    preemptions held back is short, saying why: alike on both engines."""
    policy = Policy(
        consolidation_max_fraction=0.5,
        consolidation_stable_seconds=0,
        displace_gap=gap,
        disruption_override_gap=override,
    )
    rng = random.Random(seed)
    fleet_machines = fleet(rng, machines, clusters, busy=rng.uniform(0.3, 0.9))
    inv = Inventory()
    inv.add(fleet_machines, 0)
    fast, ref = FastEngine(inv, policy), ReferenceEngine(fleet_machines, policy)
    # (The reference does not steer consolidation by marks: tests/core/test_disruption.py.)
    fast.memory.marks_steer_moves = False
    table = NeedsTable(max_silence_seconds=float("inf"))
    for generation in range(1, cycles + 1):
        now = generation * 10
        if generation == 1 or rng.random() < 0.3:
            for rollup in gpu_rollups(rng, clusters, needs, scale, generation):
                table.apply(rollup, now)
        bound_both(rng, fast, ref)
        a, b = fast.decide(table, now), ref.decide(table, now)
        assert summary(a) == summary(b), f"cycle {generation}"
        fast.apply(a, now)
        ref.apply(b, now)
        finish_transitions(fast, ref, {s for s in NEXT if rng.random() < 0.7}, now + 5)


def test_the_bounded_scenarios_hold_something_back():
    """The generator above is worth running: its needs wait on held machines, and its moves
    for cost find victims held back."""
    from bigfleet.engine.fleet_cost import DrainRoom

    waited, original = [], DrainRoom.waiting

    def counting(self, need):
        found = original(self, need)
        waited.append(found[0])
        return found

    DrainRoom.waiting = counting
    try:
        for seed in range(30):
            test_fast_engine_keeps_to_marks_and_budgets_like_the_reference.hypothesis.inner_test(
                seed, 60, 3, 3, 20, 4, 100_000, 1_000_000
            )
    finally:
        DrainRoom.waiting = original
    assert sum(1 for n in waited if n) >= 5, waited
